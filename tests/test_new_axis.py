"""A new axis is one entry of the axis table (results/axes.py): proved on a copy of the source with one entry
added and nothing else changed. The copy's `attnbench run` and `attnbench profile` get the flag, sweep files
and the Python API take the key, the pytest plugin its --attn- option; cells carry it, its cell_id part
appears off its default (and ids at the default stay as they were), the rows and the loader have its column
(older runs filled with its default), reports name it, and so do the progress line and a profile's directory
name and re-profile command. What the table cannot give (ARCHITECTURE.md, "A
new axis": its meaning in the float64 reference, a capability flag for the variants that support it) is
not part of this test."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MARK = "    # not an axis of identity but a label"  # the synthetic entry goes just before the model label
ENTRY = (
    '    Axis("tiles", "Int64", "ints", "tiles per block (a synthetic axis)", "N,...", default=(1,),\n'
    '         quiet=1, id="t{}", text=lambda v: f"{v} tiles"),\n'
)


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    """The package as installed (attnbench/ with variants/, harness/, results/, reports/ inside), one
    table entry added."""
    top = tmp_path_factory.mktemp("new-axis")
    pkg = top / "attnbench"
    shutil.copytree(ROOT / "attnbench", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    for layer in ("variants", "harness", "results", "reports"):
        shutil.copytree(
            ROOT / layer, pkg / layer, ignore=shutil.ignore_patterns("__pycache__", "reference", "out")
        )
    shutil.copytree(ROOT / "benchmarks", top / "benchmarks", ignore=shutil.ignore_patterns("__pycache__"))
    table = pkg / "results" / "axes.py"
    text = table.read_text()
    assert text.count(MARK) == 1, "the synthetic entry's place in results/axes.py moved"
    table.write_text(text.replace(MARK, ENTRY + MARK))
    return top


def run(copy: Path, *args: str, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(
        [sys.executable, *args], cwd=cwd or copy, env=env, capture_output=True, text=True, timeout=300
    )
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_the_copy_is_what_runs(copy):
    out = run(copy, "-c", "import attnbench.results.axes as a; print(a.__file__, [x.name for x in a.AXES])")
    assert out.stdout.startswith(str(copy)) and "'tiles'" in out.stdout


def test_every_front_end_takes_the_new_axis(copy, tmp_path):
    run_help = run(copy, "-m", "attnbench", "run", "--help").stdout
    assert "--tiles N,..." in run_help and "tiles per block" in run_help
    assert "--tiles N " in run(copy, "-m", "attnbench", "profile", "--help").stdout  # one value there
    sweep_file = tmp_path / "s.toml"
    sweep_file.write_text("[sweep]\ntiles = [2, 4]\nseq_len = [16]\n")
    script = textwrap.dedent(
        f"""
        import json, attnbench
        from attnbench.harness.sweep.sweeps import build_sweep
        from attnbench.results.axes import cell_id
        flags = build_sweep({{"tiles": "1,2", "seq_len": "16"}})
        cells = flags.cells(["naive"])
        toml = build_sweep(config={str(sweep_file)!r})
        try:
            attnbench.run(tiles="x", out="never")
        except ValueError as exc:
            api = str(exc)
        first = dict(variant="naive", device="cpu", dtype="float32", batch=1, heads=8, seq_len=16, d_k=64,
                     d_v=64, causal=False, padding=0.0)
        print(json.dumps({{
            "flags": list(flags.tiles), "toml": list(toml.tiles), "api": api,
            "ids": [c.cell_id for c in cells], "values": [c.tiles for c in cells],
            "old_id": cell_id({{**first, "pass": "fwd"}}),  # a cell of a run made before the axis
        }}))
        """
    )
    got = json.loads(run(copy, "-c", script).stdout)
    assert got["flags"] == [1, 2] and got["toml"] == [2, 4] and got["values"] == [1, 2]
    assert got["api"] == "tiles must be positive integers, got 'x'"  # named by its keyword
    plain = "naive|cpu|float32|b1|h8|n16|dk64|dv64|full|pad0|fwd"
    assert got["ids"] == [plain, plain + "|t2"] and got["old_id"] == plain  # quiet at its default


def test_a_run_records_it_and_reports_name_it(copy, tmp_path):
    out = tmp_path / "run"
    fast = ("--budget-ms", "5", "--warmup-ms", "1", "--calibrate-ms", "0")
    proc = run(copy, "-m", "attnbench", "run", "--variants", "naive", "--seq-len", "16,32", "--heads", "2",
               "--tiles", "3", *fast, "--out", str(out))  # fmt: skip
    assert " n16 d64 t3 fwd " in proc.stderr and " n32 d64 t3 fwd " in proc.stderr  # each cell's line
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert [r["tiles"] for r in rows] == [3, 3] and all(r["cell_id"].endswith("|t3") for r in rows)
    assert json.loads((out / "meta.json").read_text())["sweep"]["tiles"] == [3]
    script = textwrap.dedent(
        f"""
        import attnbench
        from attnbench.reports import plots, tables
        from attnbench.results.schema import COLUMNS
        new = attnbench.load({str(out)!r})
        old = attnbench.load({str(ROOT / "results" / "reference" / "quick-epyc-2core")!r})
        seen = [sorted(map(int, set(df["tiles"]))) for df in (new, old)]
        print(COLUMNS["tiles"], new["tiles"].dtype, *seen)
        print(tables.axis_text("tiles", 3), "tiles" in tables.PANEL_AXES, plots.keys_of(new).count("tiles"),
              plots.keys_of(old).count("tiles"))
        """
    )
    schema, labels = run(copy, "-c", script).stdout.splitlines()
    assert schema == "Int64 Int64 [3] [1]"  # an old run is filled with the axis's default
    assert labels == "3 tiles True 1 0"  # a panel axis, in a figure's CSV only where some row sets it


def test_the_pytest_plugin_has_the_option(copy, tmp_path):
    grid = ("--attn-variants", "naive", "--attn-seq-len", "16", "--attn-tiles", "1,5")
    test = str(copy / "benchmarks" / "test_attention.py")
    proc = run(
        copy, "-m", "pytest", test, "--collect-only", "-q", "-p", "no:cacheprovider", "--rootdir",
        str(tmp_path), *grid, cwd=tmp_path,
    )  # fmt: skip
    ids = [line for line in proc.stdout.splitlines() if "test_attention[" in line]
    assert len(ids) == 2 and ids[1].endswith("-t5]") and not ids[0].endswith("-t1]")


def test_a_profile_names_it_and_its_command_gives_the_cell_again(copy):
    """Plan directly (a real profile is `attnbench profile`'s own test): the directory name and the command
    that profiles the cell again say the new axis off its default, and the command's flags give the cell."""
    script = textwrap.dedent(
        """
        import json, shlex
        from attnbench.harness.tools.profile import single_cell
        from attnbench.harness.tools.profile_plan import Plan
        out = {}
        for tiles in ("3", None):
            cell = single_cell("naive", {"seq_len": "16", "tiles": tiles})
            plan = Plan(cell)
            words = shlex.split(plan.command())
            flags = words[words.index("--device"):words.index("--seconds")]
            given = {f[2:].replace("-", "_"): v for f, v in zip(flags[::2], flags[1::2])}
            again = single_cell(words[words.index("--variant") + 1], given)
            out[str(tiles)] = [plan.shape, plan.command(), again == cell, cell.tiles]
        print(json.dumps(out))
        """
    )
    got = json.loads(run(copy, "-c", script).stdout)
    shape, command, same, tiles = got["3"]
    assert tiles == 3 and same and shape == "cpu-float32-b1-h8-n16-dk64-full-t3-fwd"
    assert "--mod" not in command and " --causal no --tiles 3 --pass fwd " in command
    shape, command, same, tiles = got["None"]  # at its default it says nothing, as before the axis existed
    assert tiles == 1 and same and shape == "cpu-float32-b1-h8-n16-dk64-full-fwd" and "--tiles" not in command
