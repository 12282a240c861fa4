"""Dump every JSON answer and export of a seeded deployment, to compare two versions byte for byte.

A refactoring must not change what finance receives. This script builds the same deployment from
the public interfaces only (the `chargeback` CLI and HTTP), so it runs unchanged on the code before
and after a restructuring:

    .venv/bin/python scripts/api_answers.py /tmp/before      # on the old commit
    .venv/bin/python scripts/api_answers.py /tmp/after       # on the new one
    diff -r /tmp/before /tmp/after

What it seeds: a fresh SQLite database, the simulator's fleet (seed 42) ingested for a fixed window
(2026-10-28 to 2026-11-02) under examples/policy.yaml, October closed (finalized, exports hashed),
November rated as a draft, a finance token. It then GETs every path of /api/v1/openapi.json whose
parameters it can fill (periods, tenants, ids found in earlier answers) and writes each body, plus
the CLI exports (CSV, FOCUS, PDF text), to OUT. Values that are the wall clock of this run (the
moment of closing, token and audit times) differ from run to run; `--mask-times` replaces ISO
timestamps of today's date, wall-clock times and token prefixes by placeholders so that the rest can
be compared.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START, END = "2026-10-28T00:00:00Z", "2026-11-02T00:00:00Z"
CLOSED, DRAFT = "2026-10", "2026-11"
# Which list answer names the values of which path parameter.
SOURCES = {"/api/v1/tenants": ("tenants", "name"), "/api/v1/policy/versions": ("versions", "version"),
           "/api/v1/audit": ("audit", "id"), "/api/v1/policy/changes": ("changes", "id"),
           "/api/v1/policy/releases": ("releases", "id")}
PARAMS = {"period": "periods", "tenant": "tenants", "name": "tenants", "number": "versions",
          "entry_id": "audit", "change_id": "changes", "release_id": "releases"}
EXTRA = [f"/api/v1/usage?start={START}&end={END}&group_by={group}" for group in ("tenant", "department", "pool", "class")]
EXTRA += [f"/api/v1/periods/{CLOSED}/export?format={fmt}" for fmt in ("csv", "focus")]


def cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, "-c", "from app.cli import main; main()", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True)
    if done.returncode not in (0, 2):  # 2: ingest left gaps, which the answers then show
        raise SystemExit(f"chargeback {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout


def seed(env: dict[str, str]) -> str:
    cli(env, "db", "upgrade")
    cli(env, "policy", "import", "examples/policy.yaml", "--effective-from", START, "--actor", "answers")
    cli(env, "ingest", "--start", START, "--end", END)
    cli(env, "rate", "--period", CLOSED)
    cli(env, "close", "--period", CLOSED, "--accept-gaps", "--accept-unpooled", "--reason", "answers")
    cli(env, "rate", "--period", DRAFT)
    cli(env, "user", "create", "finn", "--role", "admin")
    out = cli(env, "token", "create", "--user", "finn", "--scopes", "read", "--label", "answers")
    token = re.search(r"\b(cbk_[A-Za-z0-9_\-]+|[A-Za-z0-9_\-]{32,})\b", out)
    if not token:
        raise SystemExit(f"no token in: {out!r}")
    return token.group(1)


def fill(path: str, known: dict[str, list[str]]) -> list[str]:
    """Every concrete path for a templated one, from the values known so far (none: skipped)."""
    paths = [path]
    for name in re.findall(r"{(\w+)}", path):
        values = known.get(PARAMS.get(name, name), [])
        paths = [p.replace("{" + name + "}", v) for p in paths for v in values[:3]]
    return paths


def harvest(path: str, body, known: dict[str, list[str]]) -> None:
    """Remember the ids and names an answer lists, to fill the templated paths that need them."""
    if path not in SOURCES:
        return
    kind, key = SOURCES[path]
    items = body.get("items") if isinstance(body, dict) else body
    known[kind] = [str(item[key]) for item in items or [] if isinstance(item, dict) and item.get(key) is not None]


def mask(text: str, today: str) -> str:
    """Today's timestamps, any with sub-second digits (wall clock, not data), and token prefixes."""
    text = re.sub(today + r"[T ][0-9:.]+(?:Z|[+-]00:?00)?", "<now>", text)
    text = re.sub(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d\.\d+(?:Z|[+-]00:?00)?", "<now>", text)
    return re.sub(r"cbt_[\w-]{8}", "cbt_<prefix>", text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--mask-times", action="store_true", help="replace today's timestamps by <now>")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "CHARGEBACK_DATABASE_URL": f"sqlite:///{tmp}/answers.db",
               "CHARGEBACK_SECRET_KEY": "answers-" + "0" * 40, "CHARGEBACK_PROMETHEUS_URL": ""}
        env.pop("CHARGEBACK_SCRAPE_INTERVAL_S", None)
        token = seed(env)
        for fmt in ("csv", "focus", "pdf"):
            target = args.out / f"export-{CLOSED}.{fmt}"
            cli(env, "export", "--period", CLOSED, "--format", fmt, "--out", str(target))
            if fmt == "pdf":
                text = subprocess.run(["pdftotext", "-layout", str(target), "-"], capture_output=True, text=True).stdout
                target.unlink()
                (args.out / f"export-{CLOSED}.pdf.txt").write_text(text)
        os.environ.update({k: v for k, v in env.items() if k.startswith("CHARGEBACK_")})
        sys.path.insert(0, str(ROOT))
        from fastapi.testclient import TestClient

        from app.main import create_app

        client = TestClient(create_app(), headers={"Authorization": f"Bearer {token}"})
        document = client.get("/api/v1/openapi.json").json()
        known: dict[str, list[str]] = {"periods": [CLOSED, DRAFT]}
        # /metrics is this process's own request timings: different on every run by nature.
        gets = sorted(p for p, ops in document["paths"].items() if "get" in ops and p != "/metrics")
        # Paths without parameters first: their answers name the ids that templated paths need.
        for path in sorted(gets, key=lambda p: ("{" in p, p)) + EXTRA:
            for concrete in fill(path, known):
                response = client.get(concrete)
                body_text = response.text
                try:
                    harvest(path, response.json(), known)
                    body_text = json.dumps(response.json(), indent=1, sort_keys=False)
                except ValueError:
                    pass
                if args.mask_times:
                    body_text = mask(body_text, today)
                name = re.sub(r"[^\w.-]+", "_", concrete.strip("/")) or "root"
                (args.out / f"{name}.txt").write_text(f"{response.status_code} {response.headers.get('content-type')}\n"
                                                      f"{body_text}\n")
    print(f"wrote {len(list(args.out.iterdir()))} answers to {args.out}")


if __name__ == "__main__":
    main()
