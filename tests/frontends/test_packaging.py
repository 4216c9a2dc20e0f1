"""One import name: every command works beside a user's own harness/, variants/, results/, reports/ packages,
and plug-ins written against the old top-level names are told how to write them today."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TEST_CALIBRATE_MS, cli_env, run_cli
from test_pytest_benchmark import _benchmark, _file

from attnbench import variants

DECOYS = ("harness", "variants", "results", "reports")
SMALL = ("--seq-len", "32", "--heads", "2", "--warmup-ms", "1", "--budget-ms", "5")


def _decoy_dir(tmp_path: Path) -> Path:
    """A user's project whose own packages carry attnbench's folder names, and fail loudly if imported."""
    home = tmp_path / "project"
    for name in DECOYS:
        (home / name).mkdir(parents=True)
        text = f'raise ImportError("the user\'s own {name} was imported")\n'
        (home / name / "__init__.py").write_text(text)
    return home


def _console_script() -> str:
    found = shutil.which("attnbench") or str(Path(sys.executable).parent / "attnbench")
    assert Path(found).is_file(), "the attnbench console script is not installed beside this interpreter"
    return found


@pytest.mark.slow
@pytest.mark.parametrize("entry", ["module", "console script"])
def test_every_command_runs_beside_decoy_packages(tmp_path, entry):
    home = _decoy_dir(tmp_path)
    prefix = [sys.executable, "-m", "attnbench"] if entry == "module" else [_console_script()]

    def cli(*args: str) -> subprocess.CompletedProcess:
        proc = subprocess.run([*prefix, *args], cwd=home, env=cli_env(), capture_output=True, text=True,
                              timeout=300)  # fmt: skip
        assert proc.returncode == 0, f"attnbench {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
        assert "the user's own" not in proc.stderr
        return proc

    assert "quick" in cli("list", "--presets").stdout
    if entry == "module":
        # `python -m attnbench` differs from the console script in how the parent starts, and it puts the
        # working folder, with its decoys, first on sys.path: the commands that import the variants and
        # start workers without writing files run here; the others run once, through the console script.
        # This is the one real process of each command (the other tests run the CLI in their own process,
        # see conftest.run_cli), but for `collect`, whose real process is in tests/harness/test_slurm.py
        assert "chunked" in cli("list").stdout
        cli("check", "--variants", "naive", "--seq-len", "16", "--dtype", "float32")
        return
    cli("run", "--variants", "naive,chunked", *SMALL, "--calibrate-ms", TEST_CALIBRATE_MS, "--out", "run")
    assert "naive" in cli("export", "run").stdout
    bench = cli("bench", "sdpa_math", "--seq-len", "32", "--dtype", "float32", "--budget-ms", "5",
                "--min-ms", "1", "--calibrate-ms", TEST_CALIBRATE_MS, "-q", "--out", "bench")  # fmt: skip
    assert bench.stdout.startswith("sdpa_math against sdpa: ")
    cell = "naive|cpu|float32|b1|h2|n32|dk64|dv64|full|pad0|fwd"
    assert cli("repro", "run", cell).stdout.startswith("attnbench run --variants naive ")
    assert "hostname" in cli("env").stdout
    cli("report", "run", "--out", "report")
    cli("compare", "run", "run", "--variant-a", "naive", "--variant-b", "chunked", "--out", "compare")
    cli("profile", "--variant", "naive", "--seq-len", "32", "--no-py-spy", "--iters", "1", "--out", "prof")
    cli("import-benchmark", _file(tmp_path, [_benchmark()]), "--out", "imported")
    assert (home / "report" / "report.html").is_file() and (home / "prof" / "index.html").is_file()
    assert "| calibrated cpu | none (--calibrate-ms 0) |" in (home / "report" / "README.md").read_text()
    assert json.loads((home / "imported" / "meta.json").read_text())["run_id"]


def test_old_plugin_imports_get_the_new_spelling(tmp_path):
    old = tmp_path / "old_plugin.py"
    old.write_text("import variants\n\n@variants.register('old')\ndef f(q, k, v, **kw):\n    return q\n")
    with pytest.raises(variants.VariantError, match="from attnbench import register"):
        variants.load_variant_file(old)
    assert "old" not in variants.all_variants()


def test_the_repository_folders_refuse_their_folder_names(tmp_path):
    """From the repository root `import results` would find results/: it says what to write instead."""
    root = Path(__file__).resolve().parents[2]
    for name in DECOYS:
        proc = subprocess.run([sys.executable, "-c", f"import {name}"], cwd=root, capture_output=True,
                              text=True, timeout=60)  # fmt: skip
        assert proc.returncode == 1 and f"attnbench.{name}" in proc.stderr


def test_old_plugin_file_at_the_command_line_is_one_line(tmp_path):
    old = tmp_path / "old_plugin.py"
    old.write_text("from variants import register\n")
    p = run_cli("list", "--variant-file", str(old), cwd=tmp_path)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "from attnbench import register" in p.stderr and len(p.stderr.strip().splitlines()) == 1
