"""What `attnbench.bench(fn)` answers, in a few lines for a terminal or a notebook: is fn right (per dtype and
mask, the worst error, and where it fails), what it does not support and what would add it, whether it is
faster or slower than the baseline at which N and by how much (the judge's verdict on an A/B in one run,
each visit of fn paired with the baseline's visit of the same round), and how its time and memory grow.
Read off the run's rows and meta.json alone, as every report is; the full story is `run.report()`.
"""

from __future__ import annotations

import html
import itertools
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnbench.results.causes import pointed, reads_bnhd
from attnbench.results.formulas import counted, end_to_end_rel_err, quantised
from attnbench.results.judge import Cell, Design, Side, judge
from attnbench.results.schema import GATE_FAILED
from attnbench.results.verdicts import holm_verdict

from .answer_growth import growth
from .answer_text import MESSAGE_CHARS, PASSES, SHAPE_AXES, cut, judged_text
from .answer_text import dtypes_first as _dtypes
from .answer_text import short as _short
from .answer_text import shown as _shown
from .answer_text import window_text as _window
from .answer_workloads import contradicted, one_query
from .busy import fewer_threads, machine_busy, unsettled
from .tables import axis_text, label, length_axis, length_name, present, varying
from .words import n_text, names_text, range_text

BROKEN = ("error", "crashed", "timeout", "oom")  # the statuses of a cell whose call raised, died or hung
BROKEN_WORDS = {"timeout": "timed out"}  # a status, as a line says what its cells did
# a gate row's verdicts that are failures (harness.tools.check's GateRow), and each one's word in a line
GATE_VERDICTS = {"FAIL": "WRONG", "error": "ERROR", "crashed": "CRASHED", "timeout": "TIMED OUT"}
MAX_CAUSES = 3  # the most WRONG lines of the sweep's cells: a line per cause, the last one for the rest
_NUMBER = re.compile(r"[-+]?\d[\d.,]*(?:e[-+]?\d+)?")  # a message's numbers, left out of its cause


@dataclass(frozen=True)
class Declared:
    """What bench gates of fn beyond its sweep's cells, at N = n with `attnbench check`'s own rows (GateRows
    of harness.tools.check): every mask, forward and, where fn has one, backward (`masks`: a length no power
    of two divides, and the backward its forward calls never run); each workload it declares (`gated`);
    and the workload keywords it takes undeclared ((keyword, how): variants.handed.undeclared)."""

    gated: tuple = ()
    n: int = 0  # the workloads' N, and the masks' where `mask_ns` is not given
    undeclared: tuple[tuple[str, str], ...] = ()
    # (device, why not, whether fn declares workloads) for each device the run measured on that this process
    # cannot run fn on (the run's cells were measured elsewhere: ray, slurm): nothing is gated there
    elsewhere: tuple[tuple[str, str, bool], ...] = ()
    masks: tuple = ()
    mask: str = "flags"  # the mask fn is declared to take (variants.adapt.MASKS)
    foreign: tuple[str, ...] = ()  # workload keywords it takes in another library's spelling (handed.foreign)
    mask_ns: tuple[int, ...] = ()  # the N every mask is gated at (harness.tools.check.SEQ_LENS); () is (n,)
    tile_only: str = ""  # said for the N of a WRONG line where fn failed there only (check.TILE_ONLY)


def _ns_text(ns) -> str:
    """'100', '100 and 300': the N a gate ran at, in order."""
    return names_text([n_text(n) for n in sorted(set(ns))])


@dataclass(frozen=True)
class Answer:
    """The answer's lines (at most MAX_LINES: answer_text.cut), as text or as a notebook's HTML; `wrong`:
    whether fn was wrong or raised anywhere it was gated (a cell, N = n, a declared workload, large logits).
    A message longer than MESSAGE_CHARS ends ' ...' in `lines`, at a word's end; `full`: every line, none
    left out by the cut, with every message whole, which the notebook's HTML shows (it wraps them)."""

    lines: tuple[str, ...]
    wrong: bool = False
    full: tuple[str, ...] = ()

    def text(self) -> str:
        return "\n".join(self.lines)

    def html(self) -> str:
        body = "\n".join(html.escape(line) for line in self.full or self.lines)
        return f'<pre style="white-space: pre-wrap">{body}</pre>'


def mask_text(causal: Any, padding: Any, align: Any = "top-left") -> str:
    """'no mask', 'causal', 'padded keys', 'causal, padded keys'; 'causal lower-right' where the causal mask
    is aligned to the last key (a decode step's)."""
    causal = present(causal) and bool(causal)
    said = "causal lower-right" if align == "lower-right" else "causal"
    parts = ([said] if causal else []) + (["padded keys"] if present(padding) and padding else [])
    return ", ".join(parts) or "no mask"


def _aligns(rows) -> Any:
    return rows["causal_align"] if "causal_align" in rows else ["top-left"] * len(rows)


def _masks(rows) -> str:
    """'causal; no mask', or where the rows' masks share a part and differ by the other, the shared part
    'with or without' the other ('padded keys, with or without causal': not 'causal, padded keys; padded
    keys')."""
    cells = zip(rows["causal"], rows["padding"], _aligns(rows), strict=True)
    masks = {mask_text(c, p, a) for c, p, a in cells}
    parts = [set(m.split(", ")) - {"no mask"} for m in masks]
    shared, every = set.intersection(*parts), set.union(*parts)
    if len(masks) == 2 and len(shared) == 1 and len(every) == 2:  # {X, X + Y}
        (common,), (other,) = shared, every - shared
        return f"{common}, with or without {other}"
    return "; ".join(sorted(masks))


def _ns(rows) -> str:
    """'at N = 512', or 'from N_k = 1,024 to 4,096' where the rows grow the keys (decode: one N_q)."""
    length = length_axis(rows)
    return range_text(sorted({int(n) for n in rows[length].dropna()}), name=length_name(length))


def right_word(mine) -> str:
    """What passing the gate means for fn: 'correct', or for a variant declared approximate (its rows carry
    the bound it is held to, Capability.approximate) 'within its declared approximation (rel_err <= R)'."""
    bound = mine["approximate"].dropna() if "approximate" in mine.columns else ()
    if not len(bound):
        return "correct"
    return f"within its declared approximation (rel_err <= {float(bound.max()):.2g})"


def correctness(
    mine, spell: Callable[[str], str] = str, named: bool = False, point: Callable[[str], str] = str
) -> list[str]:
    """One line for the cells right against float64 (worst error per dtype), one per cause of fn's wrong
    cells (_wrong_lines), and where no known mistake explains a finite error (`named`: a gate at N = n
    named one), how an approximation by design says so; one for cells that errored, crashed or timed out
    (a timeout's message, the harness's, in the caller's spelling by `spell`). `point`: a message that
    names no cause, pointed to the one cause found elsewhere (same_cause)."""
    lines, word = [], right_word(mine)
    gated = mine[mine["status"].isin(["ok", "wrong"])]
    right = gated[gated["status"] == "ok"]
    if len(right):
        worst = [
            f"{dtype} {float(sub['rel_err'].max()):.1e}"
            for dtype, sub in right.groupby("dtype", sort=True)
            if sub["rel_err"].notna().any()
        ]
        rounded = _end_to_end(right)
        lines.append(
            f"{word} in {len(right)} of {counted(len(gated), 'cell')} gated against float64"
            + (f" of its rounded inputs (worst kernel error: {', '.join(worst) or 'n/a'}){rounded}"
               if rounded else f" (worst relative error: {', '.join(worst) or 'n/a'})")
        )  # fmt: skip
    wrong = gated[gated["status"] == "wrong"]
    lines += _wrong_lines(wrong, point)
    lines += _by_design(wrong, word != "correct" or named or _masked_only(mine))
    broken = mine[mine["status"].isin(BROKEN)]
    if len(broken):
        first = broken.iloc[0]
        where = f"{', '.join(_dtypes(set(broken['dtype'].astype(str))))}; {_masks(broken)}; {_ns(broken)}"
        said = "/".join(dict.fromkeys(BROKEN_WORDS.get(s, s) for s in broken["status"].astype(str)))
        message = str(first["message"])  # a timeout's is the harness's (--cell-timeout), an error's fn's own
        message = spell(message) if first["status"] == "timeout" else message
        message = point(_short(message, MESSAGE_CHARS))
        lines.append(f"{counted(len(broken), 'cell')} {said} ({where}): {message}")
    return lines


def _end_to_end(right) -> str:
    """For a variant that rounds its inputs (its rows' quant_recipe: FP8), whose gate judges its kernel
    against float64 of the rounded inputs: '; end to end, against float64 of the inputs it was given (its
    rounding, e4m3fn:tensor, and its kernel together): worst rel_err bfloat16 4.6e-02 (SQNR 26.7 dB), ...',
    the error the report's speed-accuracy panel draws it at (formulas.end_to_end_rel_err, from sqnr_db);
    '' for any other variant."""
    if "quant_recipe" not in right or "sqnr_db" not in right:
        return ""
    rounded = right[quantised(right["quant_recipe"])]
    return end_to_end_text(
        zip(rounded["dtype"].astype(str), rounded["rel_err"], rounded["sqnr_db"], strict=True),
        rounded["quant_recipe"].astype(str),
    )


def end_to_end_text(errors: Iterable[tuple[str, Any, Any]], recipes: Iterable[str]) -> str:
    """'; end to end, against float64 of the inputs it was given (its rounding, e4m3fn:tensor, and its
    kernel together): worst rel_err bfloat16 4.5e-02 (SQNR 27.0 dB), ...' of (dtype, rel_err, sqnr_db) for
    each row of a rounding variant, its sweep's cells or its gate's problems alike; '' where none has an
    SQNR."""
    worst: dict[str, tuple[float, float]] = {}
    for dtype, err, db in errors:
        db = _number(db)
        if math.isnan(db):  # no SQNR (not measured, or pandas' NA): nothing end to end to say
            continue
        e2e = float(end_to_end_rel_err(err, db))  # type: ignore[arg-type]
        if dtype not in worst or e2e > worst[dtype][0]:
            worst[dtype] = (e2e, db)
    if not worst:
        return ""
    said = ", ".join(f"{d} {e:.1e} (SQNR {db:.1f} dB)" for d, (e, db) in sorted(worst.items()))
    return (
        f"; end to end, against float64 of the inputs it was given (its rounding, "
        f"{', '.join(sorted(set(recipes)))}, and its kernel together): worst rel_err {said}"
    )


def _wrong_lines(wrong, point: Callable[[str], str] = str) -> list[str]:
    """One WRONG line per cause (a message with its numbers left out: the gate's errors differ by cell,
    its cause does not), with the dtypes, masks and N of its cells and its first cell's message: 'it
    ignored causal=True' said of the causal cells and 'it ignored key_lengths=' of the padded ones, not
    one cell's cause for all. Past MAX_CAUSES causes, the last line counts the cells of the rest. `point`:
    a message that names no cause, pointed to the one found elsewhere (same_cause)."""
    from pandas import concat

    if wrong.empty:
        return []
    first_dtype = wrong["dtype"].astype(str).map(lambda d: ("1" if d == "float32" else "2") + d)  # _dtypes'
    ordered = wrong.assign(_first=first_dtype)
    ordered = ordered.sort_values(["_first", "padding", "causal", length_axis(wrong)], kind="stable")
    causes = ordered["message"].astype(str).map(lambda m: _NUMBER.sub("#", " ".join(m.split())))
    groups = [sub for _, sub in ordered.groupby(causes, sort=False)]
    shown = groups if len(groups) <= MAX_CAUSES else groups[: MAX_CAUSES - 1]
    said = [point(_short(str(sub.iloc[0]["message"]), MESSAGE_CHARS)) for sub in shown]
    lines = [f"WRONG {_where(sub)}: {message}" for sub, message in zip(shown, said, strict=True)]
    if len(groups) > len(shown):  # the rest in one line: how many causes, and the first's message
        rest = concat(groups[len(shown) :])
        more = counted(len(groups) - len(shown), "more cause")
        lines.append(f"WRONG {_where(rest)}, {more}: {_short(str(rest.iloc[0]['message']), MESSAGE_CHARS)}")
    return lines


def _where(rows) -> str:
    """'float32, bfloat16 (causal; from N = 64 to 512)': the dtypes, masks and N of rows."""
    return f"{', '.join(_dtypes(set(rows['dtype'].astype(str))))} ({_masks(rows)}; {_ns(rows)})"


def _by_design(wrong, ruled_out: bool) -> list[str]:
    """How an approximation by design (random features, low rank, sparsity) is measured, where fn's wrong
    cells all err finitely, less than zeros would (rel_err < 1), with no known mistake named (the
    gate's message goes straight to the error): nothing where it is `ruled_out` (fn declared one already,
    a gate at N = n named a mistake, or fn is wrong only where masked: a masking bug to fix, not hide)."""
    if ruled_out or wrong.empty or wrong["rel_err"].isna().any():
        return []
    err = wrong["rel_err"].astype(float)
    said = wrong["message"].astype(str).str.removeprefix(f"{GATE_FAILED}: ")
    plain = said.str.startswith(("rel_err", LOWER)).all()
    if not plain or not (err < 1).all():
        return []
    return [
        f"if it approximates attention by design, declare approximate=R, the rel_err against float64 it "
        f"is held to (worst here {err.max():.1e}): its cells are then measured as ok"
    ]


def _masked_only(mine) -> bool:
    """Whether fn is wrong only where a mask is applied while its unmasked cells are right: a mistake in its
    masking, which no approximation by design explains (one errs unmasked too)."""
    masked = mine["causal"].astype(bool) | mine["padding"].fillna(0).astype(bool)
    wrong = mine["status"] == "wrong"
    return bool(wrong.any() and not (wrong & ~masked).any() and ((mine["status"] == "ok") & ~masked).any())


# how a gate row's reason (harness.measure.gate_rows.fail_reason) opens where the gate named no cause
LOWER = "its error is about"  # a lower precision's rounding (harness.measure.lowered): no mistake to fix
NO_CAUSE = ("output rel_err", "non-finite output", "gradient rel_err", LOWER)


def cause_named(declared: Declared) -> bool:
    """Whether a gate at N = n (a mask or a declared workload) failed on a mistake it named: a masking bug
    found there is never to be declared an approximation by design."""
    rows = [*declared.masks, *declared.gated]
    return any(r.status == "FAIL" and not str(r.reason).startswith(NO_CAUSE) for r in rows)


def same_cause(failed, declared: Declared) -> Callable[[str], str]:
    """How fn's lines word a failure: where one of its failures (`failed`: its rows wrong or broken; the
    gate's rows at N = n) says it reads (B, N, H, d), each other failure that names no cause of its own
    points to it (results.causes.pointed: one layout bug said as one cause, not a wrong line, a bare error
    and a shape's exception apart); else each as it is."""
    reasons = [*failed["message"].astype(str), *(r.reason for r in [*declared.masks, *declared.gated])]
    return pointed if reads_bnhd(reasons) else str


def mask_shape(mine, kind: str) -> list[str]:
    """Where fn, declared to take one mask with every masked position in it (mask="bool" or "additive"),
    raised in masked cells only and ran its unmasked ones: the line that says which shape it was handed,
    and how a mask of one per key (a key padding mask, as lucidrains' code takes) is declared."""
    if kind not in ("bool", "additive"):
        return []
    masked = mine["causal"].astype(bool) | mine["padding"].astype(bool)
    raised, ran = mine["status"].isin(BROKEN), mine["status"].isin(["ok", "wrong"])
    if not raised.any() or (raised & ~masked).any() or not (ran & ~masked).any():
        return []
    return [
        f'it raised only where it is handed a mask, as (B, 1, N_q, N_k) (mask="{kind}"): if its mask is one '
        'per key, (B, N_k), declare mask="keys" (causal masking then reaches it as causal=)'
    ]


def at_n(
    declared: Declared,
    wrong: set[tuple[str, str]] = frozenset(),
    right: str = "correct",
    spell: Callable[[str], str] = str,
    point: Callable[[str], str] = str,
) -> list[str]:
    """The gate at N = n over every mask fn takes, forward and, where it has one, backward: one line for
    the masks right against float64 (`right`: what that is, right_word), or one for the first wrong (and
    how many more are) of those whose (dtype, mask) the sweep did not find wrong already (`wrong`: its
    WRONG lines say so), or that none was gated (every mask unsupported there); then one for each device its
    cells ran on that this process lacks; a reason's options in the caller's spelling (`spell`), one that
    names no cause pointed to the one found elsewhere (`point`: same_cause)."""
    gated = [r for r in declared.masks if r.status == "pass" or r.status in GATE_VERDICTS]
    asked = declared.mask_ns or (declared.n,)
    n, lines = _ns_text({getattr(r, "n", 0) or declared.n for r in gated} or asked), []
    failed = [r for r in gated if r.status != "pass"]
    bad = [r for r in failed if (r.dtype, mask_text(r.causal, r.padding)) not in wrong]
    if bad:
        first, more = bad[0], len(bad) - 1
        word = GATE_VERDICTS[first.status]
        also = f" (and {more} more)" if more else ""
        where = f"{first.dtype}; {mask_text(first.causal, first.padding)}"
        at = declared.tile_only or f"at N {n_text(getattr(first, 'n', 0) or declared.n)}"
        lines.append(f"{word} {at} ({where}){also}: {point(_short(spell(first.reason), MESSAGE_CHARS))}")
    elif gated and not failed:
        masks = "; ".join(dict.fromkeys(mask_text(r.causal, r.padding) for r in gated))
        worst = max((r.rel_err for r in gated if r.rel_err is not None), default=float("nan"))
        grads = [r.grad_rel_err for r in gated if r.grad_rel_err is not None]
        own = {getattr(r, "grad_against", "") for r in gated if r.grad_rel_err is not None} == {"own"}
        own_text = " against its own forward's derivative" if own else ""
        also = f", gradients {max(grads):.1e}{own_text}" if grads else ""
        rounded = _gate_end_to_end(gated)  # a rounding variant's, as its sweep's line says it
        lines.append(
            f"{right} at N {n} too, {'forward and backward' if grads else 'forward'} ({_dtype_list(gated)}; "
            f"{masks}): worst {'kernel' if rounded else 'relative'} error {worst:.1e}{also}{rounded}"
        )
    refused = [r for r in declared.masks if r.status == "unsupported"]  # a kernel limited to some N
    if refused and not gated:
        lines.append(f"not gated at N {_ns_text(asked)}, unsupported in every mask: {refused[0].reason}")
    for device, why, workloads in declared.elsewhere:
        what = f"every mask at N {_ns_text(asked)}" + (" and each workload it declares" if workloads else "")
        lines.append(
            f"not gated on {device}, which this process lacks ({why}): `attnbench check --device {device}` "
            f"gates {what} where the cells ran"
        )
    return lines


def _number(value: Any) -> float:
    """value as a float, NaN where it is None or pandas' NA."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _gate_end_to_end(rows: Sequence[Any]) -> str:
    """end_to_end_text of gate rows (harness.tools.check's GateRows: quant, sqnr_db) that passed; '' for a
    variant that does not round its inputs (or a row of an older worker, which has neither)."""
    rounded = [r for r in rows if getattr(r, "quant", "") and getattr(r, "sqnr_db", None) is not None]
    return end_to_end_text(((r.dtype, r.rel_err, r.sqnr_db) for r in rounded), (r.quant for r in rounded))


def large_logits(run_dir: str | Path, variant: str, baseline: str = "") -> tuple[list[str], bool]:
    """Where the run's numerics probe (q scaled up, against the float64 reference) found fn wrong: a WRONG
    line where it turned NaN or inf or raised (an unstable softmax's overflow), per dtype from the smallest
    scale where it did; a 'less accurate' line, with the baseline's error beside, where it stayed finite but
    over its dtype's tolerance (scores rounded to bfloat16 before the softmax lose digits as the logits
    grow: not a wrong answer); one where fn crashed or hung the probe's worker (its record has no scale:
    the probe went on without fn); nothing where it held throughout. With whether fn failed there (a WRONG
    line, or its worker crashed or hung: a failure, as a crashed cell is)."""
    from attnbench.results import load_numerics

    probe = load_numerics(run_dir).get("probe", [])
    mine = [r for r in probe if r.get("variant") == variant]
    lines = [
        f"{variant} {'timed out' if r.get('status') == 'timeout' else r.get('status')} in the numerics probe "
        f"(q scaled up, against float64), so large logits are not gated: "
        f"{_short(str(r.get('message') or ''), MESSAGE_CHARS)}"
        for r in mine
        if "q_scale" not in r and r.get("status") in BROKEN
    ][:1]  # a probe whose worker died or hung records no scale: none of fn's answers there is known
    failed = bool(lines)
    mine = [r for r in mine if "q_scale" in r and "dtype" in r]
    at_one = _first_scales(mine)  # a dtype wrong at the smallest scale already is wrong, not large logits'
    mine = [r for r in mine if at_one[r["dtype"]].get("status") in ("ok", "unsupported")]
    scales = names_text([f"{s:g}" for s in sorted({float(r["q_scale"]) for r in mine})] or ["none"])
    broken = [r for r in mine if r.get("status") in BROKEN or r.get("finite") is False]
    if broken:
        first = _first_scales(broken)
        at = ", ".join(f"{d} from q x {first[d]['q_scale']:g}" for d in _dtypes(set(first)))
        what = "it raised" if all(r.get("status") in BROKEN for r in broken) else "NaN or inf"
        lines.append(f"WRONG on large logits ({at}): {what}, where the numerics probe scales q by {scales}")
        failed = True
    off = [r for r in mine if r.get("status") == "wrong" and r["dtype"] not in {b["dtype"] for b in broken}]
    if off:
        first = _first_scales(off)
        base_records = [r for r in probe if r.get("variant") == baseline]
        theirs = {(r.get("dtype"), r.get("q_scale")): r.get("rel_err") for r in base_records}
        said = []
        for d in _dtypes(set(first)):
            r = first[d]
            base = theirs.get((d, r["q_scale"]))
            beside = f"; {baseline} {base:.1e}" if isinstance(base, float) and math.isfinite(base) else ""
            said.append(
                f"{d} from q x {r['q_scale']:g}: relative error {r['rel_err']:.1e} over the tolerance "
                f"{r['tolerance']:.1e}{beside}"
            )
        lines.append(f"less accurate on large logits, though finite ({'; '.join(said)}), where the numerics "
                     f"probe scales q by {scales}")  # fmt: skip
    return lines, failed


def _first_scales(records: list[dict]) -> dict[str, dict]:
    """dtype -> its probe record at the smallest scale among records."""
    first: dict[str, dict] = {}
    for r in sorted(records, key=lambda r: float(r["q_scale"])):
        first.setdefault(r["dtype"], r)
    return first


def workloads(
    declared: Declared, spell: Callable[[str], str] = str, point: Callable[[str], str] = str, wrong=None
) -> list[str]:
    """The gate of the workloads fn declares: one line for those right against float64 (none of whose
    lines is wrong: answer_workloads.contradicted), one for the first that is wrong or raised (and how many
    more are; causal=True's top-left cell with N_q < N_k among them, said only there), one for the first
    refused; then one for the workload keywords it takes but does not declare, which no cell hands it.
    `point`: a reason that names no cause, pointed to the one found elsewhere (same_cause). wrong: fn's
    sweep cells that were wrong (a DataFrame), None for none."""
    gated, n = declared.gated, declared.n
    lines = []
    bad = [r for r in gated if r.status in GATE_VERDICTS]
    # causal's own: said where wrong only
    right = [r for r in gated if r.status == "pass" and not _implied(r)]
    right = [r for r in right if not contradicted(r, bad, wrong)]
    if right:
        labels = "; ".join(dict.fromkeys(r.workload for r in right))
        worst = max((r.rel_err for r in right if r.rel_err is not None), default=float("nan"))
        rounded = _gate_end_to_end(right)
        lines.append(
            f"declared workloads correct against float64 at N {n_text(n)} ({_dtype_list(right)}; worst "
            f"{'kernel' if rounded else 'relative'} error {worst:.1e}{rounded}): {labels}"
        )
    if bad:
        first = bad[0]
        more = len({(r.workload, r.dtype) for r in bad}) - 1
        also = f" (and {more} more)" if more else ""
        word = GATE_VERDICTS[first.status] + ("" if _implied(first) else " declared")
        lines.append(
            f"{word} {first.workload} ({first.dtype}, N {n_text(n)}){also}: "
            f"{point(_short(spell(first.reason), MESSAGE_CHARS))}"
        )
    refused = [r for r in gated if r.status == "unsupported"]
    if refused:
        why = _short(spell(refused[0].reason), MESSAGE_CHARS)
        lines.append(f"declared {refused[0].workload}, but refused it: {why}")
    if declared.undeclared:
        keywords = ", ".join(f"{keyword}=" for keyword, _ in declared.undeclared)
        how = ", ".join(how for _, how in declared.undeclared)
        lines.append(
            f"takes {keywords} but declares no such workload, so no cell hands it one: "
            f"attnbench.variant(fn, {how}) gates and measures it"
        )
    return lines + list(declared.foreign)


def _implied(row) -> bool:
    """Whether a gate row is a problem causal=True implies (GateRow.implied), not a declared workload."""
    return bool(getattr(row, "implied", False))


def _dtype_list(rows: Sequence[Any]) -> str:
    return ", ".join(_dtypes({r.dtype for r in rows}))


def unsupported(mine, spell: Callable[[str], str] = str) -> list[str]:
    """One line per reason fn's cells were not measured (the reason names what would add it), and one for
    the cells skipped ahead (a call predicted past max_call_ms, or a series that ran out of memory or
    time at a shorter N): where, and the first one's reason, the options it names put in the caller's
    spelling by `spell` (the harness writes them as the CLI's flags: `--max-call-ms 1000`)."""
    out = []
    refused = mine[mine["status"] == "unsupported"]
    for message, sub in refused.groupby("message", sort=False):
        said = _short(spell(str(message)), MESSAGE_CHARS)
        out.append(f"unsupported in {counted(len(sub), 'cell')} ({_masks(sub)}): {said}")
    skipped = mine[mine["status"] == "skipped"]
    if len(skipped):
        dtypes = ", ".join(_dtypes(set(skipped["dtype"].astype(str))))
        passes = ", ".join(PASSES[p] for p in PASSES if (skipped["pass"] == p).any())
        where = f"{dtypes}; {_masks(skipped)}; {passes}; {_ns(skipped)}"
        first = _short(spell(str(skipped.iloc[0]["message"]).removeprefix("skipped: ")), MESSAGE_CHARS)
        out = out[:2] + [f"skipped in {counted(len(skipped), 'cell')} ({where}): {first}"]
    return out[:3]


def speed(df, variant: str, baseline: str) -> list[str]:
    """Per dtype: fn against the baseline, cell by cell over every mask and N both measured ok, judged as
    an A/B in one run (results.judge: visits paired by round where each has 3 or more)."""
    from pandas import DataFrame

    from attnbench.results.schema import CELL_AXES

    shape = [a for a in CELL_AXES if a != "variant"]
    df = df.assign(_unsettled=unsettled(df))  # a cell whose time is the machine's as much as the kernel's
    a_rows = df[df["variant"] == baseline].set_index(shape, drop=False)
    b_rows = df[df["variant"] == variant].set_index(shape, drop=False)
    common = [k for k in b_rows.index if k in a_rows.index]
    if not common:
        return [f"no cell that both {variant} and {baseline} measured: nothing to race"]
    cells, keys, pairs = [], [], []
    for k in common:
        a, b = a_rows.loc[k], b_rows.loc[k]
        pairs.append((a, b))
        b = b.copy()
        b["_unsettled"] = bool(a["_unsettled"] or b["_unsettled"])  # either side of the ratio
        ok = a["status"] == "ok" and b["status"] == "ok"
        cells.append(
            Cell(str(a["status"]), str(b["status"]), Side.of(a) if ok else None, Side.of(b) if ok else None)
        )
        keys.append(b)
    passes = [p for p in PASSES if any(k["pass"] == p for k in keys)]
    frame = DataFrame(keys)
    shapes = varying(frame, SHAPE_AXES)  # a race per shape where fn's cells have several
    ordered = frame[shapes].sort_values(shapes).astype(str)  # numbers in their order: 64 before 128
    combos = list(dict.fromkeys(ordered.itertuples(index=False, name=None)))
    lines = []
    for dtype, pass_, combo in itertools.product(_dtypes({str(k["dtype"]) for k in keys}), passes, combos):
        line = [
            (k, c) for k, c in zip(keys, cells, strict=True)
            if k["dtype"] == dtype and k["pass"] == pass_ and tuple(str(k[a]) for a in shapes) == combo
        ]  # fmt: skip
        # the line's cells are Holm's family, and the verdicts it counts are the Holm-adjusted ones
        judged = judge([c for _, c in line], Design(same_run=True))
        mine = [
            (k, holm_verdict(j)) for (k, _), j in zip(line, judged.cells, strict=True) if j.verdict != "n/a"
        ]
        if not mine:
            continue
        shown = [dtype, *([PASSES[pass_]] if len(passes) > 1 else [])]
        shown += [label(dict(zip(shapes, mine[0][0][shapes], strict=True)), shapes)] if shapes else []
        race = _race(mine, baseline, named="window" in shapes)
        lines.append(
            f"{' '.join(shown)}: {race} ({judged.basis}, Holm over {counted(judged.family, 'cell')})"
        )
    return lines[:4] or _unraced(pairs, variant, baseline)


def _unraced(pairs: list[tuple[Any, Any]], variant: str, baseline: str) -> list[str]:
    """Why there is no race where fn ran ok: the baseline was not ok in those cells (one that left out the
    scale is wrong in every one), with how many of each status and the first one's message."""
    ran = [a for a, b in pairs if b["status"] == "ok"]
    theirs = [a for a in ran if a["status"] != "ok"]
    if not theirs:
        return []
    statuses = dict.fromkeys(str(a["status"]) for a in theirs)
    said = ", ".join(f"{s} in {sum(str(a['status']) == s for a in theirs)}" for s in statuses)
    first = _short(str(theirs[0]["message"]), MESSAGE_CHARS) if present(theirs[0]["message"]) else ""
    return [f"not raced against {baseline}: it was {said} of the {counted(len(ran), 'cell')} {variant} ran "
            f"ok in" + (f": {first}" if first else "")]  # fmt: skip


def _race(judged: list[tuple[Any, Any]], baseline: str, named: bool = False) -> str:
    """'1.52x slower at N 64 to 2.10x slower at N 512 than sdpa (no mask); of 8 cells slower in 8' and the
    like: the ends are the unmasked cells' where there are some, the largest slowdown and speed-up named
    where they are no end (_extremes), and a tally over more masks than that says
    each verdict's masks ('of 4 cells slower in 2 (no mask), faster in 2 (causal)'); the cells' window
    beside their mask unless the line's shape names it already (`named`)."""
    from pandas import DataFrame

    plain = [(k, j) for k, j in judged if mask_text(k["causal"], k["padding"]) == "no mask"] or judged
    length = length_axis(DataFrame([k for k, _ in plain]))
    plain.sort(key=lambda kj: int(kj[0][length]))
    (k0, j0), (k1, j1) = plain[0], plain[-1]
    counts = {v: [k for k, j in judged if j.verdict == v] for v in ("faster", "slower", "same", "ambiguous")}
    # where the ends are the unmasked cells' and the tally counts other masks too, it names each verdict's
    where = (lambda ks: f" ({_masks(DataFrame(ks))})") if len(plain) < len(judged) else (lambda ks: "")
    said = ", ".join(f"{v} in {len(ks)}{where(ks)}" for v, ks in counts.items() if ks)
    mask = mask_text(k0["causal"], k0["padding"], k0.get("causal_align"))
    mask += "" if named else _window(k0.get("window"))
    ends = _end(k0, j0, length) + (f" to {_end(k1, j1, length)}" if len(plain) > 1 else "")
    far = _extremes(judged, [k0, k1], length)
    return f"{ends} than {baseline} ({mask}){far}; of {counted(len(judged), 'cell')} {said}"


def _extremes(judged: list[tuple[Any, Any]], ends: list[Any], length: str) -> str:
    """'; the largest slowdown: 20.13x slower at N 256' and the largest speed-up, each where it is not one of
    the line's `ends` (their cells): a cell 20x slower between two ends about as fast as the baseline is
    the race's news, not a detail of its tally. Its mask where it is not the ends'."""
    ratios = [(k, j) for k, j in judged if math.isfinite(j.ratio) and j.ratio > 0]
    said = ""
    if not ratios:
        return said
    for word, (k, j) in (("slowdown", max(ratios, key=lambda kj: kj[1].ratio)),
                         ("speed-up", min(ratios, key=lambda kj: kj[1].ratio))):  # fmt: skip
        shown = judged_text(j)
        if any(k is e for e in ends) or not shown.endswith("slower" if word == "slowdown" else "faster"):
            continue
        where = mask_text(k["causal"], k["padding"], k.get("causal_align"))
        same = where == mask_text(ends[0]["causal"], ends[0]["padding"], ends[0].get("causal_align"))
        said += f"; the largest {word}{'' if same else ', ' + where}: {_end(k, j, length)}"
    return said


def _end(k: Any, j: Any, length: str) -> str:
    """'2.05x slower at N 512' (or 'at N_k 4,096' where the keys grow), with the judge's verdict beside a
    ratio it did not call: one disturbed visit of three moves a ratio of geometric means further than the
    verdict lets it claim; and 'drifted or noisy' where fn's cell or the baseline's drifted, or was noisy
    while the machine did not hold its speed (busy.unsettled, the rule of the busy-machine line): its
    size is the machine's as much as the kernels'."""
    notes = [] if j.verdict in ("faster", "slower") else [j.verdict]
    notes += ["drifted or noisy"] if bool(k.get("_unsettled", False)) else []
    said = f" ({', '.join(notes)})" if notes else ""
    return f"{judged_text(j)} at {length_name(length)} {n_text(k[length])}{said}"


def bandwidth(df, metas, variant: str, baseline: str) -> list[str]:
    """Where fn's ok cells read a K/V cache (a decode step, a paged cache: their kv_gbps), how fast it reads
    at its longest context: its fastest cell there, as a share of the device's calibrated copy bandwidth,
    and the baseline's GB/s in the same cell."""
    from attnbench.results.schema import CELL_AXES

    from .tables import calibrated_copy

    if "kv_gbps" not in df.columns:
        return []
    mine = df[(df["variant"] == variant) & (df["status"] == "ok")].dropna(subset=["kv_gbps"])
    mine = mine[mine["seq_len"] < mine["seq_k"]]  # a decode step: a few queries read a longer context
    if mine.empty:
        return []
    longest = mine[mine["seq_k"] == mine["seq_k"].max()]
    best = longest.loc[longest["kv_gbps"].idxmax()]
    shape = varying(mine, ("dtype", *SHAPE_AXES))
    where = ", ".join([*(axis_text(a, best[a]) for a in shape), mask_text(best["causal"], best["padding"])])
    copy = calibrated_copy(next(iter(metas.values()), {}), str(best["device"]), [best.get("where_key")])
    share = (
        f": {best['kv_gbps'] / copy:.0%} of the calibrated {best['device']} copy bandwidth ({copy:.3g} GB/s)"
        if copy
        else ""
    )
    axes = [a for a in CELL_AXES if a != "variant"]
    same = df[(df["variant"] == baseline) & (df["status"] == "ok")]
    same = same[(same[axes] == best[axes]).all(axis=1)].dropna(subset=["kv_gbps"])
    beside = f"; {baseline} {same['kv_gbps'].iloc[0]:.3g} GB/s there" if len(same) else ""
    at = f"{length_name('seq_k')} {n_text(best['seq_k'])}"
    return [f"reads its K/V cache at {best['kv_gbps']:.3g} GB/s at {at} ({where}){share}{beside}"]


def answer(
    run_dir: str | Path,
    variant: str,
    baseline: str,
    seconds: float | None = None,
    declared: Declared | None = None,
    more: str = "the full report: run.report() · every cell: run.table()",
    spell: Callable[[str], str] = str,
) -> Answer:
    """The answer for `variant` raced against `baseline` in the run at run_dir (`seconds`: how long the
    run took, where the caller timed it; `declared`: what it declares beyond the sweep's masks; `more`:
    where the rest is, after the run's path on the last line: the Python API's, or the commands'; `spell`:
    the options the rows' messages name as the CLI's flags, in the caller's spelling)."""
    from attnbench.results import load, load_meta

    df = load(run_dir)
    metas = load_meta(run_dir)
    mine = df[df["variant"] == variant]
    took = f" in {seconds:.1f} s" if seconds is not None else ""
    head = f"{variant} against {baseline}: {len(mine)} cells of {variant}, {len(df)} in all, measured{took}"
    declared = declared or Declared()
    wrong = mine[mine["status"].isin(["wrong", *BROKEN])]  # (dtype, mask) pairs its lines name already
    said = {(str(r.dtype), mask_text(r.causal, r.padding)) for r in wrong.itertuples()}  # either alignment
    overflows, overflowed = large_logits(run_dir, variant, baseline)
    point = same_cause(wrong, declared)
    lines = [head, *correctness(mine, spell, cause_named(declared), point), *mask_shape(mine, declared.mask)]
    lines += [*at_n(declared, said, right_word(mine), spell, point), *overflows]
    contradicting = wrong[wrong["status"] == "wrong"]  # a workload's wrong cells: never said right
    lines += [*workloads(declared, spell, point, contradicting), *unsupported(mine, spell)]
    race: list[str] = []
    grows: list[str] = []
    if (mine["status"] == "ok").any():
        busy = machine_busy(df)  # before the race and the growth it puts in doubt
        lines += [f"{busy} Bench again on a quiet machine{spell(fewer_threads(df))}."] if busy else []
        race = speed(df, variant, baseline) + one_query(mine)
        grows = bandwidth(df, metas, variant, baseline) + growth(df, metas, variant, baseline)
    gated = [*declared.masks, *declared.gated]

    wrong_anywhere = bool(len(wrong) or overflowed or any(r.status in GATE_VERDICTS for r in gated))
    full = tuple(_shown(line, full=True) for line in [*lines, *race, *grows, f"run: {run_dir} · {more}"])
    kept = cut(lines, race, grows, f"run: {run_dir}", more)
    return Answer(tuple(_shown(line) for line in kept), wrong=wrong_anywhere, full=full)
