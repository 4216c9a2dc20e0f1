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
    assert b"bytes of the workers' output left out here]\n" in log
    calls = [int(line.split()[1]) for line in log.splitlines() if line.endswith(b" ends")]
    assert calls[-1] > 3 and calls == sorted(calls)  # the last call's end is kept, in order


def _flood(path, first: int, lines: int = 2000) -> None:
    """A real process writing `lines` numbered lines (from `first`) into a Drain of `path` (head 1000,
    tail 3000), as a worker's output comes."""
    read, write = os.pipe()
    drain = logcap.Drain(read, str(path), head=1000, tail=3000)
    script = (
        "import os,sys\nfd, a, b = map(int, sys.argv[1:])\n"
        "for i in range(a, b): os.write(fd, b'line %06d\\n' % i)"
    )
    args = [str(write), str(first), str(first + lines)]
    subprocess.run([sys.executable, "-c", script, *args], pass_fds=(write,), check=True)
    os.close(write)
    drain.wait(10)
    assert not drain.thread.is_alive()


def _parts(data: bytes) -> tuple[bytes, int, bytes]:
    """A capped log as (its head, the bytes its note says were left out, its tail); a head cut inside a line
    is ended by a newline before the note, which is not its own."""
    head, said = data.split(b"[attnbench: ", 1)
    assert len(head) in (1000, 1001)
    head = head[:1000]
    dropped, tail = said.split(b" bytes of the workers' output left out here]\n", 1)
    return head, int(dropped), tail


def test_a_drain_keeps_head_note_and_tail_of_a_real_process_output(tmp_path):
    """logcap with small bounds: what a child process writes into the pipe, the head whole (an earlier
    worker's line in it, as it is), then the note counting exactly what was left out, then the tail from a
    line's start to the last line."""
    path = tmp_path / "w.log"
    earlier = b"an earlier worker's line\n"
    path.write_bytes(earlier)
    _flood(path, 0)
    head, dropped, tail = _parts(path.read_bytes())
    assert len(head) == 1000 and head.startswith(earlier + b"line 000000\n")
    assert tail.endswith(b"line 001999\n") and tail.startswith(b"line ")
    assert len(head) + dropped + len(tail) == len(earlier) + 2000 * 12  # every byte kept or counted
    assert len(tail) <= 2 * 3000


def test_the_workers_of_one_log_share_its_head_and_tail(tmp_path):
    """A run that replaced its worker started each one's log at its end with a head and a tail of its own: a
    trial's noisy plug-ins wrote 11.6 MB, 4 MB for each of its workers. Three workers' floods, one bound."""
    path = tmp_path / "w.log"
    for worker in range(3):
        _flood(path, worker * 2000)
    head, dropped, tail = _parts(path.read_bytes())
    assert len(head) == 1000 and head.startswith(b"line 000000\n")
    assert tail.endswith(b"line 005999\n") and len(tail) <= 2 * 3000
    assert len(head) + dropped + len(tail) == 3 * 2000 * 12  # every worker's byte kept or counted, once


def test_a_plug_in_raising_keyboard_interrupt_is_its_cells_error_as_a_system_exit_is(tmp_path):
    """A worker ignores Ctrl-C, so a KeyboardInterrupt in a cell is the variant's own raise: its row's
    `error` in one line, as SystemExit's, not `crashed` (it ended the worker, which was replaced)."""
    out = tmp_path / "run"
    run_cli("run", "--variant-file", ABUSE, "--variants", "naive,abuse_kbi", "--seq-len", "64", *QUICK,
            "--out", str(out), check=True)  # fmt: skip
    row = {r["variant"]: r for r in read_rows(out)}["abuse_kbi"]
    assert (row["status"], row["message"]) == ("error", "KeyboardInterrupt: plug-in says stop"), row
