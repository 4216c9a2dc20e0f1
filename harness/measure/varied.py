"""Timed inputs that change between calls, so that an answer remembered by value cannot be timed.

A variant that keys a memo on a few sampled input values (a "fingerprint" of q, k, v), or keeps its last
inputs and answer and recomputes only the query rows that changed, answers the timed calls from memory:
the same tensors hold the same values call after call, and the checks after timing (fresh inputs, the
timed tensors refilled) find an answer that follows its inputs, since a fingerprint that changes misses.
Before each sampled call, outside the timed window (harness.measure.timing's timers call `call.between()`
where the call has one), all of q is multiplied in place by one of SIGNS random +-1 vectors over d (made on
q's device at the start, each with its first element -1): every query row changes, so no row's answer can
be reused. It is exact in every dtype, one elementwise pass over q (O(N d): a few microseconds at the
quick preset's N = 64..512, well under the call), with no host-to-device copy between calls, and the
states compose (up to 2^SIGNS of them), so that a memo of a few answers by exact value misses even in a
decode cell of one query row.

The answer must then change. Before q changes the harness copies one query row of the last answer (in a
forward+backward cell, that row of q's gradient too), drawn by a generator seeded from os.urandom (no
variant can know it beforehand) among the rows that see two keys or more (a row that sees one key has
the same answer whatever its query); the next call's row is compared with it. A row that comes back
unchanged, or holds NaN or inf, is stale: a memo keyed by a fingerprint answers with it unchanged (unless
the fingerprint's few values repeat a state, and the memo then gives an older answer, changed but wrong:
not seen here). A cell is `wrong` where the row was stale in STALE_SHARE of its calls (and STALE_MIN):
an honest call changes it every time. Every timed answer is also checked whole: NaN or inf in a row that
sees a key (a variant that computes only the rows the checks read and leaves the rest unwritten) makes
the cell `wrong`; and it must be a plain torch.Tensor (a tensor subclass can compute its answer when it is
read, outside the timed window): else the cell is an `error` (harness.measure.contract). These reads are
queued on the device after each call, outside the timed window, and read after timing: reading them
between calls would synchronise a CUDA device that the timer lets run ahead. After timing q is put back.

Forward cells and forward+backward cells alike, without dropout (a dropout cell's output is random). In a
forward+backward cell q is the autograd leaf the calls differentiate, varied in place under no_grad; its
gradient is read in `between`, before the next call resets it. A memo of the output keyed on a
fingerprint is stale in the output's row, a memo of the gradients in the gradient's (a memo of one entry
misses every call and computes); a stale gradient of k or v alone is not compared here (the gate checks
all three gradients once, on the gated inputs). A CUDA graph replays kernels without running Python, so
no memo can run in it: its timer calls no `between`.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from attnbench.harness.measure.contract import PREFIX, OutputContractError

VARIED = "answer does not follow the inputs between timed calls"
NONFINITE = "a timed call's answer holds NaN or inf in rows that see keys"
STALE_SHARE = 0.8  # a cell whose changed rows came back unchanged in this share of its calls (and 3) is wrong
STALE_MIN = 3
ROW_BOUND = (
    0.25  # a judged row's rel_err against float64 above this (or 4x a declared approximation's) is wrong
)
SIGNS = 16  # random +-1 vectors over d that q is multiplied by, one drawn before each call
JUDGE_SHARE = 1 / 8  # the share of timed answers whose row is held to float64 (and the last one), at most
JUDGE_MAX = 16
NOTHING = object()  # Varied.out before a call has answered


def secret_seed() -> int:
    """A seed drawn from os.urandom: what the rows a check reads are drawn with, so that no variant can
    compute those rows alone (a seed it could import, or derive from the run's settings, it could)."""
    return int.from_bytes(os.urandom(8), "little")


@dataclass(frozen=True)
class Stale:
    """How many calls' answers were compared with the one before (`checked`), in how many the row whose
    query changed came back unchanged or not finite (`stale`), how many timed answers held NaN or inf in a
    row that sees a key (`nonfinite`, of `answers`), and in how many a sampled row was off float64
    (`wrong`, of `judged`)."""

    stale: int
    checked: int
    nonfinite: int = 0
    answers: int = 0
    wrong: int = 0  # answers whose row was off float64, of `judged`
    judged: int = 0

    @property
    def passed(self) -> bool:
        stale = self.stale >= max(STALE_MIN, STALE_SHARE * self.checked)
        return self.nonfinite == 0 and self.wrong == 0 and not stale


class Varied:
    """The state of one timed call's varied inputs: q (a forward+backward cell's leaf: grads=True, its
    gradient compared too), the sign vectors it was multiplied by, the row compared with its copy from the
    last answer, and the last call's answer (`keep`, from inside the call). empty: (B or 1, 1, N_q, 1) bool,
    the query rows that see no key (correctness.empty_rows), or None; rows: those compared (each sees two
    keys or more), all by default; seed: the row and sign generator's (a secret_seed by default)."""

    def __init__(
        self, q: torch.Tensor, empty: torch.Tensor | None = None, rows: list[int] | None = None,
        seed: int | None = None, grads: bool = False, judge: Callable | None = None,
    ) -> None:  # fmt: skip
        self.q = q
        self.judge = judge  # judge(q, out, row): a device bool, whether that row is off float64
        self.judged: list[torch.Tensor] = []  # per judged answer, on the device: its row is wrong
        self.grads = grads  # q is an autograd leaf: its gradient is compared too
        self.rng = random.Random(secret_seed() if seed is None else seed)
        g = torch.Generator().manual_seed(self.rng.getrandbits(63))
        signs = torch.randint(0, 2, (SIGNS, q.shape[-1]), generator=g) * 2 - 1
        signs[:, 0] = -1  # never the identity: every draw changes every row
        self.signs = signs.to(device=q.device, dtype=q.dtype)  # once, before any timed call
        self.vectors = list(self.signs)  # (d,) views, made once
        self.odd = [False] * SIGNS  # which vectors q is multiplied by an odd number of times
        # (B or 1, 1, N_q): the rows that see no key, whose answer may be NaN; None: every row sees one
        self.hidden = None if empty is None else empty[..., 0].to(q.device)
        # the tensors made for the variation: the harness's, never the variant's memory (retained_bytes)
        self.owned = (
            self.signs,
            *(() if self.hidden is None else (self.hidden,)),
            *getattr(judge, "owned", ()),
        )
        self.rows = list(range(q.shape[2])) if rows is None else rows  # the rows compared
        self.out: Any = NOTHING  # no answer since q last changed
        self.row: int | None = None  # compared after the next call
        self.before: list[torch.Tensor] = []  # that row of the last answer (and of q's gradient)
        self.same: list[torch.Tensor] = []  # per compared call, on the device: the row came back stale
        self.sums: list[torch.Tensor] = []  # per answer, on the device: the sum of its rows that see a key
        self.wrong_type = ""  # the type of the first timed answer that is not a plain torch.Tensor
        self.calls = 0  # the times q was varied

    def keep(self, out: Any) -> None:
        """Inside the timed call: only a reference kept, nothing read."""
        self.out = out

    def _kept(self) -> list[torch.Tensor] | None:
        """The last answer (and q's gradient) if they are plain (B, H, N_q, d) tensors; a subclass noted."""
        out = self.out
        if out is NOTHING:
            return None
        if type(out) is not torch.Tensor:  # named after timing (finish): none of it read here
            name = type(out).__name__
            what = "None" if out is None else f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"
            sub = ", a torch.Tensor subclass" if isinstance(out, torch.Tensor) else ""
            self.wrong_type = self.wrong_type or f"{what}{sub}"
            return None
        if out.dim() != 4 or out.shape[2] != self.q.shape[2]:
            return None
        grad = self.q.grad if self.grads else None  # the last call's: the next one has not reset it yet
        return [out.detach(), *([grad] if type(grad) is torch.Tensor and grad.shape == self.q.shape else [])]

    def _compare(self) -> None:
        """The last answer checked whole and its row compared with the copy from the answer before: queued
        on the device, read after timing. The whole answer's sum over the rows that see a key (in float32
        at least) carries a NaN or inf of any of their elements: one pass, where isfinite over every
        element costs ten times more on a CPU; a compared row that holds one is wrong by it."""
        kept = self._kept()
        if kept is None:
            return
        total = 0
        for t in kept:
            rows = t.sum(-1, dtype=torch.promote_types(t.dtype, torch.float32))  # (B, H, N_q)
            total = total + (rows if self.hidden is None else rows.masked_fill(self.hidden, 0.0)).sum()
        self.sums.append(total)
        if self.before and len(self.before) == len(kept):
            same = [torch.eq(t[:, :, self.row], b).all() for t, b in zip(kept, self.before, strict=True)]
            self.same.append(same[0] if len(same) == 1 else same[0] | same[1])

    def _judge(self, kept: list[torch.Tensor] | None) -> None:
        """The last answer's row, drawn afresh, held to float64 on q as that call saw it."""
        if self.judge is not None and kept is not None and self.rows and len(self.judged) < JUDGE_MAX:
            self.judged.append(self.judge(self.q, kept[0], self.rng.choice(self.rows)))

    def between(self) -> None:
        """Outside the timed window: the last answer checked and its row compared (in some calls held to
        float64 too), a row copied, and q multiplied by a new sign vector."""
        self._compare()
        kept = self._kept()
        if self.rng.random() < JUDGE_SHARE:
            self._judge(kept)
        self.row = self.rng.choice(self.rows) if self.rows else None
        self.before = [] if kept is None or self.row is None else [t[:, :, self.row].clone() for t in kept]
        pick = self.rng.randrange(SIGNS)
        with torch.no_grad():
            self.q.mul_(self.vectors[pick])  # (d,) over every row: each row's state changes
        self.odd[pick] = not self.odd[pick]
        self.out = NOTHING
        self.calls += 1

    def finish(self) -> Stale | None:
        """The last call checked too, q put back; None where no call was varied (a timer without `between`:
        a CUDA graph, a test's fake timer). A timed answer that is not a plain tensor raises
        OutputContractError (the cell's `error`)."""
        try:
            if not self.calls:
                return None
            self._compare()
            self._judge(self._kept())
            if self.wrong_type:
                raise OutputContractError(
                    f"{PREFIX}a timed call returned {self.wrong_type}; expected a plain torch.Tensor (a "
                    "subclass can run its work when its answer is read, outside the timed window)"
                )
            bad = int((~torch.isfinite(torch.stack(self.sums))).sum()) if self.sums else 0
            same = int(torch.stack(self.same).sum()) if self.same else 0
            wrong = int(torch.stack(self.judged).sum()) if self.judged else 0
            return Stale(same, len(self.same), bad, len(self.sums), wrong, len(self.judged))
        finally:
            self.out = NOTHING
            self.before, self.same, self.sums, self.judged = [], [], [], []
            with torch.no_grad():
                for i, odd in enumerate(self.odd):  # +-1 twice is 1: q's own values again
                    if odd:
                        self.q.mul_(self.vectors[i])
            self.odd, self.calls = [False] * SIGNS, 0


def varied_failure(result: Stale) -> str:
    how = "q multiplied by a random +-1 vector over d before each call, outside the timed window"
    if result.nonfinite:
        return (
            f"{NONFINITE} in {result.nonfinite} of {result.answers} timed answers (each checked whole, "
            "outside the timed window)"
        )
    if result.wrong:
        return (
            f"{VARIED} ({how}): a sampled query row of {result.wrong} of {result.judged} timed answers "
            f"checked is off float64 by more than rel_err {ROW_BOUND} (an answer given for other values of q)"
        )
    return (
        f"{VARIED} ({how}): a sampled query row's answer came back unchanged or not finite in "
        f"{result.stale} of {result.checked} calls"
    )
