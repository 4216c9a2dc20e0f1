"""Plug-ins that abuse the run they are measured in (tests/data/abuse_variants.py): forged rows do not read as
clean, a flood of output does not fill the disk, a KeyboardInterrupt's message is one line."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import DATA, run_cli

from attnbench.harness.workers import logcap
from attnbench.results import read_rows

ABUSE = str(DATA / "abuse_variants.py")
QUICK = ("--heads", "1", "--budget-ms", "3", "--warmup-ms", "1", "-q")


def test_rows_a_plug_in_forged_are_said_by_the_run_and_its_report(tmp_path):
    out = (
        tmp_path / "run"
    )  # a real `attnbench run` process: the plug-in finds its --out as the reproducer did
    p = run_cli("run", "--variant-file", ABUSE, "--variants", "naive,abuse_forge", "--seq-len", "32,64",
                *QUICK, "--out", str(out), process=True, check=True)  # fmt: skip
    assert (
        "note: rows.jsonl: 2 lines were appended by something other than attnbench (cells naive|" in p.stderr
    )
    assert "this run's numbers cannot be trusted" in p.stderr
    naive = [r for r in read_rows(out) if r["variant"] == "naive"]
    assert len(naive) == 4  # the forgery is there, and said to be
    rep = run_cli("report", str(out), "--out", str(tmp_path / "rep"), check=True)
    assert "attnbench: warning: " in rep.stderr and "2 lines were appended" in rep.stderr
    findings = rep.stdout.split("Findings", 1)[1].lstrip().splitlines()
    assert findings[0].startswith("Changed by something other than attnbench:"), rep.stdout
    page = (tmp_path / "rep" / "README.md").read_text()
    assert "rows.jsonl repeats 2 cells that no `--resume --redo-drift` measured again" in page


def test_a_worker_log_keeps_the_first_and_the_last_of_a_flood(tmp_path):
    out = tmp_path / "run"
    run_cli("run", "--variant-file", ABUSE, "--variants", "abuse_flood", "--seq-len", "32", *QUICK,
            "--out", str(out), check=True)  # fmt: skip
    assert read_rows(out)[0]["status"] == "ok"
    log = (out / "worker.log").read_bytes()
    assert len(log) <= logcap.LOG_HEAD_BYTES + 2 * logcap.LOG_TAIL_BYTES + 4096, len(log)
    assert log.startswith(b"attnbench worker ")
    assert b"bytes of this worker's output left out here]\n" in log
    calls = [int(line.split()[1]) for line in log.splitlines() if line.endswith(b" ends")]
    assert calls[-1] > 3 and calls == sorted(calls)  # the last call's end is kept, in order


def test_a_drain_keeps_head_note_and_tail_of_a_real_process_output(tmp_path):
    """logcap with small bounds: what a child process writes into the pipe, the head whole, then the note
    counting exactly what was left out, then the tail from a line's start to the last line."""
    read, write = os.pipe()
    path = tmp_path / "w.log"
    path.write_bytes(b"an earlier worker's line\n")  # kept as it is
    drain = logcap.Drain(read, str(path), head=1000, tail=3000)
    script = "import os,sys\nfor i in range(2000): os.write(int(sys.argv[1]), b'line %06d\\n' % i)"
    subprocess.run([sys.executable, "-c", script, str(write)], pass_fds=(write,), check=True)
    os.close(write)
    drain.wait(10)
    assert not drain.thread.is_alive()
    data = path.read_bytes()
    earlier, rest = data.split(b"\n", 1)
    head, after = rest[:1000], rest[1000:]
    assert head.startswith(b"line 000000\n")
    said, tail = after.split(b"]\n", 1)
    dropped = int(said.split(b"[attnbench: ")[1].split()[0])
    assert tail.endswith(b"line 001999\n") and tail.startswith(b"line ")
    assert 1000 + dropped + len(tail) == 2000 * 12  # every byte kept or counted
    assert len(tail) <= 2 * 3000


def test_a_plug_in_raising_keyboard_interrupt_is_its_cells_error_as_a_system_exit_is(tmp_path):
    """A worker ignores Ctrl-C, so a KeyboardInterrupt in a cell is the variant's own raise: its row's
    `error` in one line, as SystemExit's, not `crashed` (it ended the worker, which was replaced)."""
    out = tmp_path / "run"
    run_cli("run", "--variant-file", ABUSE, "--variants", "naive,abuse_kbi", "--seq-len", "64", *QUICK,
            "--out", str(out), check=True)  # fmt: skip
    row = {r["variant"]: r for r in read_rows(out)}["abuse_kbi"]
    assert (row["status"], row["message"]) == ("error", "KeyboardInterrupt: plug-in says stop"), row
