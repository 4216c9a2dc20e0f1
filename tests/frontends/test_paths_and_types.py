"""Paths and runs as the CLI and the API are given them: a `~` is the home folder wherever a path is taken,
a Run stands for its directory wherever a run directory does, and a value of the wrong type is one clear
line naming the keyword, never an error from deep inside."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import DATA, run_cli

import attnbench
from tests.conftest import as_a_fresh_process

RUN = DATA / "runs" / "cpu-small"


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A home folder of the test's own, and a working directory apart from it."""
    home, here = tmp_path / "home", tmp_path / "here"
    home.mkdir()
    here.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home, here


def test_the_cli_expands_a_tilde_argparse_is_given(home):
    """`--store=~/h.sqlite` and `--out=~/x` reach argparse with the `~` (the shell expands one only at a
    word's start): it is the home folder, never a folder named `~` in the working directory."""
    home, here = home
    run_cli("history", "add", str(RUN), "--store=~/h.sqlite", cwd=here, check=True)
    p = run_cli(
        "run", "--variants", "naive", "--seq-len", "64", "--heads", "1", "--out=~", "--dry-run", cwd=here
    )
    assert p.returncode == 2 and f"'{home}' already exists and is not empty" in p.stderr, p.stderr
    assert (home / "h.sqlite").is_file() and list(here.iterdir()) == []


def test_the_api_expands_a_tilde_in_every_path(home):
    home, here = home
    with as_a_fresh_process(here):
        df = attnbench.history(RUN, store="~/h.sqlite")
        assert len(df) and len(attnbench.steps(store="~/h.sqlite").columns)
        ran = attnbench.run(variants="naive", seq_len=64, heads=1, out="~/run", dry_run=True)
        assert ran.path == home / "run"
        with pytest.raises(ValueError, match=f"^config file '{home}/nope.toml' does not exist"):
            attnbench.run(config="~/nope.toml", out="~/run", dry_run=True)
        with pytest.raises(ValueError, match=f"variant file '{home}/nope.py' does not exist"):
            attnbench.run(variant_files="~/nope.py", out="~/run", dry_run=True)
    assert (home / "h.sqlite").is_file() and list(here.iterdir()) == []


def test_a_run_is_taken_wherever_a_run_directory_is(tmp_path):
    """load, history, table and report take a Run as they take its directory; table takes a run's
    directory too, and `columns` as text."""
    run = attnbench.Run(RUN)
    assert len(attnbench.load(run)) == len(attnbench.load(RUN)) == len(attnbench.load([run])) > 0
    assert len(attnbench.history(run, store=tmp_path / "h.sqlite")) == len(attnbench.load(RUN))
    assert list(attnbench.table(run, columns="variant").data.columns) == ["variant"]
    shown = attnbench.table(str(RUN), columns="variant, dtype").data
    assert list(shown.columns) == ["variant", "dtype"] and len(shown) == len(attnbench.load(RUN))


@pytest.mark.parametrize(
    "call, said",
    [
        (
            lambda: attnbench.run(variants="naive", seq_len=64, out=123),
            "out= takes a path (str or pathlib.Path)",
        ),
        (lambda: attnbench.run(variants="naive", seq_len=64, config=1.5), "config= takes a path"),
        (lambda: attnbench.load(3), "load: each run takes a path (str or pathlib.Path) or a Run, not int 3"),
        (lambda: attnbench.history(RUN, store=7), "store= takes a path"),
        (lambda: attnbench.steps("runs/h0"), "a history store is given as steps(store='runs/h0')"),
        (lambda: attnbench.table(5), "table takes attnbench.load()'s DataFrame, a run directory or a Run"),
        (lambda: attnbench.report(RUN, out=["x"]), "out= takes a path"),
        (
            lambda: attnbench.load(attnbench.load(RUN)),
            "load: each run takes a path (str or pathlib.Path) or a Run, not DataFrame",
        ),
    ],
    ids=["run out", "run config", "load", "history store", "steps", "table", "report out", "load a frame"],
)
def test_a_value_of_the_wrong_type_is_one_clear_line(tmp_path, call, said):
    with as_a_fresh_process(tmp_path), pytest.raises(TypeError) as caught:
        call()
    message = str(caught.value)
    assert said in message and "\n" not in message, message
    assert list(Path(tmp_path).iterdir()) == []


@pytest.mark.parametrize(
    "given, said",
    [
        (dict(dry_run="False"), "dry_run= takes True or False, not str 'False'"),
        (dict(resume="no"), "resume= takes True or False, not str 'no'"),
        (dict(progress="yes"), "progress= takes True or False or None, not str 'yes'"),
        (dict(slurm_local=1), "slurm_local= takes True or False, not int 1"),
    ],
)
def test_a_switch_given_text_is_refused(tmp_path, given, said):
    """A string is true to Python: dry_run="False" made a dry run. A switch takes True or False only."""
    out = tmp_path / "never"
    with as_a_fresh_process(tmp_path), pytest.raises(TypeError) as caught:
        attnbench.run(variants="naive", seq_len=64, heads=1, out=out, **given)
    assert str(caught.value) == said
    with as_a_fresh_process(tmp_path), pytest.raises(TypeError, match=f"^{said}$"):
        attnbench.bench("naive", out=out, **given)
    assert not out.exists()


def test_a_profile_switch_given_text_is_refused(tmp_path):
    with pytest.raises(TypeError, match="^py_spy= takes True or False, not str 'no'$"):
        attnbench.profile("naive", out=tmp_path / "p", py_spy="no")
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize(
    "given, said",
    [
        (dict(seconds="2"), "seconds= takes a number of seconds (int or float), not str '2'"),
        (dict(seconds=True), "seconds= takes a number of seconds (int or float), not bool True"),
        (dict(iters="3"), "iters= takes a number of calls (int), not str '3'"),
        (dict(rate="fast"), "rate= takes samples per second (int), not str 'fast'"),
        (dict(threads="2"), "threads= takes a whole number (int), not str '2'"),
        (dict(name=5), "name= takes text (str), not int 5"),
    ],
)
def test_a_profile_keyword_of_the_wrong_type_is_refused(tmp_path, given, said):
    """`seconds="2"` failed inside with "'>' not supported between instances of 'str' and 'int'"."""
    with pytest.raises(TypeError) as caught:
        attnbench.profile("naive", seq_len=128, out=tmp_path / "p", **given)
    assert str(caught.value) == said
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize(
    "given, said",
    [
        (
            dict(executor="ray", ray_address=6379),
            "ray_address= takes the cluster's address as text, such as ",
        ),
        (dict(executor="slurm", slurm_partition=5), "slurm_partition= takes text (str), not int 5"),
        (dict(executor="slurm", slurm_gpus_per_node="2"), "slurm_gpus_per_node= takes a whole number (int)"),
        (dict(executor="slurm", slurm_time=1.5), "slurm_time= takes minutes (int) or text such as '90' or "),
        (
            dict(executor="slurm", slurm_array_parallelism="2"),
            "slurm_array_parallelism= takes a whole number",
        ),
        (dict(executor="slurm", slurm_tasks=True), "slurm_tasks= takes a whole number (int), not bool True"),
        (
            dict(executor="slurm", slurm_opt=["a=b", 3]),
            "slurm_opt= takes KEY=VALUE text, or a list of them, not",
        ),
        (dict(devices=0), "devices= takes text such as 'cuda:0,cuda:1' (str), not int 0"),
        (dict(executor=5), "executor= takes text (str), not int 5"),
        (dict(preset=["quick"]), "preset= takes text (str), not list ['quick']"),
    ],
)
def test_an_executor_keyword_of_the_wrong_type_is_refused(tmp_path, given, said):
    """`ray_address=6379` failed inside with "'int' object has no attribute 'startswith'", before bench's
    plan and run alike."""
    out = tmp_path / "never"
    with as_a_fresh_process(tmp_path), pytest.raises(TypeError) as caught:
        attnbench.run(variants="naive", seq_len=64, heads=1, out=out, **given)
    assert str(caught.value).startswith(said) and "\n" not in str(caught.value), caught.value
    with as_a_fresh_process(tmp_path), pytest.raises(TypeError, match=f"^{re.escape(said)}"):
        attnbench.bench("naive", out=out, **given)
    assert not out.exists()


def test_slurm_time_in_minutes_and_one_slurm_opt_as_text_are_taken(tmp_path):
    """`slurm_time=30` (docs: minutes) failed inside ('int' object has no attribute 'rpartition'), and
    `slurm_opt="account=x"` was read a character at a time ("got 'a'"): they are --slurm-time 30 and one
    --slurm-opt account=x."""
    pytest.importorskip("submitit")
    from attnbench.api_keywords import executor_options

    given = dict(slurm_time=30, slurm_opt="account=x", slurm_local=True)
    assert executor_options(given) == dict(slurm_time="30", slurm_opt=["account=x"], slurm_local=True)
    with as_a_fresh_process(tmp_path):
        ran = attnbench.run(
            variants="naive",
            seq_len=64,
            heads=1,
            out=tmp_path / "dry",
            dry_run=True,
            executor="slurm",
            **given,
        )
    assert ran.forecast is not None


def test_no_variants_is_refused_not_every_default_variant(tmp_path):
    """variants=[] ran the whole default set (11 variants) where variants="" is refused."""
    for empty in ([], "", {}):
        with (
            as_a_fresh_process(tmp_path),
            pytest.raises(ValueError, match="^variants needs at least one value"),
        ):
            attnbench.run(variants=empty, seq_len=64, out=tmp_path / "never", dry_run=True)


def test_an_empty_path_is_refused_not_taken_as_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.txt").write_text("the user's own folder")
    p = run_cli("run", "--out", "", "--dry-run")
    assert p.returncode == 2 and "--out is empty: name the run's directory" in p.stderr
    with pytest.raises(ValueError, match="^out= is empty: name a path$"):
        attnbench.run(out="", dry_run=True)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["mine.txt"]


def test_load_without_a_run_is_refused_not_an_empty_frame():
    with pytest.raises(TypeError, match=r"^load\(\) takes one or more run directories or Runs: "):
        attnbench.load()
    assert len(attnbench.load(RUN)) and len(attnbench.load([])) == 0  # an empty list is a caller's choice


def test_a_report_into_its_run_directory_is_pointed_at_the_runs_report_folder(tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    p = run_cli("report", str(run), "--out", str(run))
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1
    assert f"such as --out {str(run / 'report')!r} (`attnbench history publish` finds it there)" in p.stderr


async def _async_attn(q, k, v):
    return q


def _generator_attn(q, k, v):
    yield q


async def _async_generator_attn(q, k, v):
    yield q


@pytest.mark.parametrize(
    "fn, said",
    [
        (42, "a variant is a callable or a registered name, not int"),
        ([lambda q, k, v: q], "a variant is a callable or a registered name, not list"),
        (_async_attn, "variant '_async_attn' returns a coroutine when called, not the output tensor"),
        (_generator_attn, "variant '_generator_attn' returns a generator when called, not the output tensor"),
        (_async_generator_attn, "variant '_async_generator_attn' returns an async generator when called"),
    ],
    ids=["int", "list", "async def", "generator", "async generator"],
)
def test_a_bench_of_no_function_is_a_type_error_before_any_work(tmp_path, fn, said):
    """bench(42), bench([fn]) are mistakes of type; an async def or a generator function returns no tensor,
    which the output contract found only after seconds of measuring: each one line, before anything runs."""
    out = tmp_path / "never"
    with as_a_fresh_process(tmp_path), pytest.raises(TypeError) as caught:
        attnbench.bench(fn, out=out, seq_len=64)
    assert str(caught.value).startswith(said) and "\n" not in str(caught.value), caught.value
    assert not out.exists()
    if callable(fn):  # declared, the same: attnbench.variant and @register
        with pytest.raises(TypeError, match="^variant 'x' returns an? "):
            attnbench.variant(fn, name="x")
        with pytest.raises(TypeError, match="returns a"):
            attnbench.register("x37")(fn)


def test_a_bench_of_a_tensor_is_a_type_error():
    import torch

    with pytest.raises(TypeError, match="^a variant is a callable or a registered name, not Tensor$"):
        attnbench.bench(torch.zeros(2), dry_run=True)


def test_a_capabilitys_names_given_as_one_string_are_refused_as_such():
    """dtypes="float32" was read letter by letter ("unknown dtype(s) ['f', 'l', ...]")."""
    with pytest.raises(
        ValueError, match=r"dtypes must be a tuple of \[.*\], such as \('float32',\), not 'float32'"
    ):
        attnbench.variant(lambda q, k, v: q, name="x", dtypes="float32")
    with pytest.raises(ValueError, match=r"devices must be a tuple of \['cpu', 'cuda'\], such as \('cpu',\)"):
        attnbench.variant(lambda q, k, v: q, name="x", devices="cpu")


def test_an_axis_given_twice_names_the_two_spellings_given(tmp_path):
    with pytest.raises(ValueError, match=r"^pass_ is given twice \(as pass and pass_\)$"):
        attnbench.bench("naive", **{"pass": "fwdbwd", "pass_": "fwd"}, dry_run=True, out=tmp_path / "d")


def test_two_functions_of_one_name_are_told_apart_not_listed_twice(tmp_path):
    namespace = {"__name__": "__main__"}
    exec("def attn(q, k, v):\n    return q", namespace)
    attn_v1 = namespace["attn"]

    def attn(q, k, v):
        return k

    with as_a_fresh_process(tmp_path), pytest.raises(ValueError) as caught:
        attnbench.run(variants=[attn_v1, attn], seq_len=64, dry_run=True)
    said = str(caught.value)
    assert "two functions share the name 'attn'" in said and "variants={'v1': " in said, said
    assert "name=" in said and "lists a value twice" not in said
    with as_a_fresh_process(tmp_path):
        assert attnbench.run(variants={"v1": attn_v1, "v2": attn}, seq_len=64, dry_run=True).forecast
