"""Files written whole (results.whole.write_whole), the one writer of meta.json, written.json, a run's side
files, variants.pkl, a Slurm task's records and `export --out FILE`: what each of those writers did alone
and the others did not, now true of all of them."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys

import pytest
from conftest import DATA, ROOT, cli_env, run_cli

from attnbench.results import RunWriter
from attnbench.results.integrity import WRITTEN
from attnbench.results.store import META, is_unstarted
from attnbench.results.whole import write_whole

ROW = {"cell_id": "c0", "variant": "naive", "device": "cpu", "status": "ok", "time_ms_median": 1.5}


def test_a_run_file_is_on_the_disk_before_it_is_renamed_into_place(tmp_path, monkeypatch):
    """meta.json, a side file and written.json were renamed into place unsynced: after a power cut the name
    could hold an empty file. Each is fsync'd first now, as rows.jsonl's lines and an export were."""
    synced, renamed = [], []

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real_fsync(fd)

    def replace(src, dst):
        renamed.append((os.fspath(src), os.path.basename(dst), os.fspath(src) in synced))
        return real_replace(src, dst)

    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    w = RunWriter(tmp_path / "run")
    w.write_meta({"run_id": "r1", "sweep": {"devices": ["cpu"]}})
    w.write_json("numerics.json", {"ok": True})
    w.add_device({"host": "h", "device": "cpu"})
    w.append(ROW)
    w.close()
    assert {name for _, name, _ in renamed} == {META, "numerics.json", WRITTEN}
    assert all(was_synced for _, _, was_synced in renamed), renamed


def test_a_replaced_run_file_keeps_its_mode_and_a_new_one_gets_opens(tmp_path):
    """A new file has the mode open() gives it (0o666 less the umask); one replaced keeps its own, as an
    export's did: meta.json made private stays private when a device's record is added."""
    w = RunWriter(tmp_path / "run")
    w.write_meta({"run_id": "r1", "sweep": {"devices": ["cpu"]}})
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE((w.path / META).stat().st_mode) == 0o666 & ~umask
    (w.path / META).chmod(0o600)
    w.add_device({"host": "h", "device": "cpu"})
    w.close()
    assert stat.S_IMODE((w.path / META).stat().st_mode) == 0o600


# `attnbench export --out` (or a run's write of meta.json) killed outright as its temporary file is renamed
KILLED_WRITE = """
import os, signal, sys
os.replace = lambda src, dst: os.kill(os.getpid(), signal.SIGKILL)
if sys.argv[1] == "export":
    from attnbench.cli import main
    main(sys.argv[1:])
else:
    from attnbench.results import RunWriter
    RunWriter(sys.argv[2]).write_meta({"run_id": "r1"})
"""


def _killed(*args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", KILLED_WRITE, *args], cwd=ROOT, env=cli_env(), capture_output=True, timeout=300
    )
    assert done.returncode == -signal.SIGKILL, done.stderr


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="POSIX signals")
def test_a_temporary_file_a_killed_writer_left_goes_with_the_next_write(tmp_path):
    """A temporary file a writer killed outright (kill -9, the OOM killer) left stayed beside an export
    forever; it is named for its writer now, and the next write of the same file removes it once that
    writer is gone. In a run directory its name matches what a stopped start leaves (*.tmp), so the next run
    into it still starts there."""
    out = tmp_path / "x.csv"
    _killed("export", str(DATA / "runs" / "cpu-small"), "--out", str(out))
    (left,) = [p.name for p in tmp_path.iterdir()]
    assert left.startswith(".x.csv.partial-") and not out.exists()
    run_cli("export", str(DATA / "runs" / "cpu-small"), "--out", str(out), check=True)
    assert [p.name for p in tmp_path.iterdir()] == ["x.csv"]

    run = tmp_path / "run"
    _killed("meta", str(run))
    assert not (run / META).exists() and any(p.name.endswith(".tmp") for p in run.iterdir())
    assert is_unstarted(run)


def test_a_failed_write_names_the_file_and_leaves_it_as_it_was(tmp_path):
    """The error of a write that failed part-way (here a file size limit, as a full disk) names the file
    written, never its temporary file or nothing: the command line's one line says it."""
    out = tmp_path / "big.bin"
    out.write_bytes(b"before")
    code = (
        "import resource, sys\n"
        "from attnbench.results.whole import write_whole\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
        "try:\n"
        '    write_whole(sys.argv[1], "x" * 8192)\n'
        "except OSError as exc:\n"
        "    print(exc.filename, exc.strerror)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(out)], env=cli_env(), capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == f"{out} File too large", done.stderr
    assert out.read_bytes() == b"before" and [p.name for p in tmp_path.iterdir()] == ["big.bin"]


def test_a_file_of_a_long_name_is_written_too(tmp_path):
    """A name near the file system's 255 bytes: its temporary file's name, longer by what it adds, was over
    them (`file name too long`); the name is cut short in it."""
    out = tmp_path / ("e" * 246 + ".csv")
    run_cli("export", str(DATA / "runs" / "cpu-small"), "--out", str(out), check=True)
    assert [p.name for p in tmp_path.iterdir()] == [out.name]
    write_whole(out, "again\n")
    assert out.read_text() == "again\n" and [p.name for p in tmp_path.iterdir()] == [out.name]
