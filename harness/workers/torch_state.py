"""Torch's process-wide state, which one variant's code can change for every cell after it: a snapshot and
what changed since.

A worker takes a snapshot once it is set up (its threads as the run asked) and compares after every
cell, every numerics-probe request and every variant file it imports (harness.workers.worker): the variant
whose code ran last is the one that changed it, and is named. What is compared:

- settings: intra-op and interop threads, grad, inference and anomaly mode, autocast, the default dtype
  and device, deterministic algorithms, float32 matmul precision, the TF32 / reduced-precision and cuDNN
  flags, the SDPA backends enabled and the FlashAttention implementation the flash one runs, oneDNN and
  opt_einsum (a getter this torch lacks is left out);
- identities: the torch functions and Tensor methods attention code and the float64 gate call, the clocks
  of `time` and CUDA's events and streams that the timers read (FUNCTIONS), and every function, class and
  module held by the harness modules that gate, time and measure a cell (HARNESS), with their classes'
  methods and every function's code object, so that a variant replacing torch.softmax, the gate itself,
  time.perf_counter, the timing module's `time`, a timer's method or its code is caught.

A comparison reads 26 settings and about 600 identities: about a tenth of a millisecond on a 2-core VM.
`restore` puts the settings and identities back (the worker uses it after a variant file's import, where
a fresh worker would import the same file again); interop threads cannot be set twice in a process.
"""

from __future__ import annotations

import importlib
import operator
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

Getter = Callable[[], Any]
Setter = Callable[[Any], None]


def _attr(owner: Any, name: str) -> tuple[Getter, Setter]:
    return (lambda: getattr(owner, name)), (lambda v: setattr(owner, name, v))


def _sdp(backend: str) -> tuple[Getter, Setter]:
    c = torch.backends.cuda
    return getattr(c, f"{backend}_sdp_enabled"), getattr(c, f"enable_{backend}_sdp")


def _flash_impl() -> tuple[Getter, Setter]:
    """The FlashAttention implementation SDPA's flash backend dispatches to (None: torch's built-in FA2; FA3
    or FA4 once activated through torch.nn.attention), where this torch can switch it."""
    attention = torch.nn.attention

    def put(impl: str | None) -> None:
        if impl is None:
            attention.restore_flash_attention_impl(_raise_warn=False)
        else:
            attention.activate_flash_attention_impl(impl)

    # looked up when read, not now: a torch without it fails the getter, and State leaves the setting out
    return (lambda: attention.current_flash_attention_impl()), put


def _autocast(device: str) -> tuple[Getter, Setter]:
    return (lambda: torch.is_autocast_enabled(device)), (lambda v: torch.set_autocast_enabled(device, v))


def _settings() -> dict[str, tuple[Getter, Setter]]:
    """name -> (getter, setter) of each process-wide setting, as a row's message names it."""
    c, b, matmul = torch.backends.cuda, torch.backends, torch.backends.cuda.matmul
    return {
        "num_threads": (torch.get_num_threads, torch.set_num_threads),
        "num_interop_threads": (torch.get_num_interop_threads, torch.set_num_interop_threads),
        "grad_enabled": (torch.is_grad_enabled, torch._C._set_grad_enabled),
        "inference_mode": (torch.is_inference_mode_enabled, _set_inference_mode),
        "anomaly_mode": (torch.is_anomaly_enabled, torch.set_anomaly_enabled),
        "autocast_cpu": _autocast("cpu"),
        "autocast_cuda": _autocast("cuda"),
        "default_dtype": (torch.get_default_dtype, torch.set_default_dtype),
        "default_device": (torch.get_default_device, torch.set_default_device),
        "deterministic_algorithms": (
            lambda: (torch.are_deterministic_algorithms_enabled(),
                     torch.is_deterministic_algorithms_warn_only_enabled()),
            lambda v: torch.use_deterministic_algorithms(v[0], warn_only=v[1]),
        ),
        "float32_matmul_precision": (torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
        "cuda.matmul.allow_tf32": _attr(matmul, "allow_tf32"),
        "cuda.matmul.allow_fp16_reduced_precision_reduction": _attr(
            matmul, "allow_fp16_reduced_precision_reduction"),
        "cuda.matmul.allow_bf16_reduced_precision_reduction": _attr(
            matmul, "allow_bf16_reduced_precision_reduction"),
        "cudnn.enabled": _attr(b.cudnn, "enabled"),
        "cudnn.allow_tf32": _attr(b.cudnn, "allow_tf32"),
        "cudnn.benchmark": _attr(b.cudnn, "benchmark"),
        "cudnn.deterministic": _attr(b.cudnn, "deterministic"),
        "sdp.flash": _sdp("flash"),
        "sdp.mem_efficient": _sdp("mem_efficient"),
        "sdp.math": _sdp("math"),
        "sdp.cudnn": _sdp("cudnn"),
        "sdp.fp16_bf16_reduction_math": (
            c.fp16_bf16_reduction_math_sdp_allowed, c.allow_fp16_bf16_reduction_math_sdp),
        "sdp.flash_impl": _flash_impl(),
        "mkldnn.enabled": _attr(b.mkldnn, "enabled"),
        "opt_einsum.enabled": _attr(b.opt_einsum, "enabled"),
    }  # fmt: skip


def _set_inference_mode(on: bool) -> None:
    # inference mode is a thread-local RAII guard with no setter: a variant can leave it on only by entering
    # torch.inference_mode() without leaving it, and the worker is replaced after that (never restored)
    raise RuntimeError(f"inference mode cannot be set to {on} from outside its guard")


# The torch functions and Tensor methods attention code and the float64 gate call; replacing one changes
# every later variant's answer (or the reference it is gated against).
FUNCTIONS: dict[str, tuple[str, ...]] = {
    "torch": (
        "softmax", "log_softmax", "matmul", "bmm", "baddbmm", "einsum", "exp", "log", "max", "amax", "sum",
        "logsumexp", "where", "masked_fill", "cat", "stack", "empty", "empty_like", "zeros", "zeros_like",
        "ones", "full", "tensor", "arange", "randn", "randn_like", "tril", "triu", "allclose", "equal",
        "isfinite", "isnan", "dropout", "transpose", "scaled_dot_product_attention", "set_num_threads",
        "get_num_threads", "no_grad", "enable_grad", "compile",
    ),
    "torch.nn.functional": (
        "softmax", "log_softmax", "scaled_dot_product_attention", "dropout", "pad", "linear",
    ),
    "torch.Tensor": (
        "softmax", "log_softmax", "matmul", "__matmul__", "__rmatmul__", "bmm", "baddbmm", "exp", "max",
        "amax", "sum", "masked_fill", "masked_fill_", "float", "double", "to", "transpose", "contiguous",
        "__mul__", "__truediv__", "__add__", "__sub__", "__getitem__", "backward", "clone", "copy_", "detach",
        "equal", "view", "reshape", "expand", "abs", "item", "tolist",
    ),
    "torch.autograd": ("grad", "backward"),
    # what the timers read: the clocks, CUDA's events, streams and synchronisation
    "time": (
        "perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns", "process_time",
        "thread_time", "sleep", "clock_gettime", "clock_gettime_ns",
    ),
    "torch.cuda": (
        "Event", "Stream", "synchronize", "current_stream", "default_stream", "stream", "set_stream",
        "CUDAGraph", "graph",
    ),
    "torch.cuda.Event": ("record", "elapsed_time", "synchronize", "query", "wait"),
}  # fmt: skip

# attnbench's own modules that gate, time and measure a cell, and the worker that reports its clock: their
# functions and classes must stay ours, and so must the modules they hold (a timer reading a `time` another
# module swapped in reads another clock)
HARNESS = tuple(f"attnbench.harness.measure.{short}" for short in (
    "cell", "correctness", "timing", "memory", "dropout_check", "rows", "failures", "outcomes", "calibrate",
    "telemetry",
)) + ("attnbench.harness.workers.worker",)  # fmt: skip
_HELD = (types.FunctionType, types.BuiltinFunctionType, type, types.ModuleType)


def _owner(path: str) -> Any:
    if path == "torch.Tensor":
        return torch.Tensor
    if path == "torch.cuda.Event":
        return torch.cuda.Event
    return importlib.import_module(path)


def _identities() -> list[tuple[str, Any, str]]:
    """(qualified name, owner, attribute) of every identity compared."""
    out = [(f"{path}.{name}", owner, name) for path, names in FUNCTIONS.items()
           for owner in [_owner(path)] for name in names if hasattr(owner, name)]  # fmt: skip
    for path in HARNESS:
        module = importlib.import_module(path)
        for name, value in vars(module).items():
            if not isinstance(value, _HELD) or name.startswith("__"):
                continue
            out.append((f"{path}.{name}", module, name))
            if getattr(value, "__module__", None) != path:
                continue  # what the module imported: its own module compares its insides
            if isinstance(value, types.FunctionType):  # its code too: a function can be given another's
                out.append((f"{path}.{name}.__code__", value, "__code__"))
            elif isinstance(value, type):  # a class's methods, and their code
                for attr, method in vars(value).items():
                    if isinstance(method, types.FunctionType):
                        out.append((f"{path}.{name}.{attr}", value, attr))
                        out.append((f"{path}.{name}.{attr}.__code__", method, "__code__"))
    return out


@dataclass(frozen=True)
class Snapshot:
    """Torch's process-wide state at one moment: the settings' values and the identities' objects."""

    names: tuple[str, ...]
    values: tuple[Any, ...]
    objects: tuple[Any, ...]


class State:
    """Knows what to read (built once per process: the getters this torch has), takes snapshots, and says
    what changed between two of them."""

    def __init__(self) -> None:
        self.settings: dict[str, tuple[Getter, Setter]] = {}
        for name, (get, put) in _settings().items():
            try:
                get()
            except (AttributeError, RuntimeError, TypeError):  # a getter this torch (or build) lacks
                continue
            self.settings[name] = (get, put)
        self.getters = tuple(get for get, _ in self.settings.values())
        self.identities = _identities()
        self._owners = tuple(owner for _, owner, _ in self.identities)
        self._attrs = tuple(attr for _, _, attr in self.identities)
        self._missing = (None,) * len(self.identities)

    def take(self) -> Snapshot:
        return Snapshot(
            tuple(self.settings),
            tuple(get() for get in self.getters),
            tuple(map(getattr, self._owners, self._attrs, self._missing)),
        )

    def changes(self, before: Snapshot) -> list[str]:
        """What differs now from `before`, one phrase each ('num_threads 2 → 1', 'torch.softmax
        replaced'); empty when nothing did. The fast path is two tuple comparisons."""
        now = self.take()
        if now.values == before.values and _same(now.objects, before.objects):
            return []
        out = [f"{n} {_text(a)} → {_text(b)}" for n, a, b in zip(now.names, before.values, now.values,
                                                                   strict=True) if a != b]  # fmt: skip
        for (qual, _, _), a, b in zip(self.identities, before.objects, now.objects, strict=True):
            if a is not b:
                out.append(f"{qual} {'deleted' if b is None else 'replaced'}")
        return out

    def restore(self, before: Snapshot) -> list[str]:
        """Put back what changed since `before`; what could not be put back, as `changes` words it."""
        now = self.take()
        for (_, put), a, b in zip(self.settings.values(), before.values, now.values, strict=True):
            if a != b:
                try:
                    put(a)
                except (RuntimeError, TypeError, ValueError):
                    pass
        for (_, owner, attr), a, b in zip(self.identities, before.objects, now.objects, strict=True):
            if a is not b:
                setattr(owner, attr, a)
        return self.changes(before)


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return all(map(operator.is_, a, b))


def _text(value: Any) -> str:
    if isinstance(value, tuple):
        return "/".join(_text(v) for v in value)
    return str(value).removeprefix("torch.")
