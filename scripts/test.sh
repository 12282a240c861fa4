#!/usr/bin/env bash
# Set up everything the tests need on a fresh Debian machine, then run every test.
#   - Debian packages: prometheus (+ promtool), chromium, poppler-utils (pdftotext), postgresql,
#     kubernetes-client (kubectl), victoria-metrics, fonts-dejavu-core and fonts-wqy-microhei (PDF fonts)
#   - a virtualenv in .venv with the project and its test extras
#   - PostgreSQL: the one on 127.0.0.1:5432 if it answers, else a throwaway cluster in /tmp
# Extra arguments go to pytest (e.g. scripts/test.sh -k billing).
#   scripts/test.sh --quick: the fast tier — a virtualenv, ruff and the tests that need neither PostgreSQL, a
#   Prometheus server, chromium nor a built wheel, and are not marked slow (tests/support/markers.py), on SQLite.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n==> %s\n' "$*"; }

if [ "${1:-}" = "--quick" ]; then
  shift
  log "quick tier: python environment (.venv)"
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/python -m pip install -q -e '.[test]'
  log "ruff"
  .venv/bin/ruff check app tests benchmarks scripts migrations
  log "pytest: SQLite only, no Prometheus, no browser, nothing slow (two processes)"
  BASETEMP=$(mktemp -d /tmp/chargeback-pytest.XXXXXX)
  rc=0
  .venv/bin/python -m pytest -q --basetemp "$BASETEMP/quick" -n 2 \
    -m "not postgres and not prometheus and not browser and not deploy and not slow" "$@" || rc=$?
  rm -rf "$BASETEMP"
  exit "$rc"
fi

missing=()
command -v prometheus >/dev/null || missing+=(prometheus)
command -v promtool >/dev/null || missing+=(prometheus)
command -v chromium >/dev/null || missing+=(chromium)
command -v pdftotext >/dev/null || missing+=(poppler-utils)
command -v victoria-metrics >/dev/null || missing+=(victoria-metrics)
command -v pg_isready >/dev/null || missing+=(postgresql-client)
# kubectl renders the Kubernetes manifests (kubectl kustomize) in tests/deploy.
command -v kubectl >/dev/null || missing+=(kubernetes-client)
# The PDFs embed DejaVu Sans (Latin, Greek, Cyrillic, Arabic) and WenQuanYi Micro Hei (Chinese).
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing+=(fonts-dejavu-core)
[ -f /usr/share/fonts/truetype/wqy/wqy-microhei.ttc ] || missing+=(fonts-wqy-microhei)
if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  missing+=(postgresql)
fi
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

log "python environment (.venv)"
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test]'

if [ -z "${CHARGEBACK_TEST_PG_URL:-}" ]; then
  if [ -z "${CHARGEBACK_TEST_PG_THROWAWAY:-}" ] && pg_isready -q -h 127.0.0.1 -p 5432; then
    export CHARGEBACK_TEST_PG_URL="postgresql://postgres@127.0.0.1:5432/test"
    psql -q -h 127.0.0.1 -U postgres -d test -c 'select 1' >/dev/null 2>&1 \
      || export CHARGEBACK_TEST_PG_URL="postgresql://postgres@127.0.0.1:5432/postgres"
  else
    log "starting a throwaway PostgreSQL cluster (none on 127.0.0.1:5432, or CHARGEBACK_TEST_PG_THROWAWAY set)"
    PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
    PGDIR=$(mktemp -d /tmp/chargeback-pg.XXXXXX)
    PGPORT=55432
    RUN=()
    if [ "$(id -u)" -eq 0 ]; then chown postgres "$PGDIR"; RUN=(runuser -u postgres --); fi
    "${RUN[@]}" "$PGBIN/initdb" -D "$PGDIR/data" -U postgres --auth=trust >/dev/null
    "${RUN[@]}" "$PGBIN/pg_ctl" -D "$PGDIR/data" -l "$PGDIR/log" -w \
      -o "-p $PGPORT -k $PGDIR -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off" start >/dev/null
    trap '"${RUN[@]}" "$PGBIN/pg_ctl" -D "$PGDIR/data" -m immediate stop >/dev/null 2>&1 || true; rm -rf "$PGDIR"' EXIT
    export CHARGEBACK_TEST_PG_URL="postgresql://postgres@127.0.0.1:$PGPORT/postgres"
  fi
fi

# Playwright's sync API runs its own event loop in the test process, which the async route tests
# cannot share: the browser tests get pytest processes of their own (two, a test file each at a time:
# a file's tests share its portal and chromium; 288 s -> 189 s on an idle 2-core box).
log "ruff (lint: configured in pyproject.toml)"
.venv/bin/ruff check app tests benchmarks scripts migrations

# A base temporary directory of this run's own: pytest keeps only the newest three under /tmp/pytest-of-$USER
# and deletes older ones, which would pull files from under another pytest running at the same time.
BASETEMP=$(mktemp -d /tmp/chargeback-pytest.XXXXXX)
log "pytest: everything but the browser, two processes (pytest-xdist; PostgreSQL: $CHARGEBACK_TEST_PG_URL)"
run_pytest() {
  local rc=0
  .venv/bin/python -m pytest -q --basetemp "$BASETEMP/$1" "${@:2}" || rc=$?
  # Exit 5 means the selection held no test (e.g. a -k matching only the other half): not a failure.
  [ "$rc" -eq 5 ] && rc=0
  return "$rc"
}
status=0
run_pytest rest -n 2 -m "not browser" "$@" || status=$?
log "pytest: the browser tests (headless /usr/bin/chromium, two processes)"
run_pytest browser -n 2 --dist loadfile -m browser "$@" || status=$?
rm -rf "$BASETEMP"
exit "$status"
