"""torch.nn.attention.flex_attention under torch.compile: a block mask and a score_mod, compiled once.

FlexAttention (Dong et al. 2024, "Flex Attention: A Programming Model for Generating Optimized Attention
Kernels"; https://pytorch.org/docs/stable/nn.attention.flex_attention.html) turns a `mask_mod(b, h, q_idx,
kv_idx) -> bool` and a `score_mod(score, b, h, q_idx, kv_idx) -> score` into one fused kernel when called
under torch.compile (Triton on CUDA, a C++ template on CPU). Called without it, torch runs an unfused
version that materialises the scores, so this variant always calls the compiled function.

What a cell pays, and where the harness records it:
- the block mask (`create_block_mask`: which key blocks each query block sees) depends on the shape and the
  masking options only; it is built by the `setup` hook (setup_ms);
- compilation happens in the first call (first_call_ms): dynamo traces, inductor generates and compiles
  the kernel. Without a score mod or key padding, `dynamic=True`: one kernel with symbolic sizes serves
  every length (and the numerics probe's shape), so a sweep compiles it once per worker and dtype instead
  of once per length (issue 25: the quick preset paid five compiles of 3.6-4.5 s). Its steady-state
  speed against per-shape static kernels on the 2-core reference VM (B1 H8 d64 fp32, median of 7 calls,
  2026-11-25): N = 256 8.34 vs 8.00 ms, 512 16.0 vs 16.0, 1024 44.0 vs 49.0, 2048 168.0 vs 168.0: no
  loss. With a score mod (alibi, softcap) or a padding mask_mod, torch 2.13's CPU template fails to compile
  with symbolic sizes (C++ "'cur_qSplitSize9' was not declared"), so those plans keep `dynamic=False`:
  every shape its own static kernel, as a user who compiles per shape gets. On CUDA every plan is static:
  the symbolic Triton kernel was slower on an H100 (torch 2.11, B1 H16 N8192 d128 bf16, do_bench medians of
  3 rounds, benchmarks/flex_options.py, results/reference/gpu-checks-h100-2026-11-26): forward 1.384 ms
  against 1.272 static (-8%), forward+backward 6.02 against 4.98 ms (-17%), and a static compile per
  length costs 1-4 s there;
- both are kept in `_PLANS` for the life of the worker, keyed by everything they depend on, so a second
  cell or seed of the same shape pays neither again.

Masks follow variants/masks.py (causal top-left or lower-right, a window of W keys, key padding); rows that
see no key come out as zeros (flex's kernels write 0 where a row's logsumexp is -inf). Key padding is read
at call time from the key_lengths tensor the call is given (a mask_mod closing over it, rebuilt per call:
dynamo guards on the captured tensor's metadata, not its values, so no recompilation); the block mask is
built from the shape-only part of the mask with no "full" blocks (`separate_full_blocks=False`, or on a
torch without it, such as the GPU image's 2.11, the usual mask's full blocks folded into its partial ones),
so mask_mod runs on every block it visits and no block is wrongly skipped or treated as full for other key
lengths.

Score mods follow variants/mods.py: ALiBi with the slope of the query head (GQA changes nothing) and the
masks' lower-right offset, softcap C * tanh(s / C) on the scaled score (flex applies `scale` before
score_mod: the docs' "score: the attention score", q.k * scale).

Known on CPU (torch 2.13, measured 2026-11-23): with a mask_mod, some key lengths that are not multiples of
16 (N_k = 24, 40) gave wrong rows or NaN from the compiled C++ template, the same every call of one compiled
kernel, while the uncompiled flex (the same mask_mod) and N_k = 32, 48, 256 were right. It is not refused
here (the rule is not known exactly); the harness's float64 gate marks such cells `wrong`.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import inspect
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import lazy
from .errors import UnsupportedError
from .masks import diagonal_offset
from .mods import NONE, mod_kind, parse_mod, position_offset, softcap_value
from .problem import Problem
from .registry import register

torch = lazy.module("torch", globals())

# The score mods flex implements as score_mods (variants/mods.py fixes their rules), in its capability.
MODS = ("alibi", "softcap")

# Dynamo keeps at most recompile_limit (8 by default) compiled versions of one function and then runs it
# eagerly: for flex_attention that is the unfused path, silently. A sweep compiles one version per dtype
# and options, so the limit is raised for the worker, and reaching it is made an error, never a fallback.
RECOMPILE_LIMIT = 4096

# torch.nn.attention.flex_attention's documented dtypes: the CPU template takes float32, float16 and
# bfloat16 only (torch/_inductor/kernel/flex/flex_cpu.py refuses float64 with NotImplementedError), and
# torch's own flex tests on CUDA cover the same three.
DTYPES = ("float32", "float16", "bfloat16")
# "NYI: embedding dimension of the query, key, and value must be at least 16" (the Triton kernel: tl.dot
# needs K >= 16; torch/_inductor/kernel/flex/flex_attention.py). The CPU template has no such limit.
CUDA_MIN_HEAD_DIM = 16


def _flex_module():
    """torch.nn.attention.flex_attention, imported on first use (it pulls in dynamo)."""
    from torch.nn.attention import flex_attention as fa

    return fa


@functools.cache
def _import_reason() -> str | None:
    """Why flex cannot run on this torch and Python, decided without importing it: importing
    torch.nn.attention.flex_attention pulls in torch._dynamo, 3 of the 8 s `attnbench list` took (issue 26).
    So availability asks importlib whether the module is there, and dynamo's own Python rule is read from
    its source; the worker that runs flex imports it and asks dynamo itself (_compile_reason)."""
    try:
        found = importlib.util.find_spec("torch.nn.attention.flex_attention")
    except (ImportError, ValueError):
        found = None
    if found is None:
        return f"this torch ({torch.__version__}) has no torch.nn.attention.flex_attention (torch >= 2.5)"
    limit = _dynamo_python_limit()
    if limit is not None and sys.version_info >= limit:
        return _NO_DYNAMO
    return None


_NO_DYNAMO = f"torch.compile (dynamo) does not support this Python ({sys.version.split()[0]}), flex needs it"


def _dynamo_python_limit() -> tuple[int, int] | None:
    """The first Python dynamo refuses, as its check_if_dynamo_supported says (torch 2.13: `if
    sys.version_info >= (3, 15): raise`), read from torch/_dynamo/eval_frame.py without importing it (as
    harness.measure.fingerprint.torch_version reads torch/version.py); None where the text says no such
    rule."""
    spec = importlib.util.find_spec("torch")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        try:
            text = Path(folder, "_dynamo", "eval_frame.py").read_text(encoding="utf-8")
        except OSError:
            continue
        body = text.partition("def check_if_dynamo_supported")[2].partition("\ndef ")[0]
        found = re.search(r"sys\.version_info\s*>=\s*\(\s*3\s*,\s*(\d+)\s*\)", body)
        return (3, int(found.group(1))) if found else None
    return None


@functools.cache
def _compile_reason() -> str | None:
    """Why flex cannot run here, asked of torch itself: imports flex_attention (and dynamo with it), so only
    where flex is about to run (a worker's first plan), never in a listing or the parent's precheck."""
    try:
        _flex_module()
    except ImportError as exc:
        return (
            f"this torch ({torch.__version__}) has no torch.nn.attention.flex_attention (torch >= 2.5): {exc}"
        )
    if not torch._dynamo.is_dynamo_supported():
        return _NO_DYNAMO
    return None


@functools.cache
def _has_separate_full_blocks() -> bool:
    """Whether create_block_mask takes separate_full_blocks= (torch 2.13 does, the GPU image's 2.11 not)."""
    return "separate_full_blocks" in inspect.signature(_flex_module().create_block_mask).parameters


def _block_mask(mask_mod, n_q: int, n_k: int, device, *, every_block_partial: bool):
    """create_block_mask over (N_q, N_k) for every batch and head. every_block_partial: no block is
    "full" (each block flex visits runs the mask_mod, as key padding needs): separate_full_blocks=False
    where torch has it; elsewhere the usual mask with its full blocks folded into the partial ones through
    BlockMask's public to_dense and from_kv_blocks (torch >= 2.5), the same blocks, visited in order."""
    fa = _flex_module()
    if not every_block_partial:
        return fa.create_block_mask(mask_mod, None, None, n_q, n_k, device=device)
    if _has_separate_full_blocks():
        return fa.create_block_mask(mask_mod, None, None, n_q, n_k, device=device, separate_full_blocks=False)
    usual = fa.create_block_mask(mask_mod, None, None, n_q, n_k, device=device)
    visited = usual.to_dense().to(torch.int32)  # (B, H, query blocks, key blocks): 1 where partial or full
    counts = visited.sum(-1, dtype=torch.int32)
    # each row's visited key blocks first, in ascending order (a stable sort of 1s before 0s)
    order = torch.sort(visited, dim=-1, descending=True, stable=True).indices.to(torch.int32)
    return fa.BlockMask.from_kv_blocks(
        counts, order, BLOCK_SIZE=usual.BLOCK_SIZE, mask_mod=mask_mod, seq_lengths=(n_q, n_k)
    )


def _available(device: str) -> str | None:
    reason = _import_reason()
    if reason:
        return reason
    if device == "cpu":
        # torch's own gate for the CPU template (flex_cpu.check_cpu_supported): AVX2, not macOS; without it
        # compilation fails with "torch.compile on current platform is not supported for CPU"
        avx2 = torch.cpu._is_avx2_supported()
        if not avx2 or sys.platform == "darwin":
            return (
                "torch compiles flex_attention for CPU only on x86 with AVX2, not macOS (check_cpu_supported)"
            )
    if device == "cuda":
        from torch.utils._triton import has_triton, has_triton_package

        if not has_triton_package():
            return "flex_attention on CUDA compiles Triton kernels, and Triton is not installed"
        # has_triton() reads the GPU's properties, which initialises CUDA: only where this process has
        # (the worker; the parent that plans cells stays without a CUDA context, as in sdpa._cuda_capability)
        if torch.cuda.is_initialized() and not has_triton():
            return "Triton does not support this GPU (torch's has_triton(): compute capability below 7.0)"
    return None


@functools.cache
def _cpu_backward_reason() -> str:
    """torch's own reason for refusing backward on CPU, asked of flex_attention's input check."""
    check = getattr(_flex_module(), "_validate_device", None)
    if check is not None:
        t = torch.empty(1, 1, 1, 16, requires_grad=True)
        try:
            check(t, t, t)
        except NotImplementedError as exc:
            return f"torch refused flex_attention: {exc}"
    # the text of torch 2.5 to 2.13 (flex_attention._validate_device), where the check cannot be asked
    return "torch refused flex_attention: FlexAttention does not support backward on CPU."


def _supports(p: Problem) -> str | None:
    if p.device == "cpu" and p.backward:
        return _cpu_backward_reason()
    if p.device == "cuda" and min(p.d_k, p.d_v) < CUDA_MIN_HEAD_DIM:
        return (
            f"flex_attention's Triton kernel needs head dims >= {CUDA_MIN_HEAD_DIM} (torch: NYI), "
            f"got d_k {p.d_k}, d_v {p.d_v}"
        )
    return None


# ---- masks and score mods, by the rules of masks.py and mods.py -----------------------------------------


def _structure_mask(n_q: int, n_k: int, causal: bool, causal_align: str, window: int):
    """The shape-only part of the mask as a mask_mod (causal, window), or None when it hides nothing."""
    if not causal:
        return None
    off = diagonal_offset(n_q, n_k, causal_align)  # t_i - i

    if window:

        def windowed(b, h, q_idx, kv_idx):
            t = q_idx + off
            return (kv_idx <= t) & (kv_idx > t - window)

        return windowed

    def causal_mask(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + off

    return causal_mask


def _padded(structure, key_lengths: torch.Tensor):
    """The full mask_mod of one call: key j of batch b is visible when j < key_lengths[b] (read from the
    tensor at run time), and the structure allows it."""

    def padded(b, h, q_idx, kv_idx):
        keep = kv_idx < key_lengths[b]
        return keep if structure is None else keep & structure(b, h, q_idx, kv_idx)

    return padded


def _packed(structure, cu_seqlens: tuple[int, ...], device):
    """The mask_mod of a packed batch: query and key in one sequence (the sequence of each of the T rows,
    a tensor the mask_mod indexes), and the structure allows it."""
    lengths = torch.tensor([b - a for a, b in zip(cu_seqlens, cu_seqlens[1:], strict=False)], device=device)
    seq = torch.repeat_interleave(torch.arange(len(lengths), device=device), lengths)

    def packed(b, h, q_idx, kv_idx):
        same = seq[q_idx] == seq[kv_idx]
        return same if structure is None else same & structure(b, h, q_idx, kv_idx)

    return packed


def _score_mod(mod: str, heads: int, n_q: int, n_k: int, causal: bool, causal_align: str):
    """The score_mod for a canonical mod text (mods.parse_mod), or None for 'none'."""
    kind = mod_kind(mod)
    if kind == NONE:
        return None
    if kind == "softcap":
        cap = softcap_value(mod)

        def softcap(score, b, h, q_idx, kv_idx):
            return cap * torch.tanh(score / cap)

        return softcap
    if kind == "alibi":
        off = position_offset(n_q, n_k, causal=causal, causal_align=causal_align)  # t_i - i

        def alibi(score, b, h, q_idx, kv_idx):
            slope = torch.exp2(-8.0 * (h + 1) / heads)  # m_h of the query head h (mods.alibi_slope)
            return score + slope * (kv_idx - (q_idx + off))

        return alibi
    raise ValueError(f"flex has no score_mod for mod {mod!r} (it implements {', '.join(MODS)})")


# ---- plans: what one shape and set of options needs, made once per worker --------------------------------


@functools.cache
def _compiled(dynamic: bool = False) -> Callable[..., Any]:
    """torch.compile(flex_attention, dynamic=dynamic), with dynamo's recompile limit raised for a sweep and
    reaching it made an error (see RECOMPILE_LIMIT). dynamic=True: one kernel for every length (plans
    without a score mod or padding, see the module's docstring)."""
    cfg = torch._dynamo.config
    # recompile_limit is the torch >= 2.6 name of cache_size_limit (an alias of it in 2.13)
    name = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
    setattr(cfg, name, max(getattr(cfg, name), RECOMPILE_LIMIT))
    acc = "accumulated_recompile_limit" if hasattr(cfg, "accumulated_recompile_limit") else None
    acc = acc or ("accumulated_cache_size_limit" if hasattr(cfg, "accumulated_cache_size_limit") else None)
    if acc:
        setattr(cfg, acc, max(getattr(cfg, acc), RECOMPILE_LIMIT))
    if hasattr(cfg, "fail_on_recompile_limit_hit"):
        cfg.fail_on_recompile_limit_hit = True
    return torch.compile(_flex_module().flex_attention, dynamic=dynamic)


@dataclass(frozen=True)
class _Plan:
    """A shape's block mask, mask and score mods, and the compiled function they are run with."""

    key: tuple
    block_mask: Any  # a BlockMask (of full blocks when nothing is masked)
    structure: Callable[..., Any] | None  # the shape-only mask_mod (causal, window)
    padding: bool  # the call's key_lengths complete the mask (a mask_mod per call)
    score_mod: Callable[..., Any] | None
    gqa: bool
    packed: bool = False  # a packed batch: the structure holds its sequences (variants.lengths)

    @property
    def dynamic(self) -> bool:
        """Whether this plan runs the kernel compiled with symbolic sizes: on CPU only (no loss there), and
        without a score mod, padding or a packed batch; on CUDA the symbolic Triton kernel is slower (see
        the module's docstring)."""
        # a packed batch's mask_mod indexes its rows' sequence: torch 2.13's CPU template, compiled with
        # symbolic sizes, emits C++ that does not compile with it and causal masking ("cur_kvSplitSize7 was
        # not declared"); compiled for its shape it runs
        return self.key[0] == "cpu" and self.score_mod is None and not self.padding and not self.packed

    def __call__(self, q, k, v, key_lengths, scale):
        block_mask = self.block_mask
        if self.padding:  # the same block mask, the mask_mod reading this call's key lengths
            block_mask = copy.copy(block_mask)
            block_mask.mask_mod = _padded(self.structure, key_lengths.to(q.device))
        try:
            return _compiled(self.dynamic)(
                q, k, v, score_mod=self.score_mod, block_mask=block_mask, scale=scale, enable_gqa=self.gqa
            )
        except Exception as exc:  # torch's "not implemented" (inductor wraps it): the cell is unsupported
            reason = _not_implemented(exc)
            if reason is None:
                raise
            raise UnsupportedError(f"torch refused flex_attention: {reason}") from exc


def _not_implemented(exc: BaseException) -> str | None:
    """The message of a NotImplementedError in exc's chain (inductor wraps lowering errors), or None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, NotImplementedError):
            return " ".join(str(exc).split())
        text = str(exc)
        if "NotImplementedError: " in text:  # InductorError / BackendCompilerFailed keep only the text
            return " ".join(text.split("NotImplementedError: ", 1)[1].split("\n", 1)[0].split())
        exc = exc.__cause__ or exc.__context__
    return None


_PLANS: dict[tuple, _Plan] = {}


def _key(
    q, k, v, causal: bool, padding: bool, causal_align: str, window: int, mod: str, cu_seqlens=None
) -> tuple:
    """What a plan depends on: shapes, dtype, device and options (a packed batch's offsets among them),
    never the values of q, k, v."""
    align = causal_align if causal else "top-left"  # the alignment means nothing without causal masking
    seqs = None if cu_seqlens is None else tuple(int(x) for x in cu_seqlens.tolist())
    return (str(q.device), q.dtype, tuple(q.shape), tuple(k.shape), tuple(v.shape), causal, align, window,
            padding, mod, seqs)  # fmt: skip


def _plan(
    q, k, v, *, causal: bool, padding: bool, causal_align: str, window: int, mod: str, cu_seqlens=None
) -> _Plan:
    """The cached plan for this shape and options; builds its block mask the first time."""
    key = _key(q, k, v, causal, padding, causal_align, window, mod, cu_seqlens)
    plan = _PLANS.get(key)
    if plan is not None:
        return plan
    reason = _available(q.device.type) or _compile_reason()
    if reason:
        raise UnsupportedError(reason)
    fa = _flex_module()
    n_q, n_k = q.shape[2], k.shape[2]
    structure = _structure_mask(n_q, n_k, causal, causal_align, window)
    if key[-1] is not None:  # a packed batch: its block mask skips the blocks of no sequence's pairs
        structure = _packed(structure, key[-1], q.device)
    # with padding every visited block runs the mask_mod (no "full" blocks): which blocks are full
    # depends on the key lengths, values this plan must not depend on. Where nothing is masked, a block
    # mask of full blocks (noop_mask) and not block_mask=None: flex's default mask runs the mask_mod on
    # every block, 1.26x slower on CPU (B1 H8 N2048 d64 fp32: 130 ms against 103 ms, 7 alternating rounds)
    block_mask = _block_mask(structure or fa.noop_mask, n_q, n_k, q.device, every_block_partial=padding)
    plan = _Plan(
        key=key,
        block_mask=block_mask,
        structure=structure,
        padding=padding,
        score_mod=_score_mod(mod, q.shape[1], n_q, n_k, causal, causal_align),
        gqa=k.shape[1] != q.shape[1],
        packed=key[-1] is not None,
    )
    _PLANS[key] = plan
    return plan


def _refuse_unsupported_call(q, k, v, dropout_p: float) -> None:
    if dropout_p:
        raise UnsupportedError("flex_attention has no dropout (torch's flex_attention takes no dropout_p)")
    # torch checks requires_grad itself, in or out of no_grad (flex_attention._validate_device)
    if q.device.type == "cpu" and (q.requires_grad or k.requires_grad or v.requires_grad):
        raise UnsupportedError(_cpu_backward_reason())


def setup(
    q, k, v, *, causal=False, key_lengths=None, causal_align="top-left", window=0, mod="none",
    cu_seqlens=None,
) -> Callable[..., Any]:  # fmt: skip
    """The harness's setup hook: this shape's plan (its block mask built now, timed as setup_ms; a packed
    batch's from its offsets); the returned callable compiles on its first call (first_call_ms) and runs
    compiled after that. A call with other offsets than setup's gets its own plan, never setup's."""
    mod = parse_mod(mod)
    plan = _plan(q, k, v, causal=causal, padding=key_lengths is not None, causal_align=causal_align,
                 window=window, mod=mod, cu_seqlens=cu_seqlens)  # fmt: skip

    def bound(
        q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None, causal_align="top-left",
        window=0, mod="none", cu_seqlens=None,
    ):  # fmt: skip
        _refuse_unsupported_call(q, k, v, dropout_p)
        mod = parse_mod(mod)
        padding = key_lengths is not None
        this = plan
        if _key(q, k, v, causal, padding, causal_align, window, mod, cu_seqlens) != plan.key:
            this = _plan(q, k, v, causal=causal, padding=padding, causal_align=causal_align, window=window,
                         mod=mod, cu_seqlens=cu_seqlens)  # fmt: skip
        return this(q, k, v, key_lengths, scale)

    return bound


def _compile_key(p: Problem) -> tuple:
    """The kernel a cell compiles (estimate's compile key), so that a worker's cells of one key share a
    compile: its dtype, pass and masks; its shape too with a score mod, key padding or a packed batch (a
    packed batch's pattern is not in it: the patterns of one mean length hold the same tokens). Measured:
    without them, one compile served every N of a sweep (the first N's first call 5 s on the 2-core VM,
    1.4 s on an H200, the next N's milliseconds); with a packed batch, one per mean length."""
    key = (p.device, p.dtype, p.pass_, p.causal, p.causal_align, p.window, p.mod, p.padding > 0, p.lengths)
    if p.mod == NONE and not p.padding and p.lengths == "none":
        # dynamo specialises a size of 1, the query heads a K/V head serves and the lower-right diagonal's
        # offset (an int the mask_mod holds)
        offset = p.seq_k - p.seq_len if p.causal_align == "lower-right" else 0
        return key + (p.seq_len == 1, p.heads // (p.kv_heads or p.heads), offset)
    return key[:-1] + (p.batch, p.heads, p.kv_heads, p.seq_len, p.seq_k, p.d_k, p.d_v)


@register(
    "flex",
    description="torch.nn.attention.flex_attention under torch.compile (block mask + score_mod, per shape)",
    dtypes=DTYPES,
    memory="linear",
    dropout=False,
    backward=True,  # on CUDA; torch refuses it on CPU (_supports gives its reason)
    available=_available,
    supports=_supports,
    setup=setup,
    gqa=True,
    lower_right=True,
    window=True,
    mods=MODS,
    varlen="tiles:128",  # the block mask's 128 x 128 blocks that hold a pair of one sequence
    compiles=_compile_key,
)
def flex(
    q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None, causal_align="top-left", window=0,
    mod="none", cu_seqlens=None,
):  # fmt: skip
    """flex_attention on (q, k, v): q (B, H, N_q, d_k), k (B, H_kv, N_k, d_k), v (B, H_kv, N_k, d_v) ->
    (B, H, N_q, d_v). Builds (once per shape and options) the block mask, then calls the compiled kernel."""
    _refuse_unsupported_call(q, k, v, dropout_p)
    mod = parse_mod(mod)
    plan = _plan(q, k, v, causal=causal, padding=key_lengths is not None, causal_align=causal_align,
                 window=window, mod=mod, cu_seqlens=cu_seqlens)  # fmt: skip
    return plan(q, k, v, key_lengths, scale)
