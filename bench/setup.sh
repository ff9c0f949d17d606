#!/usr/bin/env bash
# Installs the baselines of the `query`/`baseline` suites into bench/.venv
# (gitignored): DuckDB, and ClickHouse in-process through chdb. Rerunnable. Needs
# python3 with the venv module and network access to PyPI.
#
# Exits non-zero when DuckDB cannot be installed (it also converts the rows to the
# Parquet every baseline loads). A failed chdb install leaves DuckDB in place and the
# query suite skips the ClickHouse side with a message; with
# PROFILEDB_REQUIRE_EXTERNAL=1 (CI) it fails this script too, as the suite would.
set -euo pipefail
cd "$(dirname "$0")"
DUCKDB_VERSION="${DUCKDB_VERSION:-2.0.0}"
CHDB_VERSION="${CHDB_VERSION:-4.4.0}"
CHDB_CORE_VERSION="${CHDB_CORE_VERSION:-26.9.0}"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet "duckdb==${DUCKDB_VERSION}"
.venv/bin/python -c 'import duckdb; print("duckdb", duckdb.__version__, "installed in bench/.venv")'

# --no-deps: chdb's declared pandas and pyarrow (~300 MB) serve DataFrame/Arrow
# results; the bench reads ClickHouse's JSON output and needs only the engine.
# chdb-core first: both packages write chdb/__init__.py and chdb's must win.
if .venv/bin/python -m pip install --quiet --no-deps "chdb-core==${CHDB_CORE_VERSION}" \
  && .venv/bin/python -m pip install --quiet --no-deps "chdb==${CHDB_VERSION}" \
  && .venv/bin/python -c 'import chdb; print("chdb", chdb.__version__, "(ClickHouse", chdb.engine_version + ") installed in bench/.venv")'; then
  :
elif [ "${PROFILEDB_REQUIRE_EXTERNAL:-}" = 1 ]; then
  echo "chdb could not be installed, and PROFILEDB_REQUIRE_EXTERNAL=1 requires it" >&2
  exit 1
else
  echo "chdb could not be installed; the query suite will skip the ClickHouse side"
fi
