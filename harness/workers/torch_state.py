"""Torch's process-wide state, which one variant's code can change for every cell after it: a snapshot and
what changed since.

A worker takes a snapshot once it is set up (its threads as the run asked) and compares after every
cell, every numerics-probe request and every variant file it imports (harness.workers.worker): the variant
whose code ran last is the one that changed it, and is named. What is compared:

- settings: intra-op and interop threads, grad, inference and anomaly mode, autocast, the default dtype
  and device, deterministic algorithms, float32 matmul precision, the TF32 / reduced-precision and cuDNN
  flags, the SDPA backends enabled and the FlashAttention implementation the flash one runs, oneDNN and
  opt_einsum (a getter this torch lacks is left out), and the depth of torch's function-mode and
  dispatch-mode stacks (a TorchFunctionMode entered and never left runs on every later torch call);
- identities: the torch functions and Tensor methods attention code and the float64 gate call, the clocks
  of `time` and CUDA's events and streams that the timers read (FUNCTIONS), and every function, class,
  module and constant (a global named in capitals: TOLERANCE, PROBE_N) held by the modules that gate, time
  and measure a cell and the formulas they read (HARNESS) and by every module of the built-in variants'
  package (VARIANTS), with their classes' methods and every function's code object, so that a variant
  replacing torch.softmax, the gate itself, a tolerance, time.perf_counter, the timing module's `time`, a
  timer's method or its code, or the helper a built-in variant calls (grouped.scores) is caught;
- tables: those constants that hold a dict, list, set or mapping, by value too (the gate's tolerances, the
  calibration's sizes: read-only mappings, whose dict a variant can still reach), so that a table changed
  in place is caught as well as one rebound;
- kernels: the kernels registered for each aten operator attention code and the gate run (KERNELS: softmax,
  the matmuls, exp, the copy to float64, SDPA and its backends), as torch's dispatcher dumps them, so that a
  kernel a variant registers over aten's (torch.library, any dispatch key) is caught.

A comparison reads 28 settings, about 1,900 identities, 25 tables and 14 operators' kernels: about 0.35 ms on
a 2-core VM (0.05 ms with the settings and the harness's identities alone; the kernels' dumps are half of it).
`restore` puts the settings, identities and mode stacks back (the worker uses it after a variant file's
import, where a fresh worker would import the same file again); interop threads cannot be set twice in a
process, and neither a table changed in place nor a kernel registered is put back.
"""

from __future__ import annotations

import importlib
import operator
import pkgutil
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
        "torch_function_modes": (torch._C._len_torch_function_stack, _pop_function_modes),
        "torch_dispatch_modes": (_dispatch_modes, _pop_dispatch_modes),
    }  # fmt: skip


def _set_inference_mode(on: bool) -> None:
    # inference mode is a thread-local RAII guard with no setter: a variant can leave it on only by entering
    # torch.inference_mode() without leaving it, and the worker is replaced after that (never restored)
    raise RuntimeError(f"inference mode cannot be set to {on} from outside its guard")


def _dispatch_modes() -> int:
    from torch.utils import _python_dispatch

    return _python_dispatch._len_torch_dispatch_stack()


def _pop_function_modes(depth: int) -> None:
    """Leave the TorchFunctionModes entered since (a mode left entered runs on every later torch call)."""
    while torch._C._len_torch_function_stack() > depth:
        torch._C._pop_torch_function_stack()


def _pop_dispatch_modes(depth: int) -> None:
    from torch.utils import _python_dispatch

    while _python_dispatch._len_torch_dispatch_stack() > depth:
        _python_dispatch._pop_mode()


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

# attnbench's own modules that gate, time and measure a cell (and the gate's helpers and formulas), and the
# worker that reports its clock: their functions and classes must stay ours, and so must the modules they hold
# (a timer reading a `time` another module swapped in reads another clock) and their constants and tables
HARNESS = tuple(f"attnbench.harness.measure.{short}" for short in (
    "cell", "correctness", "timing", "memory", "dropout_check", "rows", "failures", "outcomes", "calibrate",
    "telemetry", "contract", "guard", "located", "own_gradient", "inputs", "varied", "numerics",
)) + ("attnbench.harness.workers.worker", "attnbench.results.formulas")  # fmt: skip
# the built-in variants' package: every module of it is compared as HARNESS's are (a plug-in that replaces
# grouped.scores changes naive's answer and time)
VARIANTS = "attnbench.variants"
# module-level state, not tables: set while a cell runs, a cache its variant fills, or what importing a
# variant file did
NOT_TABLES = frozenset({
    "attnbench.harness.measure.failures._ARMED", "attnbench.harness.measure.memory.HOLDINGS",
    "attnbench.variants.flex._PLANS", "attnbench.variants.registry._REGISTRY",
    "attnbench.variants.registry._LOAD_ERRORS", "attnbench.variants.registry._LOADED",
    "attnbench.variants.registry.ENV_CHANGED", "attnbench.variants.registry._REGISTERED_IN",
})  # fmt: skip
# the aten operators attention code and the float64 gate run: a kernel registered over one of them (through
# torch.library, for any dispatch key) runs in every later cell. Each is read as torch's dispatcher dumps it,
# ~15 us an operator: these, not every operator
KERNELS = (
    "aten::_softmax", "aten::_safe_softmax", "aten::_log_softmax", "aten::matmul", "aten::bmm", "aten::mm",
    "aten::baddbmm", "aten::exp", "aten::_to_copy", "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product_attention_math", "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
)  # fmt: skip
_HELD = (types.FunctionType, types.BuiltinFunctionType, type, types.ModuleType)
_CONTAINERS = (dict, list, set, types.MappingProxyType)


def _owner(path: str) -> Any:
    if path == "torch.Tensor":
        return torch.Tensor
    if path == "torch.cuda.Event":
        return torch.cuda.Event
    return importlib.import_module(path)


def _modules() -> list[str]:
    """HARNESS and every module of the built-in variants' package, imported: the built-in variants first, by
    the registry, in its order (which is their order in every listing), then the package's other modules."""
    package = importlib.import_module(VARIANTS)
    importlib.import_module(f"{VARIANTS}.registry")._load_builtins()
    found = [f"{VARIANTS}.{m.name}" for m in pkgutil.iter_modules(package.__path__)]
    return [*HARNESS[-1:], *HARNESS[:-1], VARIANTS, *found]  # formulas first: a table's home names it


def _identities() -> tuple[list[tuple[str, Any, str]], list[tuple[str, Any, str]]]:
    """(qualified name, owner, attribute) of every identity compared, and of every table (a module-level
    constant holding a dict, list, set or mapping, compared by value too)."""
    out = [(f"{path}.{name}", owner, name) for path, names in FUNCTIONS.items()
           for owner in [_owner(path)] for name in names if hasattr(owner, name)]  # fmt: skip
    tables, seen = [], set()
    for path in _modules():
        module = importlib.import_module(path)
        _resolve_lazy(module)
        for name, value in vars(module).items():
            if _constant(name, value):  # rebound or, for a table, changed in place
                out.append((f"{path}.{name}", module, name))
                if _mutable(value) and f"{path}.{name}" not in NOT_TABLES and id(value) not in seen:
                    tables.append((f"{path}.{name}", module, name))  # once, where it is first found
                    seen.add(id(value))
                continue
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
    return out, tables


def _resolve_lazy(module: types.ModuleType) -> None:
    """Put the modules a built-in variant's lazy globals stand for (variants.lazy: `torch`, `F`) in their
    place, as its first call would: compared as the modules they are, never as a stand-in that a first call
    replaces."""
    from attnbench.variants import lazy

    for value in list(vars(module).values()):
        if isinstance(value, lazy._Stand):
            _ = value.__name__  # the first attribute read imports the module into the global


def _constant(name: str, value: Any) -> bool:
    """Whether a module's global is one of its constants: named in capitals (TOLERANCE, _POISONED), and
    not a function, class or module."""
    bare = name.lstrip("_")
    return bool(bare) and bare == bare.upper() and bare[0].isalpha() and not isinstance(value, _HELD)


def _mutable(value: Any) -> bool:
    if isinstance(value, _CONTAINERS):
        return True
    return isinstance(value, tuple | frozenset) and any(map(_mutable, value))


def _frozen(value: Any) -> Any:
    """A table's value as it is now, in values that do not change with it (compared with ==)."""
    if isinstance(value, dict | types.MappingProxyType):
        return tuple((k, _frozen(v)) for k, v in value.items())
    if isinstance(value, list | tuple):
        return tuple(map(_frozen, value))
    if isinstance(value, set | frozenset):
        return frozenset(map(_frozen, value))
    return value


def _freezer(table: Any) -> Callable[[Any], Any]:
    """_frozen, or for a flat table (what the tables are) the same in one step: a tenth of the time."""
    if isinstance(table, dict | types.MappingProxyType) and not any(map(_mutable, table.values())):
        return _items
    if isinstance(table, list | tuple) and not any(map(_mutable, table)):
        return tuple
    return _frozen


def _items(table: Any) -> tuple[Any, ...]:
    return tuple(table.items())


def _kernels(op: str) -> str:
    """Every kernel registered for `op`, as torch's dispatcher dumps it ('' for an op this torch lacks)."""
    try:
        return torch._C._dispatch_dump(op)
    except RuntimeError:
        return ""


def _kernel_keys(before: str, now: str) -> str:
    """The dispatch keys whose kernels differ between two dumps of one operator ('CPU', 'CPU/CUDA')."""
    lines = set(before.splitlines()) ^ set(now.splitlines())
    return "/".join(sorted({line.split(":", 1)[0].removesuffix(" (inactive)") for line in lines}))


@dataclass(frozen=True)
class Snapshot:
    """Torch's process-wide state at one moment: the settings' values and the identities' objects."""

    names: tuple[str, ...]
    values: tuple[Any, ...]
    objects: tuple[Any, ...]
    tables: tuple[Any, ...] = ()
    kernels: tuple[str, ...] = ()


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
        self.identities, self.tables = _identities()
        self._owners = tuple(owner for _, owner, _ in self.identities)
        self._attrs = tuple(attr for _, _, attr in self.identities)
        self._missing = (None,) * len(self.identities)
        # the tables as the modules hold them now: a table rebound is an identity's change, not a table's
        self._tables = tuple(getattr(owner, attr) for _, owner, attr in self.tables)
        self._freezers = tuple(map(_freezer, self._tables))
        self.kernels = tuple(op for op in KERNELS if _kernels(op))

    def take(self) -> Snapshot:
        return Snapshot(
            tuple(self.settings),
            tuple(get() for get in self.getters),
            tuple(map(getattr, self._owners, self._attrs, self._missing)),
            tuple(freeze(table) for freeze, table in zip(self._freezers, self._tables, strict=True)),
            tuple(map(torch._C._dispatch_dump, self.kernels)),
        )

    def changes(self, before: Snapshot) -> list[str]:
        """What differs now from `before`, one phrase each ('num_threads 2 → 1', 'torch.softmax
        replaced'); empty when nothing did. The fast path is two tuple comparisons."""
        now = self.take()
        if (now.values == before.values and _same(now.objects, before.objects) and now.tables == before.tables
                and now.kernels == before.kernels):  # fmt: skip
            return []
        out = [f"{n} {_text(a)} → {_text(b)}" for n, a, b in zip(now.names, before.values, now.values,
                                                                   strict=True) if a != b]  # fmt: skip
        for (qual, _, _), a, b in zip(self.identities, before.objects, now.objects, strict=True):
            if a is not b:
                out.append(f"{qual} {'deleted' if b is None else 'replaced'}")
        for (qual, _, _), a, b in zip(self.tables, before.tables, now.tables, strict=True):
            if a != b:
                out.append(f"{qual} changed")
        for op, a, b in zip(self.kernels, before.kernels, now.kernels, strict=True):
            if a != b:
                out.append(f"{op} kernel for {_kernel_keys(a, b)} replaced")
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
