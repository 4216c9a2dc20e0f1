"""Where a report goes: written whole or not at all (Ctrl-C, a failure), and the --out mistakes refused."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import synthetic
from conftest import ROOT, cli_env, run_cli

import attnbench
from attnbench.reports import render as render_mod
from attnbench.results import whole
from attnbench.results.whole import written_whole


def files_of(root: Path) -> dict[str, bytes]:
    return {str(f.relative_to(root)): f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file()}


def _two_runs(tmp_path: Path) -> tuple[Path, Path]:
    a = synthetic.write_run(
        tmp_path / "runs" / "a",
        synthetic.power_law_rows({"naive": (2, 2), "chunked": (2, 1)}, [128, 256, 512]),
        run_id="run-a",
    )
    b = synthetic.write_run(
        tmp_path / "runs" / "b",
        synthetic.power_law_rows({"naive": (2, 2), "sdpa": (2, 1)}, [256, 512, 1024, 2048]),
        run_id="run-b",
    )
    return a, b


def _late_interrupt(*_args, **_kw):
    raise KeyboardInterrupt  # as Ctrl-C at the end: every figure and CSV of the new report already written


@pytest.mark.parametrize("where", ["over an old report", "into a new folder"])
def test_an_interrupted_report_leaves_the_old_one_whole_and_a_new_folder_unmade(tmp_path, monkeypatch, where):
    a, b = _two_runs(tmp_path)
    out = tmp_path / "rep" / "x"
    if where == "over an old report":
        run_cli("report", str(a), "--out", str(out), check=True)
    before = files_of(out) if out.exists() else None
    monkeypatch.setattr(render_mod.trust, "blocks", _late_interrupt)
    proc = run_cli("report", str(b), "--out", str(out))
    assert proc.returncode == 130
    said = "was not made" if before is None else "is as it was"
    assert proc.stderr.strip() == f"interrupted: the report was not written; {str(out)!r} {said}"
    if before is None:
        assert not (tmp_path / "rep").exists()  # nor the folder made for it
    else:
        assert files_of(out) == before  # README.md, report.html, CSVs and figures: all run a's
        assert sorted(p.name for p in out.parent.iterdir()) == ["x"]  # no temporary folder left
    monkeypatch.undo()
    run_cli("report", str(b), "--out", str(out), check=True)  # then a complete one replaces it
    assert "run-b" in (out / "README.md").read_text() and "run-a" not in (out / "report.html").read_text()
    assert sorted(p.name for p in out.parent.iterdir()) == ["x"]


def test_the_api_report_is_written_whole_too(tmp_path, monkeypatch):
    a, b = _two_runs(tmp_path)
    out = tmp_path / "rep"
    attnbench.report(a, out=out)
    before = files_of(out)

    def fail(*_args, **_kw):
        raise RuntimeError("a figure failed")

    monkeypatch.setattr(render_mod.trust, "blocks", fail)
    with pytest.raises(RuntimeError, match="a figure failed"):
        attnbench.report(b, out=out)
    assert files_of(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["rep", "runs"]
    monkeypatch.setattr(render_mod.trust, "blocks", _late_interrupt)
    with pytest.raises(KeyboardInterrupt, match="the report was not written"):
        attnbench.report(b, out=out)
    assert files_of(out) == before
    monkeypatch.undo()
    rep = attnbench.report(b, out=out)
    assert rep.out_dir == out and rep.readme == out / "README.md" and rep.html.is_file()


def test_a_report_over_an_earlier_one_removes_the_files_only_that_one_wrote_and_keeps_the_users(tmp_path):
    """Two runs' report, then one run's into the same folder: the two runs' figures (time-run-b-...) would
    otherwise stay beside the new page, which shows none of them (trial P); a file the user put there is
    kept, as written_whole keeps it."""
    a, b = _two_runs(tmp_path)
    out = tmp_path / "rep"
    attnbench.report(a, b, out=out)
    both = {p.name for p in out.iterdir()}
    (out / "notes.txt").write_text("mine\n")
    attnbench.report(a, out=out)
    one = {p.name for p in attnbench.report(a, out=tmp_path / "fresh").out_dir.iterdir()}
    assert {p.name for p in out.iterdir()} == one | {"notes.txt"}
    assert any(name.startswith("time-run-b-") for name in both - one)  # there was something to remove


def test_written_whole_keeps_the_users_own_files_and_replaces_a_folder_whole(tmp_path):
    out = tmp_path / "site"
    (out / "runs" / "old").mkdir(parents=True)
    (out / "notes.txt").write_text("mine")
    (out / "index.html").write_text("old")
    with written_whole(out, "the site") as partial:
        (partial / "runs" / "new").mkdir(parents=True)
        (partial / "index.html").write_text("new")
    assert (out / "notes.txt").read_text() == "mine" and (out / "index.html").read_text() == "new"
    assert [p.name for p in (out / "runs").iterdir()] == ["new"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]


@pytest.mark.parametrize("case", ["the folder of the runs", "a page's name", "a markdown name"])
def test_an_out_that_is_no_report_folder_is_refused_before_anything_is_written(tmp_path, case):
    a, _b = _two_runs(tmp_path)
    out = {
        "the folder of the runs": tmp_path / "runs",
        "a page's name": tmp_path / "rep" / "myreport.html",
        "a markdown name": tmp_path / "myreport.md",
    }[case]
    before = files_of(tmp_path)
    proc = run_cli("report", str(a), "--out", str(out))
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("attnbench: error: --out")
    assert ("holds run directories (a, b)" if "runs" in case else "names a file") in proc.stderr
    assert files_of(tmp_path) == before and not (tmp_path / "rep").exists()
    with pytest.raises(ValueError, match="out="):
        attnbench.report(a, out=out)


def test_an_out_that_holds_other_files_and_no_report_is_refused_as_runs_is(tmp_path):
    """Trial: report(run, out="some/unrelated/folder") wrote its pages in among files not a report's, where
    `run` refuses a non-empty --out. It is refused in one line (exit 2, nothing written); a folder of an
    earlier report (one from before its rendered-from.json too) or only hidden files is written into."""
    from attnbench.reports.rendered_from import RECORD

    a, _b = _two_runs(tmp_path)
    out = tmp_path / "papers"
    (out / "drafts").mkdir(parents=True)
    (out / "notes.txt").write_text("mine\n")
    before = files_of(tmp_path)
    proc = run_cli("report", str(a), "--out", str(out))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    said = f"attnbench: error: --out {str(out)!r} is not empty (drafts, notes.txt) and holds no report"
    assert proc.stderr.startswith(said), proc.stderr
    with pytest.raises(ValueError, match=f"^out={str(out)!r} is not empty"):
        attnbench.report(a, out=out)
    assert files_of(tmp_path) == before
    earlier = tmp_path / "earlier"
    attnbench.report(a, out=earlier)
    (earlier / RECORD).unlink()  # a report written before the record: its pages are attnbench's
    (earlier / "notes.txt").write_text("mine\n")
    assert (attnbench.report(a, out=earlier).out_dir / RECORD).is_file()
    hidden = tmp_path / "kept"
    hidden.mkdir()
    (hidden / ".gitkeep").write_text("")
    assert (attnbench.report(a, out=hidden).out_dir / "report.html").is_file()


@pytest.mark.parametrize("rows", ["missing", "empty"])
def test_a_run_with_no_measured_cell_is_refused_as_compare_refuses_it(tmp_path, rows):
    """An outside trial: a run whose rows.jsonl was missing was reported (exit 0, 'Trust: 0 of 0 cells ran
    ok; none is suspect...') while compare refused it. Refused in one line, as compare and `history add`
    say it (results.store.no_cells_text), nothing written; beside a run with cells too."""
    a, b = _two_runs(tmp_path)
    (b / "rows.jsonl").unlink() if rows == "missing" else (b / "rows.jsonl").write_text("")
    before = files_of(tmp_path)
    for given in ([b], [a, b]):
        proc = run_cli("report", *map(str, given), "--out", str(tmp_path / "rep"))
        assert proc.returncode == 2 and proc.stdout == "", proc.stderr
        # (after the warning that rows.jsonl is not what attnbench wrote)
        assert proc.stderr.splitlines()[-1] == f"attnbench: error: {b} has no measured cells"
        assert files_of(tmp_path) == before and not (tmp_path / "rep").exists()
    with pytest.raises(ValueError, match=f"^{b} has no measured cells$"):
        attnbench.report(b, out=tmp_path / "rep")


# `attnbench report` that signals itself once every figure and CSV of the new report is written (the point a
# long report is most often stopped at), before the report is moved into --out
SIGNALLED_REPORT = """
import os, signal, sys
from attnbench.reports import render

def stopped(*args, **kwargs):
    os.kill(os.getpid(), getattr(signal, sys.argv[1]))
    raise AssertionError("not stopped")

render.trust.blocks = stopped
from attnbench.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _signalled_report(signame: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", SIGNALLED_REPORT, signame, "report", *args],
        cwd=ROOT, env=cli_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="POSIX signals")
def test_a_report_stopped_by_sigterm_or_killed_leaves_no_partial_folder_behind(tmp_path):
    """SIGTERM (`timeout`, a batch system's limit) and SIGHUP stop a report as Ctrl-C does: nothing written,
    said, exit 128 + the signal. A report killed outright (kill -9, the OOM killer) cannot clean up: its
    temporary folder is removed by the next report into the same --out, once its writer is gone."""
    a, b = _two_runs(tmp_path)
    out = tmp_path / "rep" / "x"
    run_cli("report", str(a), "--out", str(out), check=True)
    before = files_of(out)
    # SIGHUP goes through the same handler of the command line (test_interrupt stops a run with each)
    done = _signalled_report("SIGTERM", str(b), "--out", str(out))
    assert done.returncode == 143, done.stderr
    assert done.stderr.strip() == f"interrupted: the report was not written; {str(out)!r} is as it was"
    assert files_of(out) == before and sorted(p.name for p in out.parent.iterdir()) == ["x"]
    done = _signalled_report("SIGKILL", str(b), "--out", str(out))
    assert done.returncode == -signal.SIGKILL, done.stderr
    (left,) = [p.name for p in out.parent.iterdir() if p.name != "x"]
    assert left.startswith(".x.partial-") and files_of(out) == before
    # they used to pile up: the next report into the same --out removes it, its writer gone
    run_cli("report", str(b), "--out", str(out), check=True)
    assert sorted(p.name for p in out.parent.iterdir()) == ["x"]
    assert "run-b" in (out / "README.md").read_text()


def test_written_whole_keeps_the_temporary_folder_of_a_live_writer_or_another_machine(tmp_path):
    """Only a writer known gone loses its folder: this process's own (alive), one named as another
    machine's, or one of an older attnbench (no writer in its name) are kept; one of a process that ended is
    removed, and so is one whose pid now belongs to another process (its start time differs)."""
    out = tmp_path / "site"
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    tag = whole._writer_tag(ended.pid)
    ended.wait()
    host, pid, start = whole._writer_tag(os.getpid()).split("-")
    folders = {
        "alive": f".site.partial-{host}-{pid}-{start}-abc",
        "other machine": f".site.partial-{int(host, 16) ^ 1:06x}-{pid}-{start}-abc",
        "older attnbench": ".site.partial-abc123",
        "ended": f".site.partial-{tag}-abc",
        "pid reused": f".site.partial-{host}-{pid}-{int(start) + 1}-abc",
    }
    for name in folders.values():
        (tmp_path / name).mkdir()
    with written_whole(out, "the site") as partial:
        (partial / "index.html").write_text("new")
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert kept == sorted(["site", folders["alive"], folders["other machine"], folders["older attnbench"]])
