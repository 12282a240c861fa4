"""`chargeback serve` (mounted at top level by app/cli.py)."""

from __future__ import annotations

import typer

app = typer.Typer(help="web commands", no_args_is_help=True)


@app.command("serve")
def serve(
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on"),
    port: int = typer.Option(8000, "--port", help="TCP port (0: any free port)"),
    workers: int = typer.Option(1, "--workers", help="Worker processes"),
    proxy_headers: bool = typer.Option(
        False, "--proxy-headers", help="Trust X-Forwarded-* from a reverse proxy (then cookies get Secure over https)"
    ),
) -> None:
    """Serve the portal (HTML and /api/v1) with uvicorn."""
    import uvicorn

    uvicorn.run(
        "app.main:app", host=host, port=port, workers=workers, proxy_headers=proxy_headers,
        forwarded_allow_ips="*" if proxy_headers else None, access_log=False,
    )
