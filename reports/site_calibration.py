"""The calibrations the history site's cross-machine page divides by: each machine's calibrated matmul
TFLOP/s and the size of the matmul it timed, and which % of peak cannot be set beside the others'; a decode
cell's calibrated copy bandwidth; and a cell's rate beside its % of them (`rate_text`)."""

from __future__ import annotations

import math
from typing import Any

from attnbench.results.devices import calibration_for, matmul_n
from attnbench.results.formulas import gbps, is_decode, kv_bytes

from .page import Table
from .tables import present

MARK = "†"  # after a % of peak whose calibration is not comparable with the others' (its note says why)
RATE_WORDS = (
    f"TFLOP/s (% of calibrated peak; {MARK}: its calibration is not comparable, below); a decode shape's "
    "(N_q queries against N_k ≠ N_q keys) K/V GB/s (% of the calibrated copy bandwidth), as its run's "
    "report's decode panel gives it: a decode step is bound by reading its cache, not by FLOPs"
)


def rate_text(cell: Any) -> str:
    """A cell's rate as its run's report judges it, with its % of its device's calibration: any cell's
    '633 (81.5%)', its TFLOP/s and % of its calibrated matmul peak, marked where that calibration is not
    comparable with the others' on the page (its `cal_note`: `calibrations`'); a decode cell's (results.
    formulas.is_decode) '12.3 GB/s (45.1% of copy)', its K/V GB/s and % of the calibrated copy bandwidth, as
    the report's decode panel (reports.panels.decode); ', suspect' where the cell is suspect (results.
    suspect: too fast to believe, never ranked). '-' where the rate is unknown."""
    if is_decode(_int(cell.get("seq_len")), _int(cell.get("seq_k"))):
        rate, ceiling, note = _kv_gbps(cell), cell.get("cal_copy_gbps"), None
        unit, of = " GB/s", " of copy"
    else:
        rate, ceiling, note = cell["tflops"], cell["cal_matmul_tflops"], cell.get("cal_note")
        unit = of = ""
    if not present(rate) or not float(rate) > 0:
        return "-"
    mark = MARK if isinstance(note, str) and note else ""
    pct = ""
    if present(ceiling) and float(ceiling) > 0:
        pct = f" ({100 * float(rate) / float(ceiling):.1f}%{mark}{of})"
    suspect = cell.get("suspect")
    return f"{float(rate):.3g}{unit}{pct}" + (", suspect" if present(suspect) and bool(suspect) else "")


def _kv_gbps(cell: Any) -> float:
    """A decode cell's K/V GB/s: kv_bytes over its median time, its bytes from its shape (results.formulas.
    kv_bytes, as its row's `kv_bytes`: a paged cell's contexts sum to B · N_k); NaN where one is unknown."""
    sizes = [_int(cell.get(a)) for a in ("batch", "kv_heads", "seq_k", "d_k", "d_v")]
    time = cell.get("time_ms_median")
    if any(v is None for v in sizes) or not present(time):
        return math.nan
    return gbps(kv_bytes(*sizes, str(cell.get("dtype"))), float(time))


def _int(value: Any) -> int | None:
    return int(value) if present(value) else None


def calibrations(common, meta_of: Any) -> tuple[Table, dict[tuple[str, str, str], str]]:
    """Per machine, run and dtype of the shared cells (`common`: the store's rows, with their run's `path`
    and `where_key`), the calibration their % divides by: its matmul TFLOP/s and the N of the square matmul
    it timed (meta.json, read by `meta_of(path)`: results.devices.matmul_n). A smaller matmul runs further
    below the device's peak, so a % against it reads higher: one timed at an N below its device's usual size
    (meta.json's matmul_n: docs/method.md's 2048 on a CPU, 8192 on a GPU) or below another calibration of
    the same device kind and dtype on this page is noted. Where a decode cell is among them, each calibrated
    copy bandwidth too, which its % divides by (rate_text). Returns the table and {(path, where_key, dtype):
    its note, '' for none}."""
    found = {}
    for _, r in common.drop_duplicates(["path", "where_key", "dtype"]).iterrows():
        cal = calibration_for(meta_of(r["path"]), str(r["device"]), str(r["where_key"]))
        usual = matmul_n({"matmul_n": cal.get("matmul_n")}, "")
        found[(str(r["path"]), str(r["where_key"]), str(r["dtype"]))] = (
            r,
            matmul_n(cal, str(r["dtype"])),
            usual,
        )
    largest: dict[tuple[str, str], int] = {}  # per device kind and dtype, the largest N timed here
    for r, n, _ in found.values():
        kind = (str(r["device"]), str(r["dtype"]))
        largest[kind] = max(largest.get(kind, 0), n or 0)
    notes, rows = {}, []
    lengths = {"seq_len", "seq_k"} <= set(common.columns)  # a frame of calibrations alone has none
    copy = lengths and bool(is_decode(common["seq_len"], common["seq_k"]).any())
    for key, (r, n, usual) in sorted(found.items(), key=lambda kv: (str(kv[1][0]["machine"]), kv[0])):
        notes[key] = _note(n, usual, largest[(str(r["device"]), key[2])])
        rows.append(
            (
                str(r["machine"]),
                str(r["run_id"]),
                f"{r['device']} {key[2]}",
                _number(r["cal_matmul_tflops"]),
                "?" if n is None else str(n),
                *((_number(r["cal_copy_gbps"]),) if copy else ()),
                f"{MARK} {notes[key]}" if notes[key] else "-",
            )
        )
    headers = ("machine", "run", "device and dtype", "matmul TFLOP/s", "matmul N")
    headers += ("copy GB/s", "note") if copy else ("note",)
    caption = "the calibrated matmul peak each % divides by, and the N of the N×N×N matmul that measured it"
    caption += "; a decode cell's %: the calibrated copy bandwidth" if copy else ""
    return Table(headers, tuple(rows), caption), notes


def _number(value: Any) -> str:
    return f"{float(value):.4g}" if present(value) else "-"


def _note(n: int | None, usual: int | None, largest: int) -> str:
    """Why a % against a calibration of an N×N×N matmul cannot be set beside the others' ('' where it can)."""
    if n is None:
        return "the size of its matmul is unknown (its run's meta.json cannot be read): its % may not compare"
    if usual and n < usual:
        return (
            f"calibrated on an N = {n} matmul, below the N = {usual} its device's calibration times: a "
            "smaller matmul runs further below the peak, so its % reads high"
        )
    if n < largest:
        return (
            f"calibrated on an N = {n} matmul, another machine here on N = {largest}: a smaller matmul runs "
            "further below the peak, so its % reads high against theirs"
        )
    return ""
