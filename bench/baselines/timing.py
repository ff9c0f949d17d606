"""Timing and answer checks shared by the baseline engines of the query suite.

A spec file is a JSON list of {"name", "sql", "total", "iterations"}; "total" says
which figure of the answer is compared with profiledb's: "sum" (of the last column
over all rows, the default) or "first_row" (the last column of the first row, for
answers that carry the grand total on every row); "iterations", when present,
replaces the runs after the first (0: the first run only, for queries asked once).
"""
import math
import time


def pct(sorted_v, p):
    if not sorted_v:
        return None
    rank = math.ceil(p / 100 * len(sorted_v))
    return sorted_v[min(max(rank, 1), len(sorted_v)) - 1]


def total_of(rows, kind):
    if not rows or not isinstance(rows[0][-1], (int, float)):
        return None
    if kind == "first_row":
        return float(rows[0][-1])
    return float(sum(r[-1] for r in rows))


def measure(execute, decode, query, iterations):
    """Runs `query` once (first_ms, its answer checked) and `iterations` more times.

    `execute(sql)` returns the engine's answer as the client receives it; `decode`
    turns that into rows outside the timed section, once, for the total. The first
    run's CPU time is the whole process's (every engine thread), first_cpu_ms.
    """
    iterations = query.get("iterations", iterations)
    cpu = time.process_time()
    t = time.perf_counter()
    answer = execute(query["sql"])
    first = (time.perf_counter() - t) * 1e3
    first_cpu = (time.process_time() - cpu) * 1e3
    times = []
    for _ in range(iterations):
        t = time.perf_counter()
        execute(query["sql"])
        times.append((time.perf_counter() - t) * 1e3)
    times.sort()
    rows = decode(answer)
    return {
        "first_ms": first,
        "first_cpu_ms": first_cpu,
        "p50_ms": pct(times, 50),
        "p99_ms": pct(times, 99),
        "rows": len(rows),
        "total": total_of(rows, query.get("total", "sum")),
    }
