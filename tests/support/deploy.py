"""Checks shared by the compose, Dockerfile and Kubernetes tests: real CLI commands, real settings."""

from __future__ import annotations

import re
from pathlib import Path

import typer
from typer.testing import CliRunner

from app.cli import app as cli_app
from app.core.settings import Settings

ROOT = Path(__file__).resolve().parents[2]  # the checkout
PREFIX = "CHARGEBACK_"


def check_command(argv: list[str]) -> None:
    """`argv` is a `chargeback` command line that the CLI parses, every option converted; its --help works."""
    assert argv and argv[0] == "chargeback", argv
    command = typer.main.get_command(cli_app)
    args, path = list(argv[1:]), []
    while hasattr(command, "list_commands"):  # a group (typer ships its own click: no isinstance)
        assert args, f"{argv}: a command group needs a subcommand"
        name = args.pop(0)
        sub = command.get_command(command.context_class(command), name)
        assert sub is not None, f"{argv}: no command {name!r} under {' '.join(['chargeback', *path])}"
        command, path = sub, [*path, name]
    # Parses and converts every argument (types, ranges) without running the command.
    command.make_context(" ".join(["chargeback", *path]), args)
    helped = CliRunner().invoke(cli_app, [*path, "--help"])
    assert helped.exit_code == 0, helped.output


def check_settings(env: dict[str, str]) -> Settings:
    """Every CHARGEBACK_* name is a Settings field and the values make a valid Settings (production checks too)."""
    names = {k.removeprefix(PREFIX).lower(): v for k, v in env.items() if k.startswith(PREFIX)}
    unknown = sorted(n for n in names if n not in Settings.model_fields)
    assert not unknown, f"not settings in app/core/settings.py: {unknown}"
    # _env_file=None: only what the deployment sets, never a developer's .env.
    return Settings(_env_file=None, **names)


_VARIABLE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


class MissingVariable(LookupError):
    """A ${NAME:?message} whose NAME is unset: compose refuses to start."""


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's ${NAME}, ${NAME:-default} and ${NAME:?error} interpolation."""

    def one(match: re.Match) -> str:
        name, op, arg = match["name"], match["op"], match["arg"]
        present = env.get(name)
        if op in (":-", ":?") and not present or op in ("-", "?") and present is None:
            if op.endswith("?"):
                raise MissingVariable(f"{name}: {arg}")
            return arg if op else ""
        return present or ""

    return _VARIABLE.sub(one, value)
