"""The run-mode rules, in one place (harness.run.request.RunRequest): which modes go together, said with the
CLI's flags, respelled once by the Python API (attnbench.api.keyword), and nothing written when refused."""

from __future__ import annotations

import pytest

from attnbench.api import keyword
from attnbench.harness.run import runner
from attnbench.harness.run.request import RunRequest
from attnbench.harness.sweep.spec import SweepSpec
from attnbench.harness.sweep.sweeps import flag_name, respell

SWEEP = SweepSpec(variants=("naive",), seq_len=(16,))


def _refused(**kwargs) -> str:
    with pytest.raises(ValueError) as info:
        runner.run(RunRequest(**kwargs))
    return str(info.value)


def test_the_rules_name_the_cli_flags(tmp_path):
    out = tmp_path / "r"
    assert (
        _refused(out=out, resume=True, options={"seq_len": "16", "pass": None, "heads": "2"})
        == "--resume takes the sweep and its settings from the run's meta.json; drop --seq-len (of its "
        "settings, a resume may give only --cell-timeout again)"
    )
    assert _refused(resume=True) == "--resume needs --out DIR naming the run to finish"
    assert (
        _refused(sweep=SWEEP, out=out, redo_drift=True)
        == "--redo-drift measures a run's drifted cells again: give it with --resume --out DIR"
    )
    assert (
        _refused(sweep=SWEEP, out=out, force_resume=True)
        == "--force-resume finishes a run on another set-up: give it with --resume --out DIR"
    )
    assert (
        _refused(out=out, cells="a")
        == "--cells and --status choose cells of --rerun RUN_DIR; give --rerun too"
    )
    assert _refused(out=out, rerun=str(tmp_path), preset="quick").startswith(
        "--rerun measures with the old run's sweep, settings and variant files; drop --preset"
    )
    assert _refused(out=out, options={"processes": 3}).startswith("--processes was removed: ")
    assert _refused(out=out, options={"repeat": 3}).startswith("--repeat was removed: ")
    assert flag_name("pass_") == "--pass" and flag_name("budget_ms") == "--budget-ms"
    assert not out.exists()


def test_the_api_respells_them_once_with_its_keywords():
    said = {
        "--resume needs --out DIR naming the run": "resume=True needs out=DIR naming the run",
        "--resume takes the sweep; drop --seq-len": "resume=True takes the sweep; drop seq_len",
        "--rounds 3 visits the whole sweep": "rounds=3 visits the whole sweep",
        "--out '/a b' is a file": "out='/a b' is a file",
        "--pass must be fwd, --variant-file too": "pass_ must be fwd, variant_files too",
    }
    for flags, keywords in said.items():
        assert respell(flags, keyword) == keywords


def test_a_new_run_refuses_a_non_empty_directory_or_a_file_before_writing_anything(tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    (full / "precious.txt").write_text("keep me")
    message = _refused(sweep=SWEEP, out=str(full))
    assert message == f"{str(full)!r} already exists and is not empty; pass --resume or choose another --out"
    assert [p.name for p in full.iterdir()] == ["precious.txt"]  # not even a lock file
    afile = tmp_path / "a.txt"
    afile.write_text("x")
    assert _refused(sweep=SWEEP, out=afile) == f"--out {str(afile)!r} is a file, not a directory"
    assert afile.read_text() == "x"
