#!/usr/bin/env python3
"""DuckDB baselines for the profiledb query suite (and the fleet suite).

  convert --dir D            D/samples-*.csv + D/stacks.csv -> D/samples.parquet, D/stacks.parquet
  load --dir D --db F        D/*.parquet -> native tables `samples`, `stacks` in the
                             DuckDB database file F (replaced); prints
                             {"rows", "stack_rows", "bytes", "seconds"}
  run --dir D --spec S.json --iterations N [--db F]
                             runs each {"name", "sql", "total"} of S once (first) and N
                             more times, over the Parquet files of D with a fresh
                             connection per query, or with --db over the native tables
                             of F through one connection held open for the whole run;
                             prints {"name": {"first_ms", "p50_ms", "p99_ms", "rows", "total"}}

Run by `cargo run -p bench -- query|baseline|fleet` from bench/.venv (see bench/setup.sh).
"""
import argparse
import glob
import json
import os
import sys
import time

import duckdb

from timing import measure

CPU_TYPE = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"


def convert(d):
    t = time.perf_counter()
    con = duckdb.connect()
    files = sorted(glob.glob(os.path.join(d, "samples-*.csv")))
    if not files:
        sys.exit("no samples-*.csv in " + d)
    cols = ("{'ts_ms': 'BIGINT', 'service': 'VARCHAR', 'host': 'VARCHAR', 'region': 'VARCHAR', "
            "'zone': 'VARCHAR', 'version': 'VARCHAR', 'stack_id': 'BIGINT', 'value': 'BIGINT'}")
    flist = "[" + ", ".join("'%s'" % f for f in files) + "]"
    samples = os.path.join(d, "samples.parquet")
    con.execute(
        f"COPY (SELECT ts_ms, service, host, region, zone, version, '{CPU_TYPE}' AS profile_type, "
        f"stack_id, value FROM read_csv({flist}, header=false, columns={cols}) "
        f"ORDER BY ts_ms, service, host) TO '{samples}' (FORMAT parquet, COMPRESSION zstd)")
    stacks = os.path.join(d, "stacks.parquet")
    con.execute(
        f"COPY (SELECT * FROM read_csv('{os.path.join(d, 'stacks.csv')}', header=true, "
        "columns={'stack_id': 'BIGINT', 'service': 'VARCHAR', 'leaf': 'VARCHAR', 'stack': 'VARCHAR'})) "
        f"TO '{stacks}' (FORMAT parquet, COMPRESSION zstd)")
    rows = con.execute(f"SELECT count(*) FROM read_parquet('{samples}')").fetchone()[0]
    print(json.dumps({
        "rows": rows,
        "parquet_bytes": os.path.getsize(samples) + os.path.getsize(stacks),
        "seconds": time.perf_counter() - t,
    }))


def load(d, db):
    for stale in (db, db + ".wal"):
        if os.path.exists(stale):
            os.remove(stale)
    t = time.perf_counter()
    con = duckdb.connect(db)
    # Sorted like the ClickHouse table's key, so DuckDB's per-row-group min/max
    # skip other profile types, services and times as MergeTree's index does.
    con.execute(
        "CREATE TABLE samples AS SELECT * FROM read_parquet("
        f"'{os.path.join(d, 'samples.parquet')}') ORDER BY profile_type, service, ts_ms")
    con.execute(
        "CREATE TABLE stacks AS SELECT * FROM read_parquet("
        f"'{os.path.join(d, 'stacks.parquet')}') ORDER BY stack_id")
    con.execute("CHECKPOINT")
    rows = con.execute("SELECT count(*) FROM samples").fetchone()[0]
    stack_rows = con.execute("SELECT count(*) FROM stacks").fetchone()[0]
    con.close()
    seconds = time.perf_counter() - t
    print(json.dumps({
        "rows": rows,
        "stack_rows": stack_rows,
        "bytes": os.path.getsize(db),
        "seconds": seconds,
    }))


def parquet_connection(d):
    con = duckdb.connect()
    con.execute(f"CREATE VIEW samples AS SELECT * FROM read_parquet('{os.path.join(d, 'samples.parquet')}')")
    con.execute(f"CREATE VIEW stacks AS SELECT * FROM read_parquet('{os.path.join(d, 'stacks.parquet')}')")
    return con


def run(d, spec_path, iterations, db):
    with open(spec_path) as f:
        spec = json.load(f)
    native = duckdb.connect(db, read_only=True) if db else None
    out = {}
    for q in spec:
        # Over Parquet, a fresh connection per query: nothing cached between query
        # kinds. The native tables stay open, as a database server would hold them.
        con = native or parquet_connection(d)
        out[q["name"]] = measure(lambda sql: con.execute(sql).fetchall(), lambda rows: rows, q, iterations)
        if native is None:
            con.close()
    if native is not None:
        native.close()
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert")
    c.add_argument("--dir", required=True)
    ld = sub.add_parser("load")
    ld.add_argument("--dir", required=True)
    ld.add_argument("--db", required=True)
    r = sub.add_parser("run")
    r.add_argument("--dir", required=True)
    r.add_argument("--spec", required=True)
    r.add_argument("--iterations", type=int, default=10)
    r.add_argument("--db")
    a = ap.parse_args()
    if a.cmd == "convert":
        convert(a.dir)
    elif a.cmd == "load":
        load(a.dir, a.db)
    else:
        run(a.dir, a.spec, a.iterations, a.db)


if __name__ == "__main__":
    main()
