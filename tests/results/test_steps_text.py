"""A step's words (results.steps_text): what changed across it and near it, its cells counted in good
English, and one spelling of a value not recorded in the line, the frame and the dashboard."""

from __future__ import annotations

from test_steps_gate import _series

from attnbench.reports.dashboard import steps_table
from attnbench.results import steps, steps_text

# a step placed at run 4 (the first run after it) whose variant's source changed between runs 4 and 5: noise
# can place a step one run off the change that made it
LEVELS = [1.0] * 3 + [1.3] * 6
SOURCES = ["file mine.py, source sha256 aaa"] * 4 + ["file mine.py, source sha256 bbb"] * 5
COMMITS = ["1a2b3c4d5e" * 4] * 9


def test_a_change_one_run_from_the_placed_step_is_named_in_the_line_the_frame_and_the_dashboard():
    (step,) = steps.find(_series(LEVELS, variant_source=SOURCES, git_commit=COMMITS))
    assert step.at == 3 and step.changed() == {}
    said = "variant_source file mine.py, source sha256 aaa -> file mine.py, source sha256 bbb"
    said += " between runs 4 and 5, one run after the placed step"
    assert f"; same commit; {said}; calibration" in steps_text.describe(step)
    assert steps_text.as_frame([step])["nearby"].tolist() == [said]
    assert steps_table([step], {}).rows[0][4] == f"same commit; {said}"  # as the line says it


def test_software_that_changed_a_run_from_the_step_makes_the_gate_judge_the_step_itself():
    torch = ["2.13.0"] * 4 + ["2.14.0"] * 5
    (step,) = steps.find(_series(LEVELS, torch=torch))
    assert step.nearby == ((4, {"torch": ("2.13.0", "2.14.0")}),)
    moved = steps.Step(**{**step.__dict__, "beyond": 1.0, "beyond_interval": (0.9, 1.1)})
    assert not moved.against_others and moved.gated == (moved.ratio, moved.low, moved.high)


def test_one_spelling_of_a_value_not_recorded_and_one_other_cell_counted():
    sources = [None] * 3 + ["builtin"] * 6
    (step,) = steps.find(_series(LEVELS, variant_source=sources, git_commit=COMMITS))
    assert "; same commit, variant_source ? -> builtin; " in steps_text.describe(step)
    assert steps_text.as_frame([step])["changed"].tolist() == ["variant_source ? -> builtin"]
    assert steps_table([step], {}).rows[0][4] == "same commit, variant_source ? -> builtin"
    two = steps.Step(**{**step.__dict__, "cells": 2})
    assert ", with 1 other cell of v that stepped there too" in steps_text.describe(two)
    assert steps_table([two], {}).rows[0][3] == "4 of 9, with 1 other cell of v that stepped there too"
    other = steps.Step(**{**step.__dict__, "cells": 3, "other_way": 1})
    said = ", with 1 other cell of v that stepped there too, and 1 that stepped there the other way"
    assert said in steps_text.describe(other) and said in f", {steps_table([other], {}).rows[0][3]}"


def test_the_site_says_what_history_check_says_of_a_step_across_which_nothing_changed():
    """Both sides recorded the one commit and nothing else changed: `history check` says 'same commit', and
    the site's Steps table said 'nothing recorded', which the runs contradict. Both say what they hold; runs
    that recorded neither commit nor code say 'commit ? -> ?' in both."""
    (step,) = steps.find(_series(LEVELS, git_commit=COMMITS))
    assert step.changed() == {} and step.nearby == ()
    assert "; same commit; calibration" in steps_text.describe(step)
    assert steps_table([step], {}).rows[0][4] == steps_text.what_changed(step) == "same commit"
    (unknown,) = steps.find(_series(LEVELS))
    assert steps_table([unknown], {}).rows[0][4] == "commit ? -> ?"


def test_runs_that_recorded_no_commit_are_told_apart_by_their_code_never_called_the_same_commit():
    """A `pip install` of a folder records no commit: two runs without one are not 'same commit'. Their
    code's sha256 tells whether the code stayed (same code) or changed (its two values); neither recorded:
    unknown."""
    (step,) = steps.find(_series(LEVELS))  # runs from before either field
    assert "; commit ? -> ?; " in steps_text.describe(step) and "same commit" not in steps_text.describe(step)
    (step,) = steps.find(_series(LEVELS, code_sha256=["c0de" * 4] * 9))
    assert f"; same code (sha256 {'c0de' * 4}); " in steps_text.describe(step)
    (step,) = steps.find(_series(LEVELS, code_sha256=["aaaa" * 4] * 3 + ["bbbb" * 4] * 6))
    said = steps_text.describe(step)
    assert f"; code_sha256 {'aaaa' * 4} -> {'bbbb' * 4}; " in said and "same" not in said
    assert step.changed() == {"code_sha256": ("aaaa" * 4, "bbbb" * 4)}


def test_commits_and_code_hashes_are_said_short_in_steps_and_in_compare_s_set_up_line():
    """A 40-character commit reads as its first 10 characters and a sha256 as its first 12, in a step's
    words and in compare's 'set-up differs' line alike (the line printed whole hashes while history's steps
    printed short ones); a value that is no hash is said as it is."""
    from attnbench.results.identity import diff_text, short_hash

    commit, sha = "1a2b3c4d5e" * 4, "c0de" * 16
    assert (short_hash(commit), short_hash(commit + "-dirty")) == ("1a2b3c4d5e", "1a2b3c4d5e-dirty")
    assert (short_hash(sha), short_hash(None), short_hash("2.13.0")) == ("c0dec0dec0de", "?", "2.13.0")
    (step,) = steps.find(_series(LEVELS, code_sha256=[sha] * 3 + ["b" * 64] * 6))
    assert "; code_sha256 c0dec0dec0de -> bbbbbbbbbbbb; " in steps_text.describe(step)
    said = diff_text({"git_commit": [commit, "f" * 40], "torch": ["2.12.0", "2.13.0"]})
    assert said == "git_commit 1a2b3c4d5e -> ffffffffff, torch 2.12.0 -> 2.13.0"


def test_the_dashboard_s_runs_table_names_a_pip_install_s_code_by_its_sha256():
    """A run with no commit recorded (a `pip install` of a folder) is told apart by its code's sha256 in the
    published runs table, not shown as '?' beside another install's '?'."""
    import pandas as pd

    from attnbench.reports.dashboard import runs_table

    runs = pd.DataFrame(
        {
            "run_key": ["a", "b", "c"],
            "run_id": ["ra", "rb", "rc"],
            "path": ["/x/ra", "/x/rb", "/x/rc"],
            "created": ["2026-12-01T00:00:00"] * 3,
            "git_commit": ["1a2b3c4d5e" * 4, None, None],
            "code_sha256": ["c0de" * 16, "beef" * 16, None],
            "torch": ["2.13.0"] * 3,
        }
    )
    table = runs_table(runs, pd.DataFrame({"run_key": ["a", "b"]}), {"a": 1, "b": 2, "c": 3}, {})
    assert table.headers[3] == "code"
    assert [row[3] for row in table.rows] == ["1a2b3c4d5e", "sha256 beefbeefbeef", "?"]
