"""The calibrations the history site's cross-machine page divides by: each machine's calibrated matmul
TFLOP/s and the size of the matmul it timed, and which % of peak cannot be set beside the others'."""

from __future__ import annotations

from typing import Any

from attnbench.results.devices import calibration_for, matmul_n

from .page import Table

MARK = "†"  # after a % of peak whose calibration is not comparable with the others' (its note says why)


def calibrations(common, meta_of: Any) -> tuple[Table, dict[tuple[str, str, str], str]]:
    """Per machine, run and dtype of the shared cells (`common`: the store's rows, with their run's `path`
    and `where_key`), the calibration their % divides by: its matmul TFLOP/s and the N of the square matmul
    it timed (meta.json, read by `meta_of(path)`: results.devices.matmul_n). A smaller matmul runs further
    below the device's peak, so a % against it reads higher: one timed at an N below its device's usual size
    (meta.json's matmul_n: docs/method.md's 2048 on a CPU, 8192 on a GPU) or below another calibration of
    the same device kind and dtype on this page is noted. Returns the table and {(path, where_key, dtype):
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
    for key, (r, n, usual) in sorted(found.items(), key=lambda kv: (str(kv[1][0]["machine"]), kv[0])):
        notes[key] = _note(n, usual, largest[(str(r["device"]), key[2])])
        tflops = r["cal_matmul_tflops"]
        rows.append(
            (
                str(r["machine"]),
                str(r["run_id"]),
                f"{r['device']} {key[2]}",
                f"{float(tflops):.4g}" if tflops == tflops and tflops is not None else "-",
                "?" if n is None else str(n),
                f"{MARK} {notes[key]}" if notes[key] else "-",
            )
        )
    headers = ("machine", "run", "device and dtype", "matmul TFLOP/s", "matmul N", "note")
    caption = "the calibrated matmul peak each % divides by, and the N of the N×N×N matmul that measured it"
    return Table(headers, tuple(rows), caption), notes


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
