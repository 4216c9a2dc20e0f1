"""Scaling fits: known exponents come back from synthetic rows; the asymptotic rule, CI and edge cases."""

from __future__ import annotations

import math
import random
import subprocess
import sys
from pathlib import Path

import pytest
import synthetic

from attnbench import results
from attnbench.reports import fit

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "runs" / "cpu-small"
SEQ = [256, 512, 1024, 2048, 4096, 8192, 16384]


def test_exact_power_laws_are_recovered():
    for exp in (1.0, 1.5, 2.0, 3.0):
        f = fit.fit_power_law(SEQ, [3e-4 * n**exp for n in SEQ])
        assert f.exponent == pytest.approx(exp, abs=1e-9)
        assert f.r2 == pytest.approx(1.0)
        assert f.ci_low == pytest.approx(exp, abs=1e-6) and f.ci_high == pytest.approx(exp, abs=1e-6)
        assert f.predict(1000) == pytest.approx(3e-4 * 1000**exp, rel=1e-6)


def test_the_line_and_the_quantiles_are_scipys():
    """fit_power_law's ordinary line, the normal's and Student's t quantiles (computed here: importing
    scipy.stats cost a report 0.6 s) are scipy's, noisy, flat-ish and exact lines alike."""
    import numpy as np
    from scipy import stats

    rng = random.Random(3)
    for k in (3, 4, 7):
        x = np.log(np.array(SEQ[:k], dtype=float))
        for noise in (0.0, 0.01, 0.5):
            ly = np.array([1.7 * v + rng.gauss(0, noise) for v in x])
            got, want = fit._line(x, ly), stats.linregress(x, ly)
            assert got == pytest.approx((want.slope, want.intercept, want.rvalue, want.stderr), rel=1e-12)
    assert fit._z() == pytest.approx(float(stats.norm.ppf(0.975)), rel=1e-14)
    for dof in (1, 2, 3, 5, 10, 30, 100):
        assert fit._quantile(2.0, dof) == pytest.approx(float(stats.t.ppf(0.975, dof)), rel=1e-12)


def test_a_one_visit_fit_imports_no_scipy():
    """The fits a run of one visit a cell with three N asks for (time, memory, no rounds) import no scipy:
    only a fit through visits (Theil-Sen) or a memory model over four N or more does."""
    code = (
        "import sys; from attnbench.reports import fit; n = [256, 512, 1024]\n"
        "fit.fit_power_law(n, [v**2 for v in n]); fit.fit_power_law(n, [v**2 for v in n], log_se=[.1] * 3)\n"
        "fit.fit_memory(n, [v * 4.0 for v in n]); fit.fit_visits(n, [[1.0], [2.0], [4.0]])\n"
        "print([m for m in ('scipy.stats', 'scipy.optimize') if m in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr[-2000:]


def test_noisy_exponent_within_ci():
    rng = random.Random(1)
    y = [2e-5 * n**2 * math.exp(rng.gauss(0, 0.05)) for n in SEQ]
    f = fit.fit_power_law(SEQ, y)
    assert f.exponent == pytest.approx(2.0, abs=0.15)
    assert f.ci_low < 2.0 < f.ci_high
    assert f.seq_lens == (4096, 8192, 16384)  # the top two octaves


def test_asymptotic_rule_ignores_small_n_overhead():
    # a fixed 1 ms launch cost dominates small N: a fit over all points understates the N² growth
    y = [1.0 + 1e-6 * n**2 for n in SEQ]
    assert fit.fit_power_law(SEQ, y, asymptotic=False).exponent < 1.5
    assert fit.fit_power_law(SEQ, y).exponent > 1.85


@pytest.mark.parametrize("n, kept", [(7, 3), (6, 3), (5, 3), (4, 3), (3, 3), (2, 2), (1, 1)])
def test_asymptotic_points(n, kept):
    pts = fit.asymptotic_points(SEQ[:n])
    assert pts == SEQ[:n][n - kept :]


def test_asymptotic_points_are_a_range_of_n_not_a_count():
    # lengths added inside the top two octaves add points to the fit instead of shrinking its range
    grid = [256, 512, 1024, 1536, 2048, 3072]
    assert fit.asymptotic_points(grid) == [1024, 1536, 2048, 3072]


def test_a_run_says_from_which_length_its_times_are_asymptotic():
    # time_fit_from: the points from there up (at least three), in place of the top two octaves
    grid = [256, 512, 1024, 1536, 2048, 2560]
    assert fit.asymptotic_points(grid) == [1024, 1536, 2048, 2560]
    assert fit.asymptotic_points(grid, fit_from=512) == [512, 1024, 1536, 2048, 2560]
    assert fit.asymptotic_points(grid, fit_from=2048) == [1536, 2048, 2560]  # three at least
    assert fit.time_fit_from({"sweep": {"settings": {"time_fit_from": 512}}}) == 512
    for meta in ({}, {"sweep": []}, {"sweep": {"settings": {"time_fit_from": "512"}}}, {"sweep": {}}):
        assert fit.time_fit_from(meta) == 0  # older runs, and meta.json written by hand, fit as before


def test_the_scaling_table_fits_time_from_the_runs_setting_and_memory_over_the_top_octaves(tmp_path):
    rows = synthetic.power_law_rows({"naive": (2.0, 2.0)}, SEQ[:6], noise=0.0, seed=3)
    run = synthetic.write_run(tmp_path / "run", rows)
    df, metas = results.load(run), results.load_meta(run)
    assert fit.scaling_table(df, metas).set_index("variant").loc["naive", "fit_seq_lens"] == "2048 4096 8192"
    for meta in metas.values():
        meta["sweep"].setdefault("settings", {})["time_fit_from"] = 512
    table = fit.scaling_table(df, metas).set_index("variant")
    assert table.loc["naive", "fit_seq_lens"] == "512 1024 2048 4096 8192"
    assert table.loc["naive", "time_exp"] == pytest.approx(2.0, abs=0.01)


def test_weighted_fit_ci_follows_the_samples_spread_and_widens_for_scatter_they_do_not_explain():
    grid = [1024, 1536, 2048, 3072]
    exact = [1e-5 * n**2 for n in grid]
    tight = fit.fit_power_law(grid, exact, log_se=[0.02] * 4)
    assert tight.exponent == pytest.approx(2.0) and tight.scale == 1.0
    # 2% per point over 1.1 in log N: about ±0.05, where OLS on 4 exact points would claim ±0
    assert 0.02 < (tight.ci_high - tight.ci_low) / 2 < 0.1
    bent = [y * f for y, f in zip(exact, (1.0, 1.15, 0.9, 1.1), strict=True)]
    wide = fit.fit_power_law(grid, bent, log_se=[0.02] * 4)
    assert wide.scale > 2  # the points scatter far more than 2% each: the CI is scaled by the Birge ratio
    assert (wide.ci_high - wide.ci_low) > 2 * (tight.ci_high - tight.ci_low)
    assert wide.ci_low < 2.0 < wide.ci_high


def test_a_cell_the_speed_probe_saw_drift_weighs_less():
    assert fit.cell_log_se(0.001, 100, 1.0) == fit.SE_FLOOR
    assert fit.cell_log_se(0.001, 100, 0.5) == pytest.approx(math.hypot(fit.SE_FLOOR, math.log(0.5)))
    assert fit.cell_log_se(0.001, 100, None) == fit.cell_log_se(0.001, 100, float("nan")) == fit.SE_FLOOR
    # the probe after the cell (the next cell's) counts as much as the one before it: the worse of the two
    assert fit.cell_log_se(0.001, 100, 1.0, 0.25) == pytest.approx(math.hypot(fit.SE_FLOOR, math.log(4)))
    # a run whose later, larger N ran on a slowed machine: the cells the probe saw slowed pull the fit less,
    # and the exponent stays N²'s; blind to it, the fit bends upward and only its Birge-scaled CI says so
    grid = [1024, 1536, 2048, 3072]
    slowed = [1e-5 * n**2 * f for n, f in zip(grid, (1.0, 1.0, 2.0, 3.0), strict=True)]
    blind = fit.fit_power_law(grid, slowed, log_se=[0.02] * 4)
    seen = fit.fit_power_law(grid, slowed, log_se=[fit.cell_log_se(0.01, 6, 1 / f) for f in (1, 1, 2, 3)])
    assert blind.exponent > 2.5 and blind.scale > 2 and blind.ci_low < 2.0
    # the two slowed cells weigh under 1% of the others: the fit rests on N 1024 and 1536, and gives no CI
    assert seen.exponent == pytest.approx(2.0, abs=0.05) and seen.ci_low is None
    assert seen.weightless == (2048, 3072)


def test_a_fit_that_rests_on_two_of_its_n_gives_no_ci():
    """The trial's windowed sdpa on a busy machine: 0.82, 38.7 and 79.7 ms at N 256, 512 and 1,024, the
    probe right after the N 512 cell seeing the machine at 5% of its speed (its error 3.0 in log units,
    the others' 0.15). The weighted line went through N 256 and 1,024 alone, N^3.30, and claimed [3.01,
    3.60], 'faster than quadratic', for a kernel whose work grows as N·W: two points cannot check their own
    errors by their scatter. A point 3x less certain than the others still weighs in."""
    from attnbench.reports.growth import says_nothing

    se = [fit.cell_log_se(0.337, 13, 1.127, 1.060), fit.cell_log_se(0.652, 5, 1.091, 0.049)]
    se.append(fit.cell_log_se(0.251, 5, 1.002, 1.111))
    two = fit.fit_power_law([256, 512, 1024], [0.818, 38.7, 79.7], log_se=se)
    assert two.exponent == pytest.approx(3.30, abs=0.01) and two.ci_low is None and two.ci_high is None
    assert two.weightless == (512,) and two.text() == "3.30 (no CI: N 512 weighs under 1%)"
    assert says_nothing(two.exponent, two.ci_low, two.ci_high) == "two N"
    three = fit.fit_power_law([256, 512, 1024], [1.0, 4.4, 16.0], log_se=[0.02, 0.06, 0.02])
    assert (
        three.ci_low is not None
        and three.weightless == ()
        and says_nothing(three.exponent, three.ci_low, three.ci_high) is None
    )


def test_median_log_se_from_the_samples_spread_with_a_floor():
    assert fit.median_log_se(0.10, 5) == pytest.approx(fit.MEDIAN_SE_PER_IQR * 0.10 / math.sqrt(5))
    assert fit.median_log_se(0.001, 100) == fit.SE_FLOOR
    assert fit.median_log_se(None, None) == fit.SE_FLOOR


def test_memory_fit_separates_a_constant_workspace_from_the_part_that_grows():
    grid = [256, 512, 1024, 1536, 2048, 3072]
    # chunked's shape: a 5 MiB block workspace plus 4 KiB per query row: a plain power law says ~0.6
    mib = 2**20
    peak = [5 * mib + 4096 * n for n in grid]
    assert fit.fit_power_law(grid, peak).exponent < 0.8
    m = fit.fit_memory(grid, peak)
    assert m.exponent == pytest.approx(1.0, abs=0.01) and m.offset == pytest.approx(5 * mib, rel=0.02)
    assert (m.ci_high - m.ci_low) / 2 < 0.25
    assert m.predict(4096) == pytest.approx(5 * mib + 4096 * 4096, rel=0.01)
    quadratic = fit.fit_memory(grid, [32.0 * n * n for n in grid])
    assert quadratic.exponent == pytest.approx(2.0, abs=0.01) and quadratic.offset < 0.01 * 32 * 1024**2
    few = fit.fit_memory([1024, 2048, 4096], [5 * mib + 4096 * n for n in (1024, 2048, 4096)])
    assert few.offset == 0.0  # 3 points: the plain power law, no constant


def test_too_few_points():
    one = fit.fit_power_law([1024, 1024], [5.0, 5.2])
    assert not one.available and one.text() == "n/a (ok at 1 N)"
    keys = fit.fit_power_law([512], [5.0], length="seq_k")  # a decode series' keys: the report's N_k
    assert keys.text() == "n/a (ok at 1 N_k)"
    two = fit.fit_power_law([1024, 2048], [1.0, 4.0])
    assert two.exponent == pytest.approx(2.0) and two.ci_low is None and "no CI" in two.text()
    none = fit.fit_power_law([], [])
    assert not none.available and none.text() == "n/a (ok at no N)"


def test_non_positive_and_non_finite_values_are_dropped():
    f = fit.fit_power_law([256, 512, 1024, 2048, 4096], [0.0, float("nan"), 1.0, 4.0, 16.0])
    assert f.exponent == pytest.approx(2.0)
    assert f.seq_lens == (1024, 2048, 4096)


def test_flat_values_fit_zero():
    f = fit.fit_power_law([256, 512, 1024], [7.0, 7.0, 7.0])
    assert f.exponent == 0.0 and f.solve(10.0) is None


def test_agreement_wording():
    tight = fit.PowerFit(1.95, 0.0, 1.9, 2.0, 0.99)
    assert fit.agreement(tight, 2.0) == "agrees"
    assert fit.agreement(tight, 1.0) == "above"
    assert fit.agreement(fit.PowerFit(0.5, 0.0, 0.45, 0.55, 0.99), 1.0) == "below"
    assert fit.agreement(fit.PowerFit(1.9, 0.0, -3.0, 6.8, 0.9), 2.0) == "uncertain"
    assert fit.agreement(fit.PowerFit(), 2.0) == ""
    # through two N: no CI, so neither above nor below (the findings: growth not measured)
    assert fit.agreement(fit.PowerFit(2.6, 0.0, None, None, 1.0, seq_lens=(512, 1024)), 2.0) == "uncertain"
    assert fit.agreement(tight, None) == ""


def test_largest_pow2():
    assert fit.largest_pow2(40000.0) == 32768
    assert fit.largest_pow2(None) is None and fit.largest_pow2(0.5) is None


def test_scaling_table_on_synthetic_run(tmp_path):
    rows = synthetic.power_law_rows(
        {"naive": (2.0, 2.0), "chunked": (2.0, 1.0), "mystery": (1.0, 1.0)}, SEQ[:6], noise=0.02, seed=3
    )
    # a wrong cell at the largest N with an absurd time must not enter the fit
    rows.append(
        synthetic.cell(
            "naive", 16384, status="wrong", time_ms=1e-6, peak_mem_bytes=1, message="failed the float64 gate"
        )
    )
    run = synthetic.write_run(tmp_path / "run", rows, memory_bytes=16 * synthetic.GIB)
    df, metas = results.load(run), results.load_meta(run)
    table = fit.scaling_table(df, metas).set_index("variant")
    assert table.loc["naive", "time_exp"] == pytest.approx(2.0, abs=0.1)
    assert table.loc["naive", "mem_exp"] == pytest.approx(2.0, abs=0.1)
    assert table.loc["chunked", "mem_exp"] == pytest.approx(1.0, abs=0.1)
    assert table.loc["naive", "mem_theory"] == 2.0 and table.loc["chunked", "mem_theory"] == 1.0
    assert table.loc["naive", "time_theory"] == 2.0
    assert table.loc["mystery", "mem_class"] == "unknown" and math.isnan(table.loc["mystery", "time_theory"])
    assert table.loc["naive", "fit_seq_lens"] == "2048 4096 8192"  # largest half of the 6 ok seq_lens
    # 1 MiB · (N/256)² reaches 16 GiB at N = 256 · 128 = 32768 (noise moves it less than a factor 2)
    assert table.loc["naive", "n_max_fit"] in (16384, 32768)
    assert table.loc["naive", "peak_fraction_at_max"] > 0


def test_fixture_memory_exponents():
    df, metas = results.load(FIXTURE), results.load_meta(FIXTURE)
    table = fit.scaling_table(df, metas)
    non_causal = table[~table["causal"].astype(bool)].set_index("variant")
    assert non_causal.loc["naive", "mem_exp"] == pytest.approx(2.0, abs=0.1)
    assert non_causal.loc["sdpa", "mem_exp"] < 1.5
    assert non_causal.loc["naive", "mem_agreement"] == "agrees"
    assert not fit.fit_index(table)[fit.combo_key(non_causal.loc["fault_wrong"], "fault_wrong")][0].available
    assert non_causal.loc["fault_wrong", "time_fit"].startswith("n/a")
    assert non_causal.loc["naive", "n_max_fit"] == 16384  # 272 MiB at 2048, ∝ N²: 17 GiB at 16k, 68 at 32k


def test_extrapolated_text_stops_at_8x_measured():
    assert fit.extrapolated_text(16384, 2048) == "16,384"  # exactly 8×: still read off the fit
    assert fit.extrapolated_text(2**24, 16384) == "> 131,072 (beyond 8× measured)"
    assert fit.extrapolated_text(None, 2048) == "n/a"


def test_largest_n_measured_fits_and_within_time_budget(tmp_path):
    # exact laws, no noise: time 1 ms · (N/256)², memory 1 MiB · (N/256)^k, measured up to N = 1024
    rows = synthetic.power_law_rows({"naive": (2.0, 2.0), "chunked": (2.0, 1.0)}, [256, 512, 1024])
    run = synthetic.write_run(tmp_path / "run", rows, memory_bytes=16 * synthetic.GIB)
    table = fit.scaling_table(results.load(run), results.load_meta(run)).set_index("variant")
    assert (table["n_max_measured"] == 1024).all()
    # naive reaches 16 GiB at N = 256 · 128 = 32768, chunked at 256 · 16384: both beyond 8 × 1024
    assert table.loc["naive", "n_max_fit"] == 32768
    assert (
        table.loc["naive", "n_fit_text"]
        == table.loc["chunked", "n_fit_text"]
        == "> 8,192 (beyond 8× measured)"
    )
    # 1 ms · (N/256)² = 1000 ms at N = 256 · √1000 ≈ 8095: the largest power of two within is 4096
    assert table.loc["chunked", "n_time_budget"] == 4096 and table.loc["chunked", "n_time_text"] == "4,096"
    assert table.loc["naive", "n_time_text"] == "–"  # memory binds first for N² variants


def test_a_near_flat_fit_solves_to_beyond_not_an_overflow():
    """Noisy small-N times can fit an exponent near 0: the N at which such a fit reaches a budget lies
    beyond any float, and must read as 'beyond', not raise OverflowError (a real report once did)."""
    flat = fit.PowerFit(exponent=1e-4, intercept=0.0)
    n = fit.largest_pow2(flat.solve(1e5))
    assert n is not None and n > 1e300
    assert fit.extrapolated_text(n, 128).startswith("> 1,024 (beyond")


def test_a_run_in_rounds_is_fitted_through_every_visit_and_resists_one_busy_visit():
    """fit_visits: Theil-Sen through every visit median (--rounds), Sen's interval; one visit that met a busy
    moment (3x slower) neither moves the exponent nor widens the interval much; a cell with one visit
    leaves the fit to the weighted least squares."""
    from attnbench.reports.fit import fit_visits

    ns = [1024, 1536, 2048, 2560]
    visits = [[1e-5 * n**2 * f for f in (1.0, 1.04, 0.97)] for n in ns]
    visits[2][1] *= 3.0  # one busy visit at N = 2048
    fit = fit_visits(ns, visits)
    assert fit is not None and abs(fit.exponent - 2.0) < 0.05
    assert fit.ci_low < 2.0 < fit.ci_high and fit.ci_high - fit.ci_low < 0.3
    assert fit_visits(ns, [*visits[:3], [visits[3][0]]]) is None  # one visit: not a rounds fit
    assert fit_visits(ns[:2], visits[:2]) is None  # fewer than three lengths


def test_an_approximation_has_no_time_theory_and_the_table_says_why(tmp_path):
    """Exact attention's N^2 is the work an approximation by design skips: no time theory to agree with, and
    the scaling table says 'none (approximate)' where an exact kernel's says N²."""
    from attnbench.reports.render import summary_table

    meta = {"variant_capabilities": {
        "performer": {"memory": "linear", "approximate": 0.9}, "chunked": {"memory": "linear"},
    }}  # fmt: skip
    assert fit.theory("performer", meta) == (None, 1.0, "linear")
    assert fit.theory("chunked", meta) == (2.0, 1.0, "linear")
    rows = [
        synthetic.cell(v, n, time_ms=t * n, peak_mem_bytes=1000 * n)
        for v, t in (("performer", 0.01), ("chunked", 0.02))
        for n in (256, 512, 1024)
    ]
    df = results.load(synthetic.write_run(tmp_path / "run", rows))
    theory = {
        row[0]: row[3] for row in summary_table(fit.scaling_table(df, {df["run_id"].iloc[0]: meta})).rows
    }
    assert theory == {"performer": "none (approximate)", "chunked": "N²"}


def test_a_run_without_capabilities_says_once_why_theory_is_unknown(tmp_path):
    """The CPU reference (made before attnbench 0.2) showed theory 'unknown' and vs theory '–' in every row
    and never said why: the scaling section says it once, beside the table, and a run that recorded its
    variants' capabilities says nothing of it."""
    import json

    from attnbench.reports.render import prepare, render

    rows = [synthetic.cell(v, n, time_ms=0.01 * n * n, peak_mem_bytes=1000 * n)
            for v in ("naive", "chunked") for n in (256, 512, 1024)]  # fmt: skip
    pages = {}
    for name, recorded in (("old", False), ("new", True)):
        run = synthetic.write_run(tmp_path / name, rows, run_id=name)
        if not recorded:
            meta = json.loads((run / "meta.json").read_text())
            del meta["variant_capabilities"]
            (run / "meta.json").write_text(json.dumps(meta))
        render(prepare([run]), tmp_path / f"report-{name}")
        pages[name] = (tmp_path / f"report-{name}" / "README.md").read_text()
    said = "Theory unknown for every variant: the run recorded no variant capabilities (made before "
    said += "attnbench 0.2)"
    scaling = pages["old"].split("## Scaling: fitted exponents vs theory", 1)[1].split("\n## ", 1)[0]
    assert pages["old"].count(said) == 1 and said in scaling.split("| variant |", 1)[0]
    assert "Theory unknown" not in pages["new"]
    assert fit.no_theory_text({"a": {}, "b": {"variant_capabilities": {"x": {}}}}) == (
        "Theory unknown for the cells of a: the run recorded no variant capabilities (made before attnbench "
        "0.2), so 'vs theory' says nothing there."
    )
