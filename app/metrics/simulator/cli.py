"""`simulator` commands: serve the live exporter, write its policy and an OpenMetrics backfill file."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from app.core.timeutil import SECONDS_PER_HOUR, parse_iso

app = typer.Typer(help="The deterministic cluster simulator", no_args_is_help=True)


@app.command("serve")
def serve(host: str = typer.Option("127.0.0.1", help="address to bind"),
          port: int = typer.Option(9400, help="port (0 = any free port)"),
          seed: int = typer.Option(42), gpus: int = typer.Option(32)) -> None:
    """Serve dcgm-exporter and vLLM metrics of the simulated cluster on /metrics (state at now)."""
    from app.metrics.simulator import Simulator, serve_exporter

    server = serve_exporter(Simulator(seed=seed, gpus=gpus), host=host, port=port)
    bound_host, bound_port = server.server_address[:2]
    typer.echo(f"simulator exporter on http://{bound_host}:{bound_port}/metrics (seed {seed}, {gpus} GPUs)")
    try:
        while True:
            time.sleep(SECONDS_PER_HOUR)
    except KeyboardInterrupt:
        server.shutdown()


@app.command("policy")
def policy(out: Path | None = typer.Argument(None, help="file to write (default: standard output)"),
           seed: int = typer.Option(42), gpus: int = typer.Option(32)) -> None:
    """Write a policy document that fits the simulated cluster (its nodes, namespaces and services) as YAML.

    The namespace `scratch` stays unclaimed on purpose: its use is billed to the platform as unallocated, and
    `chargeback doctor` names it.
    """
    from app.metrics.simulator import Simulator
    from app.metrics.simulator.policy import seed_policy
    from app.policy.service import dump_yaml

    text = dump_yaml(seed_policy(Simulator(seed=seed, gpus=gpus)))
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text)
        typer.echo(f"policy for the simulator (seed {seed}, {gpus} GPUs) written to {out}", err=True)


@app.command("openmetrics")
def openmetrics(out: Path = typer.Argument(..., help="file to write"),
                start: str = typer.Option(..., help="ISO 8601 start (an hour boundary)"),
                end: str = typer.Option(..., help="ISO 8601 end"),
                seed: int = typer.Option(42), gpus: int = typer.Option(32),
                metric: list[str] = typer.Option(None, help="only these metric families (repeatable)"),
                blocks: bool = typer.Option(False, help="OUT is a directory: one file per 2-hour block "
                                                         "(promtool then parses each sample once)")) -> None:
    """Write the simulated history from START to END for `promtool tsdb create-blocks-from openmetrics`."""
    from app.metrics.simulator import Simulator

    sim = Simulator(seed=seed, gpus=gpus)
    began = time.perf_counter()
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} series"),
               TimeElapsedColumn())
    try:
        with Progress(*columns) as bar:
            task = bar.add_task("writing", total=None)

            def progress(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            if blocks:
                files = sim.write_openmetrics_blocks(out, parse_iso(start), parse_iso(end), metrics=metric or None,
                                                     progress=progress)
                written = sum(n for _, n in files)
            else:
                written = sim.write_openmetrics(out, parse_iso(start), parse_iso(end), metrics=metric or None,
                                                progress=progress)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    typer.echo(f"{written} samples to {out} in {time.perf_counter() - began:.1f} s")
