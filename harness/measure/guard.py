"""The memory guard: predict a cell's peak from its shape and the variant's memory class, before running it.

A cell predicted not to fit in the device's free memory is skipped (never run), so that one cell
cannot take the machine down. Prediction, per call (e = bytes per element; N_q = seq_len, N_k = seq_k;
K and V have H_kv heads, which grouped-query variants read without repeating):
  S  = B*H*N_q*N_k*e   one score-sized tensor (a packed batch's, score_elements: what its variant's
                       varlen work holds at once, T x T masked, B x max(L)^2 padded, max(L)^2 exact)
  IO = B*H*N_q*(d_k+d_v)*e + B*H_kv*N_k*(d_k+d_v)*e   the inputs' size (q and the output, k and v)
  quadratic variants: forward 3*S (scores, weights, and one temporary, e.g. the masked or shifted
                      scores), forward+backward 6*S (saved scores and weights plus their gradients);
                      with dropout 2*S more (the mask and the dropped weights, beside the weights);
                      with a score modification S more forward, 2*S forward+backward (the modded
                      scores beside the scaled ones, and what autograd saves of tanh), and for alibi
                      the (H, N_q, N_k) bias, S/B
  linear variants:    forward 2*IO + block buffers, forward+backward 6*IO + block buffers; a packed
                      batch padded to its longest sequence (varlen work "padded") has IO over B x max(L)
                      rows, and its key mask, B x max(L)^2 booleans (one byte each, shared by the heads)
plus the cell's inputs (3 with gradients) and the float64 reference of the correctness gate (float64
copies of q, k and v, k and v repeated to H heads for grouped-query cells, and its score blocks, one more
with a mod). A linear variant's mod works in place on its blocks (chunked's softcap backward: one block).
These are upper estimates: measured peaks (naive forward = 2*S + output) sit below them, a third below for
naive, so the formula alone would skip cells that fit (trial U: naive at N = 16384 predicted 24.5 GiB, where
its 9.0 GiB at N = 12288 grows to 16 GiB).

Where the cell's series (CellSpec.group_key: the variant and every axis but the lengths) has ok cells no
longer in N_q and N_k measured already (`MeasuredPeaks`, fed every row as the executors' skip-ahead is), the
call's part is the longest one's measured peak grown as the formula's terms that grow with the lengths grow
(the scores; a linear variant's inputs and padded mask, not its fixed block buffers), or faster where the
series' two longest measured peaks grew faster than those terms: the exponent between them, never under 1.
The inputs and the reference stay the formula's. A cell with nothing measured before it keeps the formula.
The skip line says which it was predicted from.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from attnbench.harness.sweep.settings import Settings
from attnbench.harness.sweep.spec import CellSpec
from attnbench.results.formulas import DTYPE_BYTES, bytes_text

# elements of (B, H, rows, N_k) float64 scores per block of the gate's reference (harness.measure.attention64
# computes it in such blocks; the constant is here so that the parent's guard imports no torch)
REFERENCE_ROW_BLOCK = 1 << 24
BLOCK_BUFFER_ELEMS = 256 * 512 * 3  # per (batch, head): a linear variant's score blocks (fp32)


@dataclasses.dataclass(frozen=True)
class Prediction:
    """A cell's predicted peak, in bytes, and what it was predicted from (the skip line's words)."""

    bytes: int
    basis: str


def predict_peak_bytes(
    spec: CellSpec, memory_class: str, settings: Settings | None = None, work: str = "masked"
) -> int:
    """A cell's predicted peak by the formula alone (the module doc); `work`, a packed cell's variant's
    capability varlen (score_elements: anything but padded or exact counts the whole pack)."""
    call, rest = _parts(spec, memory_class, settings, work)
    return call + rest


def predict(
    spec: CellSpec,
    memory_class: str,
    settings: Settings | None = None,
    work: str = "masked",
    measured: Mapping[tuple[int, int], int] | None = None,
) -> Prediction:
    """A cell's predicted peak: from its series' `measured` peaks ((N_q, N_k) -> bytes, MeasuredPeaks.of)
    where it has some no longer than the cell, else from the formula (the module doc)."""
    call, rest = _parts(spec, memory_class, settings, work)
    here = (spec.seq_len, spec.seq_k)
    points = {n: b for n, b in (measured or {}).items() if n[0] <= here[0] and n[1] <= here[1] and b > 0}
    if not points:
        return Prediction(call + rest, f"the {memory_class} formula: no shorter cell of its series measured")
    grows = {n: _growing(spec, memory_class, settings, work, n) for n in points}
    # the longest measured (the most growing bytes), and the one before it, to read the series' own growth
    (last, x_last), *before = sorted(grows.items(), key=lambda item: (item[1], item[0]), reverse=True)
    x_here = _growing(spec, memory_class, settings, work, here)
    exponent, faster = 1.0, ""
    prev = next(((n, x) for n, x in before if x < x_last), None)
    if prev is not None and points[last] > points[prev[0]]:
        seen = math.log(points[last] / points[prev[0]]) / math.log(x_last / prev[1])
        if seen > 1.0:
            exponent, faster = seen, f", faster than the formula from {_at(prev[0])} on"
    factor = (x_here / x_last) ** exponent if x_last > 0 else 1.0
    grown = int(points[last] * max(factor, 1.0))
    basis = (
        f"its {bytes_text(points[last])} measured at {_at(last)}, x{max(factor, 1.0):.2f} as "
        + (f"its peaks grew{faster}" if faster else f"the {memory_class} formula grows")
        + f", plus {bytes_text(rest)} of inputs and the gate's reference"
    )
    return Prediction(grown + rest, basis)


def _at(n: tuple[int, int]) -> str:
    return f"seq_len {n[0]}" if n[0] == n[1] else f"seq_len {n[0]}, seq_k {n[1]}"


def _growing(
    spec: CellSpec, memory_class: str, settings: Settings | None, work: str, n: tuple[int, int]
) -> int:
    """The formula's bytes of one call of `spec`'s series at (N_q, N_k) = n that grow with the lengths: a
    quadratic variant's all, a linear one's without its fixed block buffers."""
    at = dataclasses.replace(spec, seq_len=n[0], seq_k=n[1])
    call, _ = _parts(at, memory_class, settings, work)
    fixed = 0 if memory_class == "quadratic" else at.dims[0] * at.heads * BLOCK_BUFFER_ELEMS * 4
    return call - fixed


def _parts(spec: CellSpec, memory_class: str, settings: Settings | None, work: str) -> tuple[int, int]:
    """(the call's bytes, the rest: the cell's inputs and the gate's float64 reference), by the formula."""
    e = DTYPE_BYTES.get(spec.dtype, 4)
    b, n_q, n_k = spec.dims  # a packed batch: one sequence of T tokens
    bh = b * spec.heads
    scores = spec.heads * score_elements(spec, work) * e
    io = (bh * n_q + b * spec.kv_heads * n_k) * (spec.d_k + spec.d_v) * e
    backward = spec.pass_ == "fwdbwd"
    if memory_class == "quadratic":
        call = (6 if backward else 3) * scores + (2 * scores if spec.dropout > 0 else 0)
        if spec.mod != "none":
            call += (2 if backward else 1) * scores + (scores // b if spec.mod == "alibi" else 0)
    else:
        padded = _padded(spec, work)  # (B, max L) of a pack padded to its longest sequence, else None
        held = io if padded is None else io * padded[0] * padded[1] // (b * n_q)  # its padded copies
        mask = 0 if padded is None else padded[0] * padded[1] ** 2
        call = (6 if backward else 2) * held + bh * BLOCK_BUFFER_ELEMS * 4 + mask
    inputs = (2 if backward else 1) * io * 2
    rows = min(n_q, (settings or Settings()).check_rows)
    # the reference's float64 copies: q, k and v, and k and v repeated to H heads for grouped-query cells
    kv_heads_64 = spec.kv_heads + (spec.heads if spec.kv_heads != spec.heads else 0)
    copies = (bh * n_q * spec.d_k + b * kv_heads_64 * n_k * (spec.d_k + spec.d_v)) * 8
    blocks = 3 + (spec.mod != "none")  # a mod's new scores beside the block's
    reference = min(bh * rows * n_k, REFERENCE_ROW_BLOCK) * 8 * blocks + bh * rows * spec.d_v * 8 + copies
    return int(call), int(inputs + reference)


class MeasuredPeaks:
    """Per series (CellSpec.group_key), the peak memory its ok cells measured, by (N_q, N_k): what `predict`
    grows. Fed every row (a visit's without a peak adds nothing); torch-free, for the parent."""

    def __init__(self, rows: list[dict[str, Any]] = ()) -> None:
        self.series: dict[tuple, dict[tuple[int, int], int]] = {}
        for row in rows:
            self.note(CellSpec.from_dict(row), row)

    def note(self, spec: CellSpec, row: Mapping[str, Any]) -> None:
        peak = row.get("peak_mem_bytes")
        if row.get("status") != "ok" or not isinstance(peak, int) or isinstance(peak, bool) or peak <= 0:
            return
        known = self.series.setdefault(spec.group_key, {})
        n = (spec.seq_len, spec.seq_k)
        known[n] = max(known.get(n, 0), peak)

    def of(self, spec: CellSpec) -> dict[tuple[int, int], int]:
        """(N_q, N_k) -> bytes: the peaks measured of `spec`'s series."""
        return dict(self.series.get(spec.group_key, {}))


def score_elements(spec: CellSpec, work: str = "masked") -> int:
    """The score elements per head a quadratic variant holds at once: B*N_q*N_k; in a packed batch
    (variants.lengths) what its `work` computes in one go: a masked variant the T x T pack, a padded one
    B x max(L)^2, one that runs each sequence alone (exact) its longest's max(L)^2."""
    b, n_q, n_k = spec.dims
    lengths = None if spec.paged else spec.seq_lens()
    if lengths and work == "padded":
        return len(lengths) * max(lengths) ** 2
    if lengths and work == "exact":
        return max(lengths) ** 2
    return b * n_q * n_k


def _padded(spec: CellSpec, work: str) -> tuple[int, int] | None:
    """(B, max L) of a packed cell whose variant pads the pack to its longest sequence, else None."""
    lengths = None if spec.paged else spec.seq_lens()
    return (len(lengths), max(lengths)) if lengths and work == "padded" else None


def fits(predicted: Prediction, available: int, fraction: float) -> str | None:
    """None when the prediction fits in `fraction` of `available`, else the skip reason, which says what it
    was predicted from."""
    if predicted.bytes <= fraction * available:
        return None
    return (
        f"memory guard: predicted peak {bytes_text(predicted.bytes)} ({predicted.basis}) exceeds "
        f"{fraction * 100:.3g}% of the {bytes_text(available)} available"  # 90%, or a tiny fraction's 0.0742%
    )
