"""Two runs measuring on one machine at once: the second is told when it starts, both are told when they
end and record it (neighbours.jsonl); a session that died, or whose pid another process now has, is not
taken for a live run; sessions that ended long ago are removed. Real runs, real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import DATA, TEST_CALIBRATE_MS, cli_env

from attnbench.harness.run import neighbours

ROOT = Path(__file__).resolve().parents[2]
SCALEOUT = DATA / "scaleout_variants.py"
TINY = ["--heads", "1", "--budget-ms", "5", "--warmup-ms", "1", "--calibrate-ms", TEST_CALIBRATE_MS]


def _run(out: Path, shared: Path, *args: str) -> subprocess.Popen:
    env = {**cli_env(), neighbours.ENV: str(shared), "ATTNBENCH_TEST_SLEEP_S": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "attnbench", "run", *args, *TINY, "--out", str(out)], cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_a_run_started_beside_another_is_told_and_both_record_each_other(tmp_path):
    shared, a, b = tmp_path / "announced", tmp_path / "a", tmp_path / "b"
    # a waits 1 s at its first call of each shape (the probe's, the gate's, each cell's): once it has
    # announced itself, b runs meanwhile
    slow = _run(a, shared, "--variant-file", str(SCALEOUT), "--variants", "sleep_1s", "--seq-len", "32,64")
    deadline = time.time() + 120
    while not list(shared.glob("*.json")):
        assert slow.poll() is None and time.time() < deadline, slow.communicate()
        time.sleep(0.05)
    fast = _run(b, shared, "--variants", "naive", "--seq-len", "32")
    b_out, b_err = fast.communicate(timeout=120)
    assert slow.poll() is None, "the slow run ended before the second one: nothing was measured beside it"
    a_out, a_err = slow.communicate(timeout=120)
    assert fast.returncode == slow.returncode == 0, (a_err, b_err)

    assert f"another attnbench run is measuring on this machine: {a} (pid {slow.pid}, since " in b_err
    assert "measure one at a time" in b_err
    # each run's closing note names the other, and its folder records it
    assert f"another attnbench run measured on this machine during this one: {a} (pid {slow.pid}" in b_err
    assert f"another attnbench run measured on this machine during this one: {b} (pid {fast.pid}" in a_err
    for run, other, pid in ((a, b, fast.pid), (b, a, slow.pid)):
        (seen,) = [json.loads(line) for line in (run / neighbours.RECORD).read_text().splitlines()]
        assert (seen["out"], seen["pid"]) == (str(other), pid) and seen["from"] <= seen["to"]
    assert all(json.loads(f.read_text()).get("ended") for f in shared.glob("*.json"))  # both ended
    # the report's findings open with it (before any winner: the machine was another run's too)
    from attnbench.reports.render import findings_of, prepare

    opened = findings_of(prepare([b])).busy
    assert opened[0].startswith(f"Another attnbench run measured on this machine during this run: {a} (pid ")


def test_a_dead_or_reused_pid_is_no_live_run_and_old_sessions_are_removed(tmp_path, monkeypatch):
    monkeypatch.setenv(neighbours.ENV, str(tmp_path))
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    now = time.time()
    sessions = {
        "dead.json": {"pid": int(dead.stdout), "ticks": "1", "out": "runs/dead", "began": now - 60},
        # this very process, but started at another time: its pid was another process's
        "reused.json": {"pid": os.getpid(), "ticks": "1", "out": "runs/reused", "began": now - 60},
        "old.json": {
            "pid": 1,
            "ticks": "1",
            "out": "runs/old",
            "began": now - 3 * 86400,
            "ended": now - 2 * 86400,
        },
    }
    for name, entry in sessions.items():
        (tmp_path / name).write_text(json.dumps(entry))
    me = neighbours.announce(tmp_path / "run")  # this process's own session is never its neighbour
    assert neighbours.alongside() is None
    assert not (tmp_path / "old.json").exists()  # ended over a day ago
    assert {e["out"] for e in neighbours.others()} == {"runs/dead", "runs/reused"}
    # a live session is told; ended, it is not
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        began = time.time()
        ticks = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        live = {"pid": child.pid, "ticks": ticks, "out": "runs/live", "began": began}
        (tmp_path / "live.json").write_text(json.dumps(live))
        assert "runs/live (pid" in (neighbours.alongside() or "")
        (tmp_path / "live.json").write_text(json.dumps({**live, "ended": time.time()}))
        assert neighbours.alongside() is None
        (tmp_path / "run").mkdir()
        assert "runs/live" in me.end(tmp_path / "run")[0]  # it overlapped this session while it lasted
        # killed and not yet reaped by its parent (a zombie, whose pid and start time are still there)
        child.kill()
        while _state(child.pid) != "Z":
            time.sleep(0.01)
        (tmp_path / "live.json").write_text(json.dumps(live))
        assert neighbours.alongside() is None
    finally:
        child.kill()
        child.wait()


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_a_moment_is_said_one_way_with_its_date_only_where_the_line_lacks_it(tmp_path, monkeypatch):
    """results.neighbours.at says every moment of both lines: the run's (since when a neighbour measures,
    its date where that is not today's) and the report's (the overlap, its end's date where it is not its
    start's)."""
    from datetime import datetime, timezone

    from attnbench.results import neighbours as recorded

    day = datetime(2026, 12, 7, 10, 2, 11, tzinfo=timezone.utc).timestamp()
    assert recorded.at(day) == "2026-12-07 10:02:11 UTC" and recorded.at(None) == "?"
    assert recorded.at(day, beside=day + 3600) == "10:02:11 UTC"
    assert recorded.at(day, beside=day + 86400) == "2026-12-07 10:02:11 UTC"
    spans = [(day, day + 209), (day + 50000, day + 50000 + 3600)]  # the second ends past midnight
    lines = [
        json.dumps({"out": f"runs/n{i}", "pid": i, "from": a, "to": b}) for i, (a, b) in enumerate(spans)
    ]
    (tmp_path / recorded.RECORD).write_text("\n".join(lines) + "\n")
    said = recorded.sentence(tmp_path)
    assert "runs/n0 (pid 0, 2026-12-07 10:02:11 UTC to 10:05:40 UTC)" in said
    assert "runs/n1 (pid 1, 2026-12-07 23:55:31 UTC to 2026-12-08 00:55:31 UTC)" in said
    entry = {"out": "runs/nightly", "pid": 4242, "began": day}
    monkeypatch.setattr(neighbours, "_now", lambda: day + 60)
    assert neighbours.described(entry) == "runs/nightly (pid 4242, since 10:02:11 UTC)"
    monkeypatch.setattr(neighbours, "_now", lambda: day + 86400)  # it began yesterday
    assert neighbours.described(entry) == "runs/nightly (pid 4242, since 2026-12-07 10:02:11 UTC)"


def test_a_report_names_a_few_neighbours_and_counts_the_rest(tmp_path):
    """25 runs beside one: the report's sentence names the first three, counts the other 22 and points to
    neighbours.jsonl, which has them all, instead of burying the findings under 25 pids; three are named
    all."""
    from attnbench.results import neighbours as recorded

    lines = [
        json.dumps({"out": f"runs/n{i}", "pid": 100 + i, "from": 1.8e9, "to": 1.8e9 + 60}) for i in range(25)
    ]
    (tmp_path / recorded.RECORD).write_text("\n".join(lines) + "\n")
    said = recorded.sentence(tmp_path)
    assert said.startswith(
        "25 other attnbench runs measured on this machine during this run: runs/n0 (pid 100"
    )
    assert "runs/n2 (pid 102" in said and "runs/n3" not in said and "pid 124" not in said
    assert f"and 22 more, each with its pid and times in {tmp_path / recorded.RECORD}" in said
    (tmp_path / recorded.RECORD).write_text("\n".join(lines[:3]) + "\n")
    said = recorded.sentence(tmp_path)
    assert "runs/n2 (pid 102" in said and "more" not in said


def test_a_runs_closing_note_names_a_few_neighbours_and_counts_the_rest(tmp_path, monkeypatch):
    """The note a run ends with names three of the five runs beside it, counts the other two and points to
    its neighbours.jsonl, which records all five."""
    monkeypatch.setenv(neighbours.ENV, str(tmp_path / "announced"))
    now = time.time()
    seen = {
        f"{i}.json": {"out": f"runs/n{i}", "pid": 100 + i, "began": now - 60, "ended": now} for i in range(5)
    }
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (note,) = neighbours.Announced(None, time.time() - 30, seen=seen).end(run_dir)
    assert "runs/n2 (pid 102" in note and "runs/n3" not in note, note
    assert f"and 2 more, each in {run_dir / neighbours.RECORD}" in note
    assert len((run_dir / neighbours.RECORD).read_text().splitlines()) == 5


def test_a_dry_run_says_the_runs_measuring_beside_it_and_announces_nothing(tmp_path):
    """Trial T (M4): a dry run estimated 2 min for a run that took 18, with 25 other runs measuring on the
    machine and nothing said. The dry run names the live ones (an ended one is not), says the estimate
    assumes a quiet machine, and does not announce itself: it measures nothing."""
    shared = tmp_path / "announced"
    shared.mkdir()
    children = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2)]
    try:
        now = time.time()
        for child in children:
            ticks = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
            entry = {"pid": child.pid, "ticks": ticks, "out": f"runs/{child.pid}", "began": now}
            (shared / f"{child.pid}.json").write_text(json.dumps(entry))
        ended = {"pid": 1, "ticks": "1", "out": "runs/ended", "began": now - 60, "ended": now - 30}
        (shared / "ended.json").write_text(json.dumps(ended))
        before = sorted(p.name for p in shared.iterdir())
        env = {**cli_env(), neighbours.ENV: str(shared)}
        argv = [sys.executable, "-m", "attnbench", "run", "--variants", "naive", "--seq-len", "32",
                "--dry-run", *TINY, "--out", str(tmp_path / "dry")]  # fmt: skip
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        said = done.stdout + done.stderr
        pids = ", ".join(str(pid) for pid in sorted(c.pid for c in children))
        assert (
            f"2 other attnbench runs are measuring on this machine now (pids {pids}): the estimate "
            "assumes a quiet machine" in said
        ), said
        assert "runs/ended" not in said and "pid 1," not in said
        assert sorted(p.name for p in shared.iterdir()) == before  # the dry run announced nothing
        assert not (tmp_path / "dry").exists()
    finally:
        for child in children:
            child.kill()
            child.wait()
