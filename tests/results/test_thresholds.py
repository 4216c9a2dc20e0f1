"""The gates' thresholds, one grammar (results.thresholds): compare's STAT:N% / STAT:X / STAT:Xms,
--run-spread and history check's --fail-on-step, each with a note where a bare number is likely a mistake."""

from __future__ import annotations

import pytest

from attnbench.results.thresholds import Threshold, parse_run_spread, parse_step, parse_threshold


def test_compare_reads_ms_bare_or_with_its_suffix_and_notes_a_bare_fraction():
    assert parse_threshold("median:0.01ms") == Threshold("median", 0.01, False, "median:0.01ms")
    assert parse_threshold("min:5").note is None and parse_threshold("median:5%").note is None
    t = parse_threshold("median:0.05")
    assert (t.value, t.relative) == (0.05, False)
    assert t.note == "note: --fail-above median:0.05 is 0.05 ms; for 5% write median:5%"
    assert parse_threshold("median:0.05ms").note is None  # the unit written out: no mistake to guess


def test_zero_means_any_slowdown_in_both_commands():
    assert parse_threshold("median:0%").value == 0 and parse_step("0%") == (0.0, None)
    assert parse_step("0") == (0.0, None)


def test_a_bare_fraction_of_a_percent_is_said_and_kept():
    assert parse_step("0.05") == (0.0005, "note: --fail-on-step 0.05 is 0.05%; for 5% write 5%")
    value, note = parse_run_spread("0.1")
    assert value == pytest.approx(0.001) and note == "note: --run-spread 0.1 is 0.1%; for 10% write 10%"
    assert parse_step("5") == (0.05, None) and parse_step("15%") == (0.15, None)


@pytest.mark.parametrize("pct", ["100%", "150%", "999%"])
def test_a_slowdown_gate_of_100_to_1000_percent_can_fire_and_is_taken_silently(pct):
    """A 2x slowdown is +100%: such a gate can fire, so it is neither refused nor noted."""
    assert parse_threshold(f"median:{pct}").note is None and parse_step(pct)[1] is None


def test_an_absurd_percent_is_noted():
    assert "fails only a slowdown of more than" in parse_threshold("median:1e9%").note
    assert "it can hardly fire" in parse_step("1e9%")[1]


@pytest.mark.parametrize("bad", ["five", "-5%", "", "5%%", "nan", "1e999%"])
def test_a_bad_percent_is_one_line_naming_the_flag(bad):
    with pytest.raises(ValueError, match="^bad --fail-on-step ") as caught:
        parse_step(bad)
    assert "\n" not in str(caught.value)
