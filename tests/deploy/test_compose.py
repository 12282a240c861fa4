"""docker-compose.yml and the Dockerfile, checked against the CLI and the settings (no Docker engine here)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import jsonschema
import pytest
import yaml

from app.billing import pdf
from app.core.settings import DEV_SECRET
from tests.support.deploy import ROOT, MissingVariable, check_command, check_settings, interpolate

pytestmark = pytest.mark.deploy

COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())  # PyYAML resolves the `<<` merges
SERVICES = COMPOSE["services"]
OURS = {name: svc for name, svc in SERVICES.items() if "build" in svc}  # services running the portal image
SECRETS = {"CHARGEBACK_SECRET_KEY": "k" * 64, "POSTGRES_PASSWORD": "0123abcd" * 4}


def _port_option(command: list[str]) -> int:
    return int(command[command.index("--port") + 1])


def test_compose_file_follows_the_compose_spec_schema():
    schema = json.loads((Path(__file__).parent / "schemas" / "compose-spec.json").read_text())
    validator = jsonschema.Draft7Validator(schema)
    assert not [e.message for e in validator.iter_errors(COMPOSE)]
    broken = {**COMPOSE, "services": {**SERVICES, "app": {**SERVICES["app"], "depends_on": {"migrate": {"condition": "done"}}}}}
    assert list(validator.iter_errors(broken))


def test_every_service_runs_a_real_cli_command():
    assert set(OURS) == {"simulator", "migrate", "app", "worker"}
    for svc in OURS.values():
        check_command(svc["command"])


def test_the_negative_check_can_fail():
    with pytest.raises(Exception, match="--hots"):  # click's UsageError: no such option
        check_command(["chargeback", "serve", "--hots", "0.0.0.0"])
    with pytest.raises(Exception, match="valid number"):  # the option's type refuses "soon"
        check_command(["chargeback", "worker", "--poll-seconds", "soon"])
    with pytest.raises(AssertionError):
        check_settings({"CHARGEBACK_PROMETHEUS_ULR": "http://x"})


@pytest.mark.parametrize("name", ["migrate", "app", "worker"])
def test_environment_names_real_settings_and_passes_the_production_check(name):
    env = {k: interpolate(str(v), SECRETS) for k, v in OURS[name]["environment"].items()}
    settings = check_settings(env)
    assert settings.environment == "production"
    assert settings.database_url.startswith("postgresql://") and "@postgres:5432/" in settings.database_url
    assert settings.prometheus_url == "http://prometheus:9090"


def test_secrets_come_from_the_environment_never_a_default():
    raw = OURS["app"]["environment"]["CHARGEBACK_SECRET_KEY"]
    with pytest.raises(MissingVariable):
        interpolate(raw, {})
    assert ":-" not in raw and DEV_SECRET not in raw
    with pytest.raises(MissingVariable):
        interpolate(SERVICES["postgres"]["environment"]["POSTGRES_PASSWORD"], {})
    # The database URL and PostgreSQL use the same password variable.
    url = interpolate(OURS["app"]["environment"]["CHARGEBACK_DATABASE_URL"], SECRETS)
    assert f":{SECRETS['POSTGRES_PASSWORD']}@" in url


def test_migrate_runs_once_before_app_and_worker():
    assert OURS["migrate"]["command"] == ["chargeback", "db", "upgrade"]
    assert OURS["migrate"]["restart"] == "no"
    assert OURS["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("app", "worker"):
        assert OURS[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert "healthcheck" in SERVICES["postgres"]
    for name, svc in SERVICES.items():
        deps = svc.get("depends_on", {})
        assert set(deps) <= set(SERVICES) - {name}, name


def test_prometheus_scrapes_the_simulator_and_the_portal_where_they_listen():
    mount = next(v for v in SERVICES["prometheus"]["volumes"] if v.endswith(":/etc/prometheus/prometheus.yml:ro"))
    config = yaml.safe_load((ROOT / mount.split(":")[0]).read_text())
    targets = {t for job in config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    listening = {f"{name}:{_port_option(OURS[name]['command'])}" for name in ("simulator", "app")}
    assert targets == listening


def _stages(text: str) -> list[list[tuple[str, str]]]:
    """The Dockerfile as stages of (instruction, arguments), continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n(\s*#[^\n]*\n)*", " ", text)
    stages: list[list[tuple[str, str]]] = [[]]
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        if word.upper() == "FROM":
            stages.append([])
        stages[-1].append((word.upper(), rest.strip()))
    return [s for s in stages if s and s[0][0] == "FROM"]


def test_dockerfile_builds_the_wheel_and_runs_it_as_non_root():
    build, runtime = _stages((ROOT / "Dockerfile").read_text())
    assert " AS build" in build[0][1]
    copied = [shlex.split(args)[:-1] for op, args in build if op == "COPY"]
    for sources in copied:
        for source in sources:
            assert (ROOT / source).exists(), source
    assert any(op == "RUN" and "pip wheel" in args for op, args in build)
    runs = " ".join(args for op, args in runtime if op == "RUN")
    assert "from=build" in runs and "--no-index" in runs  # installs the built wheels, nothing else
    assert not re.search(r"gcc|build-essential", runs)
    # apt-get brings only the fonts the PDFs embed (app/billing/pdf.py FONTS), no toolchain
    installed = re.findall(r"apt-get install -y --no-install-recommends ([^&]+)", runs)
    fonts = {package for _, _, package, _ in pdf.FONTS + pdf.FALLBACK_FONTS}
    assert installed and {p for group in installed for p in group.split()} == fonts
    user = [args for op, args in runtime if op == "USER"]
    assert user and user[-1].split(":")[0] not in {"0", "root"}
    (health,) = [args for op, args in runtime if op == "HEALTHCHECK"]
    assert "/healthz" in health
    (cmd,) = [args for op, args in runtime if op == "CMD"]
    check_command(yaml.safe_load(cmd))  # exec form is a JSON array
    env = dict(re.findall(r"(\w+)=(\S+)", " ".join(args for op, args in runtime if op == "ENV")))
    with pytest.raises(ValueError, match="SECRET_KEY"):
        check_settings(env)  # the image's production default refuses to start without a real secret


def test_dockerignore_keeps_local_state_out_but_not_the_sources():
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines() if line.strip() and not line.startswith("#")}
    assert {".git", ".venv", "var"} <= ignored
    assert not ignored & {"app", "templates", "static", "migrations", "alembic.ini", "setup.py", "pyproject.toml"}


def test_readme_deploying_commands_are_real():
    text = (ROOT / "README.md").read_text()
    section = text.split("## Deploying", 1)[1].split("\n## ", 1)[0].replace("\\\n", " ")
    lines = [line.strip() for line in section.splitlines() if line.startswith("    ")]
    commands = []
    for line in lines:
        words = shlex.split(line, comments=True)
        if "chargeback" in words and words[0] in {"chargeback", "docker"}:
            commands.append(words[words.index("chargeback"):])
    assert len(commands) >= 6
    for argv in commands:
        check_command([w for w in argv if w != "&"])
