#!/usr/bin/env python3
"""DuckDB baseline for the profiledb query suite.

  convert --dir D            D/samples-*.csv + D/stacks.csv -> D/samples.parquet, D/stacks.parquet
  run --dir D --spec S.json --iterations N
                             runs each {"name", "sql"} of S once (first) and N more times;
                             prints {"name": {"first_ms", "p50_ms", "p99_ms", "rows", "total"}}

Run by `cargo run -p bench -- query|baseline` from bench/.venv (see bench/setup.sh).
"""
import argparse
import glob
import json
import math
import os
import sys
import time

import duckdb

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


def pct(sorted_v, p):
    if not sorted_v:
        return None
    rank = math.ceil(p / 100 * len(sorted_v))
    return sorted_v[min(max(rank, 1), len(sorted_v)) - 1]


def run(d, spec_path, iterations):
    with open(spec_path) as f:
        spec = json.load(f)
    out = {}
    for q in spec:
        # A fresh connection per query: nothing cached between query kinds.
        con = duckdb.connect()
        con.execute(f"CREATE VIEW samples AS SELECT * FROM read_parquet('{os.path.join(d, 'samples.parquet')}')")
        con.execute(f"CREATE VIEW stacks AS SELECT * FROM read_parquet('{os.path.join(d, 'stacks.parquet')}')")
        t = time.perf_counter()
        res = con.execute(q["sql"]).fetchall()
        first = (time.perf_counter() - t) * 1e3
        times = []
        for _ in range(iterations):
            t = time.perf_counter()
            con.execute(q["sql"]).fetchall()
            times.append((time.perf_counter() - t) * 1e3)
        times.sort()
        total = None
        if res and isinstance(res[0][-1], (int, float)):
            if q["name"].startswith("diff"):
                total = float(res[0][-1])
            else:
                total = float(sum(r[-1] for r in res))
        out[q["name"]] = {
            "first_ms": first,
            "p50_ms": pct(times, 50),
            "p99_ms": pct(times, 99),
            "rows": len(res),
            "total": total,
        }
        con.close()
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert")
    c.add_argument("--dir", required=True)
    r = sub.add_parser("run")
    r.add_argument("--dir", required=True)
    r.add_argument("--spec", required=True)
    r.add_argument("--iterations", type=int, default=10)
    a = ap.parse_args()
    if a.cmd == "convert":
        convert(a.dir)
    else:
        run(a.dir, a.spec, a.iterations)


if __name__ == "__main__":
    main()
