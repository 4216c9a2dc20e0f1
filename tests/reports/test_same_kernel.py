"""No kernel ranked against itself: a variant that picks its kernel among others' (sdpa) is not ranked against
them where its run did not record which it ran, and where a run records two names of one kernel, the gap
they measured apart is what a lead must clear (an outside audit, trial U, H1)."""

from __future__ import annotations

import json
import re

import pytest
import synthetic

from attnbench.reports import findings, tables
from attnbench.reports.render import best_table, prepare, render
from attnbench.results import load
from attnbench.variants import registry
from attnbench.variants.errors import VariantError

SEQ = [256, 512, 1024, 2048, 4096]
SDPA = re.compile(r"\bsdpa\b(?![_ ]\(=)(?!_)")  # the name sdpa alone, not sdpa_flash


def _traded_rows(flash_at: dict[int, str] | None = None) -> list[dict]:
    """As the CPU reference (cpu-epyc-2core, no kernel column) has them: sdpa 15% ahead of sdpa_flash up to
    N = 512 and 12% behind it above (its report said 'Crossover between N = 3,072 and 4,096: sdpa_flash
    takes the lead from sdpa' and 'sdpa ... 1.15× ahead of sdpa_flash', p = 0.012), chunked 1.3× behind the
    faster of them. `flash_at`: sdpa_flash's status at an N where it is not ok."""
    rows = []
    for n in SEQ:
        x = (n / 256) ** 2
        a, b = (1.0, 1.15) if n <= 512 else (1.12, 1.0)
        status = (flash_at or {}).get(n, "ok")
        flash = {"time_ms": b * x} if status == "ok" else {"message": "not here"}
        rows += [
            synthetic.cell("sdpa", n, time_ms=a * x),
            synthetic.cell("sdpa_flash", n, status=status, **flash),
            synthetic.cell("chunked", n, time_ms=1.3 * x),
        ]
    return rows


def _with_meta(run, edit) -> None:
    path = run / "meta.json"
    meta = json.loads(path.read_text())
    edit(meta)
    path.write_text(json.dumps(meta))


def _no_capabilities(meta):  # a run made before meta.json recorded them (the CPU reference)
    del meta["variant_capabilities"]


def _recorded_picks(meta):  # a run made today: the registry's record of sdpa says what it picks among
    meta["variant_capabilities"]["sdpa"]["picks_among"] = list(registry.get("sdpa").cap.picks_among)


@pytest.mark.parametrize(
    "made", [None, _no_capabilities, _recorded_picks], ids=["records-without-picks", "no-records", "picks"]
)
def test_sdpa_is_not_ranked_against_a_kernel_it_may_have_run(tmp_path, made):
    run = synthetic.write_run(tmp_path / "run", _traded_rows())
    if made:
        _with_meta(run, made)
    rep = render(prepare([run]), tmp_path / "report")
    ranked = findings.ranking_sentences(load(run))
    (only,) = ranked
    assert re.fullmatch(
        r"sdpa_flash is fastest at every N measured, 256 to 4,096 \(1\.1\d–1\.3\d× ahead of chunked\)\.", only
    ), only
    # said once, before the panels, in plain words
    (said,) = rep.findings.kernels
    assert said.startswith("This run did not record which kernel sdpa chose"), said
    assert "it may be sdpa_flash's: where sdpa_flash ran too" in said and "one kernel measured twice" in said
    assert str(rep.findings).count("did not record which kernel") == 1
    # no lead, tie or crossover between the two anywhere a ranking is shown
    for row in best_table(load(run)).rows:
        assert not SDPA.search(row[1]), row
    ranks = tables.ranking(load(run))
    assert "sdpa" not in set(ranks["variant"]), ranks
    assert not tables.best_variant(load(run))["best"].eq("sdpa").any()
    # its own times are still drawn and tabled
    drawn = (tmp_path / "report" / "time-cpu-float32-fwd.csv").read_text()
    assert re.search(r"(^|,)sdpa,", drawn, re.M), drawn


def test_sdpa_is_ranked_where_none_it_may_have_run_ran_and_takes_no_lead_across(tmp_path):
    """sdpa_flash unsupported at N = 2,048: sdpa is ranked there, and neither takes the lead from the other
    at the N on either side (each was not ranked at the other's)."""
    run = synthetic.write_run(tmp_path / "run", _traded_rows({2048: "unsupported"}))
    text = " ".join(findings.ranking_sentences(load(run)))
    assert "sdpa is fastest at N = 2,048 (1.16× ahead of chunked)." in text, text
    assert "Crossover" not in text, text


def test_a_recorded_kernel_tells_sdpa_apart_from_another_backend(tmp_path):
    """sdpa recorded MATH, sdpa_flash the flash kernel: two kernels, ranked apart, and nothing to say."""
    rows = [
        synthetic.cell(v, n, time_ms=t * (n / 256) ** 2, kernel=k)
        for n in SEQ
        for v, t, k in (("sdpa", 1.2, "MATH"), ("sdpa_flash", 1.0, "FLASH_ATTENTION (CPU)"))
    ]
    run = synthetic.write_run(tmp_path / "run", rows)
    rep = render(prepare([run]), tmp_path / "report")
    assert rep.findings.kernels == ()
    (only,) = findings.ranking_sentences(load(run))
    assert re.fullmatch(
        r"sdpa_flash is fastest at every N measured, 256 to 4,096 \(1\.[12]\d(–1\.2\d)?× ahead of sdpa\)\.",
        only,
    )


def _one_kernel_apart_rows(gap: float) -> list[dict]:
    """As the H200 reference (h200-2026-11-27) has them: sdpa and sdpa_cudnn record CUDNN_ATTENTION, and
    measured `gap` apart at N = 1,024 (1.11× there at N = 8,192); flex 6% ahead of xformers at every N,
    each cell's samples within ±2%, so their own test tells them apart (p < 0.001)."""
    rows = []
    for n in SEQ:
        x = (n / 256) ** 2
        one = {"kernel": "CUDNN_ATTENTION"}
        rows += [
            synthetic.cell("flex", n, time_ms=x),
            synthetic.cell("xformers", n, time_ms=1.06 * x),
            synthetic.cell("sdpa", n, time_ms=2.0 * x, **one),
            synthetic.cell("sdpa_cudnn", n, time_ms=2.0 * x * (gap if n == 1024 else 1.005), **one),
        ]
    return rows


def test_a_lead_under_the_gap_one_kernel_measured_apart_is_a_tie(tmp_path):
    """One kernel under two names measured 1.10× apart: two visits of one kernel differ by that much here,
    so flex's 1.06× lead over xformers is not told apart, and the findings say why."""
    run = synthetic.write_run(tmp_path / "run", _one_kernel_apart_rows(1.10))
    df = load(run)
    text = findings.ranking_sentences(df)
    assert not any("ahead of xformers" in s for s in text), text
    assert text[0].startswith("flex and xformers "), text
    ranks = tables.ranking(df)
    assert set(ranks[ranks["group"] == 0]["variant"]) == {"flex", "xformers"}, ranks
    assert tables.best_variant(df)["tied"].eq("xformers").all()
    assert findings.one_kernel_sentence(df) == (
        "sdpa and sdpa_cudnn ran one kernel (CUDNN_ATTENTION) and measured up to 1.10× apart (N = 1,024): "
        "two visits of one kernel differ by that much here, so a lead under 1.10× is a tie."
    )
    rep = render(prepare([run]), tmp_path / "report")
    assert findings.one_kernel_sentence(df) in rep.findings.panels[0].sentences


def test_one_kernel_measured_closer_than_the_tie_rule_changes_no_lead(tmp_path):
    run = synthetic.write_run(tmp_path / "run", _one_kernel_apart_rows(1.01))
    df = load(run)
    lead = findings.ranking_sentences(df)[0]
    assert re.fullmatch(
        r"flex is fastest at every N measured, 256 to 4,096 \(1\.0\d(–1\.0\d)?× ahead of xformers\)\.", lead
    )
    said = findings.one_kernel_sentence(df)
    assert said.startswith(
        "sdpa and sdpa_cudnn ran one kernel (CUDNN_ATTENTION) and measured at most 1.01× apart"
    )
    assert said.endswith("), under the 2% every lead clears."), said


def test_the_loader_reads_what_a_variant_picks_among_and_knows_the_built_in_sdpa_of_older_runs():
    from attnbench.results.load import BUILTIN_PICKS, picks_among

    # what a run records of today's registry, and the loader's knowledge of runs made before it, agree
    for name, picks in BUILTIN_PICKS.items():
        assert registry.get(name).cap.picks_among == picks
        assert registry.get(name).record()["picks_among"] == list(picks)
    assert {n for n, v in registry.all_variants().items() if v.cap.picks_among} == set(BUILTIN_PICKS)
    assert picks_among({}, "sdpa") == BUILTIN_PICKS["sdpa"]  # no records: built in
    assert (
        picks_among({"variant_capabilities": {"sdpa": {"source": "builtin"}}}, "sdpa")
        == BUILTIN_PICKS["sdpa"]
    )
    assert picks_among({"variant_capabilities": {"sdpa": {"picks_among": []}}}, "sdpa") == ()
    mine = {"variant_capabilities": {"mine": {"source": "mine.py", "picks_among": ["a", "b"]}}}
    assert picks_among(mine, "mine") == ("a", "b")
    assert picks_among({"variant_capabilities": {"sdpa": {"source": "mine.py"}}}, "sdpa") == ()


@pytest.mark.parametrize("bad", ["sdpa_flash", ("x", 3), ("me",), True])
def test_picks_among_is_a_tuple_of_other_variants_names(bad):
    with pytest.raises(VariantError, match="picks_among must be a tuple of other variants' names"):
        registry.Capability(name="me", picks_among=bad)
