"""What `attnbench compare` is given, loaded and checked before anything is judged: both runs' (or run
sets') rows with their device model, and a one-line refusal for what cannot be compared."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnbench.results import devices, identity
from attnbench.results.formulas import bytes_text
from attnbench.results.store import no_cells_text

from . import calibration


def _with_device_model(rows, groups: list):
    """The run's rows with `device_model`: the device group each row was measured on (results.devices).
    Not `model`: the rows' own `model` column is the published model a cell's shape is from."""
    import pandas as pd

    of = devices.group_of(groups)
    rows["device_model"] = pd.array([of[w].model for w in rows["where"]], dtype="string")
    return rows


def _check_normalize(normalize: str | None, meta_a: dict[str, Any], meta_b: dict[str, Any]) -> None:
    if normalize not in (None, "calibration"):
        raise ValueError(f"--normalize takes 'calibration', got {normalize!r}")
    if normalize and not (calibration.has_calibration(meta_a) and calibration.has_calibration(meta_b)):
        raise ValueError("--normalize calibration needs both runs' calibration (meta.json has none)")


def _check_sets(meta_a: dict[str, Any], meta_b: dict[str, Any], normalize, variant_a, same: bool) -> None:
    """ValueError (one line) for what run sets (results.runset) cannot be compared by: a set with a single
    run, --normalize (one calibration per run), an A/B inside one set (made in one run, its rounds pair)."""
    sets = [m.get("runset") for m in (meta_a, meta_b)]
    if not any(sets):
        return
    if not all(sets):
        which = "RUN_A" if sets[0] else "RUN_B"
        n = len((sets[0] or sets[1])["runs"])
        raise ValueError(
            f"{which} is a run set ({n} runs) and the other a single run: compare a set with a set, each "
            "made the same way (the spread between a side's runs is what the verdict is judged by)"
        )
    if normalize:
        raise ValueError("--normalize rescales one run by its calibration: use --control with run sets")
    if same and variant_a is not None:
        raise ValueError(
            "--variant-a/--variant-b in one run set: compare them in one of its runs, whose rounds pair them"
        )


def require_variant(df, name: str, flag: str, side: str) -> None:
    """ValueError (one line, naming the run's variants) unless `name` is a variant of run `side`."""
    names = set(df["variant"].dropna().astype(str))
    if name not in names:
        known = ", ".join(sorted(names)) or "none"
        raise ValueError(f"{flag} {name!r} is not a variant of run {side} (it has: {known})")


def no_common(run_a, run_b, a, b, axes: list[str], how: str) -> str:
    """The one line for two runs that share no cell: how cells were matched, and every axis whose values in
    A and in B do not overlap (a CPU run against a GPU run differs in dtype and shapes too, not only in
    device)."""
    apart = []
    for x in axes:
        va, vb = (sorted(set(df[x].dropna().tolist())) for df in (a, b))
        if va and vb and not set(va) & set(vb):
            apart.append(f"{x} ({_few(va)} in A, {_few(vb)} in B)")
    said = (
        f"; no value in common on {'; '.join(apart)}"
        if apart
        else "; every axis has a value in both, but no cell has them all"
    )
    return f"{run_a} and {run_b} have no cell in common ({how}{said}); compare needs the same cells"


def _few(values: list[Any], shown: int = 3) -> str:
    return ", ".join(str(v) for v in values[:shown]) + (", ..." if len(values) > shown else "")


def machines(meta_a: dict[str, Any], meta_b: dict[str, Any]) -> tuple[str, str] | None:
    """The machines of A and B ('NVIDIA H200 on vm') where they are two (another model, or another host),
    else None."""
    from attnbench import results

    named = []
    for meta in (meta_a, meta_b):
        host = (meta.get("fingerprint") or {}).get("hostname")
        named.append(results.machine_label(meta) + (f" on {host}" if host else ""))
    return (named[0], named[1]) if named[0] != named[1] else None


# What `compare` names first where A and B differ, from meta.json: each run's settings (as their flags), its
# sweep's axes, the environment its fingerprint records and how its workers ran, and each shared variant's
# source. What differs between any two runs (run_id, created, the folder, the calibration, which has its own
# table) is left out, and so are the fields said under another name: the threads (worker_threads, else the
# fingerprint's torch_threads, else the --threads setting) and the environment the sweep set (--env).
_SAID_ELSEWHERE = {"threads", "torch_threads", "sweep_env", "settings"}
_HOW_RUN = ("executor", "executor_options", "gc_disabled")
_FINGERPRINT_NAMES = {"git_commit": "attnbench commit", "code_sha256": "attnbench code", "hostname": "host"}


def _shown(key: str, value: Any) -> str:
    """A recorded value as a differences line says it: a whole number as it is (bytes in binary units),
    other numbers as %g, a list (its first 4) joined by commas ('default' when empty, as a sweep's empty
    axis is), a mapping as k=v, a commit or a sha256 short (results.identity.short_hash). Two values said
    alike are not a difference."""
    if value is None or isinstance(value, bool):
        return "not set" if value is None else str(value).lower()
    if isinstance(value, int):
        return bytes_text(value) if key.endswith("_bytes") else str(value)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict):
        return " ".join(f"{k}={_shown(k, v)}" for k, v in value.items()) or "none"
    if isinstance(value, (list, tuple)):
        shown = [_shown(key, v) for v in value]
        return ",".join(shown[:4]) + (",..." if len(shown) > 4 else "") if shown else "default"
    return identity.short_hash(value)


def _threads(meta: dict[str, Any]) -> Any:
    """The threads a run's workers measured with: worker_threads, else the fingerprint's torch_threads, else
    the --threads setting (0: torch's choice); None where it records none."""
    settings = (meta.get("sweep") or {}).get("settings") or {}
    for value in (meta.get("worker_threads"), (meta.get("fingerprint") or {}).get("torch_threads")):
        if value is not None:
            return value
    return settings.get("threads")


_SOURCE = "'s source"  # a variant's source as a differences line names it


def _recorded(meta: dict[str, Any]) -> dict[str, Any]:
    """{what: value} of one run's meta.json for setup_differences, in the order it says them."""
    sweep = meta.get("sweep") if isinstance(meta.get("sweep"), dict) else {}
    settings = sweep.get("settings") if isinstance(sweep.get("settings"), dict) else {}
    fingerprint = meta.get("fingerprint") if isinstance(meta.get("fingerprint"), dict) else {}
    out: dict[str, Any] = {"threads": _threads(meta)}
    out.update({f"--{k.replace('_', '-')}": v for k, v in settings.items() if k not in _SAID_ELSEWHERE})
    out.update({k: v for k, v in sweep.items() if k not in _SAID_ELSEWHERE})
    out.update({_FINGERPRINT_NAMES.get(k, k): v for k, v in fingerprint.items() if k not in _SAID_ELSEWHERE})
    gpu = fingerprint.get("gpu")
    if isinstance(gpu, dict):  # the GPU and its driver, not its clocks and temperature at the fingerprint
        out["gpu"] = f"{gpu.get('name')} x{gpu.get('count', 1)}, driver {gpu.get('driver')}"
    out.update({k.replace("_", " "): meta[k] for k in _HOW_RUN if k in meta})
    if isinstance(meta.get("cpu_affinity"), dict):
        out["worker CPUs"] = meta["cpu_affinity"].get("worker")
    for name, cap in (meta.get("variant_capabilities") or {}).items():
        if isinstance(cap, dict) and "source" in cap:
            out[f"{name}{_SOURCE}"] = cap["source"]
    return {k: v for k, v in out.items() if v is not None or k != "threads"}


def setup_differences(meta_a: dict[str, Any], meta_b: dict[str, Any]) -> dict[str, list[str]]:
    """{what: [A's, B's]} for each setting, sweep axis, environment field, way of running and shared
    variant's source that both runs record and that differs (threads first, then in meta.json's order),
    each value as a line says it."""
    a, b = _recorded(meta_a), _recorded(meta_b)
    shown = {k: [_shown(k, a[k]), _shown(k, b[k])] for k in a if k in b}
    for key in [k for k in shown if k.endswith(_SOURCE)]:  # a variant's code, by its hash alone
        differs = identity.code_differs(a[key], b[key])
        if differs is None:  # hashed by two rules: say so, never that the code changed
            older = 0 if (identity.code_of(a[key]) or ("",))[0] == identity.OLD_TEXT else 1
            shown[key][older] += f" ({identity.NOT_COMPARABLE})"
        elif not differs:  # one file, imported by pytest in one run, loaded with --variant-file in the other
            del shown[key]
    return {k: pair for k, pair in shown.items() if pair[0] != pair[1]}


def differences_line(meta_a: dict[str, Any], meta_b: dict[str, Any]) -> str:
    """What differs between the two runs' settings and environment, in one line ('A and B differ in:
    threads 1 in A, 2 in B; --budget-ms 10 in A, 50 in B'), said first by the text and the page; or that
    nothing they both record does."""
    diff = setup_differences(meta_a, meta_b)
    if not diff:
        return "A and B differ in: nothing their meta.json both record (settings, sweep, environment)"
    return "A and B differ in: " + "; ".join(f"{k} {a} in A, {b} in B" for k, (a, b) in diff.items())


# Where a warning below points for the differences it is about: they are named once on compare's first
# screen, by differences_line, and a warning says only what they mean for the ratios.
SAID_IN = "said in 'A and B differ in'"


def setup_lines(meta_a: dict[str, Any], meta_b: dict[str, Any]) -> list[str]:
    """One line where the runs' set-ups differ by what a resume refuses to mix (results.identity: torch,
    the attnbench commit, the allocator and huge-page environment; the hosts are `machines`'): B/A then
    measures the whole change, not the code alone. It names none of them: differences_line names each, on
    both sides, and a difference said twice on one screen reads as two. A key either run does not record
    (older runs) is not said."""
    a, b = (identity.recorded_identity(m) for m in (meta_a, meta_b))
    both = (set(a) & set(b)) - {"hosts"}
    if not identity.identity_diff(*({k: x[k] for k in both} for x in (a, b))):
        return []
    return [
        f"set-up differs in what a resume refuses to mix ({SAID_IN}): each ratio measures the whole change, "
        "not the code alone; to time one change, keep the others the same"
    ]


def _check_control(control: str | None, normalize: str | None, a, b) -> None:
    """ValueError (one line) unless the control is a variant of both runs, and not with --normalize."""
    if control is None:
        return
    if normalize:
        raise ValueError("--control and --normalize both rescale B's times: choose one")
    require_variant(a, control, "--control", "A")
    require_variant(b, control, "--control", "B")


def _picked(a, b, variant_a: str | None, variant_b: str | None, control_variant: str | None, same: bool):
    """--variant-a/--variant-b: A's rows of variant_a (labelled variant_b, so that cells pair) and B's of
    variant_b; ValueError (one line) for one without the other, with --control, a variant a run lacks,
    or a variant compared with itself in one run."""
    if variant_a is None and variant_b is None:
        return a, b
    if variant_a is None or variant_b is None:
        raise ValueError("--variant-a and --variant-b go together: name the variant of each run compared")
    if control_variant is not None:
        raise ValueError("--variant-a/--variant-b compare one variant with another: --control does not apply")
    if same and variant_a == variant_b:
        raise ValueError(f"--variant-a and --variant-b are both {variant_a!r} in one run: nothing to compare")
    require_variant(a, variant_a, "--variant-a", "A")
    require_variant(b, variant_b, "--variant-b", "B")
    a = a[a["variant"] == variant_a].copy()
    a["variant"] = variant_b
    return a, b[b["variant"] == variant_b]


def _identity(meta: dict[str, Any]) -> tuple | None:
    """What makes a run itself wherever its directory is: its run_id and created (a run set's, every run's);
    None where meta.json lacks either."""
    record = meta.get("runset")
    if record:
        return tuple(zip(record.get("run_ids", []), record.get("created", []), strict=False)) or None
    session = (meta.get("imported_from") or {}).get("session_sha256")
    if session:  # one pytest-benchmark session, whichever of its files (JSON, saved) was imported
        return ("pytest-benchmark session", session)
    run_id, created = meta.get("run_id"), meta.get("created")
    return (run_id, created) if run_id and created else None


def _same_run(run_a, run_b, meta_a: dict[str, Any], meta_b: dict[str, Any]) -> tuple[bool, str]:
    """(whether A and B are one run, how it is said): the same directory however spelled, or a copy of it
    (the same run_id and created in meta.json)."""
    if Path(run_a).resolve() == Path(run_b).resolve():
        return True, f"the same run is given twice ({run_a})"
    ident = _identity(meta_a)
    if ident is not None and ident == _identity(meta_b):
        if ident[0] == "pytest-benchmark session":
            files = [(m.get("imported_from") or {}).get("file") for m in (meta_a, meta_b)]
            return True, (
                f"{run_b} and {run_a} were imported from one pytest-benchmark session ({files[0]} and "
                f"{files[1]} hold the same timings: meta.json's imported_from.session_sha256 {ident[1][:12]})"
            )
        what = "run set" if meta_a.get("runset") else "run"
        said = f"the run_id {meta_a.get('run_id')} and created {meta_a.get('created')}"
        return True, f"{run_b} is a copy of the {what} {run_a} ({said} in meta.json)"
    return False, ""


def load(run_a, run_b, normalize, control_variant, variant_a, variant_b):
    """Both sides' rows (with their device model), metas, labels and device groups, checked: ValueError or
    RunDirError (one line) for what cannot be compared, a run with itself or a copy of itself among them
    (but for an A/B of two of its variants)."""
    from attnbench import results
    from attnbench.results import runset

    (a, meta_a, name_a, each_a), (b, meta_b, name_b, each_b) = map(runset.load_each, (run_a, run_b))
    for run, rows, meta in ((run_a, a, meta_a), (run_b, b, meta_b)):
        if rows.empty:  # said as `history add` says it, not as a cell that no axis matched
            raise ValueError(no_cells_text(run, meta))
    same, said = _same_run(run_a, run_b, meta_a, meta_b)
    if same and variant_a is None and variant_b is None:
        raise ValueError(
            f"{said}: compare two runs, or two variants of one run with --variant-a and --variant-b"
        )
    _check_sets(meta_a, meta_b, normalize, variant_a, same)
    groups_a, groups_b = (devices.groups(m, results.scalar_records(x)) for m, x in ((meta_a, a), (meta_b, b)))
    a, b = _with_device_model(a, groups_a), _with_device_model(b, groups_b)
    a, b = _picked(a, b, variant_a, variant_b, control_variant, same=same)
    _check_normalize(normalize, meta_a, meta_b)
    _check_control(control_variant, normalize, a, b)
    labels = (f"{name_a} ({results.machine_label(meta_a)})", f"{name_b} ({results.machine_label(meta_b)})")
    busy = busy_lines(("A", run_a, a, meta_a, each_a), ("B", run_b, b, meta_b, each_b))
    return a, b, meta_a, meta_b, labels, (groups_a, groups_b), same, busy


def busy_lines(*sides: tuple[str, Any, Any, dict[str, Any], Any]) -> list[str]:
    """A line per run of a side (a run set's every run) measured on a busy machine, by the one rule that
    run, report and bench say it by (results.drift.is_busy, busy_sentence): a regression on its cells may
    be the machine's, so the line comes before the gate's result; and one per run with no speed probe (made
    before them), whose drift no one measured. A side is (name, path, rows, meta, a set's runs' rows as
    runset.load_each gives them, None for a run)."""
    from attnbench import results
    from attnbench.results import drift

    out = []
    for side, path, rows, meta, each in sides:
        runset = meta.get("runset") or {}
        runs, ids = runset.get("runs"), runset.get("run_ids")
        for run, run_id in zip(runs, ids, strict=True) if runs else [(path, None)]:
            records = results.scalar_records(each[each["run_id"] == run_id] if runs else rows)
            missed, ok = drift.unprobed(records)
            if ok and missed == ok:
                out.append(
                    f"run {side} ({run}) has no speed probes (made before them): whether the machine "
                    "drifted during it was not measured, so a cell timed while the machine slowed reads as "
                    "the code's"
                )
            if not drift.is_busy(*drift.busy_cells(records)):
                continue
            said = drift.busy_sentence(records, str(run))
            out.append(
                f"run {side} ({run}): {said}; its ratios, and any regression the gate finds, may be the "
                "machine's rather than the code's"
            )
    return out


# the settings that decide how a cell is sampled (its meta.json's sweep settings), as their flags name them
SAMPLING = ("warmup_ms", "budget_ms", "min_ms", "min_samples", "max_samples", "target_rel_iqr")


def sampling_warnings(meta_a: dict[str, Any], meta_b: dict[str, Any]) -> list[str]:
    """One line where the two runs sampled their cells differently (--warmup-ms, --budget-ms, ...: SAMPLING;
    which, and how, differences_line says, and this line does not repeat): a longer budget or warm-up
    reaches more of a cell's slow tail or warms it further, so such ratios are partly the settings'. A
    setting a run does not record (older runs, a run set's first run) is not said."""

    def settings(meta: dict[str, Any]) -> dict[str, Any]:
        sweep = meta.get("sweep") if isinstance(meta, dict) else None
        found = sweep.get("settings") if isinstance(sweep, dict) else None
        return found if isinstance(found, dict) else {}

    a, b = settings(meta_a), settings(meta_b)
    recorded = [k for k in SAMPLING if all(isinstance(x.get(k), (int, float)) for x in (a, b))]
    if all(a[k] == b[k] for k in recorded):
        return []
    return [
        f"sampling settings differ ({SAID_IN}): a cell's time depends on how it is sampled (its warm-up, how "
        "much of its slow tail a budget reaches), so the ratios are partly the settings'; run both with the "
        "same ones"
    ]


def unmatched(x, y, axes: list[str]):
    """The cells of x that y lacks (the last row of a cell measured twice): their cell_id and status."""
    x = x.drop_duplicates(subset=axes, keep="last")
    m = x[[*axes, "cell_id", "status"]].merge(y[axes].drop_duplicates(), on=axes, how="left", indicator=True)
    return m.loc[m["_merge"] == "left_only", ["cell_id", "status"]].reset_index(drop=True)


def unjudged(judged: list[tuple[Any, Any]], meta_a: dict[str, Any], meta_b: dict[str, Any]) -> str:
    """Why cells ok in both runs were not judged (fewer than 2 replicates a side at the level judged), for
    compare's refusal where it is all of them and its warning where it is some; "" where all were judged.
    `judged` pairs each cell (results.judge.Cell) with its Judged. A side without raw timings (a
    pytest-benchmark file saved without --benchmark-save-data) is named with the way out."""
    lacking = [j for c, j in judged if c.ok and min(j.n_a, j.n_b) < 2]
    if not lacking:
        return ""
    ok = sum(c.ok for c, _ in judged)
    said = (
        f"compare cannot judge {len(lacking)} of the {ok} cells ok in both runs"
        if len(lacking) < ok
        else f"compare can judge none of the {ok} cells ok in both runs"
    )
    bare = [
        side for side, meta in (("A", meta_a), ("B", meta_b))
        if (meta.get("imported_from") or {}).get("raw_timings") is False
    ]  # fmt: skip
    if bare:
        which = " and ".join(bare)
        return (
            f"{said}: {which} {'has' if len(bare) == 1 else 'have'} no raw timings (a "
            "pytest-benchmark file saved without --benchmark-save-data keeps only its statistics); save the "
            "sessions with --benchmark-save-data (or write them with --benchmark-json) and import them again"
        )
    return f"{said}: fewer than 2 timed calls a side"
