"""runner.check_mode, called first by runner.run: the one place that decides which run modes go together,
with each front end's spelling of the options (`name`), and nothing written when it refuses."""

from __future__ import annotations

import pytest

from attnbench.api import _mode_name as api_name  # the Python API's spelling: resume=True, out=
from attnbench.harness.run import runner
from attnbench.harness.sweep.spec import SweepSpec
from attnbench.harness.sweep.sweeps import flag_name

SWEEP = SweepSpec(variants=("naive",), seq_len=(16,))


def _refused(**kwargs) -> str:
    with pytest.raises(ValueError) as info:
        runner.run(**kwargs)
    return str(info.value)


def test_the_cli_spelling_is_the_default_and_says_what_the_cli_always_said(tmp_path):
    out = tmp_path / "r"
    assert (
        _refused(sweep=None, out=out, resume=True, given=["seq_len", "pass_"])
        == "--resume takes the sweep and its settings from the run's meta.json; drop --seq-len"
    )
    assert _refused(sweep=None, resume=True) == "--resume needs --out DIR naming the run to finish"
    assert (
        _refused(sweep=SWEEP, out=out, redo_drift=True)
        == "--redo-drift measures a run's drifted cells again: give it with --resume --out DIR"
    )
    assert (
        _refused(sweep=SWEEP, out=out, force_resume=True)
        == "--force-resume finishes a run on another set-up: give it with --resume --out DIR"
    )
    assert flag_name("pass_") == "--pass" and flag_name("budget_ms") == "--budget-ms"
    assert not out.exists()


def test_a_keyword_spelling_names_the_options_as_the_api_takes_them(tmp_path):
    out = tmp_path / "r"
    assert (
        _refused(sweep=None, out=out, resume=True, given=["preset"], name=api_name)
        == "resume=True takes the sweep and its settings from the run's meta.json; drop preset="
    )
    assert (
        _refused(sweep=None, resume=True, name=api_name)
        == "resume=True needs out=DIR naming the run to finish"
    )
    assert _refused(sweep=SWEEP, out=out, redo_drift=True, name=api_name).endswith(
        "give it with resume=True out=DIR"
    )
    assert "drop sweep=" in _refused(sweep=SWEEP, out=out, resume=True, name=api_name)  # never ignored
    assert not out.exists()


def test_a_new_run_refuses_a_non_empty_directory_or_a_file_before_writing_anything(tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    (full / "precious.txt").write_text("keep me")
    message = _refused(sweep=SWEEP, out=str(full))
    assert message == f"{str(full)!r} already exists and is not empty; pass --resume or choose another --out"
    assert [p.name for p in full.iterdir()] == ["precious.txt"]  # not even a lock file
    afile = tmp_path / "a.txt"
    afile.write_text("x")
    assert _refused(sweep=SWEEP, out=afile, name=api_name) == f"out={str(afile)!r} is a file, not a directory"
    assert afile.read_text() == "x"
