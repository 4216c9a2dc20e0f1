"""Timed inputs that change between calls, so that an answer remembered by value cannot be timed.

A variant that keys a memo on a few sampled input values (a "fingerprint" of q, k, v) answers the timed
calls from memory: the same tensors hold the same values call after call, and the checks after timing
(fresh inputs, the timed tensors refilled) find an answer that follows its inputs, since a fingerprint that
changes misses. Before each sampled call, outside the timed window (harness.measure.timing's timers call
`call.between()` where the call has one), one query row of q, drawn from a seeded generator, has the signs
of about half its elements flipped in place (it is multiplied by one of SIGNS random +-1 vectors made on
q's device at the start): exact in every dtype, a few microseconds, no host-to-device copy between calls,
and the states of a row compose (2^SIGNS of them per row), so that a memo of a few answers by exact value
misses even in a decode cell of one query row, where flipping the whole row's sign gave two states (a memo
of the last two answers served 500 of 503 calls). That row of the answer must then change: half of each of
its scores' terms change sign. Before the flip the harness copies that row of the last answer; the next
call's row is compared with it. A memo keyed by a fingerprint answers with the row unchanged (unless the
flip missed every sampled value; a decode cell's few sampled values can repeat a state, and the answer the
memo gives then is an older one, changed but wrong: not seen here); an honest call changes it, unless
that query sees a single key (its softmax is 1 either way). After timing q is put back.

Forward cells without dropout only: a fwdbwd call's output is consumed by its backward, and a dropout
cell's output is random. A CUDA graph replays kernels without running Python, so no memo can run in it: its
timer calls no `between`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import torch

VARIED = "answer does not follow the inputs between timed calls"
STALE_SHARE = 0.8  # a cell whose changed rows came back unchanged in this share of its calls (and 3) is wrong
STALE_MIN = 3
SIGNS = 16  # random +-1 vectors a row is multiplied by, one drawn before each call


@dataclass(frozen=True)
class Stale:
    """How many calls' answers were compared with the one before (`checked`), and in how many the row whose
    query changed came back unchanged (`stale`)."""

    stale: int
    checked: int

    @property
    def passed(self) -> bool:
        return self.stale < max(STALE_MIN, STALE_SHARE * self.checked)


class Varied:
    """The state of one timed call's varied inputs: the rows of q flipped now, the row flipped before the
    last call with that row of the answer before it, and the last call's answer (`keep`, from inside it)."""

    def __init__(self, q: torch.Tensor, seed: int) -> None:
        self.q = q
        self.rng = random.Random(seed)
        g = torch.Generator().manual_seed(seed)
        signs = torch.randint(0, 2, (SIGNS, q.shape[-1]), generator=g) * 2 - 1
        signs[:, 0] = -1  # never the identity: every draw changes the row
        self.signs = signs.to(device=q.device, dtype=q.dtype)  # once, before any timed call
        self.flipped: dict[int, torch.Tensor] = {}  # row -> the product of the signs it was multiplied by
        self.out: Any = None
        self.row: int | None = None  # flipped before the last call
        self.before: torch.Tensor | None = None  # that row of the answer before the flip
        self.same: list[torch.Tensor] = []  # per compared call, on the device: the row came back unchanged

    def _compare(self) -> None:
        """Queued on the device, read after timing: reading it now would synchronise a CUDA device between
        calls that the timer lets run ahead."""
        out = self.out
        if self.before is None or not isinstance(out, torch.Tensor) or out.dim() != 4:
            return
        self.same.append(torch.eq(out[:, :, self.row], self.before).all())

    def between(self) -> None:
        """Outside the timed window: the last call's changed row compared, then a new row flipped."""
        self._compare()
        row = self.rng.randrange(self.q.shape[2])
        out = self.out
        keep = isinstance(out, torch.Tensor) and out.dim() == 4 and out.shape[2] == self.q.shape[2]
        self.before = out[:, :, row].detach().clone() if keep else None
        signs = self.signs[self.rng.randrange(SIGNS)]
        with torch.no_grad():
            self.q[:, :, row].mul_(signs)
        self.flipped[row] = signs if row not in self.flipped else self.flipped[row] * signs
        self.row = row

    def keep(self, out: Any) -> None:
        self.out = out

    def finish(self) -> Stale | None:
        """The last call compared too, q put back; None where no call was varied (a timer without
        `between`: a CUDA graph, a test's fake timer)."""
        try:
            self._compare()
            if not self.same:
                return None
            return Stale(int(torch.stack(self.same).sum()), len(self.same))
        finally:
            self.out = self.before = None
            self.same = []
            with torch.no_grad():
                for row, signs in self.flipped.items():  # +-1 twice is 1: the row's own values again
                    self.q[:, :, row].mul_(signs)
            self.flipped = {}


def varied_failure(result: Stale) -> str:
    how = "half of one query row's signs flipped before each, outside the timed window"
    return (
        f"{VARIED} ({how}): the flipped row's answer came back unchanged in {result.stale} of "
        f"{result.checked} calls"
    )
