#!/usr/bin/env bash
# Installs the DuckDB baseline for the `query`/`baseline` suites into bench/.venv
# (gitignored). Rerunnable. Needs python3 with the venv module and network access
# to PyPI.
set -euo pipefail
cd "$(dirname "$0")"
DUCKDB_VERSION="${DUCKDB_VERSION:-2.0.0}"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet "duckdb==${DUCKDB_VERSION}"
.venv/bin/python -c 'import duckdb; print("duckdb", duckdb.__version__, "installed in bench/.venv")'
