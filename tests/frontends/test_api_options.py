"""attnbench.run is the CLI's equal: every option of `attnbench run` is a keyword, and its errors name the
keyword, never a flag. One real run; every other case is refused, or a dry run."""

from __future__ import annotations

import inspect
import warnings

import pytest

import attnbench
from attnbench import cli
from attnbench.harness.sweep.sweeps import AXIS_KEYS, SETTING_KEYS
from tests.conftest import ROOT, as_a_fresh_process

# flags whose keyword is spelled otherwise, and flags that are the CLI's own
RENAMED = {"variant_file": "variant_files", "quiet": "progress"}


def test_every_run_flag_is_a_keyword():
    run_parser = cli.build_parser()._subparsers._group_actions[0].choices["run"]
    keywords = set(inspect.signature(attnbench.run).parameters) | set(AXIS_KEYS) | set(SETTING_KEYS)
    flags = [a.dest for a in run_parser._actions if a.option_strings and a.help != "==SUPPRESS=="]
    flags = [f for f in flags if f != "help"]  # and not a removed flag, which says what replaced it
    missing = [f for f in flags if RENAMED.get(f, f) not in keywords]
    assert not missing and len(flags) > 30, missing


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(executor="ray", devices="cpu"), "devices picks this machine's GPUs for executor local"),
        (dict(ray_address="127.0.0.1:1"), "ray_address names the Ray cluster of executor ray"),
        (dict(slurm_partition="gpu"), "slurm_partition is an option of executor slurm; give that too"),
        (dict(executor="slurm", slurm_tasks=0), "slurm_tasks must be 1 or more, got 0"),
        (dict(executor="slurm", slurm_time="soon"), "slurm_time takes minutes or [D-]HH:MM:SS"),
        (dict(devices="cuda:0"), "devices='cuda:0': torch sees 0 CUDA device(s)"),
        (dict(executor="nope"), "unknown executor 'nope'; known: local, ray, slurm"),
        (dict(window=16, causal="no"), "give causal yes or lower-right, not no or both"),
        (dict(window=16, causal="no"), "window=16 needs causal masking"),
        (dict(kv_heads=3), "kv_heads=3 does not divide heads=1"),
        (dict(budget_ms=-5), "budget_ms must be a positive number, got -5"),
        (dict(min_samples=600), "min_samples=600 is more than max_samples=500"),
        (dict(cpu_affinity="4096"), "cpu_affinity asks for CPU 4096"),
        (dict(env=["NO_EQUALS_SIGN"]), "env takes NAME=VALUE, got 'NO_EQUALS_SIGN'"),
        (dict(redo_drift=True), "redo_drift=True measures a run's drifted cells again"),
        (dict(rerun="somewhere", cells="x", status="ok"), "choose cells by cells or by status, not both"),
        (dict(processes=3), "processes was removed: a worker process is where a visit runs"),
        (dict(repeat=3), "repeat was removed: runs made one after another share the machine's drift"),
        (dict(casual="yes"), "unknown keyword 'casual' (did you mean 'causal'?); known: variants"),
        (dict(device="CPU"), "unknown device 'CPU' (did you mean 'cpu'?)"),  # a word in another case
        (dict(rouns=3), "unknown keyword 'rouns' (did you mean 'rounds'?)"),
        # run's own keywords are known too, and suggested: where the cells are measured among them
        (
            dict(executor="slurm", slurm_partion="ci"),
            "unknown keyword 'slurm_partion' (did you mean 'slurm_partition'?)",
        ),
        (dict(executor="ray", ray_adress="x:1"), "(did you mean 'ray_address'?); known: variants, device"),
        (dict(executor="ray", ray_adress="x:1"), ", executor, devices, ray_address, slurm_partition, "),
    ],
)
def test_errors_name_the_keyword(tmp_path, kwargs, words):
    if kwargs.get("devices") == "cuda:0" and __import__("torch").cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    out = tmp_path / "never"
    with as_a_fresh_process(tmp_path), pytest.raises(ValueError) as caught:
        sweep = {} if "rerun" in kwargs else dict(variants="naive", seq_len=64, heads=1)
        attnbench.run(out=out, **sweep, **kwargs)
    message = str(caught.value)
    assert words in message and "--" not in message, message
    assert not out.exists()


def _mine(q, k, v, **kw):
    return q


@pytest.mark.parametrize(
    "first, words",
    [
        (_mine, "run()'s first argument is the sweep (a sweep file or a mapping of axes), not function "),
        ([_mine, "sdpa"], "give what to measure as variants=, e.g. attnbench.run(variants=[my_attn, 'sdpa']"),
        ("naive", "'naive' is a variant, not a sweep file: give it as variants='naive'"),
        ("quick", "'quick' is a preset, not a sweep file: give it as preset='quick'"),
    ],
    ids=["function", "list", "variant", "preset"],
)
def test_what_to_measure_given_as_the_sweep_is_told_its_keyword(tmp_path, first, words):
    """bench(fn) takes fn first, so run(fn) is what a user types next: the error says variants= (or preset=),
    not a TypeError from inside (a function is not iterable) nor 'config file naive does not exist'."""
    out = tmp_path / "never"
    with pytest.raises((TypeError, ValueError)) as caught:
        attnbench.run(first, seq_len=64, out=out)
    assert words in str(caught.value) and not out.exists()


def test_a_run_directory_error_names_the_keyword(tmp_path):
    """results.store's messages know no front end: the API says `resume=True` where the CLI says --resume."""
    stopped = tmp_path / "stopped"
    stopped.mkdir()
    (stopped / "writer.lock").write_text("")  # what a start stopped before meta.json leaves
    with as_a_fresh_process(tmp_path), pytest.raises(ValueError) as caught:
        attnbench.run(out=stopped, resume=True)
    message = str(caught.value)
    assert "holds no run" in message and "without resume=True" in message and "--" not in message, message


def test_report_names_out(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match=r"^out='.*file' exists and is not a directory"):
        attnbench.report(ROOT / "results" / "reference" / "llm-epyc-2core", out=tmp_path / "file")


@pytest.mark.parametrize("spelled", [{"pass_": "fwdbwd"}, {"pass": "fwdbwd"}], ids=["pass_", "pass"])
def test_pass_keyword_and_dry_run(tmp_path, spelled):
    """`pass_` (and `pass` through **{}) choose the pass; a dry run measures and writes nothing and says
    what it would do."""
    out = tmp_path / "dry"
    with as_a_fresh_process(tmp_path):
        run = attnbench.run(variants="naive", seq_len="64,128", heads=1, out=out, dry_run=True, **spelled)
    assert not out.exists() and run.counts == {}
    assert [c.pass_ for c in run.forecast.measured] == ["fwdbwd", "fwdbwd"], run.forecast
    # printed, and shown in a notebook, it reads as what it would measure, not a dataclass nor a missing run
    said = str(run).splitlines()
    assert said[0] == f"run {out}: a dry run, nothing measured" and said[1:] == run.forecast.lines()
    assert (
        run._repr_html_().startswith(f"<pre>run {out}: a dry run")
        and "does not exist" not in run._repr_html_()
    )


def test_executor_keywords_reach_the_executor(tmp_path):
    """executor="slurm", slurm_local=True runs the cells in submitit's array tasks on this machine, as
    --executor slurm --slurm-local does: their rows come from shards, and a callable among the variants
    reaches the tasks' workers by value (variants.pkl)."""
    pytest.importorskip("submitit")
    out = tmp_path / "slurm"

    def mine(q, k, v, *, scale=None):
        return (q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5).softmax(-1) @ v

    mine.__module__ = "__main__"  # as a script's: shipped by value
    with as_a_fresh_process(ROOT):  # the tasks' interpreters import this checkout from their directory
        run = attnbench.run(
            variants=[mine, "naive"], seq_len=64, heads=1, budget_ms=3, warmup_ms=1, min_ms=1,
            calibrate_ms=0, executor="slurm", slurm_local=True, slurm_tasks=1, out=out,
        )  # fmt: skip
    assert run.counts == {"ok": 2}, run
    assert list((out / "shards").glob("*.jsonl"))


def test_an_incomplete_run_warns_with_the_call_that_finishes_it(tmp_path):
    """The CLI says `run incomplete` and exits 3 where cells have no row (a Slurm array task cancelled); the
    API returns the Run with its `missing` and warns the same, naming the resume that measures them."""
    from attnbench import api
    from attnbench.harness.run.runner import RunSummary

    summary = RunSummary(path=tmp_path / "r", executor="slurm", missing=2)
    with pytest.warns(UserWarning, match=r"run incomplete: .*\(2 of its cells not measured\); finish with: "
                      r"attnbench.run\(out='.*r', resume=True, executor='slurm'\)"):  # fmt: skip
        ran = api._finished(summary)
    assert ran.missing == 2 and not ran.interrupted
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert api._finished(RunSummary(path=tmp_path / "r")).missing == 0  # a whole run: no warning
