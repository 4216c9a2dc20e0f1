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

xformers also has grouped-query inputs (5-D BMGHK tensors), bottom-right causal masks
(LowerTriangularFromBottomRightMask) and local windows (...LocalAttentionMask), but attnbench cannot run
xformers on this project's machines to check them, so the capability declares none of them (gqa,
lower_right and window stay False): those cells are `unsupported`, never measured on an untested path.
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

from .problem import Problem
from .registry import UnsupportedError, register


def _version() -> str | None:
    try:
        return version("xformers")
    except PackageNotFoundError:
        return None


def _extensions_problem() -> str | None:
    """Why xformers' own C++/CUDA operators did not load, in one line, or None. A wheel is built for one
    torch, CUDA and Python (0.0.35: torch 2.10.0+cu128, Python 3.10); on another only the operators that
    call torch's own kernels are left, and xformers refuses those on some inputs too. Seen on the GPU image
    (torch 2.11.0+cu130, Python 3.12, 2026-11-25): every cell was refused."""
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

    return (
        f"xformers {_version()}'s CUDA operators did not load: {built}; this is torch {torch.__version__}, "
        f"Python {platform.python_version()}"
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
    """xformers.ops and its fmha module, imported where a cell is about to run (never for availability)."""
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

    causal: bool
    shape: tuple[int, int, int]  # (B, N_q, N_k)
    key_lengths: Any  # the tensor the padded-keys bias was made from; None: no key padding
    version: int | None  # key_lengths' in-place write count when the bias was made
    bias: Any  # None, LowerTriangularMask or BlockDiagonalPaddedKeysMask
    attend: Callable[..., Any]  # xformers.ops.memory_efficient_attention

    def fits(self, q, k, causal: bool, key_lengths) -> bool:
        """Whether this plan's bias is right for a call, decided without reading key_lengths' values (a
        device->host sync): the same shape and causal, and for key padding the very tensor the bias was
        made from, unwritten since. Any other tensor, equal values or not, gets a plan of its own."""
        if (causal, (q.shape[0], q.shape[2], k.shape[2])) != (self.causal, self.shape):
            return False
        if key_lengths is None or self.key_lengths is None:
            return key_lengths is self.key_lengths
        version = _version_of(key_lengths)
        return key_lengths is self.key_lengths and version is not None and version == self.version

    def __call__(self, q, k, v, dropout_p: float, scale: float | None):
        b, n_q = q.shape[0], q.shape[2]
        # (B, N, H, d) views; with layout="bnhd" inputs they are contiguous, so nothing below copies them
        qx, kx, vx = (t.transpose(1, 2) for t in (q, k, v))
        if self.key_lengths is not None:  # the batch as one sequence of B blocks: (1, B*N, H, d), a view
            qx, kx, vx = (t.reshape(1, -1, *t.shape[2:]) for t in (qx, kx, vx))
        try:
            out = self.attend(qx, kx, vx, attn_bias=self.bias, p=dropout_p, scale=scale)
        except NotImplementedError as exc:  # no operator supports these inputs: xformers says which and why
            raise UnsupportedError(_no_operator_reason(exc)) from None
        return out.reshape(b, n_q, out.shape[-2], -1).transpose(1, 2)  # (B, H, N_q, d_v)


def _plan(q, k, causal: bool, key_lengths) -> _Plan:
    """The attention bias for these inputs. For key padding it reads key_lengths' values (.tolist(): a
    device->host sync), which is why the harness's setup hook makes it, once per cell."""
    if causal and key_lengths is not None:
        raise UnsupportedError(_supports(Problem(causal=True, padding=0.25)))
    xops, fmha = _import_ops()

    b, n_q, n_k = q.shape[0], q.shape[2], k.shape[2]
    bias = None
    if causal:
        bias = fmha.attn_bias.LowerTriangularMask()
    elif key_lengths is not None:
        bias = fmha.attn_bias.BlockDiagonalPaddedKeysMask.from_seqlens(
            q_seqlen=[n_q] * b, kv_padding=n_k, kv_seqlen=key_lengths.tolist(), device=q.device
        )
    return _Plan(
        causal=causal,
        shape=(b, n_q, n_k),
        key_lengths=key_lengths,
        version=None if key_lengths is None else _version_of(key_lengths),
        bias=bias,
        attend=xops.memory_efficient_attention,
    )


def setup(q, k, v, *, causal=False, key_lengths=None) -> Callable[..., Any]:
    """The harness's setup hook (setup_ms): the attention bias made now, the padded-keys one from the
    cell's key_lengths. The callable it returns reuses it while a call's inputs fit it (_Plan.fits), and
    makes a new one, reading the key lengths again, for any other call (the harness's fresh-input check)."""
    planned = _plan(q, k, causal, key_lengths)

    def bound(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
        plan = planned if planned.fits(q, k, causal, key_lengths) else _plan(q, k, causal, key_lengths)
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
    layout="bnhd",  # xformers takes (B, N, H, K): handed so, its inputs need no copy in the timed call
)
def xformers_attention(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    """memory_efficient_attention on q (B, H, N_q, d_k), k (B, H, N_k, d_k), v (B, H, N_k, d_v) ->
    (B, H, N_q, d_v); any memory layout (with (B, H, N, d)-contiguous inputs the (B, N, H, K) views are
    strided, and the padded path's packing copies them)."""
    return _plan(q, k, causal, key_lengths)(q, k, v, dropout_p, scale)
