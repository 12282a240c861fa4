"""Checks shared by the compose, Dockerfile and Kubernetes tests: real CLI commands, real settings."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import typer
import yaml
from typer.testing import CliRunner

from app.cli import app as cli_app
from app.core.settings import Settings

ROOT = Path(__file__).resolve().parents[2]  # the checkout
PREFIX = "CHARGEBACK_"
KUBERNETES_VERSION = "1.31.0"  # schemas kubernetes-validate ships; any recent cluster accepts these objects
CRDS = ROOT / "tests" / "deploy" / "schemas"  # vendored CRD schemas (SOURCES.md there)
# kind -> the vendored file of its CRD's openAPIV3Schema.
CRD_FILES = {
    "ServiceMonitor": "servicemonitors.v1.json",
    "PrometheusRule": "prometheusrules.v1.json",
    "ClusterQueue": "kueue.clusterqueues.v1beta2.json",
    "ResourceFlavor": "kueue.resourceflavors.v1beta2.json",
    "Cohort": "kueue.cohorts.v1beta2.json",
    "LocalQueue": "kueue.localqueues.v1beta2.json",
    "WorkloadPriorityClass": "kueue.workloadpriorityclasses.v1beta2.json",
}


def validate_core(objects: list[dict], tmp_path: Path, version: str = KUBERNETES_VERSION) -> subprocess.CompletedProcess:
    """`kubernetes-validate --strict` (this interpreter's, from the test extra) on one file per object."""
    files = []
    for i, obj in enumerate(objects):
        files.append(tmp_path / f"{i:02d}-{obj['kind']}-{obj['metadata']['name']}.yaml")
        files[-1].write_text(yaml.safe_dump(obj))
    return subprocess.run(
        [str(Path(sys.executable).parent / "kubernetes-validate"), "--strict", "--no-warn", "-k", version, *map(str, files)],
        capture_output=True, text=True, timeout=300,
    )


def _strict(schema: dict) -> dict:
    """The CRD schema with unknown fields rejected (the API server's strict field validation)."""
    schema = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if (node.get("type") == "object" and "properties" in node and "additionalProperties" not in node
                    and not node.get("x-kubernetes-preserve-unknown-fields")):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


def crd_validator(kind: str) -> jsonschema.Validator:
    """A strict validator for `kind` from its vendored CRD schema (CEL rules are not evaluated)."""
    data = json.loads((CRDS / CRD_FILES[kind]).read_text())
    assert data["kind"] == kind
    schema = _strict(data["openAPIV3Schema"])
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    return cls(schema)


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
