"""Faults around a run, each one line on stderr and exit 2 with nothing torn or lost: a full disk, a start
interrupted before meta.json, a malformed meta.json, a numerics probe a crash left unwritten."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import synthetic
from conftest import cli_env, on_a_pty, run_cli, stopped_by_ctrl_c

QUICK = ("--heads", "2", "--warmup-ms", "1", "--budget-ms", "5", "--min-ms", "1", "-q")

FILLER = """
from pathlib import Path

from attnbench import variants


@variants.register("fill_disk", description="naive, that fills the run's disk once, in its N = 32 cell")
def fill_disk(q, k, v, **kw):
    done = Path({marker!r})
    if q.shape[2] == 32 and not done.exists():
        done.touch()
        with open({filler!r}, "wb", buffering=0) as fh:
            try:
                while True:
                    fh.write(b"x" * 4096)
            except OSError:  # ENOSPC: the disk is full now
                pass
    return variants.get("naive").fn(q, k, v, **kw)
"""


@contextlib.contextmanager
def tiny_disk(where: Path, size: str):
    """A tmpfs of `size` mounted at `where` for the test's length, unmounted afterwards whatever happens;
    the test is skipped where mounting is not permitted (not root, or no CAP_SYS_ADMIN in a container)."""
    where.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", f"attnbench-test-{uuid.uuid4().hex[:8]}", str(where)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        pytest.skip(
            f"cannot mount a tmpfs here to fill a disk for real: {proc.stderr.strip() or proc.returncode}"
        )
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_disk_stops_the_run_with_one_line_and_resume_finishes_it(tmp_path):
    marker, variant_file = tmp_path / "filled", tmp_path / "fill.py"
    with tiny_disk(tmp_path / "disk", "1m") as disk:
        filler = disk / "filler"
        variant_file.write_text(FILLER.format(marker=str(marker), filler=str(filler)))
        out = disk / "run"
        proc = run_cli(
            "run", "--variant-file", str(variant_file), "--variants", "naive,fill_disk",
            "--seq-len", "32,48,64", *QUICK, "--out", str(out),
        )  # fmt: skip
        assert marker.exists(), proc.stderr  # the disk did fill
        assert proc.returncode == 2, proc.stderr
        (line,) = proc.stderr.strip().splitlines()
        # the visit's line in visits.jsonl or the cell's row in rows.jsonl, whichever met the full disk
        assert re.match(
            rf"attnbench: error: cannot write {re.escape(str(out))}/(rows|visits)\.jsonl: no space left on "
            "device",
            line,
        ), line
        assert f"--resume --out {out}" in line
        for name in ("rows.jsonl", "visits.jsonl"):
            raw = (out / name).read_bytes() if (out / name).exists() else b""
            assert raw == b"" or raw.endswith(b"\n")  # no torn last line
        raw = (out / "rows.jsonl").read_bytes()
        before = [json.loads(x) for x in raw.splitlines()]
        assert len(before) < 6 and not list(out.glob("*.tmp"))

        filler.unlink()  # space is back
        again = run_cli("run", "--resume", "--out", str(out), "-q")
        assert again.returncode == 0, again.stderr
        rows = [json.loads(x) for x in (out / "rows.jsonl").read_text().splitlines()]
        assert rows[: len(before)] == before and len(rows) == 6
        assert {r["status"] for r in rows} == {"ok"}
        assert len({r["cell_id"] for r in rows}) == 6


def test_a_run_stopped_while_calibrating_is_reused_and_the_hint_says_so(tmp_path):
    """Ctrl-C before meta.json (here: during a long calibration) leaves the lock and the worker's log; the
    hint names what works, --resume says why there is nothing to resume, and the same command runs again
    into that directory."""
    out = tmp_path / "run"
    args = ["run", "--variants", "naive", "--seq-len", "32", *QUICK, "--out", str(out)]
    returncode, err = stopped_by_ctrl_c(
        [*args, "--calibrate-ms", "20000"],
        lambda _: (out / "worker.log").is_file(),
        "the worker's start",
        0.5,
    )
    assert returncode == 130, err
    assert not (out / "meta.json").exists() and (out / "worker.log").is_file()
    assert "run the same command again" in err and "--resume" not in err

    resume = run_cli("run", "--resume", "--out", str(out))
    assert resume.returncode == 2
    (line,) = resume.stderr.strip().splitlines()
    assert "holds no run" in line and "without --resume" in line

    again = run_cli(*args)
    assert again.returncode == 0, again.stderr
    rows = (out / "rows.jsonl").read_text().splitlines()
    assert len(rows) == 1 and json.loads(rows[0])["status"] == "ok"


def test_a_directory_with_anything_else_is_still_refused(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "worker.log").write_text("old\n")
    (out / "notes.txt").write_text("mine\n")
    proc = run_cli("run", "--variants", "naive", "--seq-len", "32", *QUICK, "--out", str(out))
    assert proc.returncode == 2 and "already exists and is not empty" in proc.stderr
    assert (out / "notes.txt").read_text() == "mine\n"


RUN = Path(__file__).resolve().parents[1] / "data" / "runs" / "cpu-small"
BASE_META = json.loads((RUN / "meta.json").read_text())
DAMAGED = {
    "a list": ([], "is not a run's metadata: a JSON object was expected, not a list"),
    "no sweep": (
        {k: v for k, v in BASE_META.items() if k != "sweep"},
        "is damaged: it has no `sweep` (what the run measures)",
    ),
    "a wrong type": (
        {**BASE_META, "fingerprint": 3},
        "is damaged: `fingerprint` should be an object, not an integer",
    ),
    "a wrong type in the sweep": (
        {**BASE_META, "sweep": {**BASE_META["sweep"], "seq_len": "64"}},
        "is damaged: `sweep.seq_len` should be a list, not a string",
    ),
    "a wrong value in the sweep": (
        {**BASE_META, "sweep": {**BASE_META["sweep"], "seq_len": ["a"]}},
        "is damaged: its `sweep` cannot be read: seq_len must be positive integers, got 'a'",
    ),
}
READERS = {
    "run --resume": lambda run, tmp: ("run", "--resume", "--out", str(run), "-q"),
    "collect": lambda run, tmp: ("collect", str(run), "-q"),
    "run --rerun": lambda run, tmp: ("run", "--rerun", str(run), "--out", str(tmp / "rerun"), "-q"),
    "repro": lambda run, tmp: ("repro", str(run), "x"),
    "export": lambda run, tmp: ("export", str(run)),
    "report": lambda run, tmp: ("report", str(run), "--out", str(tmp / "report")),
    "compare": lambda run, tmp: ("compare", str(RUN), str(run), "--out", str(tmp / "compare")),
}


@pytest.mark.parametrize("damage", list(DAMAGED))
def test_a_damaged_meta_json_is_one_line_naming_the_file_for_every_command(tmp_path, damage):
    meta, message = DAMAGED[damage]
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    (run / "meta.json").write_text(json.dumps(meta))
    # what only measuring reads (the sweep's values) fails the commands that measure; the others read rows
    readers = READERS if damage != "a wrong value in the sweep" else list(READERS)[:4]
    for name in readers:
        proc = run_cli(*READERS[name](run, tmp_path))
        assert proc.returncode == 2, (name, proc.stderr)
        assert proc.stderr == f"attnbench: error: {run / 'meta.json'} {message}\n", name


SLOW_PROBE = """
import time
from pathlib import Path

from attnbench import variants


@variants.register("slow_probe", description="naive, slow at the numerics probe's N = 128 until told not to")
def slow_probe(q, k, v, **kw):
    if q.shape[2] == 128 and not Path({marker!r}).exists():
        time.sleep(60)
    return variants.get("naive").fn(q, k, v, **kw)
"""


def _probe_variants(run: Path) -> set[str]:
    return {rec["variant"] for rec in json.loads((run / "numerics.json").read_text())["probe"]}


def test_a_probe_stopped_by_ctrl_c_is_measured_by_the_resume(tmp_path):
    marker, variant_file, out = tmp_path / "fast", tmp_path / "slow.py", tmp_path / "run"
    variant_file.write_text(SLOW_PROBE.format(marker=str(marker)))
    args = ["run", "--variant-file", str(variant_file), "--variants", "naive,slow_probe", "--seq-len", "32"]
    argv = [*args, *QUICK, "--out", str(out), "--calibrate-ms", "200"]
    # a second after meta.json: inside slow_probe's probe call
    returncode, err = stopped_by_ctrl_c(argv, lambda _: (out / "meta.json").is_file(), "meta.json", 1.0)
    assert returncode == 130 and not (out / "numerics.json").exists(), err
    marker.touch()
    again = run_cli("run", "--resume", "--out", str(out), "-q")
    assert again.returncode == 0, again.stderr
    assert {"naive", "slow_probe", "unstable_softmax"} <= _probe_variants(out)
    assert len((out / "rows.jsonl").read_text().splitlines()) == 2


def test_a_torn_probe_is_measured_again_on_resume(carried_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(carried_run, run)
    (run / "numerics.json").write_text('{"probe": [{"variant": "naive", "dev')  # cut mid-write
    rows = (run / "rows.jsonl").read_text()
    report = run_cli("report", str(run), "--out", str(tmp_path / "report"))
    assert report.returncode == 0 and "Traceback" not in report.stderr, report.stderr
    assert (
        "numerics.json: unreadable (torn write?), left out; `run --resume` measures it again" in report.stderr
    )
    proc = run_cli("run", "--resume", "--out", str(run), "-q", cwd=carried_run.parent)
    assert proc.returncode == 0, proc.stderr
    assert {"naive", "mine", "unstable_softmax"} <= _probe_variants(run)
    assert (run / "rows.jsonl").read_text() == rows  # every cell was done: nothing measured again


RAW = ("\x1b", "\u202e", "\u202c", "\r")


def test_control_and_bidi_characters_are_shown_escaped_and_stored_as_they_were(tmp_path):
    """A variant's message with ESC, U+202E and CR: the run's progress lines, check's table, README.md and
    report.html show escapes (\\x1b, \\u202e); rows.jsonl keeps the message as the variant raised it."""
    from conftest import DATA

    files = ("--variant-file", str(DATA / "check_variants.py"))
    out = tmp_path / "run"
    run = run_cli(
        "run", *files, "--variants", "control_chars", "--seq-len", "32", *QUICK[:-1], "--out", str(out)
    )
    assert run.returncode == 0, run.stderr
    (row,) = [json.loads(x) for x in (out / "rows.jsonl").read_text().splitlines()]
    assert row["status"] == "error" and "\x1b[31mred\x1b[0m \u202eevil" in row["message"]  # stored as raised
    assert "\\x1b[31mred\\x1b[0m \\u202eevil\\u202c done" in run.stderr  # the progress line

    report = run_cli("report", str(out), "--out", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    for page in ("README.md", "report.html"):
        text = (tmp_path / "report" / page).read_text()
        assert "\\u202eevil" in text and not any(c in text for c in RAW), page

    check = run_cli("check", *files, "--variants", "control_chars", "--seq-len", "16", "--dtype", "float32")
    assert check.returncode == 1 and "\\u202eevil" in check.stdout
    assert not any(c in check.stdout + check.stderr for c in RAW)

    # export: to a terminal escaped as run shows it (issue 40: it wrote them raw); to a pipe as stored
    code, shown = on_a_pty(("export", str(out)), tmp_path)
    shown = shown.replace("\r\n", "\n")  # a pty ends its lines so
    assert code == 0 and "\\u202eevil" in shown and not any(c in shown for c in RAW)
    piped = run_cli("export", str(out), process=True)
    assert piped.returncode == 0 and "\x1b[31mred\x1b[0m \u202eevil" in piped.stdout


def test_an_export_to_a_full_disk_is_one_line_and_not_exit_0(tmp_path):
    """Issue 40: `attnbench export RUN > file` on a full disk exited 0 with the file cut short (the write
    failed at exit, unseen). /dev/full refuses every write with ENOSPC."""
    run = synthetic.write_run(tmp_path / "run", [synthetic.cell("naive", 64, time_ms=1.0)])
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "attnbench", "export", str(run)], stdout=full,
                              stderr=subprocess.PIPE, text=True, env=cli_env(), timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "attnbench: error: cannot write the export: no space left on device; what was written is incomplete"
    ]


def test_a_disk_full_from_the_start_is_one_line_and_the_same_command_runs_after(tmp_path):
    with tiny_disk(tmp_path / "disk", "64k") as disk:
        filler = disk / "filler"
        with open(filler, "wb", buffering=0) as fh, contextlib.suppress(OSError):
            while True:
                fh.write(b"x" * 4096)
        out = disk / "run"
        args = ("run", "--variants", "naive", "--seq-len", "32", *QUICK, "--out", str(out))
        proc = run_cli(*args)
        assert proc.returncode == 2, proc.stderr
        (line,) = proc.stderr.strip().splitlines()
        assert line.startswith(f"attnbench: error: cannot write {out}") and "no space left on device" in line
        assert line.endswith("nothing was measured yet: make room, then run the same command again")
        filler.unlink()
        again = run_cli(*args)
        assert again.returncode == 0, again.stderr
        assert len((out / "rows.jsonl").read_text().splitlines()) == 1


def test_a_disk_with_room_for_the_lock_only_is_one_line_naming_the_worker_log(tmp_path):
    """Issue 40: the worker could not write its log, died, and the run ended in a WorkerDied traceback
    (exit 1) with "no space" lost. One page left free: writer.lock takes it."""
    with tiny_disk(tmp_path / "disk", "64k") as disk:
        spare = disk / "spare"
        spare.write_bytes(b"x" * 4096)
        with open(disk / "filler", "wb", buffering=0) as fh, contextlib.suppress(OSError):
            while True:
                fh.write(b"x" * 4096)
        spare.unlink()
        out = disk / "run"
        proc = run_cli("run", "--variants", "naive", "--seq-len", "32", *QUICK, "--out", str(out))
        assert proc.returncode == 2, proc.stderr
        (line,) = proc.stderr.strip().splitlines()[-1:]
        assert "Traceback" not in proc.stderr
        assert line.startswith(f"attnbench: error: cannot write {out}") and "no space left on device" in line


def test_a_report_onto_a_full_disk_is_one_line(tmp_path):
    with tiny_disk(tmp_path / "disk", "64k") as disk:
        with open(disk / "filler", "wb", buffering=0) as fh, contextlib.suppress(OSError):
            while True:
                fh.write(b"x" * 4096)
        proc = run_cli("report", str(RUN), "--out", str(disk / "report"))
        assert proc.returncode == 2, proc.stderr
        (line,) = proc.stderr.splitlines()
        assert line.startswith(f"attnbench: error: cannot write {disk / 'report'}")
        assert line.endswith(": no space left on device")


def test_appending_until_the_disk_is_full_leaves_whole_lines_only(tmp_path):
    """store.append_record (rows.jsonl's and the Slurm shards' writer): the record the disk has no room for
    is cut back out, however much of it was written, and the error names the file."""
    from attnbench.results.store import RunWriteError, append_record

    with tiny_disk(tmp_path / "disk", "64k") as disk:
        target = disk / "shards" / "task.jsonl"
        target.parent.mkdir()
        record = {"cell_id": "x", "pad": "y" * 1000}  # 64 KiB is not a multiple of a line: the last one tears
        written = 0
        with target.open("ab") as fh, pytest.raises(RunWriteError) as err:
            while True:
                append_record(fh, {**record, "n": written}, target, disk)
                written += 1
        lines = target.read_bytes().split(b"\n")
        assert lines[-1] == b"" and [json.loads(x)["n"] for x in lines[:-1]] == list(range(written))
        assert str(err.value).startswith(f"cannot write {target}: no space left on device; nothing was")


REMOVER = """
import shutil

from attnbench import variants


@variants.register("rm_out", description="naive, which removes the run's folder at N = 64")
def rm_out(q, k, v, **kw):
    if q.shape[2] == 64:
        shutil.rmtree({out!r}, ignore_errors=True)
    return variants.get("naive").fn(q, k, v, **kw)
"""


def test_a_run_folder_removed_mid_run_is_said_so_not_a_full_disk(tmp_path):
    """Was "nothing was measured yet: make room, then run the same command again" (the folder's meta.json
    was gone with it) after cells had been measured, with no disk full."""
    out = tmp_path / "run"
    plugin = tmp_path / "rm_out.py"
    plugin.write_text(REMOVER.format(out=str(out)))
    proc = run_cli("run", "--variant-file", str(plugin), "--variants", "naive,rm_out", "--seq-len", "32,64",
                   "--calibrate-ms", "0", *QUICK, "--out", str(out))  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"attnbench: error: cannot write {out}{'/'}"), line
    assert line.endswith(
        f"the run folder {out} disappeared while the run wrote it (removed or moved away): the rows measured "
        "so far went with it; run the same command again for a new run"
    ), line
    assert "Traceback" not in proc.stderr


HANG = """
import time

from attnbench import variants


@variants.register("hang64", description="naive, hanging at N = 64")
def hang64(q, k, v, **kw):
    if q.shape[2] == 64:
        time.sleep(3600)
    return variants.get("naive").fn(q, k, v, **kw)
"""


def test_a_resume_takes_a_lower_cell_timeout_and_a_complete_run_starts_nothing(tmp_path):
    """A run started with the default 600 s and a hanging kernel cost 10 minutes on every resume, which
    refused --cell-timeout ('drop --cell-timeout'); a resume of a complete run started a worker and added a
    line to resumes.jsonl."""
    variant_file, out = tmp_path / "hang.py", tmp_path / "run"
    variant_file.write_text(HANG)
    args = ["run", "--variant-file", str(variant_file), "--variants", "naive,hang64", "--seq-len", "32,64"]
    log, hanging = out / "worker.log", re.compile(r"^cell hang64\|.*\|n64\|", re.M)
    returncode, err = stopped_by_ctrl_c(
        [*args, *QUICK, "--out", str(out), "--calibrate-ms", "0"],
        lambda _: log.is_file() and hanging.search(log.read_text()), "hang64 at 64",
    )  # fmt: skip
    assert returncode == 130, err
    again = run_cli("run", "--resume", "--out", str(out), "--cell-timeout", "2", "-q")
    assert again.returncode == 0, again.stderr
    rows = {
        (r["variant"], r["seq_len"]): r
        for r in map(json.loads, (out / "rows.jsonl").read_text().splitlines())
    }
    assert len(rows) == 4 and rows["hang64", 64]["status"] == "timeout"
    assert "cell exceeded --cell-timeout 2 s" in rows["hang64", 64]["message"]
    (record,) = map(json.loads, (out / "resumes.jsonl").read_text().splitlines())
    assert record["cell_timeout"] == 2.0
    size = log.stat().st_size
    done = run_cli("run", "--resume", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == f"nothing to resume: {out} is complete (4 cells)"
    assert len((out / "resumes.jsonl").read_text().splitlines()) == 1 and log.stat().st_size == size
    import attnbench

    again = attnbench.run(out=out, resume=True, progress=False)  # the API alike: it started a worker
    assert again.resumed == 4 and again.counts == {"ok": 3, "timeout": 1}
    assert len((out / "resumes.jsonl").read_text().splitlines()) == 1 and log.stat().st_size == size
