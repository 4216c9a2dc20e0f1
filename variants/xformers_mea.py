"""xformers.ops.memory_efficient_attention, adapted to attnbench's (B, H, N, d) calling convention.

xformers takes (B, N, H, K) tensors and expresses masks as attention-bias objects:
LowerTriangularMask for top-left causal, BlockDiagonalPaddedKeysMask for key padding (the batch is
packed into one sequence of B blocks, keys padded to N_k). Its causal + padded-keys masks are aligned
bottom-right, which differs from attnbench's top-left convention, so that combination is refused.

What a timed call does, and what it leaves to others (the project's GPU issue: no extra work in it):
- the inputs come as (B, H, N, K) tensors over (B, N, H, K) memory (`layout="bnhd"`: the harness makes
  them so, outside the timed calls), so `transpose(1, 2)` is contiguous and the padded path's packing
  reshape is a view: no copy of q, k or v. Called with (B, H, N, K)-contiguous tensors it still answers
  right, paying those copies;
- the attention bias is made by the `setup` hook (setup_ms): the padded-keys one from key_lengths' values,
  a device->host read (`.tolist()`), once per cell instead of once per call. The callable setup returns
  reuses it only for the very key_lengths tensor it was made from, unwritten since (`_Plan.fits`, no
  sync); any other call (the harness's fresh-input check) makes a bias of its own.

A packed batch (variants.lengths) is one (1, T, H, K) sequence under BlockDiagonalMask (or
BlockDiagonalCausalMask), made in setup from the offsets' values, reused for the very cu_seqlens tensor.

The capability declares grouped-query heads (xformers' 5-D BMGHK form, k and v expanded without a copy),
lower-right causal (LowerTriangularFromBottomRightMask) and sliding windows
(LowerTriangularFromBottomRightLocalAttentionMask, bottom-right aligned: refused for a top-left cell with
N_q != N_k), each gated on an H200 (results/reference/gpu-checks-h200-2026-11-27). xformers itself refuses
the backward of BMGHK and padded-keys inputs; those cells are `unsupported` with its reason.

The 0.0.35 wheel links its `_C` to CUDA 12's runtime: on a CUDA 13 build of torch, load_cuda_runtime_12
loads it from nvidia-cuda-runtime-cu12 first; the row's `kernel` names the operators xformers dispatched to.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from .errors import UnsupportedError
from .problem import Problem
from .registry import register


def _version() -> str | None:
    try:
        return version("xformers")
    except PackageNotFoundError:
        return None


CUDART_12 = "libcudart.so.12"


@functools.cache  # a process-wide effect: loaded (or not) once, asked before every xformers import
def load_cuda_runtime_12() -> str | None:
    """Make libcudart.so.12 loadable before xformers imports, where this process has none. xformers 0.0.35's
    wheel (Python and torch ABI independent) links its `_C.so` to CUDA 12's runtime by soname, and a CUDA 13
    build of torch ships only libcudart.so.13: `_C` then fails to load and xformers refuses every operator,
    the `-pt` ones that call torch's own kernels too. The runtime of the wheel nvidia-cuda-runtime-cu12
    (nvidia/cuda_runtime/lib on sys.path) is loaded globally here, so that the dynamic linker finds it by
    soname when `_C.so` loads. Returns what was loaded (the soname where the system has it), or None where
    neither has it or this is no CUDA build of torch."""
    import ctypes
    import sys

    import torch

    if torch.version.cuda is None or not sys.platform.startswith("linux"):
        return None
    try:
        ctypes.CDLL(CUDART_12, mode=ctypes.RTLD_GLOBAL)
        return CUDART_12
    except OSError:
        pass
    for entry in sys.path:
        path = Path(entry or ".", "nvidia", "cuda_runtime", "lib", CUDART_12)
        if path.is_file():
            try:
                ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
            except OSError:
                continue
            return str(path)
    return None


def _extensions_problem() -> str | None:
    """Why xformers' own C++/CUDA operators did not load, in one line, or None. A wheel is built for one
    torch, CUDA and Python (0.0.35: torch 2.10.0+cu128, Python 3.10); on another only the operators that
    call torch's own kernels are left, and xformers refuses those on some inputs too. Seen on the GPU image
    (torch 2.11.0+cu130, Python 3.12, 2026-11-25): every cell was refused."""
    load_cuda_runtime_12()
    try:
        from xformers import _cpp_lib
    except Exception:  # not this layout of xformers: its dispatch error still says why
        return None
    exc = getattr(_cpp_lib, "_cpp_library_load_exception", None)
    if exc is None:
        return None
    info = getattr(exc, "build_info", None)
    try:
        built = (
            f"built for torch {info.torch_version} (CUDA {info.cuda_version}), Python {info.python_version}"
        )
    except Exception:
        built = "built for another torch or Python"
    import platform

    import torch

    loaded = load_cuda_runtime_12()
    runtime = (
        f"{CUDART_12} from {loaded}" if loaded else f"no {CUDART_12} (pip install nvidia-cuda-runtime-cu12)"
    )
    return (
        f"xformers {_version()}'s CUDA operators did not load: {built}; this is torch {torch.__version__}, "
        f"Python {platform.python_version()}, {runtime} ({type(exc).__name__}: "
        f"{' '.join(str(exc).split())[:160]})"
    )


def _no_operator_reason(exc: BaseException) -> str:
    """xformers' 'No operator found' text cut to what decides: each operator and its first reason, after
    the reason its extensions did not load (where they did not)."""
    text = str(exc)
    reasons = re.findall(r"`([^`]+)` is not supported because:\s*\n?\s*([^\n]+)", text)
    found = "; ".join(f"{op}: {' '.join(why.split())}" for op, why in reasons)
    if not found:
        found = " ".join(text.split())
    head = _extensions_problem()
    out = (
        f"{head}; no operator takes these inputs ({found})"
        if head
        else f"no xformers operator takes these inputs ({found})"
    )
    return out[:600]


def _declared_devices() -> dict[str, set[str]]:
    """{operator module: the devices its forward operator supports}, as xformers' own sources declare them
    (0.0.35: `class FwOp(AttentionFwOpBase): SUPPORTED_DEVICES: Set[str] = {"cuda"}` in each of
    xformers/ops/fmha/*.py), read without importing xformers: its package import pulls in torch._dynamo
    and scipy (xformers/checkpoint.py), which took `attnbench list` from 1.7 to 3.6 s with the 0.0.35 wheel
    installed on the 2-core VM, and printed xformers' warning about its CUDA operators (issue 26; flex's
    availability reads dynamo's rule from its source so). {} where the sources say nothing readable (another
    layout): the worker's import and xformers' dispatch then say why a cell cannot run."""
    spec = importlib.util.find_spec("xformers")
    files = []
    for folder in (spec.submodule_search_locations or []) if spec else []:
        for path in sorted(Path(folder, "ops", "fmha").glob("*.py")):
            try:
                stat = path.stat()
            except OSError:
                continue
            files.append((str(path), stat.st_mtime_ns, stat.st_size))
    return _declared_in(tuple(files))


@functools.cache
def _declared_in(files: tuple[tuple[str, int, int], ...]) -> dict[str, set[str]]:
    """_declared_devices from these (path, mtime, size) sources, each set of them parsed once per process:
    availability is asked before every cell is measured (Variant.check), and a changed file is read again."""
    declared: dict[str, set[str]] = {}
    for name, _mtime, _size in files:
        path = Path(name)
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            continue
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "FwOp"):
            devices = _literal_devices(cls)
            if devices is not None:
                declared.setdefault(path.stem, set()).update(devices)
    return declared


def _literal_devices(cls: ast.ClassDef) -> set[str] | None:
    """The class body's `SUPPORTED_DEVICES = {...}` as a set, or None where it has no literal one (another
    operator's alias, `SUPPORTED_DEVICES = FwOp.SUPPORTED_DEVICES`, says nothing by itself)."""
    for stmt in cls.body:
        target = stmt.targets[0] if isinstance(stmt, ast.Assign) else getattr(stmt, "target", None)
        if getattr(target, "id", None) != "SUPPORTED_DEVICES" or stmt.value is None:
            continue
        try:
            devices = ast.literal_eval(stmt.value)
        except ValueError:
            return None
        return set(map(str, devices)) if isinstance(devices, (set, list, tuple)) else None
    return None


def _available(device: str) -> str | None:
    if importlib.util.find_spec("xformers") is None:
        return "xformers is not installed (pip install 'attnbench[xformers]')"
    # Which devices xformers' forward operators support, from its sources (0.0.35: cuda only, no CPU kernel).
    declared = _declared_devices()
    if declared and not any(device in devices for devices in declared.values()):
        return (
            f"xformers {_version()} has no {device.upper()} kernel: no memory_efficient_attention "
            f"operator supports device={device} ({', '.join(sorted(declared))})"
        )
    return None


def _import_ops():
    """xformers.ops and its fmha module, imported where a cell is about to run (never for availability),
    CUDA 12's runtime loaded first where the process has none (load_cuda_runtime_12)."""
    load_cuda_runtime_12()
    try:
        import xformers.ops as xops
        from xformers.ops import fmha
    except Exception as exc:  # a broken binary install: the cell says what went wrong
        why = f"xformers {_version()} failed to import: {type(exc).__name__}: {exc}"
        raise UnsupportedError(why) from None
    return xops, fmha


def _supports(p: Problem) -> str | None:
    if p.causal and p.padding:
        return "xformers' causal padded-keys masks are bottom-right aligned; attnbench's causal is top-left"
    if p.padding and (p.window or (p.kv_heads or p.heads) != p.heads):
        return "xformers' padded-keys mask is taken here without windows or grouped-query heads"
    if p.window and p.causal_align != "lower-right" and p.seq_len != p.seq_k:
        return "xformers' local attention masks are bottom-right aligned; this cell's causal is top-left"
    if p.packed and p.window:
        return "xformers' block-diagonal masks are taken here without windows"
    return None


def _version_of(t) -> int | None:
    """t's count of in-place writes (torch bumps it on each); None where torch keeps none (inference mode)."""
    try:
        return t._version
    except RuntimeError:
        return None


@dataclass(frozen=True)
class _Plan:
    """What a call needs besides q, k, v: xformers' attention bias, and the inputs it was made for."""

    key: tuple  # (B, H_q, H_kv, N_q, N_k, causal, causal_align, window): what the bias and views are for
    key_lengths: Any  # the tensor the padded-keys bias was made from; None: no key padding
    version: int | None  # key_lengths' in-place write count when the bias was made
    cu_seqlens: Any  # the offsets a packed batch's block-diagonal bias was made from; None: not packed
    cu_version: int | None
    bias: Any  # None, or one of xformers' attention biases (_bias)
    attend: Callable[..., Any]  # xformers.ops.memory_efficient_attention

    def fits(self, q, k, key_lengths, cu_seqlens=None, **options) -> bool:
        """Whether this plan's bias is right for a call, decided without reading key_lengths' (or a packed
        batch's cu_seqlens') values (a device->host sync): the same shape and mask, and for key padding (or
        a pack) the very tensor the bias was made from, unwritten since. Any other tensor, equal values or
        not, gets a plan of its own."""
        if _key(q, k, **options) != self.key:
            return False
        return _same(key_lengths, self.key_lengths, self.version) and _same(
            cu_seqlens, self.cu_seqlens, self.cu_version
        )

    def views(self, q, k, v):
        """q, k, v as xformers takes them: (B, N, H, d) views; with layout="bnhd" inputs they are
        contiguous, so nothing copies them. With key padding, the batch as one sequence of B blocks:
        (1, B*N, H, d), a view. With fewer k/v heads (grouped-query), xformers' BMGHK form: q as (B, N, G,
        H_q/G, d) and k, v expanded over each group's query heads without a copy (stride 0): query head h
        reads k/v head h // (H_q/G), as attnbench's convention has it."""
        qx, kx, vx = (t.transpose(1, 2) for t in (q, k, v))
        if self.key_lengths is not None:
            qx, kx, vx = (t.reshape(1, -1, *t.shape[2:]) for t in (qx, kx, vx))
        groups, heads = kx.shape[2], qx.shape[2]
        if groups != heads:
            per = heads // groups
            qx = qx.reshape(*qx.shape[:2], groups, per, qx.shape[-1])
            kx, vx = (t.unsqueeze(3).expand(*t.shape[:3], per, t.shape[-1]) for t in (kx, vx))
        return qx, kx, vx

    def __call__(self, q, k, v, dropout_p: float, scale: float | None):
        b, n_q = q.shape[0], q.shape[2]
        qx, kx, vx = self.views(q, k, v)
        try:
            out = self.attend(qx, kx, vx, attn_bias=self.bias, p=dropout_p, scale=scale)
        except NotImplementedError as exc:  # no operator supports these inputs: xformers says which and why
            raise UnsupportedError(_no_operator_reason(exc)) from None
        return out.reshape(b, n_q, q.shape[1], -1).transpose(1, 2)  # (B, H, N_q, d_v)


def _same(given, made_from, version: int | None) -> bool:
    """Whether `given` is the very tensor a bias was made from (`made_from`, at write count `version`)."""
    if given is None or made_from is None:
        return given is made_from
    now = _version_of(given)
    return given is made_from and now is not None and now == version


def _key(q, k, *, causal=False, causal_align="top-left", window=0) -> tuple:
    return (q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], causal, causal_align, window)


def kernel(q, k, v, *, key_lengths=None, dropout_p=0.0, scale=None, cu_seqlens=None, **options) -> str | None:
    """The kernel hook (the row's `kernel`): the operator xformers' dispatch picks for these inputs, as
    memory_efficient_attention picks it (fmha._dispatch_fw; with the backward's, `fwd + bwd`, where q
    needs a gradient): cutlassF-pt, fa2F@..., fa3F@..."""
    plan = _plan(q, k, key_lengths, cu_seqlens, **options)
    _, fmha = _import_ops()
    qx, kx, vx = plan.views(q, k, v)
    inp = fmha.Inputs(query=qx, key=kx, value=vx, attn_bias=plan.bias, p=0.0, scale=None)
    grad = q.requires_grad
    forward = fmha.dispatch._dispatch_fw(inp, grad).NAME
    if not grad:
        return forward
    return f"{forward} + {fmha.dispatch._dispatch_bw(inp, varlen_lse_packed=None).NAME}"


def _bias(fmha, q, k, key_lengths, causal: bool, causal_align: str, window: int, cu_seqlens=None):
    """xformers' attention bias for attnbench's mask (variants/masks.py): top-left causal is
    LowerTriangularMask, lower-right LowerTriangularFromBottomRightMask, a window of W keys (causal) its
    LowerTriangularFromBottomRightLocalAttentionMask(W) (bottom-right aligned: the same as top-left when
    N_q = N_k, and refused otherwise), key padding a BlockDiagonalPaddedKeysMask over the packed batch
    (reading key_lengths' values: a device->host sync), a packed batch's BlockDiagonalMask, or
    BlockDiagonalCausalMask with causal (each sequence's queries and keys start together: top-left and
    bottom-right agree), from its lengths (a sync too)."""
    b, n_q, n_k = q.shape[0], q.shape[2], k.shape[2]
    biases = fmha.attn_bias
    if cu_seqlens is not None:
        lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()
        mask = biases.BlockDiagonalCausalMask if causal else biases.BlockDiagonalMask
        return mask.from_seqlens(lengths, device=q.device)
    if key_lengths is not None:
        return biases.BlockDiagonalPaddedKeysMask.from_seqlens(
            q_seqlen=[n_q] * b, kv_padding=n_k, kv_seqlen=key_lengths.tolist(), device=q.device
        )
    if window:
        return biases.LowerTriangularFromBottomRightLocalAttentionMask(window)
    if causal and causal_align == "lower-right" and n_q != n_k:
        return biases.LowerTriangularFromBottomRightMask()
    return biases.LowerTriangularMask() if causal else None


def _plan(q, k, key_lengths, cu_seqlens=None, **options) -> _Plan:
    """The attention bias for these inputs, and what it was made for. For key padding it reads key_lengths'
    values (.tolist(): a device->host sync), which is why the harness's setup hook makes it, once per cell."""
    b, h_q, h_kv, n_q, n_k, causal, causal_align, window = key = _key(q, k, **options)
    problem = Problem(heads=h_q, kv_heads=h_kv, seq_len=n_q, seq_k=n_k, causal=causal,
                      padding=0.25 if key_lengths is not None else 0.0, causal_align=causal_align,
                      window=window, lengths="none" if cu_seqlens is None else "packed")  # fmt: skip
    refused = _supports(problem)
    if refused:
        raise UnsupportedError(refused)
    xops, fmha = _import_ops()
    return _Plan(
        key=key,
        key_lengths=key_lengths,
        version=None if key_lengths is None else _version_of(key_lengths),
        cu_seqlens=cu_seqlens,
        cu_version=None if cu_seqlens is None else _version_of(cu_seqlens),
        bias=_bias(fmha, q, k, key_lengths, causal, causal_align, window, cu_seqlens),
        attend=xops.memory_efficient_attention,
    )


def setup(q, k, v, *, key_lengths=None, cu_seqlens=None, **options) -> Callable[..., Any]:
    """The harness's setup hook (setup_ms): the attention bias made now, the padded-keys one from the
    cell's key_lengths. The callable it returns reuses it while a call's inputs fit it (_Plan.fits), and
    makes a new one, reading the key lengths again, for any other call (the harness's fresh-input check)."""
    planned = _plan(q, k, key_lengths, cu_seqlens, **options)

    def bound(q, k, v, *, key_lengths=None, dropout_p=0.0, scale=None, cu_seqlens=None, **options):
        fits = planned.fits(q, k, key_lengths, cu_seqlens, **options)
        plan = planned if fits else _plan(q, k, key_lengths, cu_seqlens, **options)
        return plan(q, k, v, dropout_p, scale)

    return bound


@register(
    "xformers",
    description="xformers.ops.memory_efficient_attention (cutlass / flash kernels, CUDA)",
    devices=("cuda",),
    dtypes=("float32", "float16", "bfloat16"),
    memory="linear",
    available=_available,
    supports=_supports,
    setup=setup,
    kernel=kernel,
    gqa=True,  # BMGHK: k/v expanded over each group's query heads (_Plan.views)
    lower_right=True,
    window=True,  # bottom-right local attention; top-left only where N_q = N_k (_supports)
    varlen="exact",  # a packed batch under BlockDiagonal(Causal)Mask: only each sequence's blocks
    layout="bnhd",  # xformers takes (B, N, H, K): handed so, its inputs need no copy in the timed call
)
def xformers_attention(
    q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None, causal_align="top-left", window=0,
    cu_seqlens=None,
):  # fmt: skip
    """memory_efficient_attention on q (B, H, N_q, d_k), k (B, H_kv, N_k, d_k), v (B, H_kv, N_k, d_v) ->
    (B, H, N_q, d_v); any memory layout (with (B, H, N, d)-contiguous inputs the (B, N, H, K) views are
    strided, and the padded path's packing copies them)."""
    options = {"causal": causal, "causal_align": causal_align, "window": window}
    return _plan(q, k, key_lengths, cu_seqlens, **options)(q, k, v, dropout_p, scale)
