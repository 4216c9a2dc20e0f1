"""compare: a known shift in the raw samples is significant, no shift is not; the --fail-above gate and
the real `attnbench compare` command with its exit statuses."""

from __future__ import annotations

import json
import math
import random

import pytest
import synthetic
from conftest import run_cli
from synthetic import rows_in_rounds

from attnbench.reports.compare import compare_runs, parse_threshold, text_report, verdict_rule

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


def _verdict_pair(tmp_path, samples_a, samples_b):
    """One naive cell at N=1024 in each run, with the given raw samples."""
    a = synthetic.write_run(tmp_path / "a", [synthetic.cell("naive", 1024, sample_ms=samples_a)], run_id="a")
    b = synthetic.write_run(tmp_path / "b", [synthetic.cell("naive", 1024, sample_ms=samples_b)], run_id="b")
    return a, b


@pytest.mark.parametrize(
    "factor_b, spread, n, expected",
    [
        (1.00, 0.01, 30, "same"),  # independent draws, one distribution: CI well inside ±2%
        (0.80, 0.02, 30, "faster"),
        (1.25, 0.02, 30, "slower"),
        (1.05, 0.30, 5, "ambiguous"),  # overlapping wide samples: CI spans 1 and leaves ±2%
    ],
)
def test_verdicts_on_seeded_samples(tmp_path, factor_b, spread, n, expected):
    sa = synthetic.samples(10.0, n=n, spread=spread, seed=1)
    sb = synthetic.samples(10.0 * factor_b, n=n, spread=spread, seed=2)
    cmp = compare_runs(*_verdict_pair(tmp_path, sa, sb))
    row = cmp.cells.iloc[0]
    assert row["verdict"] == expected
    assert row["ratio_ci_low"] <= row["ratio"] <= row["ratio_ci_high"]
    if expected in ("faster", "slower"):
        assert abs(row["cliffs_delta"]) == pytest.approx(1.0)  # the samples do not overlap at all
        assert (row["cliffs_delta"] > 0) == (expected == "slower")
    assert int(cmp.per_variant.iloc[0][expected]) == 1


def test_bootstrap_ci_is_reproducible(tmp_path):
    sa = synthetic.samples(10.0, n=20, spread=0.1, seed=3)
    sb = synthetic.samples(10.5, n=20, spread=0.1, seed=4)
    pair = _verdict_pair(tmp_path, sa, sb)
    first, second = compare_runs(*pair).cells.iloc[0], compare_runs(*pair).cells.iloc[0]
    assert (first["ratio_ci_low"], first["ratio_ci_high"]) == (
        second["ratio_ci_low"],
        second["ratio_ci_high"],
    )


def test_same_band_follows_the_threshold(tmp_path):
    # a significant 3% slowdown: beyond the default ±2% band it is 'slower'; inside --fail-above 5% 'same'
    sa = synthetic.samples(10.0, n=30, spread=0.005, seed=5)
    sb = synthetic.samples(10.3, n=30, spread=0.005, seed=6)
    pair = _verdict_pair(tmp_path, sa, sb)
    assert compare_runs(*pair).cells.iloc[0]["verdict"] == "slower"
    gated = compare_runs(*pair, threshold=parse_threshold("median:5%"))
    assert gated.cells.iloc[0]["verdict"] == "same" and len(gated.regressions) == 0


def test_gate_ignores_a_slowdown_it_cannot_tell(tmp_path):
    # +30% on the median, but 4 wide samples a side: the CI spans 1, so --fail-above does not fire
    sa = [10.0, 6.0, 14.0, 9.0]
    sb = [13.0, 7.0, 15.0, 12.0]
    cmp = compare_runs(*_verdict_pair(tmp_path, sa, sb), threshold=parse_threshold("median:5%"))
    row = cmp.cells.iloc[0]
    assert row["ratio"] > 1.05 and row["verdict"] == "ambiguous"
    assert len(cmp.regressions) == 0


def test_cliffs_delta_and_median_ci_analytic():
    from attnbench.results import stats

    assert stats.cliffs_delta([1, 2, 3], [4, 5, 6]) == 1.0
    assert stats.cliffs_delta([4, 5, 6], [1, 2, 3]) == -1.0
    assert stats.cliffs_delta([1, 2, 3, 4], [1, 2, 3, 4]) == 0.0
    # of the 9 pairs, b > a in 5 (2>1, 3>1, 6>1, 6>3, 6>5), b < a in 3, one tie: (5 - 3) / 9
    assert stats.cliffs_delta([1, 3, 5], [2, 3, 6]) == pytest.approx(2 / 9)
    assert math.isnan(stats.cliffs_delta([1, 2], [3, 4, 5]))
    # 9 values: the distribution-free 95% CI of the median is the 2nd and 8th order statistics
    assert stats.median_ci(list(range(1, 10))) == (2.0, 8.0)
    assert all(math.isnan(x) for x in stats.median_ci([1, 2, 3, 4, 5]))


# ---- calibration: the machine's speed apart from the code's --------------------------------------


def _machine_pair(tmp_path, variant: str, slower: float, a_tflops: float = 0.05, **b_machine):
    """The same cells on machine A (a_tflops, 10 GB/s) and on machine B (A's calibration, changed by
    b_machine), B's times `slower`x A's."""
    rows_a, rows_b = [], []
    for n in (256, 512, 1024):
        t = 2.0 * (n / 256) ** 2
        rows_a.append(synthetic.cell(variant, n, sample_ms=synthetic.samples(t, spread=0.005, seed=n)))
        rows_b.append(
            synthetic.cell(variant, n, sample_ms=synthetic.samples(t * slower, spread=0.005, seed=n + 1))
        )
    a = synthetic.write_run(tmp_path / "a", rows_a, run_id="a", peak_tflops=a_tflops, copy_gbps=10.0)
    b_cal = {"peak_tflops": a_tflops, "copy_gbps": 10.0, **b_machine}
    b = synthetic.write_run(tmp_path / "b", rows_b, run_id="b", **b_cal)
    return a, b


def test_a_slower_machine_is_not_a_slower_code_once_normalised(tmp_path):
    # chunked (linear memory) at 0.05 TFLOP/s and 10 GB/s is compute-bound: B's matmul ceiling is 0.8x A's
    a, b = _machine_pair(tmp_path, "chunked", 1.25, peak_tflops=0.04)
    gate = parse_threshold("median:5%")
    raw = compare_runs(a, b, threshold=gate)
    assert set(raw.cells["verdict"]) == {"slower"} and len(raw.regressions) == 3
    assert any("matmul float32 TFLOP/s" in w and "0.80x" in w for w in raw.calibration_warnings)
    norm = compare_runs(a, b, threshold=gate, normalize="calibration")
    assert set(norm.cells["bound"]) == {"compute"} and norm.cells["norm_factor"].tolist() == pytest.approx(
        [0.8] * 3
    )
    assert set(norm.cells["verdict"]) == {"same"} and len(norm.regressions) == 0
    assert norm.cells["ratio"].tolist() == pytest.approx([1.0] * 3, rel=0.03)


def test_memory_bound_cells_are_priced_by_copy_bandwidth(tmp_path):
    # naive materialises the scores: at 10 GB/s against 1 TFLOP/s its cells are memory-bound
    a, b = _machine_pair(tmp_path, "naive", 2.0, a_tflops=1.0, copy_gbps=5.0)
    norm = compare_runs(a, b, normalize="calibration")
    assert set(norm.cells["bound"]) == {"memory"} and set(norm.cells["verdict"]) == {"same"}
    code_slower = compare_runs(
        *_machine_pair(tmp_path / "2", "naive", 3.0, a_tflops=1.0, copy_gbps=5.0), normalize="calibration"
    )
    assert set(code_slower.cells["verdict"]) == {"slower"}  # 3x slower on a 2x slower machine: 1.5x the code


def test_same_calibration_gives_no_warning_and_normalize_is_refused_without_one(tmp_path):
    a, b = _machine_pair(tmp_path, "chunked", 1.0)
    assert compare_runs(a, b).calibration_warnings == []
    meta = json.loads((b / "meta.json").read_text())
    del meta["calibration"]
    (b / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="needs both runs' calibration"):
        compare_runs(a, b, normalize="calibration")


H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"


def _mixed_run(path, run_id, on_h100, on_a100, factor=1.0):
    """A run whose seq_lens `on_h100` ran on node1's H100 and `on_a100` on node2's A100 (3x slower)."""
    h100 = synthetic.device("node1", gpu_name=H100, gpu_uuid="GPU-aaa", tflops=600.0)
    a100 = synthetic.device("node2", gpu_name=A100, gpu_uuid="GPU-bbb", tflops=250.0)

    def rows(ns, scale):
        return [
            synthetic.cell(
                v, n, sample_ms=synthetic.samples(base * scale * factor * n / 256, spread=0.01, seed=n)
            )
            for v, base in VARIANTS.items()
            for n in ns
        ]

    cells = synthetic.on(h100, rows(on_h100, 1.0)) + synthetic.on(a100, rows(on_a100, 3.0))
    return synthetic.write_run(path, cells, run_id=run_id, devices=[h100, a100])


def test_compare_pairs_device_groups_of_one_model_and_says_so(tmp_path):
    # N = 2048 ran on A's A100 but B's H100, N = 4096 the other way round: those cells are not paired
    a = _mixed_run(tmp_path / "a", "run-a", [256, 1024, 4096], [512, 2048, 8192])
    b = _mixed_run(tmp_path / "b", "run-b", [256, 1024, 2048], [512, 4096, 8192], factor=1.1)
    cmp = compare_runs(a, b)
    assert sorted(cmp.cells["seq_len"].unique().tolist()) == [256, 512, 1024, 8192]
    assert cmp.cells["ratio"].to_numpy() == pytest.approx(1.10, rel=0.01)  # never 3x or 1/3x
    assert (cmp.cells["where_a"] == cmp.cells["where_b"]).all()
    assert "within one device model" in cmp.match
    h100, a100 = f"{H100} (1 device: node1:cuda:GPU-aaa)", f"{A100} (1 device: node2:cuda:GPU-bbb)"
    assert sorted(cmp.pairing) == [
        f"paired A cuda {a100} with B cuda {a100}: 4 cells",
        f"paired A cuda {h100} with B cuda {h100}: 4 cells",
    ]
    text = text_report(cmp)
    assert all(line in text for line in cmp.pairing)
    ceilings = {(c.device, c.what): (c.a, c.b) for c in cmp.ceilings}
    assert ceilings[(f"cuda {A100}", "matmul float32 TFLOP/s")] == (250.0, 250.0)  # each group's own


def test_a_device_group_without_counterpart_is_named_unpaired(tmp_path):
    a = _mixed_run(tmp_path / "a", "run-a", [256, 1024, 4096], [512, 2048, 8192])
    h100 = synthetic.device("node1", gpu_name=H100, gpu_uuid="GPU-aaa", tflops=600.0)
    only = [
        synthetic.cell(v, n, sample_ms=synthetic.samples(base * n / 256, seed=n))
        for v, base in VARIANTS.items()
        for n in (256, 512)
    ]
    b = synthetic.write_run(tmp_path / "b", synthetic.on(h100, only), run_id="run-b", devices=[h100])
    cmp = compare_runs(a, b)  # B's N = 512 ran on an H100, A's on an A100: not paired
    assert cmp.cells["seq_len"].tolist() == [256, 256] and len(cmp.pairing) == 2
    assert (
        cmp.pairing[1] == f"unpaired: A cuda {A100} (1 device: node2:cuda:GPU-bbb) has no cell the other run "
        "measured on its model"
    )


def test_a_single_device_compare_names_no_pairing(tmp_path):
    a, b = _pair(tmp_path, _rows(), _rows(1.10))
    assert compare_runs(a, b).pairing == []


def test_cells_timed_in_different_modes_are_warned_about(tmp_path):
    """events in A against graph in B: the ratio is partly the mode's, and compare says so once per pair."""
    gpu = {"gpu": {"name": "Synthetic GPU", "memory_bytes": 2**34}}  # two variants: naive and sdpa
    rows_a = [dict(r, timing_mode="events") for r in _rows(device="cuda")]
    rows_b = [dict(r, timing_mode="graph" if r["seq_len"] == SEQ[0] else "events")
              for r in _rows(device="cuda")]  # fmt: skip
    a = synthetic.write_run(tmp_path / "a", rows_a, run_id="run-a", **gpu)
    b = synthetic.write_run(tmp_path / "b", rows_b, run_id="run-b", **gpu)
    cmp = compare_runs(a, b)
    assert cmp.timing_warnings == [
        "2 paired cells timed by events in A and by graph in B: their ratios are partly the timing mode's (a "
        "CUDA graph leaves out launch gaps); run both with the same --timing"
    ]
    assert "WARNING 2 paired cells timed by events in A" in text_report(cmp)
    same = compare_runs(a, synthetic.write_run(tmp_path / "c", rows_a, run_id="run-c", **gpu))
    assert same.timing_warnings == []
    assert compare_runs(*_pair(tmp_path / "old", _rows(), _rows())).timing_warnings == []  # no column


def _process_rows(factor: float, spread: float, seed: int, k: int = 3):
    """Rows measured in k processes: each process's samples tight (±1%) around its own median, the medians
    spread by ±spread around base·factor (the run-to-run variance the samples of one process cannot see)."""
    rng = random.Random(seed)
    rows = []
    for variant, base in VARIANTS.items():
        for n in SEQ:
            medians = [base * (n / 256) ** 2 * factor * (1 + rng.uniform(-spread, spread)) for _ in range(k)]
            pooled = [
                s for i, m in enumerate(medians) for s in synthetic.samples(m, n=20, spread=0.01, seed=i)
            ]
            rows.append(synthetic.cell(variant, n, sample_ms=pooled, process_medians_ms=medians))
    return rows


def _without_process_medians(rows):
    return [{k: v for k, v in r.items() if k != "process_medians_ms"} for r in rows]


def test_process_medians_with_a_wide_spread_do_not_cry_wolf(tmp_path):
    """10 pairs of runs of one distribution whose processes differ by ±10%: judged by the process medians,
    at most one pair fails (each cell's test has its α: about 1 of 80 cells expected), where the pooled
    samples of the same rows fail nearly every pair."""
    gate = parse_threshold("median:5%")
    failing, failing_by_samples = 0, 0
    for seed in range(10):
        rows_a, rows_b = _process_rows(1.0, 0.10, seed), _process_rows(1.0, 0.10, 100 + seed)
        cmp = compare_runs(*_pair(tmp_path / str(seed), rows_a, rows_b), threshold=gate)
        assert set(cmp.cells["basis"]) == {"processes"} and (cmp.cells["k_a"] == 3).all()
        assert "WARNING" not in text_report(cmp)
        failing += bool(len(cmp.regressions))
        pooled = _pair(
            tmp_path / f"s{seed}", _without_process_medians(rows_a), _without_process_medians(rows_b)
        )
        failing_by_samples += bool(len(compare_runs(*pooled, threshold=gate).regressions))
    assert failing <= 1 and failing_by_samples >= 8, (failing, failing_by_samples)


def test_process_medians_catch_a_real_slowdown(tmp_path):
    a, b = _pair(tmp_path, _process_rows(1.0, 0.01, 0), _process_rows(1.30, 0.01, 1))
    cmp = compare_runs(a, b, threshold=parse_threshold("median:5%"))
    assert len(cmp.regressions) == len(cmp.cells) == 8
    assert (cmp.cells["ratio_ci_low"] > 1.2).all() and (cmp.cells["p_value"] < 0.01).all()
    assert "Welch t-interval of the difference of the mean log process medians" in verdict_rule(cmp)


def test_fewer_than_three_process_medians_fall_back_to_samples_with_one_warning(tmp_path):
    a, b = _pair(tmp_path, _rows(), _rows(shuffle=True))  # runs before --processes: no process medians
    cmp = compare_runs(a, b, threshold=parse_threshold("median:5%"))
    assert set(cmp.cells["basis"]) == {"samples"}
    warnings = [line for line in text_report(cmp).splitlines() if line.startswith("WARNING")]
    assert warnings == [
        "WARNING 8 paired cells measured in one process per cell (--processes): their verdicts see only the "
        "samples within each run, not the run-to-run variance, and may cry wolf; measure both runs with "
        "--processes 3 or --rounds 3"
    ]
    two = _pair(tmp_path / "two", _process_rows(1.0, 0.01, 0, k=2), _process_rows(1.0, 0.01, 1, k=2))
    cmp2 = compare_runs(*two)
    assert set(cmp2.cells["basis"]) == {"samples"}
    assert "fewer than 3 processes per cell" in " ".join(cmp2.warnings)


def test_round_medians_are_judged_as_process_medians_are(tmp_path):
    """Both runs in 3 rounds (--rounds): each visit's median spans the run, so the CI and test come from the
    visit medians (basis 'rounds'), as from process medians: a ±10% drift between visits does not cry wolf
    where the pooled samples would, and a 30% slowdown is still caught."""

    def in_rounds(rows):
        return [
            {
                **{k: v for k, v in r.items() if k != "process_medians_ms"},
                "round_medians_ms": r["process_medians_ms"],
            }
            for r in rows
        ]

    gate = parse_threshold("median:5%")
    failing = 0
    for seed in range(5):
        rows_a, rows_b = _process_rows(1.0, 0.10, seed), _process_rows(1.0, 0.10, 100 + seed)
        cmp = compare_runs(*_pair(tmp_path / str(seed), in_rounds(rows_a), in_rounds(rows_b)), threshold=gate)
        assert set(cmp.cells["basis"]) == {"rounds"} and "WARNING" not in text_report(cmp)
        failing += bool(len(cmp.regressions))
    assert failing <= 1
    slow = _pair(
        tmp_path / "slow", in_rounds(_process_rows(1.0, 0.01, 0)), in_rounds(_process_rows(1.3, 0.01, 1))
    )
    assert len(compare_runs(*slow, threshold=gate).regressions) == 8


def test_a_control_variant_takes_out_a_machine_that_ran_slower_through_a_whole_run(tmp_path):
    """Identical code, run B on a machine 15% slower throughout: as measured every cell is a regression;
    relative to naive (--control), none is, and naive itself, compared as measured, never fails the gate.
    A real 10% slowdown of sdpa on top of it is still caught, cell by cell."""
    gate = parse_threshold("median:5%")
    a, b = _pair(tmp_path, rows_in_rounds(VARIANTS, 1), rows_in_rounds(VARIANTS, 2, speed=1.15))
    assert len(compare_runs(a, b, threshold=gate).regressions) >= 6
    cmp = compare_runs(a, b, threshold=gate, control_variant="naive")
    assert cmp.regressions.empty
    sdpa = cmp.cells[cmp.cells["variant"] == "sdpa"]
    assert sdpa["ratio"].to_numpy() == pytest.approx(1.0, abs=0.02)
    assert sdpa["control_ratio"].to_numpy() == pytest.approx(1.15, abs=0.1)
    naive = cmp.cells[cmp.cells["variant"] == "naive"]
    assert (
        naive["control_ratio"].isna().all()
        and (naive["why"] == "the control (its change is the machine's)").all()
    )
    report = text_report(cmp)
    assert "Relative to the control variant naive" in report and "geometric mean" in report

    slower_sdpa = {"naive": 1.0, "sdpa": 0.4 * 1.10}
    planted = _pair(
        tmp_path / "planted", rows_in_rounds(VARIANTS, 1), rows_in_rounds(slower_sdpa, 2, speed=1.15)
    )
    caught = compare_runs(*planted, threshold=gate, control_variant="naive")
    assert sorted(caught.regressions["variant"]) == ["sdpa"] * 4
    assert (caught.regressions["ratio"] > 1.07).all()
    # the ratio, its interval and the gate come from the same visits, each over its round's control visit
    judged = caught.regressions
    assert ((judged["ratio_ci_low"] <= judged["ratio"]) & (judged["ratio"] <= judged["ratio_ci_high"])).all()


def test_a_control_without_a_cell_of_a_shape_leaves_that_cell_as_measured(tmp_path):
    rows_a, rows_b = _rows(), _rows(1.10, shuffle=True, naive_2048="oom")
    cmp = compare_runs(*_pair(tmp_path, rows_a, rows_b), control_variant="naive")
    at = cmp.cells.set_index(["variant", "seq_len"])
    assert at.loc[("sdpa", 1024), "ratio"] == pytest.approx(1.0, rel=1e-6)
    assert at.loc[("sdpa", 2048), "ratio"] == pytest.approx(1.10, rel=1e-6)
    assert "no ok naive cell of this shape in both runs" in at.loc[("sdpa", 2048), "why"]


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"control_variant": "flex"}, "--control 'flex' is not a variant of run A (it has: naive, sdpa)"),
        ({"control_variant": "naive", "normalize": "calibration"}, "--control and --normalize"),
    ],
)
def test_a_control_that_is_not_in_both_runs_is_refused(tmp_path, kw, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        compare_runs(*_pair(tmp_path, _rows(), _rows()), **kw)


def test_cli_compare_control(tmp_path):
    a, b = _pair(tmp_path, _rows(), _rows(1.3, shuffle=True))
    as_measured = run_cli(
        "compare", str(a), str(b), "--fail-above", "median:5%", "--out", str(tmp_path / "o1")
    )
    assert as_measured.returncode == 1
    relative = run_cli(
        "compare",
        str(a),
        str(b),
        "--fail-above",
        "median:5%",
        "--control",
        "naive",
        "--out",
        str(tmp_path / "o2"),
    )
    assert relative.returncode == 0, relative.stdout + relative.stderr
    bad = run_cli("compare", str(a), str(b), "--control", "nope", "--out", str(tmp_path / "o3"))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--control 'nope'" in bad.stderr
    assert not (tmp_path / "o3").exists()


AB = {"chunked": 1.0, "chunked_twin": 1.0, "chunked_planted": 1.10}  # a run's A/B: a twin and a plant


def test_an_ab_in_one_run_pairs_each_rounds_visits(tmp_path):
    """compare RUN RUN --variant-a chunked --variant-b X: each round's visit of X against the same round's
    of chunked (a paired t on their log ratios), so a ±20% swing of the machine between rounds neither
    hides a 10% slowdown nor cries wolf on a twin of the same code; unpaired, the same visits tell nothing."""
    gate = parse_threshold("median:5%")
    for seed in range(5):
        run = synthetic.write_run(
            tmp_path / str(seed),
            rows_in_rounds(AB, seed, rounds=6, swing=0.2),
            run_id=f"ab-{seed}",
        )
        twin = compare_runs(run, run, threshold=gate, variant_a="chunked", variant_b="chunked_twin")
        assert twin.regressions.empty and set(twin.cells["basis"]) == {"paired rounds"}
        assert (
            set(twin.cells["variant"]) == {"chunked_twin"}
            and "chunked_twin in B against chunked in A" in twin.match
        )
        planted = compare_runs(run, run, threshold=gate, variant_a="chunked", variant_b="chunked_planted")
        assert len(planted.regressions) == len(SEQ), planted.cells[["seq_len", "ratio", "ratio_ci_low"]]
        assert planted.cells["ratio"].to_numpy() == pytest.approx(1.10, abs=0.02)
        assert "paired t-interval" in verdict_rule(planted)
    # two runs' rounds met different moments: not paired, Welch on the visits (basis 'rounds')
    other = synthetic.write_run(
        tmp_path / "other", rows_in_rounds({"chunked_planted": 1.10}, 99, rounds=6, swing=0.2)
    )
    across = compare_runs(run, other, threshold=gate, variant_a="chunked", variant_b="chunked_planted")
    assert set(across.cells["basis"]) == {"rounds"} and "paired t-interval" not in verdict_rule(across)


def _visited_again(rows, variant: str, factors: list[float]) -> list[dict]:
    """The rows with `variant`'s cells visited len(factors) more times (settle rounds, harness.run.settle),
    each such visit at its cell's first visit median times its factor."""
    out = []
    for row in rows:
        if row["variant"] == variant:
            first = row["round_medians_ms"][0]
            extra = [synthetic.samples(first * f, n=4, spread=0.01, seed=i) for i, f in enumerate(factors)]
            row = {
                **row,
                "samples_ms": row["samples_ms"] + [s for v in extra for s in v],
                "round_medians_ms": row["round_medians_ms"] + [first * f for f in factors],
                "round_samples": row["round_samples"] + [len(v) for v in extra],
            }
        out.append(row)
    return out


def test_visits_of_settle_rounds_are_paired_only_with_visits_of_the_same_rounds(tmp_path):
    """A settle round visits again only some variants: an A/B in one run pairs the rounds both were visited
    in, and --control scales each visit by the control's visit of the same round, both over the visits the
    two cells share; two visits of the plant's alone, met at a machine twice as fast, change neither."""
    gate = parse_threshold("median:5%")
    rows = rows_in_rounds(AB, 3, rounds=6, swing=0.2)
    run = synthetic.write_run(tmp_path / "ab", _visited_again(rows, "chunked_planted", [0.5, 0.5]))
    planted = compare_runs(run, run, threshold=gate, variant_a="chunked", variant_b="chunked_planted")
    assert set(planted.cells["basis"]) == {"paired rounds"} and len(planted.regressions) == len(SEQ)
    assert planted.cells["ratio"].to_numpy() == pytest.approx(1.10, abs=0.02)
    a, b = _pair(
        tmp_path,
        _visited_again(rows_in_rounds(VARIANTS, 1), "naive", [0.5]),
        rows_in_rounds(VARIANTS, 2, speed=1.15),
    )
    cmp = compare_runs(a, b, threshold=gate, control_variant="naive")
    assert cmp.regressions.empty
    sdpa = cmp.cells[cmp.cells["variant"] == "sdpa"]
    assert sdpa["ratio"].to_numpy() == pytest.approx(1.0, abs=0.015)  # by the whole-run factor: 1.02


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"variant_a": "naive"}, "--variant-a and --variant-b go together"),
        ({"variant_a": "naive", "variant_b": "naive"}, "are both 'naive' in one run"),
        ({"variant_a": "naive", "variant_b": "flex"}, "--variant-b 'flex' is not a variant of run B"),
        ({"variant_a": "naive", "variant_b": "sdpa", "control_variant": "naive"}, "--control does not apply"),
    ],
)
def test_an_ab_that_cannot_be_made_is_refused(tmp_path, kw, message):
    run = synthetic.write_run(tmp_path / "run", _rows())
    with pytest.raises(ValueError, match=message):
        compare_runs(run, run, **kw)


def test_cli_compare_ab_in_one_run(tmp_path):
    rows = rows_in_rounds(AB, 7, rounds=6, swing=0.2)
    run = str(synthetic.write_run(tmp_path / "run", rows))
    args = ("compare", run, run, "--fail-above", "median:5%", "--variant-a", "chunked")
    assert run_cli(*args, "--variant-b", "chunked_twin", "--out", str(tmp_path / "o1")).returncode == 0
    assert run_cli(*args, "--variant-b", "chunked_planted", "--out", str(tmp_path / "o2")).returncode == 1
    bad = run_cli("compare", run, run, "--variant-a", "chunked", "--out", str(tmp_path / "o3"))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and not (tmp_path / "o3").exists()


def test_the_gate_holds_its_alpha_over_the_whole_comparison_holm():
    """A gate fails the build when any cell fails: each cell's p is Holm-adjusted over every judged cell,
    and a slowdown fails only where that is below alpha too; a status change fails whatever p says."""
    import pandas as pd

    from attnbench.reports.compare import _family_wise

    cells = pd.DataFrame(
        {
            "p_value": [0.019, 1e-6, 0.5, 0.3, math.nan, 0.8],
            "regression": [True, True, False, False, True, False],
            "why": ["median 2.6 -> 2.86 ms", "median 10 -> 11 ms", "", "", "status ok -> wrong", ""],
        }
    )
    out = _family_wise(cells, 0.05)
    # five judged cells: 1e-6 x 5, then 0.019 x 4 = 0.076, monotone, at most 1
    assert out["p_holm"].tolist()[:4] == pytest.approx([0.076, 5e-6, 1.0, 0.9])
    assert out["regression"].tolist() == [False, True, False, False, True, False]
    assert out.loc[0, "why"] == "not over the family: p 0.019, Holm-adjusted 0.076 over 5 cells"

    # relative to a control, the control's own cells never fail the gate: they are not in the family, so
    # they do not dilute it (here the control's two judged cells leave three: 0.019 x 2 = 0.038 < 0.05)
    cells["variant"] = ["sdpa", "sdpa", "naive", "naive", "sdpa", "sdpa"]
    out = _family_wise(cells, 0.05, control="naive")
    assert out["p_holm"].tolist()[:2] == pytest.approx([0.038, 3e-6]) and out["p_holm"][2:4].isna().all()
    assert out["regression"].tolist() == [True, True, False, False, True, False]


def test_a_compare_records_holm_adjusted_p_values(tmp_path):
    cmp = compare_runs(
        *_pair(tmp_path, _rows(), _rows(1.10, shuffle=True)), threshold=parse_threshold("median:5%")
    )
    assert (cmp.cells["p_holm"] >= cmp.cells["p_value"]).all() and len(cmp.regressions) == 8
    assert "Holm" in verdict_rule(cmp)
