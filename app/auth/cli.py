"""`chargeback auth ...` commands."""

import typer

app = typer.Typer(help="auth commands", no_args_is_help=True)
