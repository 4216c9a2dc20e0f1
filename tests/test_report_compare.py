"""compare: a known shift in the raw samples is significant, no shift is not; the --fail-above gate and
the real `attnbench compare` command with its exit statuses."""

from __future__ import annotations

import random

import pytest
import synthetic
from conftest import run_cli

from attnbench.reports.compare import compare_runs, parse_threshold

SEQ = [256, 512, 1024, 2048]
VARIANTS = {"naive": 1.0, "sdpa": 0.4}


def _rows(factor: float = 1.0, seed: int = 0, device: str = "cpu", shuffle: bool = False, **status):
    rows = []
    for variant, base in VARIANTS.items():
        for n in SEQ:
            s = synthetic.samples(base * (n / 256) ** 2, n=30, spread=0.03, seed=seed + n)
            if shuffle:
                random.Random(n).shuffle(s)
            s = [x * factor for x in s]
            st = status.get(f"{variant}_{n}", "ok")
            rows.append(
                synthetic.cell(
                    variant,
                    n,
                    device=device,
                    sample_ms=s if st == "ok" else None,
                    status=st,
                    peak_mem_bytes=2**20,
                )
            )
    return rows


def _pair(tmp_path, rows_a, rows_b, **kw_b):
    a = synthetic.write_run(tmp_path / "a", rows_a, run_id="run-a")
    b = synthetic.write_run(tmp_path / "b", rows_b, run_id="run-b", **kw_b)
    return a, b


def test_known_shift_is_significant(tmp_path):
    a, b = _pair(tmp_path, _rows(), _rows(1.10, shuffle=True))
    cmp = compare_runs(a, b)
    assert len(cmp.cells) == 8
    assert cmp.cells["ratio"].to_numpy() == pytest.approx(1.10, rel=1e-6)
    assert cmp.cells["significant"].astype(bool).all() and (cmp.cells["p_value"] < 1e-6).all()
    assert cmp.per_variant["geomean_ratio"].to_numpy() == pytest.approx(1.10, rel=1e-6)
    assert (cmp.per_variant["slower"] == 4).all()
    assert cmp.cells["change"].iloc[0] == "1.10x slower"


def test_no_shift_is_not_significant(tmp_path):
    a, b = _pair(tmp_path, _rows(), _rows(shuffle=True))  # the same samples in another order
    cmp = compare_runs(a, b)
    assert not cmp.cells["significant"].astype(bool).any()
    assert cmp.cells["ratio"].to_numpy() == pytest.approx(1.0)
    # independent draws from one distribution: Mann-Whitney should (almost) never call them different
    a2, b2 = _pair(tmp_path / "2", _rows(seed=0), _rows(seed=1000))
    cmp2 = compare_runs(a2, b2)
    assert cmp2.cells["significant"].astype(bool).sum() <= 1
    assert "not significant" in " ".join(cmp2.cells["change"])


@pytest.mark.parametrize(
    "spec, stat, value, relative",
    [
        ("median:5%", "median", 0.05, True),
        ("min:0.5", "min", 0.5, False),
        ("mean:12.5%", "mean", 0.125, True),
    ],
)
def test_parse_threshold(spec, stat, value, relative):
    t = parse_threshold(spec)
    assert (t.stat, t.relative) == (stat, relative) and t.value == pytest.approx(value)


@pytest.mark.parametrize("spec", ["median:abc", "p99:5%", "5%", "", "median:", "median:-5%"])
def test_parse_threshold_rejects(spec):
    with pytest.raises(ValueError, match="--fail-above"):
        parse_threshold(spec)


def test_fail_above_gate(tmp_path):
    a, b = _pair(tmp_path, _rows(), _rows(1.10, shuffle=True))
    assert len(compare_runs(a, b, threshold=parse_threshold("median:5%")).regressions) == 8
    assert len(compare_runs(a, b, threshold=parse_threshold("median:20%")).regressions) == 0
    assert len(compare_runs(a, b, threshold=parse_threshold("max:1000")).regressions) == 0
    faster = compare_runs(b, a, threshold=parse_threshold("median:5%"))
    assert len(faster.regressions) == 0 and (faster.cells["change"].str.endswith("faster")).all()


def test_ok_to_wrong_is_a_regression(tmp_path):
    a, b = _pair(tmp_path, _rows(), _rows(shuffle=True, sdpa_1024="wrong", sdpa_2048="unsupported"))
    cmp = compare_runs(a, b, threshold=parse_threshold("median:5%"))
    reg = cmp.regressions
    assert list(zip(reg["variant"], reg["seq_len"], strict=True)) == [("sdpa", 1024)]
    assert "ok -> wrong" in reg["why"].iloc[0]
    assert int(cmp.per_variant.set_index("variant").loc["sdpa", "status_changed"]) == 2


def test_cpu_vs_gpu_matches_all_axes_but_device(tmp_path):
    a, b = _pair(
        tmp_path, _rows(), _rows(0.1, device="cuda"), gpu={"name": "Synthetic GPU", "memory_bytes": 2**34}
    )
    cmp = compare_runs(a, b)
    assert "except device (cpu in A, cuda in B)" in cmp.match
    assert len(cmp.cells) == 8 and set(cmp.cells["device_b"]) == {"cuda"}
    assert cmp.per_variant["geomean_ratio"].to_numpy() == pytest.approx(0.1, rel=1e-6)


def test_no_common_cells_is_an_error(tmp_path):
    a, b = _pair(tmp_path, _rows(), [synthetic.cell("naive", 99, time_ms=1.0)])
    with pytest.raises(ValueError, match="no cell in common"):
        compare_runs(a, b)


def test_cli_compare_exit_statuses(tmp_path):
    a, b = _pair(tmp_path, _rows(), _rows(1.10, shuffle=True))
    out = tmp_path / "out"
    proc = run_cli("compare", str(a), str(b), "--fail-above", "median:5%", "--out", str(out), timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "1.10x slower" in proc.stdout and "8 regressions" in proc.stdout
    assert (out / "compare.html").stat().st_size > 0 and (out / "compare.png").stat().st_size > 0
    ok = run_cli(
        "compare", str(a), str(b), "--fail-above", "median:20%", "--out", str(tmp_path / "o2"), timeout=120
    )
    assert ok.returncode == 0 and "no regression" in ok.stdout


@pytest.mark.parametrize("case", ["spec", "missing", "not_a_run", "alpha"])
def test_cli_compare_bad_input(tmp_path, case):
    a, b = _pair(tmp_path, _rows(), _rows())
    (tmp_path / "empty").mkdir()
    out = tmp_path / "out"
    args = {
        "spec": [str(a), str(b), "--fail-above", "median:abc"],
        "missing": [str(a), str(tmp_path / "nope")],
        "not_a_run": [str(tmp_path / "empty"), str(b)],
        "alpha": [str(a), str(b), "--alpha", "2"],
    }[case]
    proc = run_cli("compare", *args, "--out", str(out), timeout=120)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("attnbench: error:")
    assert proc.stdout == "" and not out.exists()
