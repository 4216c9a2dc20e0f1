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
These are upper estimates: measured peaks (naive forward = 2*S + output) sit below them.
"""

from __future__ import annotations

from attnbench.harness.sweep.settings import Settings
from attnbench.harness.sweep.spec import CellSpec
from attnbench.results.formulas import DTYPE_BYTES, bytes_text

# elements of (B, H, rows, N_k) float64 scores per block of the gate's reference (harness.measure.attention64
# computes it in such blocks; the constant is here so that the parent's guard imports no torch)
REFERENCE_ROW_BLOCK = 1 << 24
BLOCK_BUFFER_ELEMS = 256 * 512 * 3  # per (batch, head): a linear variant's score blocks (fp32)


def predict_peak_bytes(
    spec: CellSpec, memory_class: str, settings: Settings | None = None, work: str = "masked"
) -> int:
    """A cell's predicted peak (the module doc); `work`, a packed cell's variant's capability varlen
    (score_elements: anything but padded or exact counts the whole pack)."""
    e = DTYPE_BYTES.get(spec.dtype, 4)
    b, n_q, n_k = spec.dims  # a packed batch: one sequence of T tokens
    bh = b * spec.heads
    scores = spec.heads * score_elements(spec, work) * e
    io = (bh * n_q + b * spec.kv_heads * n_k) * (spec.d_k + spec.d_v) * e
    backward = spec.pass_ == "fwdbwd"
    if memory_class == "quadratic":
        work = (6 if backward else 3) * scores + (2 * scores if spec.dropout > 0 else 0)
        if spec.mod != "none":
            work += (2 if backward else 1) * scores + (scores // b if spec.mod == "alibi" else 0)
    else:
        padded = _padded(spec, work)  # (B, max L) of a pack padded to its longest sequence, else None
        held = io if padded is None else io * padded[0] * padded[1] // (b * n_q)  # its padded copies
        mask = 0 if padded is None else padded[0] * padded[1] ** 2
        work = (6 if backward else 2) * held + bh * BLOCK_BUFFER_ELEMS * 4 + mask
    inputs = (2 if backward else 1) * io * 2
    rows = min(n_q, (settings or Settings()).check_rows)
    # the reference's float64 copies: q, k and v, and k and v repeated to H heads for grouped-query cells
    kv_heads_64 = spec.kv_heads + (spec.heads if spec.kv_heads != spec.heads else 0)
    copies = (bh * n_q * spec.d_k + b * kv_heads_64 * n_k * (spec.d_k + spec.d_v)) * 8
    blocks = 3 + (spec.mod != "none")  # a mod's new scores beside the block's
    reference = min(bh * rows * n_k, REFERENCE_ROW_BLOCK) * 8 * blocks + bh * rows * spec.d_v * 8 + copies
    return int(work + inputs + reference)


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


def fits(predicted: int, available: int, fraction: float) -> str | None:
    """None when `predicted` fits in `fraction` of `available`, else the skip reason."""
    if predicted <= fraction * available:
        return None
    return (
        f"memory guard: predicted peak {bytes_text(predicted)} exceeds {fraction:.0%} of the "
        f"{bytes_text(available)} available"
    )
