"""`chargeback serve` (mounted at top level by app/cli.py)."""

from __future__ import annotations

import ipaddress

import typer

app = typer.Typer(help="web commands", no_args_is_help=True)

LOOPBACK_PROXIES = "127.0.0.1,::1"
# uvicorn kills a worker that does not answer its supervisor within this time; a new worker first imports
# the whole command line and the app (several seconds on a busy 2-core machine): at uvicorn's 5 s the
# workers were killed while importing, over and over, and one process served everything.
WORKER_HEALTHCHECK_S = 60


def is_loopback(host: str) -> bool:
    """True when `host` only listens on this machine (a name other than localhost counts as reachable)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def refuse_placeholder_secret_off_loopback(host: str) -> None:
    """Exit with an error when `host` is reachable from other machines and the secret is a known one."""
    from app.core.settings import get_settings, is_placeholder_secret

    if not is_loopback(host) and is_placeholder_secret(get_settings().secret_key):
        # Anyone who reads the source could forge session cookies for a reachable server.
        typer.echo(f"error: refusing to serve on {host} with the development or a placeholder secret; "
                   "set CHARGEBACK_SECRET_KEY to a random value (e.g. `openssl rand -hex 32`)", err=True)
        raise typer.Exit(2)


def share_metrics_between_workers() -> None:
    """Give the worker processes one fresh folder for their metric values, so /metrics counts them all."""
    import os
    import tempfile

    # prometheus_client's own setting, read when it is imported: set before uvicorn starts the workers.
    os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="chargeback-metrics-"))


@app.command("serve")
def serve(
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on"),
    port: int = typer.Option(8000, "--port", help="TCP port (0: any free port)"),
    workers: int = typer.Option(1, "--workers", min=1, help="Worker processes sharing the port (state is in the database)"),
    proxy_headers: bool = typer.Option(
        False, "--proxy-headers", help="Trust X-Forwarded-* from a reverse proxy (then cookies get Secure over https)"
    ),
    forwarded_allow_ips: str = typer.Option(
        LOOPBACK_PROXIES, "--forwarded-allow-ips",
        help="Comma-separated proxy addresses/networks whose X-Forwarded-* are believed (with --proxy-headers)",
    ),
) -> None:
    """Serve the portal (HTML and /api/v1) with uvicorn; refused (exit 2) while the database's schema is not this
    version's."""
    import uvicorn

    from app.core.migrate import schema_problem
    from app.core.settings import get_settings

    refuse_placeholder_secret_off_loopback(host)
    problem = schema_problem(get_settings().database_url)
    if problem is not None:  # every sign-in would be a 500: refuse to start instead
        typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(2)
    if workers > 1:
        share_metrics_between_workers()
    uvicorn.run(
        "app.main:app", host=host, port=port, workers=workers, proxy_headers=proxy_headers,
        forwarded_allow_ips=forwarded_allow_ips, access_log=False, timeout_worker_healthcheck=WORKER_HEALTHCHECK_S,
    )
