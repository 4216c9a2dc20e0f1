"""The report's sections on how far to trust it: the runs and the devices their cells were measured on, the
cells that are not ok or are flagged (suspect, drift, throttled), the machine, and each run's calibration."""

from __future__ import annotations

import shlex
from typing import Any

from attnbench.results import devices, identity
from attnbench.results.formulas import bytes_text, is_decode
from attnbench.results.load import changes
from attnbench.results.store import skipped_rows, unfinished, writer_holder

from . import page as pg
from .calibration import group_notes
from .section import num_text
from .tables import common_length_name, flagged, length_name, present

MAX_FAILURE_ROWS = 80


def device_groups(df, metas: dict[str, dict[str, Any]]) -> dict[str, list]:
    """Per run, its devices in groups that may be averaged together (results.devices.groups)."""
    return {
        rid: devices.groups(meta, df[df["run_id"] == rid].to_dict("records")) for rid, meta in metas.items()
    }


def changed_sentences(run_dirs: tuple[str, ...] = ()) -> tuple[str, ...]:
    """One sentence per thing that changed a run's files other than attnbench (a plug-in that forged rows,
    an editor: results.integrity), per run whose rows.jsonl repeats cells unexplained, and per line of a
    rows.jsonl that could not be read (results.store.skipped_rows): its cell is in no count of the report."""
    return tuple(
        f"Changed by something other than attnbench: {s}." for d in run_dirs for s in changes(d)
    ) + tuple(
        f"Not read: {s}; any cell it held is in no count of this report."
        for d in run_dirs
        for s in skipped_rows(d)
    )


def unfinished_sentences(
    df, metas: dict[str, dict[str, Any]], run_dirs: tuple[str, ...] = ()
) -> tuple[str, ...]:
    """One sentence per run that stopped before it measured every cell it planned (results.store.unfinished:
    runs that record their plan), with the command that finishes it; the run is named where there are
    several. A run whose writer lock a live process holds (results.store.writer_holder: it is still being
    measured, and a resume would be refused) says who writes it instead."""
    out = []
    dirs = dict(zip(metas, run_dirs, strict=False))
    for rid, meta in metas.items():
        left = unfinished(meta, df.loc[df["run_id"] == rid, "cell_id"])
        if left is None:
            continue
        who = f" run {rid}" if len(metas) > 1 else ""
        holder = writer_holder(dirs[rid]) if rid in dirs else None
        if holder is not None:
            out.append(
                f"Still being written{who}: by {holder} ({left[0]} of {left[1]} planned cells so far); "
                "report it again once the run ends."
            )
            continue
        target = shlex.quote(str(dirs[rid])) if rid in dirs else "RUN"
        out.append(
            f"Unfinished{who}: {left[0]} of {left[1]} planned cells measured; finish with "
            f"`attnbench run --resume --out {target}`."
        )
    return tuple(out)


def blocks(
    df, metas: dict[str, dict[str, Any]], devgroups: dict[str, list], run_dirs: tuple[str, ...] = ()
) -> list:
    """The page's last sections, in order: the runs (machine, when, cells by status, and whether a run is
    unfinished), where a run measured on several devices measured its cells, the cells that are not ok,
    the flagged ones (each section only when some cell is flagged), the machine, and, for several runs,
    each run's calibration against the first's."""
    left = unfinished_sentences(df, metas, run_dirs)
    return [
        *_runs_blocks(df, metas, dict(zip(metas, run_dirs, strict=False))),
        *([pg.Bullets(left)] if left else []),
        *_where_blocks(devgroups),
        *_failures_blocks(df),
        *_suspect_blocks(df),
        *_drift_blocks(df),
        *_throttled_blocks(df),
        *_machine_blocks(metas),
        *_calibration_section(metas, devgroups),
    ]


# the fingerprint keys every run has recorded since the first schema, and what a resume must share
# (results.identity): shown for every run, 'not recorded' where its meta.json lacks one
RECORDED = ("attnbench_version", "hostname", "python", *(k for k in identity.RESUME_KEYS if k != "hosts"))
NOT_RECORDED = "not recorded"


def fingerprint_table(metas: dict[str, dict[str, Any]]) -> pg.Table:
    """Every fingerprint key (gpu flattened), one column per run, memory in binary units; a key a run did
    not record reads 'not recorded', never a value made up from its absence."""
    flat: dict[str, dict[str, str]] = {}
    # a key one run records and another does not (older runs, an edited meta.json) reads 'not recorded'
    shown = dict.fromkeys(
        [*(k for m in metas.values() for k in (m.get("fingerprint") or {}) if k != "gpu"), *RECORDED]
    )
    for run_id, meta in metas.items():
        fp = dict(meta.get("fingerprint") or {})
        recorded_gpu, gpu = "gpu" in fp, fp.pop("gpu", None)
        items = [(k, fp[k] if k in fp else NOT_RECORDED) for k in shown]
        items += [(f"gpu.{k}", v) for k, v in (gpu or {}).items()]
        if not gpu:  # a run's "gpu": null is a run without one; no key is not knowing
            items.append(("gpu", "none" if recorded_gpu else NOT_RECORDED))
        items.append(("created", meta.get("created", "")))
        for i, rec in enumerate(meta.get("resumes") or [], 1):  # resumes.jsonl, through results.load_meta
            diff = ", ".join(
                f"{k} {old} -> {new}" for k, (old, new) in (rec.get("fingerprint_diff") or {}).items()
            )
            items.append(
                (
                    f"resumed {i}",
                    f"{rec.get('at')} on {rec.get('host')}" + (f" (forced: {diff})" if diff else ""),
                )
            )
        # the run-wide calibration per device kind, then each device's own (meta.json `devices`) where it
        # is another measurement (a one-device run records the same calibration in both places)
        run_wide = meta.get("calibration") or {}
        per_device = {
            w: rec.get("calibration")
            for w, rec in (meta.get("devices") or {}).items()
            if rec.get("calibration") not in (None, run_wide.get(rec.get("device")))
        }
        for dev, cal in [*run_wide.items(), *per_device.items()]:
            if (cal or {}).get("budget_ms") == 0:
                items.append((f"calibrated {dev}", "none (--calibrate-ms 0)"))
            for dt, tf in ((cal or {}).get("matmul_tflops") or {}).items():
                text = f"{tf:.3g} TFLOP/s" if isinstance(tf, (int, float)) else str(tf)
                items.append((f"calibrated {dev} matmul {dt}", text))
            if isinstance((cal or {}).get("copy_gbps"), (int, float)):
                items.append((f"calibrated {dev} copy", f"{cal['copy_gbps']:.3g} GB/s"))
        for k, v in items:
            text = bytes_text(v) if k.endswith("memory_bytes") and isinstance(v, (int, float)) else str(v)
            flat.setdefault(k, {})[run_id] = text
    runs = list(metas)
    return pg.Table(("key", *runs), tuple((k, *[v.get(r, "") for r in runs]) for k, v in flat.items()))


SUSPECT_RULE = (
    "An ok cell is suspect when its achieved TFLOP/s exceeds 1.25x the run's calibrated matmul ceiling (on a "
    "GPU with a known datasheet, that datasheet's peak), or when it is more than 10x faster than the "
    "float64-checked naive variant on the same cell. Suspect cells stay in the plots (ringed with a solid "
    "black circle on the time and decode figures) and the fits, and are left out of every ranking and "
    "speed-up."
)


DRIFT_RULE = (
    "Before every cell the worker times a small matmul. A cell whose probe ran more than 10% off its run's "
    "median probe was measured on a machine running faster or slower than usual (another tenant, a "
    "throttled clock): its time is shown (ringed with a dashed circle on the time and decode figures) but "
    "says as much about that moment as about the variant. `attnbench run --resume --redo-drift --out RUN` "
    "measures them again. A cell measured more than once (such a resume appends a row; the last is the one "
    "shown) whose earlier medians lie more than 10% from its last, beyond either measurement's own p25–p75 "
    "and not the way the speed probes saw the machine's speed change between them, drifted too: its answer "
    "depends on when it was measured, which measuring it again does not settle (`--rounds 3` ranks across "
    "visits)."
)


def _drift_table(df) -> pg.Table:
    """Rows flagged drift (results.drift), with the machine's speed factor at that moment and why."""
    d = flagged(df, "drift")
    rows = tuple(
        (
            str(r["run_id"]),
            str(r["cell_id"]),
            f"{float(r['speed_factor']):.2f}×" if present(r["speed_factor"]) else "",
            str(r["drift_reason"]) if present(r.get("drift_reason")) else "",
        )
        for _, r in d.iterrows()
    )
    return pg.Table(("run", "cell", "machine speed vs run median", "why"), rows[:MAX_FAILURE_ROWS])


THROTTLE_RULE = (
    "While a CUDA cell is timed, attnbench reads the GPU's SM clock, power and temperature through NVML "
    "every 20 ms. A cell whose SM clock fell more than 10% below its earlier high was timed on a GPU that "
    "slowed down (power cap, heat, another tenant): its time is shown, ringed with a dotted circle on the "
    "time and decode figures, but it says as much about the clock as about the kernel."
)


def _throttled_table(df) -> pg.Table:
    """CUDA rows whose SM clock fell during timing (harness.measure.telemetry), with the clocks and the
    power."""
    t = flagged(df, "throttled")
    import pandas as pd

    rows = tuple(
        (
            str(r["run_id"]),
            str(r["cell_id"]),
            f"{int(r['sm_clock_min_mhz'])}–{int(r['sm_clock_max_mhz'])} MHz",
            f"{float(r['sm_clock_drop']):.0%}",
            "" if pd.isna(r["timed_power_w_max"]) else f"{float(r['timed_power_w_max']):.0f} W",
            "" if pd.isna(r["clock_event_reasons"]) else str(r["clock_event_reasons"]),
        )
        for _, r in t.iterrows()
    )
    return pg.Table(("run", "cell", "SM clock", "fall", "power max", "NVML reasons"), rows[:MAX_FAILURE_ROWS])


def _suspect_table(df) -> pg.Table:
    """Ok cells too fast to believe, with the reason (results.suspect)."""
    sus = flagged(df, "suspect")
    rows = tuple((str(r["run_id"]), str(r["cell_id"]), str(r["suspect_reason"])) for _, r in sus.iterrows())
    return pg.Table(("run", "cell", "why"), rows[:MAX_FAILURE_ROWS])


def _calibration_blocks(metas: dict[str, dict[str, Any]], devgroups: dict[str, list]) -> list:
    """Every run's calibrated ceilings beside the first run's, with a warning where they differ by >10%:
    time differences between such runs are partly the machines'. A run of several device groups is
    compared group by group (calibration.match_groups). Runs of one machine (compare_load.machines, as
    compare judges it) are worded as compare words them: no --normalize; measure again, or a --control."""
    from .calibration import group_ceilings, match_groups, warnings_for
    from .compare_load import machines

    first, *others = metas
    rows, warnings, apart = [], [], []
    for rid in others:
        cs = group_ceilings(match_groups(devgroups[first], devgroups[rid]))
        rows += [
            (rid, c.device, c.what, num_text(c.a, ".3g"), num_text(c.b, ".3g"), num_text(c.ratio, ".3f"))
            for c in cs
        ]
        one = machines(metas[first], metas[rid]) is None
        warnings += warnings_for(cs, a=first, b=rid, same_machine=one)
        if not cs:  # a CPU run beside a GPU run: no ceiling of one device to set side by side
            apart.append(rid)
    blocks: list = []
    if rows:
        blocks.append(
            pg.Table(
                ("run", "device", "ceiling", f"first: {first}", "this run", "this run / first"), tuple(rows)
            )
        )
    if apart:
        who = f"Run {apart[0]} shares" if len(apart) == 1 else f"Runs {', '.join(apart)} share"
        blocks.append(
            pg.Para(
                f"{who} no calibrated device with {first}: there is no ceiling to compare, and their times "
                "are each their own machine's."
            )
        )
    return [*blocks, pg.Bullets(tuple(warnings))] if warnings else blocks


def _failures_table(df) -> pg.Table:
    """Cells that are not ok, grouped by run, variant and status, with their lengths and the first message.
    A group of decode cells (N_q queries against N_k != N_q keys: one query against each context of a
    paged cache) gives its N_k, the length its series grows, where N_q alone would say 1 for every one."""
    bad = df[df["status"] != "ok"]
    rows, lengths = [], set()
    for (run_id, variant, status), sub in bad.groupby(["run_id", "variant", "status"], dropna=False):
        decode = "seq_k" in sub.columns and bool(is_decode(sub["seq_len"], sub["seq_k"]).all())
        axis = "seq_k" if decode else "seq_len"
        lengths.add(axis)
        seqs = " ".join(str(n) for n in sorted({int(n) for n in sub[axis].dropna()}))
        msg = next((str(m) for m in sub["message"] if present(m) and str(m)), "")
        rows.append((str(run_id), str(variant), str(status), str(len(sub)), axis, seqs, msg[:300]))
    name = common_length_name(lengths)
    rows = [
        (*r[:4], f"{length_name(r[4])} {r[5]}" if name != length_name(r[4]) else r[5], r[6]) for r in rows
    ]
    return pg.Table(
        ("run", "variant", "status", "cells", name, "message (first)"),
        tuple(rows[:MAX_FAILURE_ROWS]),
        f"first {MAX_FAILURE_ROWS} of {len(rows)} groups" if len(rows) > MAX_FAILURE_ROWS else "",
    )


def _runs_blocks(df, metas: dict[str, dict[str, Any]], dirs: dict[str, str]) -> list:
    """One row per run, in the order of every section (metas'): its folder as given (a committed reference
    run told from one's own), machine, when, cells by status."""
    from attnbench import results

    runs_rows = []
    for rid, meta in metas.items():
        sub = df[df["run_id"] == rid]
        counts = ", ".join(f"{c} {s}" for s, c in sub["status"].value_counts().items()) or "no cells"
        when = str(meta.get("created", ""))
        runs_rows.append((rid, dirs.get(rid, ""), results.machine_label(meta), when, counts))
    return [pg.Heading("Runs"), pg.Table(("run", "folder", "machine", "created", "cells"), tuple(runs_rows))]


def _where_blocks(devgroups: dict[str, list]) -> list:
    """A run measured on several devices says which, and which of them are never averaged together."""
    notes = [n for rid, gs in devgroups.items() for n in group_notes(rid, gs)]
    return [pg.Heading("Where the cells were measured"), pg.Bullets(tuple(notes))] if notes else []


def _failures_blocks(df) -> list:
    failures = _failures_table(df)
    return [pg.Heading("Cells that are not ok"), failures if failures.rows else pg.Para("Every cell is ok.")]


def _flagged_blocks(heading: str, rule: str, table: pg.Table) -> list:
    """A section of flagged cells (suspect, drift, throttled): only when some cell is flagged."""
    return [pg.Heading(heading), pg.Para(rule), table] if table.rows else []


def _suspect_blocks(df) -> list:
    return _flagged_blocks("Suspect cells: shown, never ranked", SUSPECT_RULE, _suspect_table(df))


def _drift_blocks(df) -> list:
    return _flagged_blocks("Cells measured while the machine drifted", DRIFT_RULE, _drift_table(df))


def _throttled_blocks(df) -> list:
    return _flagged_blocks("Cells timed while the GPU's clock fell", THROTTLE_RULE, _throttled_table(df))


def _machine_blocks(metas: dict[str, dict[str, Any]]) -> list:
    return [pg.Heading("Machine"), fingerprint_table(metas)]


def _calibration_section(metas: dict[str, dict[str, Any]], devgroups: dict[str, list]) -> list:
    """Only for several runs: each run's calibrated ceilings against the first run's."""
    if len(metas) < 2:
        return []
    return [pg.Heading("Calibration of each run, against the first"), *_calibration_blocks(metas, devgroups)]


def probe_left_out(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The numerics probe's records that are not ok (its large-logit probe and its gate at N = 300, both on
    dense (B, H, N, d) problems) as its table lists them, less every record of a variant unsupported on each
    of them for one reason (one that runs packed batches or paged caches only: variants.handed.only_workload's
    refusal), which one sentence per reason says instead of a row per problem."""
    from .style import variant_order
    from .words import names_text

    by: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by.setdefault(str(r.get("variant", "")), []).append(r)
    never: dict[str, list[str]] = {}  # the one reason -> the variants it refused every problem
    for v, rs in by.items():
        reasons = {str(r.get("message") or "") for r in rs}
        if all(r.get("status") == "unsupported" for r in rs) and len(reasons) == 1:
            never.setdefault(reasons.pop(), []).append(v)
    left = {v for vs in never.values() for v in vs}
    kept = [r for r in records if r.get("status") != "ok" and str(r.get("variant", "")) not in left]
    said = [
        f"{names_text(variant_order(vs))} {'is' if len(vs) == 1 else 'are'} left out of the probe's table: "
        f"unsupported on every dense problem it asks" + (f" ({why})." if why else ".")
        for why, vs in never.items()
    ]
    return kept, said
