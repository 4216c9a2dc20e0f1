"""Where a gated answer errs: by query row (a NaN's rows, the rows a finite answer gets wrong, the rows left
unwritten) and, in a packed batch or a paged cache, by sequence (each judged against its own reference: the
gate's rel_err is its worst sequence's). Sequences are numbered from 1, as a person counts them: 'sequence 1
of 8' is the first. harness.measure.correctness.gate calls these; they take tensors already on the rows
checked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Sequence:
    """One sequence of a packed batch, on the rows checked: its number from 1, its rows a..b - 1 in the
    pack, and its output's rel_err against its own reference (inf when non-finite)."""

    number: int
    of: int
    a: int
    b: int
    rel_err: float
    context: int = 0  # a paged cache's sequence (a batch element): its context length; 0 in a pack

    def describe(self) -> str:
        """'sequence 3 of 8 (rows 517..1023, 507 tokens): rel_err 1.0e+00', or '...: non-finite (NaN or
        inf)'; a paged cache's 'sequence 3 of 8 (context of 45 tokens): rel_err 1.0e+00'."""
        what = "non-finite (NaN or inf)" if math.isinf(self.rel_err) else f"rel_err {self.rel_err:.1e}"
        if self.context:
            return f"sequence {self.number} of {self.of} (context of {self.context} tokens): {what}"
        return f"{self.name()}, {self.b - self.a} tokens): {what}"

    def name(self) -> str:
        """'sequence 3 of 8 (rows 517..1023', the start of describe's text and of an unwritten row's."""
        return f"sequence {self.number} of {self.of} (rows {self.a}..{self.b - 1}"


def sequences(got: torch.Tensor, ref: torch.Tensor, rows, cu_seqlens, hidden=None) -> list[Sequence]:
    """Each sequence of a packed batch that has rows checked, judged alone: got and ref (B, H, R, d) on the
    query rows `rows` (every row when None); hidden: (B or 1, 1, R, 1) rows that see no key, left out."""
    cu = cu_seqlens.cpu().tolist()
    got, ref = got.detach().to(torch.float64).cpu(), ref.cpu()
    if hidden is not None:  # a row without keys may hold anything: it counts in no sequence's error
        hidden = hidden.cpu().expand_as(got)
        got, ref = got.masked_fill(hidden, 0.0), ref.masked_fill(hidden, 0.0)
    ids = torch.arange(got.shape[2]) if rows is None else rows.cpu()
    out = []
    for s, (a, b) in enumerate(zip(cu, cu[1:], strict=False)):
        mine = (ids >= a) & (ids < b)
        if not bool(mine.any()):
            continue
        out.append(Sequence(s + 1, len(cu) - 1, a, b, _rel_err(got[:, :, mine], ref[:, :, mine])))
    return out


def contexts(got: torch.Tensor, ref: torch.Tensor, key_lengths) -> list[Sequence]:
    """Each sequence of a paged cache (batch element b, its context key_lengths[b]) judged alone, as a
    pack's are: got and ref (B, H, R, d) on the rows checked (a paged cell has no row without keys)."""
    got, ref = got.detach().to(torch.float64).cpu(), ref.cpu()
    lengths, n = key_lengths.cpu().tolist(), got.shape[2]
    return [
        Sequence(b + 1, len(lengths), 0, n, _rel_err(got[b], ref[b]), context=length)
        for b, length in enumerate(lengths)
    ]


def _rel_err(o: torch.Tensor, r: torch.Tensor) -> float:
    """||o - r|| / ||r|| (the largest |o - r| where r is 0), inf where o is not finite."""
    if not bool(torch.isfinite(o).all()):
        return math.inf
    denom = float(torch.linalg.vector_norm(r))
    diff = torch.linalg.vector_norm(o - r)
    return float(diff) / denom if denom > 0 else float((o - r).abs().max())


def worst(seqs: list[Sequence]) -> Sequence | None:
    """The sequence that errs most (the first of equals), None for none."""
    return max(seqs, key=lambda s: s.rel_err, default=None)


def unwritten(got: torch.Tensor, ref: torch.Tensor, hidden=None) -> torch.Tensor:
    """(R,) bool: the rows checked that a kernel left unwritten: all zeros in some batch element and head
    where the reference's row is not (no correct kernel returns an exact zero row for a row that sees a key;
    rows that see none, `hidden`, are left out). got, ref: (B, H, R, d)."""
    zero = (got.detach() == 0).all(-1).cpu() & (ref.cpu() != 0).any(-1)  # (B, H, R)
    if hidden is not None:
        zero &= ~hidden[..., 0].cpu().expand_as(zero)
    return zero.flatten(0, 1).any(0)


def unwritten_text(bad: torch.Tensor, rows, cu_seqlens=None) -> str:
    """A failing gate's cause where rows were left unwritten (bad: unwritten's mask), "" where none was. In a
    packed batch it names the first such row and its sequence ('it left query row 2047 unwritten (zeros
    where the answer is not), in sequence 8 of 8 (rows 1727..2047)'); elsewhere wrong_rows says which."""
    ids = (torch.arange(len(bad)) if rows is None else rows.cpu())[bad.cpu()]
    if not len(ids):
        return ""
    if cu_seqlens is None:
        return "it left query rows unwritten (zeros where the answer is not)"
    first, cu = int(ids[0]), cu_seqlens.cpu().tolist()
    said = f"query row {first}" if len(ids) == 1 else f"{len(ids)} query rows"
    s = next(i for i, (a, b) in enumerate(zip(cu, cu[1:], strict=False)) if a <= first < b)
    at = f"in {Sequence(s + 1, len(cu) - 1, cu[s], cu[s + 1], 0.0).name()})"
    return f"it left {said} unwritten (zeros where the answer is not), " + (
        at if len(ids) == 1 else f"the first row {first} {at}"
    )


def nonfinite_rows(got: torch.Tensor, rows=None) -> str:
    """Where an answer is NaN or inf, as 'at query row 0 only' or 'at 3 of 64 query rows checked, the first
    row 5' (rows: the query rows got holds, every row when None); "" when it is finite."""
    bad = (~torch.isfinite(got)).flatten(0, 1).any(0).any(-1).cpu()
    ids = (torch.arange(got.shape[2]) if rows is None else rows.cpu())[bad]
    if not len(ids):
        return ""
    if len(ids) == 1:
        return f"at query row {int(ids[0])} only"
    return f"at {len(ids)} of {got.shape[2]} query rows checked, the first row {int(ids[0])}"


def wrong_rows(got: torch.Tensor, ref: torch.Tensor, rows, tol: float, empty=None) -> str:
    """Where a finite answer errs, by query row: 'at query rows 64 to 99 (36 of 100 checked)', 'at query row
    99 only' or 'at 5 of 64 query rows checked, the first row 7'; "" where every row errs (nothing to point
    at) or none does. A row errs where its error over the reference's typical row norm passes tol in any
    batch element and head (got, ref: (B, H, R, d) on the rows checked); rows that see no key
    (correctness.empty_rows) are left out."""
    err = (got.detach().to(torch.float64) - ref).norm(dim=-1)  # (B, H, R)
    norms = ref.norm(dim=-1)
    err = err / norms.clamp_min(max(float(norms.mean()), 1e-30) * 1e-3)
    if empty is not None:
        hidden = (empty if rows is None else empty[:, :, rows.to(empty.device)])[..., 0]
        err = err.masked_fill(hidden.to(err.device).expand_as(err), 0.0)
    bad = (err > tol).flatten(0, 1).any(0).cpu()
    ids, n = (torch.arange(got.shape[2]) if rows is None else rows.cpu())[bad], got.shape[2]
    if not len(ids) or len(ids) == n:
        return ""
    if len(ids) == 1:
        return f"at query row {int(ids[0])} only"
    at = torch.nonzero(bad).flatten()
    if int(at[-1] - at[0]) + 1 == len(at):  # one run of the rows checked
        return f"at query rows {int(ids[0])} to {int(ids[-1])} ({len(ids)} of {n} checked)"
    return f"at {len(ids)} of {n} query rows checked, the first row {int(ids[0])}"
