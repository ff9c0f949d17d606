#!/usr/bin/env python3
"""ClickHouse (in-process, through chdb) baseline for the profiledb query suite.

  load --dir D --path P      D/samples.parquet, D/stacks.parquet -> MergeTree tables
                             `samples`, `stacks` in the chdb data directory P (replaced),
                             merged to one part each; prints
                             {"rows", "stack_rows", "bytes", "tables", "seconds"}
  run --path P --spec S.json --iterations N
                             runs each {"name", "sql", "total"} of S (ClickHouse SQL)
                             once (first) and N more times through one connection to P;
                             prints {"name": {"first_ms", "p50_ms", "p99_ms", "rows", "total"}}

Run by `cargo run -p bench -- query|baseline` from bench/.venv (see bench/setup.sh).
"""
import argparse
import json
import os
import shutil
import time

import chdb

from timing import measure

# Labels as LowCardinality (dictionary-encoded, as profiledb's label dictionaries),
# sorted by profile type, service and time, the filters every query applies.
SAMPLES = """CREATE TABLE samples (
    ts_ms Int64,
    service LowCardinality(String),
    host LowCardinality(String),
    region LowCardinality(String),
    zone LowCardinality(String),
    version LowCardinality(String),
    profile_type LowCardinality(String),
    stack_id Int64,
    value Int64
) ENGINE = MergeTree ORDER BY (profile_type, service, ts_ms)"""

STACKS = """CREATE TABLE stacks (
    stack_id Int64,
    service LowCardinality(String),
    leaf LowCardinality(String),
    stack String
) ENGINE = MergeTree ORDER BY stack_id"""


def scalar(con, sql):
    return json.loads(con.query(sql, "JSONCompact").bytes())["data"][0][0]


def load(d, path):
    shutil.rmtree(path, ignore_errors=True)
    t = time.perf_counter()
    con = chdb.connect(path)
    for table, ddl in (("samples", SAMPLES), ("stacks", STACKS)):
        con.query(ddl)
        parquet = os.path.join(d, table + ".parquet")
        con.query(f"INSERT INTO {table} SELECT * FROM file('{parquet}', Parquet)")
        # One part per table, the state a background merge reaches on a server.
        con.query(f"OPTIMIZE TABLE {table} FINAL")
    seconds = time.perf_counter() - t
    parts = json.loads(con.query(
        "SELECT table, sum(rows), sum(bytes_on_disk), count() FROM system.parts "
        "WHERE active AND database = currentDatabase() GROUP BY table", "JSONCompact").bytes())["data"]
    tables = {p[0]: {"rows": int(p[1]), "bytes_on_disk": int(p[2]), "parts": int(p[3])} for p in parts}
    out = {
        "rows": int(scalar(con, "SELECT count() FROM samples")),
        "stack_rows": int(scalar(con, "SELECT count() FROM stacks")),
        "bytes": sum(t["bytes_on_disk"] for t in tables.values()),
        "tables": tables,
        "seconds": seconds,
    }
    con.close()
    print(json.dumps(out))


def run(path, spec_path, iterations):
    with open(spec_path) as f:
        spec = json.load(f)
    con = chdb.connect(path)
    out = {}
    for q in spec:
        # Timed: the answer as the client receives it (bytes in ClickHouse's JSON);
        # parsing it into rows for the total happens once, outside the timing.
        out[q["name"]] = measure(
            lambda sql: con.query(sql, "JSONCompact").bytes(),
            lambda answer: json.loads(answer)["data"],
            q,
            iterations,
        )
    con.close()
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    ld = sub.add_parser("load")
    ld.add_argument("--dir", required=True)
    ld.add_argument("--path", required=True)
    r = sub.add_parser("run")
    r.add_argument("--path", required=True)
    r.add_argument("--spec", required=True)
    r.add_argument("--iterations", type=int, default=10)
    a = ap.parse_args()
    if a.cmd == "load":
        load(a.dir, a.path)
    else:
        run(a.path, a.spec, a.iterations)


if __name__ == "__main__":
    main()
