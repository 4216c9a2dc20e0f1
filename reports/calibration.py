"""Machine speed is not code speed: two runs' calibrations side by side, and times normalised by them.

Every run calibrates its device at the start (harness.measure.calibrate): the fastest square matmul call
(TFLOP/s per dtype) and the fastest device-to-device copy (GB/s). Two runs whose ceilings differ by more
than CALIBRATION_WARN measured different machines, or one machine on a different day, and their raw
time ratios mix the machine's speed with the code's.

`--normalize calibration` rescales run B's times to run A's machine: each cell is priced against the
ceiling that bounds it (a roofline over the cell's FLOPs and an estimate of the bytes it moves), and B's
samples are multiplied by ceiling_B / ceiling_A. A cell that is 1.25x slower on a machine whose bounding
ceiling is 0.8x as fast then compares as the same.

Every calibration is read through results.devices: a row is priced against the device that measured it
(its where_key's record in meta.json `devices`, else the run's `calibration[device]`), and a run of
several devices is compared group by group (devices of one model within 10% of each other).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from attnbench.results.devices import SPLIT_CALIBRATION, DeviceGroup, calibration_for, positive

# ceilings more than 10% apart: the runs measured machines of different speed (the same 10% that splits
# the devices of one run into groups)
CALIBRATION_WARN = SPLIT_CALIBRATION
ELEM_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}
SCORE_PASSES = 4  # score-sized tensors a materialising variant moves per call: write S, read/write P, read P


@dataclass(frozen=True)
class Ceiling:
    """One calibrated ceiling of each run, and B's over A's."""

    device: str
    what: str  # "matmul float32 TFLOP/s", "copy GB/s"
    a: float | None
    b: float | None

    @property
    def ratio(self) -> float:
        return self.b / self.a if self.a and self.b else math.nan

    @property
    def differs(self) -> bool:
        return math.isfinite(self.ratio) and abs(self.ratio - 1) > CALIBRATION_WARN


_positive = positive


def has_calibration(meta: dict[str, Any]) -> bool:
    """Whether a run calibrated any device (run-wide, or per device in meta.json `devices`)."""
    per_device = (rec.get("calibration") for rec in (meta.get("devices") or {}).values())
    return bool(meta.get("calibration")) or any(per_device)


def group_text(g: DeviceGroup) -> str:
    """'cpu', or 'cuda NVIDIA A100 #2' for a group of a split run."""
    return f"{g.device} {g.label}" if g.label else g.device


def between(ca: dict[str, Any], cb: dict[str, Any], device: str) -> list[Ceiling]:
    """The matmul ceiling per dtype and the copy bandwidth of two calibrations, named `device`."""
    out = []
    for dtype in sorted(set(ca.get("matmul_tflops") or {}) | set(cb.get("matmul_tflops") or {})):
        a = _positive((ca.get("matmul_tflops") or {}).get(dtype))
        b = _positive((cb.get("matmul_tflops") or {}).get(dtype))
        out.append(Ceiling(device, f"matmul {dtype} TFLOP/s", a, b))
    out.append(Ceiling(device, "copy GB/s", _positive(ca.get("copy_gbps")), _positive(cb.get("copy_gbps"))))
    return out


def group_ceilings(pairs: list[tuple[DeviceGroup, DeviceGroup]]) -> list[Ceiling]:
    """Both calibrations of each pair of device groups (A's, B's), named by the groups."""
    out = []
    for ga, gb in dict.fromkeys(pairs):
        ta, tb = group_text(ga), group_text(gb)
        out += between(ga.calibration, gb.calibration, ta if ta == tb else f"{ta} / {tb}")
    return out


def ceilings(meta_a: dict[str, Any], meta_b: dict[str, Any], pairs: list[tuple[str, str]]) -> list[Ceiling]:
    """The matmul ceiling per (device, dtype) of `pairs` and the copy bandwidth per device, in both runs'
    run-wide calibrations. A pair is (device in A, device in B): they differ when two machines' CPU and
    GPU runs are compared. (Runs of several devices: group_ceilings.)"""
    out = []
    for dev_a, dev_b in dict.fromkeys(pairs):
        device = dev_a if dev_a == dev_b else f"{dev_a} / {dev_b}"
        out += between(calibration_for(meta_a, dev_a), calibration_for(meta_b, dev_b), device)
    return out


def warnings_for(cs: list[Ceiling], a: str = "A", b: str = "B", same_machine: bool = False) -> list[str]:
    """One line per ceiling that differs by more than CALIBRATION_WARN between the runs (named a and b).
    Two machines: --normalize calibration takes the machines' speed out. The same host name and device model
    (`same_machine`, all the fingerprints match: said as that, since VMs that share a host name such as vm
    match too): its calibration moved because it was loaded during one of them, or set up otherwise (huge
    pages, clocks), which the cells need not have felt alike (a 1 s calibration on every core against cells
    on one thread), so it recommends no --normalize."""
    why = (
        "same host name and device model in both (one machine, or VMs that share a name), calibrated at "
        "another speed: loaded during one run, or set up otherwise (huge pages, clocks); raw ratios carry "
        "that, and --normalize would divide by a change the cells need not have felt alike; measure again "
        "on a quiet machine, or judge relative to a --control variant"
        if same_machine
        else "raw ratios mix the machine's speed with the code's; see --normalize calibration"
    )
    return [
        f"calibration differs: {c.device} {c.what} is {c.b:.3g} in {b} against {c.a:.3g} in {a} "
        f"({c.ratio:.2f}x): {why}"
        for c in cs
        if c.differs
    ]


def normalized_text(factors: list[float]) -> str:
    """compare --normalize calibration's note: what B's times were multiplied by, and how far the
    calibrations they were divided by lie apart (a ratio that moved with them is theirs as much as the
    code's)."""
    seen = sorted(f for f in factors if math.isfinite(f) and f > 0)
    span = f"{seen[0]:.3g}x" + (f" to {seen[-1]:.3g}x" if seen[-1] != seen[0] else "") if seen else ""
    return (
        "Normalised by calibration: each of B's times is multiplied by ceiling_B / ceiling_A for the ceiling "
        "that bounds the cell on A (matmul TFLOP/s when compute-bound, copy GB/s when memory-bound; column "
        "'bound'), so the ratios say how the code differs once the machines' speed is taken out."
        + (f" The calibrations differ by {span} (B's over A's): every ratio here is the measured one times "
           "that, as much the calibrations' as the code's." if seen else "")
    )  # fmt: skip


def bound(row: dict[str, Any], meta: dict[str, Any]) -> str:
    """'compute' or 'memory': which ceiling bounds the cell on the device that measured it (a roofline;
    the device by the row's `where`, else the run's calibration of its device kind).

    Bytes moved: q, k, v and the output once, plus SCORE_PASSES score-sized tensors for a variant whose
    recorded memory class is quadratic (it materialises the N x N scores); FLOPs: the row's own count.
    """
    cal = calibration_for(meta, str(row["device"]), row.get("where"))
    tflops = _positive((cal.get("matmul_tflops") or {}).get(str(row["dtype"])))
    gbps = _positive(cal.get("copy_gbps"))
    flops = _positive(row.get("flops"))
    if not (tflops and gbps and flops):
        return "compute"
    e = ELEM_BYTES.get(str(row["dtype"]), 4)
    bh, n_q = int(row["batch"]) * int(row["heads"]), int(row["seq_len"])
    n_k = _int_or(row.get("seq_k"), n_q)  # keys apart from queries (decode); older rows: = seq_len
    kv_heads = _int_or(row.get("kv_heads"), int(row["heads"]))  # grouped-query k/v heads; older rows: = heads
    d = int(row["d_k"]) + int(row["d_v"])
    moved = (bh * n_q + int(row["batch"]) * kv_heads * n_k) * d * e  # q and the output, k and v
    memory_class = ((meta.get("variant_capabilities") or {}).get(str(row["variant"])) or {}).get("memory")
    if memory_class == "quadratic":
        moved += SCORE_PASSES * bh * n_q * n_k * e
    return "memory" if moved / (gbps * 1e9) > flops / (tflops * 1e12) else "compute"


def _int_or(value: Any, default: int) -> int:
    """value as an int, or default when it is missing (None, NA, NaN)."""
    try:
        return default if value is None or value != value else int(value)
    except TypeError:  # pd.NA != x is NA, whose truth value raises
        return default


def factor(
    row: dict[str, Any],
    meta_a: dict[str, Any],
    meta_b: dict[str, Any],
    device_b: str,
    where_b: str | None = None,
) -> tuple[float, str]:
    """(ceiling_B / ceiling_A for the ceiling that bounds this cell in A, 'compute' or 'memory'):
    B's times multiplied by it are B's times on A's machine. Each side is priced against the device that
    measured it (row['where'] in A, where_b in B). NaN when either run lacks that ceiling."""
    which = bound(row, meta_a)
    ca = calibration_for(meta_a, str(row["device"]), row.get("where"))
    cb = calibration_for(meta_b, device_b, where_b)
    if which == "compute":
        a = _positive((ca.get("matmul_tflops") or {}).get(str(row["dtype"])))
        b = _positive((cb.get("matmul_tflops") or {}).get(str(row["dtype"])))
    else:
        a, b = _positive(ca.get("copy_gbps")), _positive(cb.get("copy_gbps"))
    return (b / a if a and b else math.nan), which


def _members(g: DeviceGroup) -> str:
    n = len(g.members)
    return f"{n} device{'s' * (n != 1)}: {', '.join(g.members)}"


def group_notes(run_id: str, groups: list[DeviceGroup]) -> list[str]:
    """One line per device kind a run measured on more than one device: which devices, which of them are
    shown together, and why the others are split off ([] for a single-device run)."""
    out = []
    for device in dict.fromkeys(g.device for g in groups):
        mine = [g for g in groups if g.device == device]
        if len(mine) == 1 and len(mine[0].members) > 1:
            out.append(
                f"{run_id} measured its {device} cells on {_members(mine[0])}, all {mine[0].model} with "
                f"calibrated matmul ceilings within {SPLIT_CALIBRATION:.0%} of each other: shown as one "
                "group."
            )
        elif len(mine) > 1:
            parts = [f"{g.label} ({_members(g)}{'; ' + g.why if g.why else ''})" for g in mine]
            out.append(
                f"{run_id} measured its {device} cells on devices that are never averaged or fitted "
                f"together (another GPU or CPU model, or a calibrated matmul ceiling more than "
                f"{SPLIT_CALIBRATION:.0%} apart), "
                f"so its sections, fits and rankings are per device group: {'; '.join(parts)}."
            )
    return out


def match_groups(first: list[DeviceGroup], other: list[DeviceGroup]) -> list[tuple[DeviceGroup, DeviceGroup]]:
    """Each of `other`'s device groups beside the group of `first` it is compared with: the first of the
    same device kind and model, else the first of the same device kind (none: left out)."""
    pairs = []
    for g in other:
        same = [f for f in first if f.device == g.device]
        model = [f for f in same if f.model == g.model]
        if model or same:
            pairs.append(((model or same)[0], g))
    return pairs


def control_moved(control: str, machines: tuple[str, str], move: float, tolerance: float) -> list[str]:
    """One line where a --control crosses machines and its own time moved with the machine (`move`, the
    control's B/A, by more than `tolerance`): a control cancels what moves every variant alike (a machine
    slower through a whole run), but a change of machine moves each variant by what bounds it, and the
    control by its own bound (a memory-bound control follows the copy bandwidth)."""
    if not math.isfinite(move) or abs(move - 1) <= tolerance:
        return []
    return [
        f"--control {control} crosses machines ({machines[0]} in A, {machines[1]} in B) and {control}'s own "
        f"time moved {move:.2f}x with the machine: every cell is judged over that move, which follows what "
        f"bounds {control} on each machine, not what bounds the cell; across machines use --normalize "
        "calibration, which rescales each cell by the ceiling that bounds it"
    ]
