"""`chargeback billing ...` commands."""

import typer

app = typer.Typer(help="billing commands", no_args_is_help=True)
