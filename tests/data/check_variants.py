"""Test-only variants for `attnbench check` (loaded with --variant-file): one that NaNs only where no key is
visible, as adapters of transformers' attention and of multi_head_attention_forward do, and ones that fail in
ways check must record instead of crashing on."""

import math

import torch

from attnbench import variants


@variants.register("nan_no_key", description="-inf mask then softmax: NaN in rows that see no key only")
def nan_no_key(q, k, v, *, causal=False, key_lengths=None, scale=None, **kw):
    n_q, n_k = q.shape[2], k.shape[2]
    scores = (q @ k.transpose(-2, -1)) * (scale or 1 / math.sqrt(q.shape[-1]))  # (B, H, N_q, N_k)
    keep = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device)
    if causal:
        keep = keep.tril()
    keep = keep[None, None]
    if key_lengths is not None:
        keep = keep & (torch.arange(n_k, device=q.device)[None, :] < key_lengths[:, None])[:, None, None, :]
    return scores.masked_fill(~keep, float("-inf")).softmax(-1) @ v  # all -inf: NaN


@variants.register("check_raise", description="raises ValueError on every call")
def check_raise(q, k, v, **kw):
    raise ValueError("deliberate failure\nwith a second line")


@variants.register("check_garbage", description="returns a string, not a tensor")
def check_garbage(q, k, v, **kw):
    return "garbage"


def _refuse(problem):
    raise RuntimeError("a supports() hook that raises")


@variants.register("check_supports_raise", description="its capability check raises", supports=_refuse)
def check_supports_raise(q, k, v, **kw):
    return variants.get("naive").fn(q, k, v, **kw)


# ESC starts a terminal colour sequence, U+202E reverses the text after it in a terminal or a browser
HOSTILE_MESSAGE = "\x1b[31mred\x1b[0m \u202eevil\u202c done\rover"


@variants.register("control_chars", description="raises with ESC and U+202E in its message")
def control_chars(q, k, v, **kw):
    raise ValueError(HOSTILE_MESSAGE)


def _unknowable(device):
    raise RuntimeError("an available() hook that raises")


@variants.register(
    "check_available_raise", description="its availability check raises", available=_unknowable
)
def check_available_raise(q, k, v, **kw):
    return variants.get("naive").fn(q, k, v, **kw)


@variants.register(
    "tail_128", description="128-wide key tiles, counted as N // 128: drops a partial last one"
)
def tail_128(q, k, v, *, causal=False, key_lengths=None, scale=None, **kw):
    n_q, n_k = q.shape[2], k.shape[2]
    kept = min(n_k, max(1, n_k // 128) * 128)  # the keys past the last full tile are never read
    scores = (q @ k[:, :, :kept].transpose(-2, -1)) * (
        scale or 1 / math.sqrt(q.shape[-1])
    )  # (B, H, N_q, kept)
    keep = torch.ones(n_q, kept, dtype=torch.bool, device=q.device)
    if causal:
        keep = keep.tril()
    keep = keep[None, None]
    if key_lengths is not None:
        keep = keep & (torch.arange(kept, device=q.device)[None, :] < key_lengths[:, None])[:, None, None, :]
    return scores.masked_fill(~keep, float("-inf")).softmax(-1) @ v[:, :, :kept]


@variants.register("top_left_paged", paged=True, causal="lower-right", gqa=True, backward=False)
def top_left_paged(q, k, v, *, causal=False, key_lengths, block_table):
    """Declares FlashAttention's causal (lower-right) and masks top-left: each query sees its context's first
    keys, where a decode step's queries end the context."""
    from attnbench.variants.paged import gather_pages

    out = q.new_empty(*q.shape[:3], v.shape[-1])
    for b, n in enumerate(key_lengths.tolist()):
        kb, vb = (gather_pages(t, block_table[b : b + 1], n)[0] for t in (k, v))  # (H_kv, n, d)
        kb, vb = (t.repeat_interleave(q.shape[1] // t.shape[0], 0) for t in (kb, vb))  # (H, n, d)
        out[b] = torch.nn.functional.scaled_dot_product_attention(q[b], kb, vb, is_causal=causal)
    return out


def _paged_per_sequence(q, k, v, *, causal, key_lengths, block_table, read=lambda row, n: row, past=0):
    """Each sequence's context gathered through `read` of its row of block_table, `past` slots past its
    length where its last page has them, and seen by every query; its queries at the context's end."""
    from attnbench.variants.paged import gather_pages

    out, n_q, page = q.new_empty(*q.shape[:3], v.shape[-1]), q.shape[2], k.shape[1]
    for b, length in enumerate(key_lengths.tolist()):
        n = length + past if length % page else length
        row = read(block_table[b : b + 1, : -(-n // page)], n)
        kb, vb = (gather_pages(t, row, n)[0] for t in (k, v))  # (H_kv, n, d)
        kb, vb = (t.repeat_interleave(q.shape[1] // t.shape[0], 0) for t in (kb, vb))  # (H, n, d)
        i, j = torch.arange(n_q, device=q.device)[:, None], torch.arange(n, device=q.device)[None, :]
        seen = ((j <= length - n_q + i) if causal else (j < length)) | (j >= length)
        out[b] = torch.nn.functional.scaled_dot_product_attention(q[b], kb, vb, attn_mask=seen)
    return out


@variants.register("sorted_pages_paged", paged=True, causal="lower-right", gqa=True, backward=False)
def sorted_pages_paged(q, k, v, *, causal=False, key_lengths, block_table):
    """Reads each sequence's pages in physical order (its row of block_table sorted), not the table's."""
    read = lambda row, n: row.sort(dim=-1).values  # noqa: E731
    return _paged_per_sequence(
        q, k, v, causal=causal, key_lengths=key_lengths, block_table=block_table, read=read
    )


@variants.register("one_past_paged", paged=True, causal="lower-right", gqa=True, backward=False)
def one_past_paged(q, k, v, *, causal=False, key_lengths, block_table):
    """Reads one slot past each context in its partly filled last page (`j <= L` where `j < L` is meant)."""
    return _paged_per_sequence(
        q, k, v, causal=causal, key_lengths=key_lengths, block_table=block_table, past=1
    )
