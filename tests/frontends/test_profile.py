"""`attnbench profile`: real subprocesses writing a flame graph, a Chrome trace, top operators and a page."""

from __future__ import annotations

import csv
import json
import shlex
from pathlib import Path

import psutil
import pytest
from conftest import run_cli, stopped_by_ctrl_c

from attnbench.harness.tools.profile import single_cell
from attnbench.harness.tools.py_spy import PY_SPY_ENV, find_py_spy
from attnbench.page_out import report_dir
from attnbench.reports.page import PAGE_FILES, written_by_attnbench
from attnbench.reports.profile_page import speedscope_summary, write_pages

HAS_PY_SPY = find_py_spy()[0] is not None
SMALL = ("--seq-len", "64", "--heads", "2")


def _torch_outputs_ok(out) -> list[dict[str, str]]:
    trace = json.loads((out / "trace.json").read_text())
    assert trace["traceEvents"], "empty Chrome trace"
    with open(out / "top_ops.csv", newline="") as f:
        ops = list(csv.DictReader(f))
    assert ops and {"name", "calls", "self_cpu_ms", "total_cpu_ms", "self_cpu_mem_bytes"} <= set(ops[0])
    assert (out / "top_ops.md").read_text().count("|") > 10
    html = (out / "index.html").read_text()
    assert "trace.json" in html and "top_ops.csv" in html and "ui.perfetto.dev" in html
    assert "Machine" in html and "cpu_model" in html  # the fingerprint
    assert (out / "index.md").is_file()
    meta = json.loads((out / "profile.json").read_text())
    assert meta["schema"] == 1 and meta["error"] == "" and meta["torch_profiler"]["iterations"] >= 1
    return ops


@pytest.mark.slow
def test_profile_writes_flame_graph_trace_and_page(tmp_path):
    out = tmp_path / "prof"
    p = run_cli("profile", "--variant", "naive", *SMALL, "--seconds", "1", "--out", str(out), check=True)
    ops = _torch_outputs_ok(out)
    assert any(r["name"] == "aten::bmm" for r in ops)
    assert "aten::bmm" in p.stdout  # the top operators, printed
    assert "USDT" not in p.stderr  # torch.profiler's chatter is filtered out
    if not HAS_PY_SPY:
        pytest.skip("py-spy is not installed: only the torch.profiler part was checked")
    svg = (out / "flame.svg").read_text()
    assert svg.startswith("<?xml") and "naive (variants/naive.py" in svg
    assert json.loads((out / "profile.speedscope.json").read_text())["profiles"]
    spied = speedscope_summary(out / "profile.speedscope.json")
    # at N=64 the loop around the call can out-sample it: the variant must appear, not necessarily first
    assert spied.n > 0 and any(f["function"] == "naive" for f in spied.functions)
    html = (out / "index.html").read_text()
    assert 'data="flame.svg"' in html and "speedscope.app" in html


def test_no_py_spy_backward_of_chunked(tmp_path):
    out = tmp_path / "prof"
    p = run_cli(
        "profile", "--variant", "chunked", *SMALL, "--pass", "fwdbwd", "--no-py-spy", "--iters", "2",
        "--out", str(out), check=True,
    )  # fmt: skip
    ops = _torch_outputs_ok(out)
    assert not (out / "flame.svg").exists() and not (out / "profile.speedscope.json").exists()
    assert any("backward" in r["name"].lower() or "ChunkedAttention" in r["name"] for r in ops)
    assert "pip install" not in p.stderr  # asked for: no install hint
    assert all(written_by_attnbench(out / name) for name in PAGE_FILES["profile"])
    # its own pages pass report_dir's page check (cmd_profile still wants an empty --out for a new profile)
    assert report_dir(out, "unused", "profile") == out


def test_missing_py_spy_says_how_to_install_and_still_profiles(tmp_path, monkeypatch):
    monkeypatch.setenv(PY_SPY_ENV, str(tmp_path / "no-such-py-spy"))
    out = tmp_path / "prof"
    p = run_cli("profile", "--variant", "naive", *SMALL, "--out", str(out), check=True)
    hint = [line for line in p.stderr.splitlines() if "py-spy not found" in line]
    assert len(hint) == 1 and "pip install 'attnbench[profile]'" in hint[0]
    _torch_outputs_ok(out)
    assert not (out / "flame.svg").exists()
    assert "py-spy not found" in (out / "index.md").read_text()


def test_a_failing_py_spy_is_said_on_the_page_and_fails_a_profile_that_asked_for_it(tmp_path, monkeypatch):
    """Trial W L4: a py-spy that cannot attach left the page's Calls table saying the cell `looped under
    py-spy` (with a ratio to the un-profiled call) and exit status 0. The page says py-spy failed, with its
    reason; --py-spy (py-spy required) exits 1, and is refused up front where py-spy is not found."""
    fake = tmp_path / "py-spy"
    fake.write_text('#!/bin/sh\necho "Reason: Operation not permitted (os error 1)" >&2\nexit 1\n')
    fake.chmod(0o755)
    monkeypatch.setenv(PY_SPY_ENV, str(fake))
    quick = ("--variant", "naive", *SMALL, "--seconds", "0.2", "--iters", "1")
    p = run_cli("profile", *quick, "--out", str(tmp_path / "auto"))
    assert p.returncode == 0, p.stderr
    calls = (tmp_path / "auto" / "index.md").read_text()
    assert "looped under py-spy" not in calls and "looped for py-spy, which failed" in calls
    assert "Operation not permitted" in calls
    p = run_cli("profile", *quick, "--py-spy", "--out", str(tmp_path / "asked"))
    assert (
        p.returncode == 1
        and "attnbench: --py-spy: py-spy failed (Reason: Operation not permitted" in p.stderr
    )
    monkeypatch.setenv(PY_SPY_ENV, str(tmp_path / "no-such-py-spy"))
    p = run_cli("profile", *quick, "--py-spy", "--out", str(tmp_path / "missing"))
    assert p.returncode == 2 and "--py-spy: py-spy not found" in p.stderr
    assert not (tmp_path / "missing").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--variant", "nope"], "unknown variant 'nope'"),
        (["--variant", "naive", "--seq-len", "0"], "seq-len must be positive integers, got 0"),
        (["--variant", "naive", "--seq-len", "64,128"], "--seq-len takes one value"),
        (["--variant", "naive", "--seq-len", "64", "--seq-len", "128"], "--seq-len takes one value"),
        (["--variant", "naive", "--causal", "both"], "--causal takes one value"),
        (["--variant", "naive", "--dtype", "float8"], "--dtype 'float8': float8 is not a dtype of a sweep"),
        (["--variant", "naive", "--seconds", "0"], "--seconds must be"),
    ],
)
def test_bad_input_is_one_line_exit_2_nothing_written(tmp_path, args, message):
    out = tmp_path / "prof"
    p = run_cli("profile", *args, "--out", str(out))
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().count("\n") == 0 and message in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and p.stdout == ""
    assert not out.exists()


def test_a_non_empty_out_dir_is_refused(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    p = run_cli("profile", "--variant", "naive", *SMALL, "--out", str(tmp_path))
    assert p.returncode == 2 and "not empty" in p.stderr
    assert [f.name for f in tmp_path.iterdir()] == ["keep.txt"]


def test_single_cell_defaults_and_values():
    cell = single_cell("chunked", {"seq_len": None, "causal": ["yes"], "d_k": "32", "pass_": "fwdbwd"})
    assert (cell.seq_len, cell.causal, cell.d_k, cell.d_v, cell.pass_, cell.heads) == (
        1024, True, 32, 32, "fwdbwd", 8
    )  # fmt: skip
    with pytest.raises(ValueError, match="--batch takes one value"):
        single_cell("chunked", {"batch": "1..4"})


def test_a_kernel_of_packs_or_paged_caches_only_is_profiled_on_its_workload():
    """sdpa_loop runs packs only and paged_gather paged caches only: with no --lengths or --page-size their
    profile refused the default cell ('runs packed variable-length batches only'); it profiles a pack of
    8 long-tail sequences or a decode step in pages of 16, and a workload given keeps its own values."""
    from attnbench.harness.tools.profile import prepare

    def cell(variant, **given):
        return prepare(variant, given, use_py_spy=False).cell

    packed = cell("sdpa_loop")
    assert (packed.lengths, packed.batch, packed.seq_len, packed.page_size) == ("longtail", 8, 1024, 0)
    paged = cell("paged_gather", seq_k="2048")
    assert (paged.page_size, paged.seq_len, paged.seq_k, paged.lengths) == (16, 1, 2048, "uniform")
    assert cell("sdpa_loop", lengths="bimodal", batch="4").lengths == "bimodal"
    assert cell("naive").lengths == "none"
    with pytest.raises(ValueError, match="sdpa_loop cannot run this cell here: runs packed variable-length"):
        cell("sdpa_loop", lengths="none")


def test_a_kernel_of_sliding_windows_only_is_profiled_on_a_window(tmp_path):
    """window= with no default: profile refused its default cell ('runs sliding-window cells only'); it
    profiles a causal window of 256 keys, and a window given keeps its value."""
    from attnbench.harness.tools.profile import prepare

    path = tmp_path / "local.py"
    path.write_text(
        "from attnbench import register\n"
        "@register('local_only', window=True)\n"
        "def local_only(q, k, v, *, causal=True, window):\n"
        "    return q\n"
    )
    cell = prepare("local_only", {}, use_py_spy=False, variant_files=[str(path)]).cell
    assert (cell.causal, cell.window, cell.seq_len) == (True, 256, 1024)
    given = prepare("local_only", {"window": "32"}, use_py_spy=False, variant_files=[str(path)]).cell
    assert (given.window, given.causal) == (32, True)  # causal filled in, as bench fills it
    lower = prepare("naive", {"window": "32", "causal": "lower-right"}, use_py_spy=False).cell
    assert (lower.causal, lower.causal_align) == (True, "lower-right")
    with pytest.raises(ValueError, match="needs causal masking"):
        prepare("naive", {"window": "32", "causal": "no"}, use_py_spy=False)


def test_page_escapes_what_it_shows(tmp_path):
    evil = "<script>alert(1)</script>"
    meta = {
        "cell": {"variant": evil, "device": "cpu", "dtype": "float32", "batch": 1, "heads": 1,
                 "seq_len": 8, "d_k": 8, "d_v": 8, "causal": False, "padding": 0.0, "pass": "fwd"},
        "command": evil, "py_spy": {"used": False, "note": evil, "records": []}, "error": "",
        "fingerprint": {"hostname": evil, "gpu": None},
    }  # fmt: skip
    (tmp_path / "profile.json").write_text(json.dumps(meta))
    header = "name,calls,self_cpu_ms,self_cpu_pct,total_cpu_ms,self_cpu_mem_bytes"
    (tmp_path / "top_ops.csv").write_text(f'{header}\n"{evil}",1,1.0,100,1.0,-2048\n')
    md, html = write_pages(tmp_path)
    assert "<script>" not in html.read_text() and "&lt;script&gt;" in html.read_text()
    assert "<script>" not in md.read_text() and "<script>" not in (tmp_path / "top_ops.md").read_text()
    assert "-2 KiB" in (tmp_path / "top_ops.md").read_text()


def test_a_notebook_function_is_profiled_from_python(tmp_path):
    """attnbench.profile(fn): a function defined in a notebook cell goes to the profiled process by value
    (variants.pkl beside the pages, which its reproduce command names); it prints as the top operators, and a
    notebook shows its pages linked. Bad input is a ValueError naming the keyword, with nothing written."""
    import attnbench
    from tests.conftest import as_a_fresh_process
    from tests.frontends.test_api_callables import notebook_function

    out = tmp_path / "prof"
    with as_a_fresh_process(tmp_path):
        with pytest.raises(
            ValueError, match=r"^seq_len takes one value \(profile runs one cell\), got '64,128'"
        ):
            attnbench.profile(notebook_function(), seq_len="64,128", out=out)
        with pytest.raises(
            ValueError,
            match=r"^unknown keyword 'seqlen' \(did you mean 'seq_len'\?\); known: batch, .*, iters,",
        ):
            attnbench.profile(notebook_function(), seqlen=64, out=out)
        assert not out.exists()
        prof = attnbench.profile(notebook_function(), seq_len=64, heads=2, py_spy=False, iters=2, out=out)
    assert prof.error == "" and prof.path == out
    ops = _torch_outputs_ok(out)
    assert any(r["name"] == "aten::bmm" for r in ops) and "aten::bmm" in str(prof)
    meta = json.loads((out / "profile.json").read_text())
    assert meta["command"].endswith(f"--no-py-spy --variant-file {out / 'variants.pkl'}")
    shown = prof._repr_html_()
    assert (
        "Profile: cell_attn" in shown and 'href="' in shown and "index.html" in shown and "aten::bmm" in shown
    )


PROFILE_VARIANTS = str(Path(__file__).resolve().parents[1] / "data" / "profile_variants.py")
TINY = ("--no-py-spy", "--iters", "2")


def _stderr_lines(p) -> list[str]:
    """What the command said, less the progress line a profile always prints."""
    return [line for line in p.stderr.splitlines() if line and not line.startswith("torch.profiler:")]


@pytest.mark.parametrize(
    "variant, given",
    [
        ("paged_gather", {}),
        ("paged_chunked", {"seq_k": "1024"}),
        ("sdpa_loop", {}),
        ("naive", {"window": "16"}),
        ("naive", {"kv_heads": "2", "seq_k": "128", "causal": "lower-right"}),
        ("naive", {"lengths": "uniform", "batch": "2"}),
        ("naive", {"mod": "softcap:30", "padding": "0.25", "dropout": "0.1"}),
    ],
)
def test_the_reproduce_command_of_every_workload_gives_the_cell_again(variant, given):
    """Plan.command() of a paged cell raised KeyError 'seq_k' after the cell was profiled (cell_given left
    out a paged cell's --seq-k, as it must a pack's): the command of every workload family's cell is read
    back by `attnbench profile`'s own parser as exactly that cell."""
    from attnbench.cli import build_parser
    from attnbench.harness.sweep import options
    from attnbench.harness.tools.profile import CELL_OPTIONS, prepare

    plan = prepare(variant, given, use_py_spy=False)
    args = build_parser().parse_args(shlex.split(plan.command())[1:])
    again = prepare(args.variant[0], options.given_options(vars(args), CELL_OPTIONS), use_py_spy=False)
    assert again.cell == plan.cell


def test_a_paged_cache_variant_profiles_a_decode_step(tmp_path):
    out = tmp_path / "prof"
    p = run_cli("profile", "--variant", "paged_gather", "--seq-k", "64", "--batch", "2", *SMALL[2:], *TINY,
                "--out", str(out))  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    _torch_outputs_ok(out)
    md = (out / "index.md").read_text()
    title = md.splitlines()[0]
    assert "N=1 " in title and "N\\_k=64" in title and "pages of 16" in title and "uniform lengths" in title
    assert "warm-up, not profiled" in md  # the un-profiled time per call beside the profiled ones


def test_the_title_names_every_axis_off_its_default(tmp_path):
    """A w16 cell's title said 'N=256 d_k=64 causal fwd': every axis off its quiet value is named."""
    from attnbench.reports.profile_page import _title

    cell = {"variant": "v", "device": "cpu", "dtype": "float32", "batch": 1, "heads": 8, "seq_len": 256,
            "d_k": 64, "d_v": 64, "causal": True, "padding": 0.0, "pass": "fwd", "window": 16, "kv_heads": 2,
            "seq_k": 256, "causal_align": "top-left", "dropout": 0.0, "mod": "alibi", "lengths": "none",
            "page_size": 0}  # fmt: skip
    assert (
        _title({"cell": cell})
        == "Profile: v · cpu float32 B=1 H=8 N=256 d_k=64 causal H_kv=2 window 16 ALiBi fwd"
    )
    lower = _title(
        {"cell": {**cell, "seq_k": 512, "causal_align": "lower-right", "window": 0, "kv_heads": 8}}
    )
    assert lower.endswith("N=256 d_k=64 lower-right causal N_k=512 ALiBi fwd")


def test_an_answer_of_the_wrong_shape_is_refused_in_one_line(tmp_path):
    """profile_scores returns (B, H, N, N): `attnbench run` makes it an error row; profile exited 0 with a
    full page. It fails in its warm-up call with the output contract's words, and nothing is profiled."""
    out = tmp_path / "prof"
    p = run_cli("profile", "--variant", "profile_scores", "--variant-file", PROFILE_VARIANTS, *SMALL,
                "--d-k", "16", *TINY, "--out", str(out))  # fmt: skip
    assert p.returncode == 1, p.stderr
    said = _stderr_lines(p)
    assert len(said) == 1 and said[0].startswith(
        "attnbench: the profiled cell failed in its warm-up call (nothing was profiled): output contract: "
        "returned float32 (1, 2, 64, 64) on cpu; expected (1, 2, 64, 16)"
    ), p.stderr
    assert not (out / "trace.json").exists() and not (out / "top_ops.csv").exists()
    assert "output contract" in (out / "index.md").read_text()


def test_a_wrong_answer_is_profiled_with_a_warning(tmp_path):
    """An answer off the float64 gate is profiled, as `attnbench run` measures a wrong cell, and said in one
    line on stderr and on the page."""
    out = tmp_path / "prof"
    fault = str(Path(PROFILE_VARIANTS).with_name("fault_variants.py"))
    p = run_cli(
        "profile", "--variant", "fault_wrong", "--variant-file", fault, *SMALL, *TINY, "--out", str(out)
    )
    assert p.returncode == 0, p.stderr
    warned = [line for line in _stderr_lines(p) if "answer is wrong" in line]
    assert len(warned) == 1 and "fault_wrong's answer is wrong (failed the float64 gate: rel_err" in warned[0]
    assert "Wrong answer (profiled anyway" in (out / "index.md").read_text()
    _torch_outputs_ok(out)


def test_a_kernel_that_raises_is_one_line_naming_the_phase(tmp_path, capfd):
    """The child's whole traceback was printed before the line, and the page blamed torch.profiler: one
    line names the warm-up call, and the traceback is in child.log only; from Python too."""
    import attnbench
    from tests.conftest import as_a_fresh_process

    out = tmp_path / "prof"
    p = run_cli("profile", "--variant", "profile_boom", "--variant-file", PROFILE_VARIANTS, *SMALL, *TINY,
                "--out", str(out))  # fmt: skip
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert _stderr_lines(p) == [
        "attnbench: the profiled cell failed in its warm-up call (nothing was profiled): RuntimeError: boom "
        f"in the kernel (traceback in {out / 'child.log'})"
    ], p.stderr
    assert "Traceback" in (out / "child.log").read_text()
    md = (out / "index.md").read_text()
    assert "torch.profiler part failed" not in md and "Failed: the profiled cell failed in its warm-up" in md

    def boom(q, k, v):
        raise RuntimeError("boom in a notebook")

    capfd.readouterr()
    with as_a_fresh_process(tmp_path):
        prof = attnbench.profile(boom, seq_len=64, heads=2, py_spy=False, iters=2, out=tmp_path / "py")
    err = capfd.readouterr().err
    assert "Traceback" not in err and "RuntimeError: boom in a notebook" in prof.error
    assert "warm-up call" in prof.error


def test_a_relative_variant_file_is_absolute_in_the_reproduce_command(tmp_path, monkeypatch):
    from attnbench.harness.tools.profile import prepare

    (tmp_path / "mine.py").write_text(
        "from attnbench import register, variants\n"
        "@register('mine_rel')\n"
        "def mine_rel(q, k, v, **kw):\n"
        "    return variants.get('naive').fn(q, k, v, **kw)\n"
    )
    monkeypatch.chdir(tmp_path)
    plan = prepare("mine_rel", {}, use_py_spy=False, variant_files=["mine.py"])
    assert plan.command().endswith(f"--variant-file {tmp_path / 'mine.py'}")


@pytest.mark.parametrize("made", [True, False])
def test_ctrl_c_leaves_no_partial_profile(tmp_path, made):
    """Ctrl-C left DIR/flame.svg, and the same command was then refused (--out not empty): what the profile
    wrote is removed (the folder too, when it made it), and one line says so."""
    out = tmp_path / "prof"
    if not made:
        out.mkdir()
    argv = ["profile", "--variant", "profile_sleepy", "--variant-file", PROFILE_VARIANTS, *SMALL, *TINY,
            "--out", str(out)]  # fmt: skip
    # the parent only, as a notebook's interrupt, once the profiled child sleeps in its warm-up (it ignores
    # the signal anyway)
    started = lambda proc: bool(psutil.Process(proc.pid).children())  # noqa: E731
    returncode, err = stopped_by_ctrl_c(argv, started, "the profiled child", 0.5)
    assert returncode == 130, err
    said = "removed the unfinished profile" if made else "removed what the profile had written into"
    assert err.strip().splitlines() == [f"interrupted: {said} {out}"]
    assert not out.exists() if made else list(out.iterdir()) == []


def test_profile_help_shows_only_the_forms_profile_takes(monkeypatch):
    """`profile --help` showed run's forms, which profile refuses: `--pass fwd|fwdbwd|both`, `--causal
    ...|both|...; a comma list takes several`, `--seq-len 512,1024 or a doubling range`. Every word its
    placeholders offer is one cell, and no help names a list, a range or 'both'."""
    import re

    from attnbench.harness.tools.profile import CELL_OPTIONS

    monkeypatch.setenv("COLUMNS", "1000")  # one line per flag
    text = run_cli("profile", "--help", check=True).stdout
    cell = text.split("cell (one value each", 1)[1].split("profilers:", 1)[0]
    for said in ("comma list", "doubling range", "..", "both"):
        assert said not in cell.replace("...", ""), (said, cell)
    for option in CELL_OPTIONS:
        assert f"{option.flag()} {option.metavar}" in text
        for word in (w for w in (option.metavar or "").split("|") if re.fullmatch(r"[a-z-]+", w)):
            single_cell("naive", {option.key: word})  # 'no', 'lower-right', 'fwdbwd', 'alibi', ...


def test_profile_help_shows_the_seq_len_a_profile_measures(monkeypatch):
    """The help's default is the cell profile makes when --seq-len is not given."""
    import re

    monkeypatch.setenv("COLUMNS", "1000")
    shown = re.search(r"--seq-len N .*\(default: (\d+)\)", run_cli("profile", "--help", check=True).stdout)
    assert shown and int(shown.group(1)) == single_cell("naive", {}).seq_len


def test_a_profile_says_another_run_measures_beside_it(tmp_path, monkeypatch):
    """A profile is one of the attnbench runs on the machine, as a run is (harness.run.neighbours): with
    another run measuring it warns before it profiles and names it when it ends (its calls' times, and their
    share of the flame graph, are the other run's too), keeps both lines in profile.json, and leaves its own
    session for the runs beside it."""
    import subprocess
    import sys
    import time

    from attnbench.harness.run import neighbours

    shared = tmp_path / "announced"
    shared.mkdir()
    monkeypatch.setenv(neighbours.ENV, str(shared))
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        ticks = Path(f"/proc/{live.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        entry = {"pid": live.pid, "ticks": ticks, "out": "runs/nightly", "began": time.time()}
        (shared / "nightly.json").write_text(json.dumps(entry))
        out = tmp_path / "prof"
        p = run_cli("profile", "--variant", "naive", *SMALL, *TINY, "--out", str(out), check=True)
    finally:
        live.kill()
        live.wait()
    told = "warning: another attnbench run is measuring on this machine: runs/nightly (pid"
    named = "warning: another attnbench run measured on this machine during this one: runs/nightly"
    assert told in p.stderr and named in p.stderr and p.stderr.index(told) < p.stderr.index(named), p.stderr
    said = json.loads((out / "profile.json").read_text())["neighbours"]
    assert len(said) == 2 and "runs/nightly" in said[0] and "during this one" in said[1]
    (own,) = [json.loads(f.read_text()) for f in shared.iterdir() if f.name != "nightly.json"]
    assert own["out"] == f"attnbench profile {out}" and own["ended"] >= own["began"]
