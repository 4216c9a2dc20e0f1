"""How the history store was chosen (results.history): 1,000 synthetic runs of 60 rows added and loaded
back into pandas, with SQLite (the stdlib) and, where `duckdb` is installed (`pip install duckdb`; attnbench
does not need it), with a DuckDB file and with a Parquet file per run read by DuckDB.

    python benchmarks/history_storage.py [N_RUNS] [--cases sqlite,duckdb,...]

"add, one transaction per run" is a nightly `attnbench history add RUN`; "one transaction" is `history add
runs/` of many runs at once, or `history rebuild`. The figures measured on the 2-core EPYC VM (2026-11-27)
are in results/history.py's docstring.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sqlite3
import tempfile
import time

import pandas as pd

COLS = ["run_key", "cell_id", "machine", "where_key", "device_group", "variant", "device", "dtype", "seq_len",
        "pass", "status", "time_ms_median", "time_ms_p25", "time_ms_p75", "tflops", "peak_mem_bytes",
        "finished_at"]  # fmt: skip


def _duck_type(col: str) -> str:
    if col in ("seq_len", "peak_mem_bytes"):
        return "BIGINT"
    return "DOUBLE" if col.startswith(("time", "tflops")) else "VARCHAR"


DUCK_TYPES = ", ".join(f"{c} {_duck_type(c)}" for c in COLS)


def synthetic_runs(n_runs: int, n_rows: int = 60, seed: int = 0) -> list[list[tuple]]:
    rng = random.Random(seed)
    runs = []
    for i in range(n_runs):
        rows = []
        for j in range(n_rows):
            t, n = 1.0 + rng.random(), 256 * (j // 5 + 1)
            cell = f"v{j % 5}|cpu|float32|b1|h8|n{n}|dk64|dv64|full|pad0|fwd"
            where = ("AMD EPYC (2 cores) on vm", "vm:cpu", "")
            axes = (f"v{j % 5}", "cpu", "float32", n, "fwd")
            rows.append(
                (f"run{i:05d}", cell, *where, *axes, "ok", t, t * 0.98, t * 1.02, 0.1, 1 << 20, "2026-11-27")
            )
        runs.append(rows)
    return runs


def _sqlite_load(path: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    with sqlite3.connect(path) as con:
        df = pd.read_sql_query("SELECT * FROM rows", con)
    return time.perf_counter() - t0, len(df)


def sqlite_per_run(d: str, runs) -> tuple[float, float, int, int]:
    path = os.path.join(d, "h.sqlite")
    t0 = time.perf_counter()
    for rows in runs:
        con = sqlite3.connect(path)
        with con:
            con.execute(f"CREATE TABLE IF NOT EXISTS rows ({', '.join(COLS)})")
            con.executemany(f"INSERT INTO rows VALUES ({', '.join('?' * len(COLS))})", rows)
        con.close()
    add = time.perf_counter() - t0
    return (add, *_sqlite_load(path), os.path.getsize(path))


def sqlite_one(d: str, runs) -> tuple[float, float, int, int]:
    path = os.path.join(d, "h.sqlite")
    t0 = time.perf_counter()
    con = sqlite3.connect(path)
    with con:
        con.execute(f"CREATE TABLE rows ({', '.join(COLS)})")
        for rows in runs:
            con.executemany(f"INSERT INTO rows VALUES ({', '.join('?' * len(COLS))})", rows)
    con.close()
    add = time.perf_counter() - t0
    return (add, *_sqlite_load(path), os.path.getsize(path))


def _duck_load(path: str) -> tuple[float, int]:
    import duckdb

    t0 = time.perf_counter()
    con = duckdb.connect(path)
    df = con.execute("SELECT * FROM rows").df()
    con.close()
    return time.perf_counter() - t0, len(df)


def duckdb_per_run(d: str, runs) -> tuple[float, float, int, int]:
    import duckdb

    path = os.path.join(d, "h.duckdb")
    t0 = time.perf_counter()
    for rows in runs:
        con = duckdb.connect(path)
        con.execute(f"CREATE TABLE IF NOT EXISTS rows ({DUCK_TYPES})")
        frame = pd.DataFrame(rows, columns=COLS)  # noqa: F841  (DuckDB reads it by name)
        con.execute("BEGIN")
        con.execute("INSERT INTO rows SELECT * FROM frame")
        con.execute("COMMIT")
        con.close()
    add = time.perf_counter() - t0
    return (add, *_duck_load(path), os.path.getsize(path))


def duckdb_one(d: str, runs) -> tuple[float, float, int, int]:
    import duckdb

    path = os.path.join(d, "h.duckdb")
    t0 = time.perf_counter()
    con = duckdb.connect(path)
    con.execute(f"CREATE TABLE rows ({DUCK_TYPES})")
    frame = pd.DataFrame([r for rows in runs for r in rows], columns=COLS)  # noqa: F841
    con.execute("INSERT INTO rows SELECT * FROM frame")
    con.close()
    add = time.perf_counter() - t0
    return (add, *_duck_load(path), os.path.getsize(path))


def parquet_per_run(d: str, runs) -> tuple[float, float, int, int]:
    import duckdb

    con = duckdb.connect()
    t0 = time.perf_counter()
    for rows in runs:
        frame = pd.DataFrame(rows, columns=COLS)  # noqa: F841
        con.execute(f"COPY (SELECT * FROM frame) TO '{d}/{rows[0][0]}.parquet' (FORMAT parquet)")
    add = time.perf_counter() - t0
    t0 = time.perf_counter()
    df = duckdb.connect().execute(f"SELECT * FROM read_parquet('{d}/*.parquet')").df()
    load = time.perf_counter() - t0
    return add, load, len(df), sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))


CASES = {
    "sqlite per run": sqlite_per_run,
    "sqlite one transaction": sqlite_one,
    "duckdb per run": duckdb_per_run,
    "duckdb one transaction": duckdb_one,
    "parquet per run + duckdb": parquet_per_run,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n_runs", type=int, nargs="?", default=1000)
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated, of: " + ", ".join(CASES))
    args = parser.parse_args()
    runs = synthetic_runs(args.n_runs)
    try:
        import duckdb  # noqa: F401
    except ImportError:
        print("duckdb is not installed: the SQLite cases only")
        have_duckdb = False
    else:
        have_duckdb = True
    for name in args.cases.split(","):
        if "duckdb" in name and not have_duckdb:
            continue
        d = tempfile.mkdtemp()
        try:
            add, load, n, size = CASES[name](d, runs)
        finally:
            shutil.rmtree(d)
        mb = size / 1e6
        print(f"{name:26s} add {len(runs)} runs {add:7.2f} s   load {n} rows {load:6.3f} s   {mb:.2f} MB")


if __name__ == "__main__":
    main()
