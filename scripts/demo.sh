#!/usr/bin/env bash
# Set up the portal and run it on its embedded default: SQLite + the built-in cluster simulator.
# Extra arguments go to `chargeback demo` (e.g. scripts/demo.sh --port 8080).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e .
exec .venv/bin/chargeback demo "$@"
