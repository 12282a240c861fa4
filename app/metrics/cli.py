"""`chargeback metrics ...` commands."""

import typer

app = typer.Typer(help="metrics commands", no_args_is_help=True)
