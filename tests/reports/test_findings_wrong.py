"""A variant that failed the float64 gate is said first in its panel's findings, in the gate's own words (its
named mistake, its worst sequence), not only in the growth note and the trust line."""

from __future__ import annotations

import math

import synthetic

from attnbench.reports import findings
from attnbench.reports.render import findings_of, prepare

NAN = (
    "failed the float64 gate: non-finite output (NaN or inf); worst: sequence 8 of 8 (context of 524 "
    "tokens): non-finite (NaN or inf)"
)
SORTED = (
    "failed the float64 gate: rel_err {e:.2e} (tol 1e-04), max_abs_err 1.76e-01; worst: sequence 1 of 8 "
    "(context of 119 tokens): rel_err {e:.1e}"
)


def _rows() -> list[dict]:
    rows = synthetic.power_law_rows({"naive": (2.0, 2.0), "chunked": (2.0, 1.0)}, [256, 512, 1024])
    for n in (256, 512, 1024):
        rows.append(synthetic.cell("bug_nan", n, status="wrong", message=NAN, rel_err=math.inf))
    for n, e in ((256, 0.31), (512, 0.12)):  # the worst is said: N = 256's
        rows.append(synthetic.cell("bug_sorted", n, status="wrong", message=SORTED.format(e=e), rel_err=e))
    return rows


def test_wrong_variants_are_said_first_in_their_panel_with_the_gates_words(tmp_path):
    found = findings_of(prepare([synthetic.write_run(tmp_path / "run", _rows())]))
    (panel,) = found.panels
    first = panel.sentences[0]
    assert first.startswith(findings.WRONG_HEAD), panel.sentences
    assert "bug_nan at every N measured (non-finite output (NaN or inf); worst: sequence 8 of 8" in first
    assert "bug_sorted at N = 256 and 512 (rel_err 3.10e-01 (tol 1e-04); worst: sequence 1 of 8" in first
    assert "max_abs_err" not in first and first.count("rel_err") == 1  # each said once
    # the growth note names them without counting their wrong cells again
    no_fit = next(s for s in panel.sentences if s.startswith("No fit"))
    assert "bug_nan and bug_sorted (wrong answers, said above)" in no_fit and "wrong each" not in no_fit
    # the one-line summary still leads with the ranking, and says there are wrong answers
    assert findings.headline(found) == "(wrong answers) " + panel.sentences[1]


def test_a_panel_with_only_wrong_cells_says_them_and_that_nothing_ran_ok(tmp_path):
    rows = [synthetic.cell("bug_nan", n, status="wrong", message=NAN, rel_err=math.inf) for n in (256, 512)]
    found = findings_of(prepare([synthetic.write_run(tmp_path / "run", rows)]))
    said = " ".join(findings.text(found).split())
    assert findings.WRONG_HEAD + "bug_nan at every N measured (non-finite output" in said
    assert findings.NOTHING_OK in said and findings.headline(found).endswith(findings.NOTHING_OK + ".")


def test_a_long_message_is_cut_at_a_word():
    from attnbench.results.causes import WRONG_SAID, gate_said

    said = gate_said("failed the float64 gate: " + "word " * 100)
    assert len(said) <= WRONG_SAID + 1 and said.endswith("word…")
