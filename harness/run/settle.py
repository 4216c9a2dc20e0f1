"""Settle rounds (Settings.settle_rounds): which cells of one shape to visit again after the run's rounds.

The ranking (reports.tables.ranking) tells two variants of a shape apart by van Elteren's test with a
stratum per round (results.ranks.rank_p). One disturbed visit (a few seconds in which the machine ran some
variants slower) reverses a pair in its round, and with three rounds the test then cannot separate even
a pair 1.3x apart (two rounds one way and one the other: p = 0.26); with four rounds it is p = 0.05 and
with five 0.008. So after the R rounds, where a pair of one shape is SETTLE_RATIO or more apart by median
and the test cannot yet tell it apart, the variants of such pairs are visited again, in a round of their
own, and the question asked again over the visits made, at most Settings.settle_rounds times. Pairs
closer than SETTLE_RATIO are left as measured: more visits rarely separate them, and each visit of a slow
cell costs a warm-up call.

Each settle round visits a subset of the previous one's cells (the first: of the shape's), so that the
k-th visits of any two cells are always the same round, and rank_p's strata (the visits both cells have)
stay aligned."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from attnbench.results.ranks import separated

SETTLE_RATIO = 1.1  # a pair this far apart by median is visited again while the rank test ties it


def unsettled(rows: Iterable[dict[str, Any]], among: set[str] | None = None) -> set[str]:
    """The cell_ids, of one shape's rows (each merged from the visits made so far), in a pair whose medians
    are SETTLE_RATIO or more apart that results.ranks.separated cannot tell apart; only pairs of cells in
    `among` (the previous settle round's cells) where given."""
    ok = [
        r
        for r in rows
        if r.get("status") == "ok"
        and (r.get("time_ms_median") or 0) > 0
        and (among is None or r["cell_id"] in among)
    ]
    ok.sort(key=lambda r: r["time_ms_median"])
    out: set[str] = set()
    for i, first in enumerate(ok):
        for other in ok[i + 1 :]:
            if other["time_ms_median"] / first["time_ms_median"] < SETTLE_RATIO:
                continue
            if not separated(first, other):
                out |= {first["cell_id"], other["cell_id"]}
    return out
