"""`attnbench report`: runs -> fits, figures (PNG + SVG + CSV), README.md and a self-contained report.html."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnbench.results.formulas import DEFAULT_BASELINES, ratio_number, record_e2e_rel_err
from attnbench.results.load import tile_failed, tile_sentences, tile_wrong
from attnbench.results.pytest_benchmark import imported_runs

from . import findings as findmod
from . import fit as fitmod
from . import page as pg
from . import rendered_from, trust
from .panels import PANELS, accuracy, decode
from .panels.varlen import PACKED_N, packed_rows
from .section import Section, file_stem, group_head, ms_text, saved_figures, seq_count
from .style import palette, slug, trim_title, variant_order
from .tables import (
    COMBO_AXES,
    approximate_names,
    axis_value,
    best_variant,
    calibrated_peak,
    common_length_name,
    device_memory,
    fixed_axes,
    groups,
    kernel_members,
    label,
    length_axis,
    length_name,
    ok_rows,
    panels,
    present,
    quiet_columns,
    ranking,
    ranking_text,
    tied_names,
    varying,
)


@dataclass
class Report:
    """What render() wrote, and the fits table it printed."""

    out_dir: Path
    readme: Path
    html: Path
    figures: list[Any] = field(default_factory=list)
    summary: pg.Table | None = None
    baseline: str | None = None
    findings: findmod.Findings | None = None

    def __repr__(self) -> str:
        """One line: where it is, the first finding, its files."""
        found = findmod.headline(self.findings) if self.findings is not None else "no findings"
        return (
            f"<attnbench report {self.out_dir}: {found} "
            f"({self.readme.name}, {self.html.name}, {len(self.figures)} figures)>"
        )

    def _repr_html_(self) -> str:
        """In a notebook: its files, linked from the notebook's folder, and the findings."""
        files = (
            pg.Link("README.md", self.readme.name),
            " · ",
            pg.Link("report.html", self.html.name),
            f" · {len(self.figures)} figures, with the CSV each was drawn from, in {self.out_dir}",
        )
        blocks: list[pg.Block] = [pg.Heading(f"attnbench report {self.out_dir}"), pg.Para(files)]
        found = findmod.blocks(self.findings) if self.findings is not None else []
        return pg.to_notebook_html([*blocks, *found], self.out_dir)


def _theory_text(exp: Any, n: str = "N") -> str:
    """A theory's exponent against the series' length `n` (N, or N_k for a decode series): N, N², N^1.5."""
    return {1.0: n, 2.0: f"{n}²"}.get(float(exp), f"{n}^{float(exp):g}") if present(exp) else "unknown"


def _class_text(mem_class: str, exp: Any) -> str:
    """A memory class as the theory beside it reads: a quadratic variant's scores grow only as N_k in a
    decode series, so they are named, not called quadratic there."""
    scores = mem_class == "quadratic" and present(exp) and float(exp) != 2.0
    return "N_q × N_k scores" if scores else mem_class


def _length_names(scaling) -> tuple[str, str]:
    """(what N counts in the table's headers, in each row's theory): 'N_k' where every series is a decode
    series, else 'N' (a decode row of a mixed table names its N_k in its theory)."""
    lengths = set(scaling["length"]) if "length" in scaling.columns else {"seq_len"}
    return common_length_name(lengths), length_name("seq_k" if "seq_k" in lengths else "seq_len")


def resolve_baseline(df, requested: str | None) -> str | None:
    """The speed-up baseline: the one asked for (ValueError if the runs lack it), else the first of
    DEFAULT_BASELINES that ran ok, else none."""
    names = sorted({str(v) for v in df["variant"].dropna().unique()})
    if requested is not None:
        if requested not in names:
            raise ValueError(
                f"unknown baseline variant {requested!r}; variants in these runs: {', '.join(names)}"
            )
        return requested
    ok = set(df.loc[df["status"] == "ok", "variant"].dropna().astype(str))
    return next((b for b in DEFAULT_BASELINES if b in ok), None)


def summary_table(scaling) -> pg.Table:
    """Fitted exponents vs theory per variant and combination (the table `attnbench report` prints)."""
    if scaling is None or scaling.empty:
        return pg.Table(("variant",), (), "no cells")
    shown = varying(scaling, [*COMBO_AXES, "seq_len"])  # seq_len: the N_q a decode series holds
    n = _length_names(scaling)[0]
    headers = (
        "variant",
        *("N_q" if a == "seq_len" else a for a in shown),
        "time exponent [95% CI]",
        "R²",
        "theory",
        "memory exponent [95% CI]",
        "R²",
        "theory",
        "vs theory",
        f"largest {n} measured",
        f"largest {n} that fits",
        f"largest {n} within {fitmod.TIME_BUDGET_MS / 1000:g} s/call",
        "% of peak",
    )
    rows = []
    for _, r in scaling.iterrows():
        verdict = []
        for what, col in (("time", "time_agreement"), ("memory", "mem_agreement")):
            if r[col]:
                verdict.append(f"{what} {r[col]}")
        rn = length_name(r.get("length"))  # this row's N
        mem_th = _theory_text(r["mem_theory"], rn)
        if present(r["mem_theory"]):
            mem_th += f" ({_class_text(str(r['mem_class']), r['mem_theory'])})"
        frac = r["peak_fraction_at_max"]
        # a variant that never ran ok says why (e.g. "n/a: 5 unsupported") instead of "ok at no N"
        time_fit, mem_fit = str(r["time_fit"]), str(r["mem_fit"])
        if not r["ok_seq_lens"]:
            time_fit = mem_fit = f"n/a: {r['statuses']}"
        rows.append(
            (
                str(r["variant"]),
                *[_held_text(r[a]) if a == "seq_len" else axis_value(a, r[a]) for a in shown],
                time_fit,
                r["_time_fit"].r2_text(),
                "none (approximate)" if r.get("approximate") else _theory_text(r["time_theory"], rn),
                mem_fit,
                r["_mem_fit"].r2_text(),
                mem_th,
                "; ".join(verdict) or "–",
                seq_count(r["n_max_measured"]),
                str(r["n_fit_text"]),
                str(r["n_time_text"]),
                _peak_text(frac),
            )
        )
    return pg.Table(headers, tuple(rows))


def _held_text(n_q: Any) -> str:
    """A scaling row's N_q: the one its decode series holds, '–' for a series that holds none."""
    return seq_count(n_q) if present(n_q) else "–"


def _peak_text(frac: Any) -> str:
    """'% of peak' as the table shows it: '38%'; above 100%, marked so ('312% (over the calibrated matmul)':
    the kernel beat it, or it was calibrated at a slower moment than the cell ran: docs/reports-and-compare.md
    says so); 'n/a' without one."""
    if not present(frac) or not math.isfinite(float(frac)):
        return "n/a"
    pct = float(frac) * 100
    return f"{pct:.0f}%" + (" (over the calibrated matmul)" if pct > 100 else "")


def _first_call_table(group) -> pg.Table:
    """Per variant, at its largest ok seq_len: the first call and the setup hook against the steady state.
    Lazy initialisation, autotuning, compilation and plan creation land in the first call, never in the
    median; a compiled variant can be fast per call and still cost seconds before its first answer."""
    ok = ok_rows(group).dropna(subset=["time_ms_median"])
    if "first_call_ms" not in ok.columns or ok["first_call_ms"].isna().all():
        return pg.Table(("variant",), ())  # runs from before attnbench 0.2 did not time the first call
    rows = []
    for variant in variant_order(ok["variant"].unique()):
        for _, r in ok[ok["variant"] == variant].sort_values("seq_len").tail(1).iterrows():
            first, med = r["first_call_ms"], r["time_ms_median"]
            ratio = f"{float(first) / float(med):.1f}×" if present(first) and float(med) > 0 else "n/a"
            setup = ms_text(r["setup_ms"]) if present(r.get("setup_ms")) else "no hook"
            rows.append((variant, str(int(r["seq_len"])), ms_text(first), setup, ms_text(med), ratio))
    return pg.Table(
        ("variant", "seq_len", "first call", "setup hook", "steady median", "first / median"),
        tuple(rows),
        "Setup apart from steady state (each variant's largest ok seq_len)",
    )


def _timing_note(group) -> pg.Para | None:
    """One line when a group's ok cells were timed in more than one way (--timing auto on CUDA: CUDA graphs
    for the launch-bound cells, events for the rest), since a line of its figures may then join two modes;
    None when one way timed them all (every CPU group: perf_counter)."""
    modes = ok_rows(group)["timing_mode"].dropna().value_counts()
    if len(modes) < 2:
        return None
    counts = ", ".join(f"{mode} {n}" for mode, n in sorted(modes.items()))
    return pg.Para(
        f"Cells timed in more than one way ({counts}): CUDA graphs leave out the launch overhead that "
        "events count; each row's timing_mode and timing_reason say how and why (time CSV: timing_mode)."
    )


def best_table(group) -> pg.Table:
    """Rows seq_len, columns the panels of a group: the fastest ok variant and its lead over the next."""
    best = best_variant(group)
    named = approximate_names(group)  # an approximation by design says so where it ranks
    ranks = ranking(group)
    pans = panels(group)
    length = length_axis(group)  # a decode group ranks its variants per N_k
    seq_lens = sorted(int(n) for n in group[length].dropna().unique())
    headers = ("seq_len" if length == "seq_len" else "N_k", *[(t or "best variant") for _, t, _ in pans])
    rows = []
    for n in seq_lens:
        cells = []
        for key, _title, _rows in pans:
            sel = best[best[length] == n]
            for axis, value in key.items():
                sel = sel[sel[axis] == value]
            if sel.empty:
                cells.append("no ok cell")
                continue
            b = sel.iloc[0]
            lead = ratio_number(b["lead"], b["lead_spread"])  # in the digits its spread supports
            if b["tied"]:  # the data cannot rank them: say so instead of "1.00× ahead"
                tied = [named.get(v, v) for v in [str(b["best"]), *tied_names(b["tied"])]]
                text = f"tie: {' ≈ '.join(tied)} {ms_text(b['time_ms'])}"
                text += f" ({lead}×{_p_text(b['p_value'])})"
            else:
                text = f"{named.get(str(b['best']), b['best'])} {ms_text(b['time_ms'])}"
                if b["only_ranked"]:  # the others there are suspect: fastest of one crowns nobody
                    text += f" (only one ranked; {', '.join(str(b['suspect']).split())} suspect)"
                if b["runner_up"]:
                    behind = named.get(str(b["runner_up"]), b["runner_up"])
                    text += f" ({lead}× ahead of {behind}{_p_text(b['p_value'])})"
            compared = [str(b["best"]), *tied_names(b["tied"]), str(b["runner_up"] or "")]
            shaky = findmod.shaky_cells(_rows, length)  # this panel's: a drifted cell of another pattern
            if any((m, n) in shaky for name in compared if name for m in kernel_members(name)):
                text += " [read off a drifted or noisy cell]"
            order = ranks[ranks[length] == n]
            for axis, value in key.items():
                order = order[order[axis] == value]
            if len(order) > 2:  # where every other variant stands, not only the front two
                text += f"; ranking: {ranking_text(order)}"
            cells.append(text)
        rows.append((str(n), *cells))
    return pg.Table(
        headers,
        tuple(rows),
        "fastest ok variant per seq_len (median time); '(only one ranked; B suspect)' where every other "
        "variant there is suspect (too fast to believe, never ranked), so it is fastest of one; "
        "'[read off a drifted or noisy cell]' where a cell it "
        "compares drifted, or was noisy while the speed probes did not hold (its lead may be the machine's); "
        "variants whose cells there ran the same kernel "
        "(the rows' kernel column) are one, 'sdpa (= sdpa_cudnn: CUDNN_ATTENTION)', at the faster's time; "
        "a variant that picks its kernel among others' (sdpa) is left out where its row does not record "
        "which it ran and one of those others ran too (it may be that kernel measured twice); "
        "'tie: A ≈ B' when B is less than 2% slower than A (or than the most two names of one kernel "
        "measured apart in that panel, where more) "
        "or the judge cannot call it slower at p < 0.05 (results.judge.separated: the visits of each round "
        "paired, in a run visited 3 or more times, else the samples); "
        "'ranking': every ok variant, fastest first, '≈' within a group the same rule cannot tell from its "
        "fastest, '›' before the next group, with that group's time over the fastest's (ranking.csv)",
    )


def _p_text(p: Any) -> str:
    if not present(p) or not math.isfinite(float(p)):
        return ", untested"
    return ", p < 0.001" if float(p) < 0.001 else f", p = {float(p):.2g}"


def _probed_at(rec: dict[str, Any]) -> str:
    """A probe record's problem: its q scale (×10), or the N of the gate past full tiles and its mask."""
    if isinstance(rec.get("q_scale"), (int, float)):
        return f"q ×{rec['q_scale']:g}"
    if isinstance(rec.get("seq_len"), int):
        return f"N {rec['seq_len']}" + (", causal" if rec.get("causal") else "")
    return ""


def _err_t(err: Any) -> str:
    return f"{err:.2e}" if isinstance(err, (int, float)) else ("n/a" if err is None else str(err))


def _probe_table(probe: list[dict[str, Any]], caption: str = "") -> pg.Table:
    """The numerics probe's results (variant, device, dtype, q scale or N) with their status and error;
    where a quantising variant's record is among them, its end-to-end error beside its kernel's
    (results.formulas.record_e2e_rel_err)."""
    rounded = any(record_e2e_rel_err(rec) is not None for rec in probe)
    rows = []
    for rec in probe:
        e2e = record_e2e_rel_err(rec)
        end = (_err_t(e2e) if e2e is not None else "",) if rounded else ()
        rows.append(
            (
                str(rec.get("variant", "")),
                str(rec.get("device", "")),
                str(rec.get("dtype", "")),
                _probed_at(rec),
                str(rec.get("status", "")),
                _err_t(rec.get("rel_err")),
                *end,
                str(rec.get("message", ""))[:200],
            )
        )
    headers = ("variant", "device", "dtype", "problem", "status", "rel_err")
    headers += ("e2e rel_err", "message") if rounded else ("message",)
    return pg.Table(headers, tuple(rows), caption)


@dataclass
class Inputs:
    """Everything a report is drawn from, loaded and checked before anything is written."""

    df: Any
    metas: dict[str, dict[str, Any]]
    numerics: dict[str, dict[str, Any]]
    baseline: str | None
    run_dirs: tuple[str, ...] = ()  # as given, in metas' order: the findings' commands and the Runs table
    rows_sha256: tuple[str, ...] = ()  # each run's rows when read (rendered_from: publish checks them)

    @property
    def dirs(self) -> dict[str, str]:
        """Run id -> its folder as given (metas and run_dirs are in the same order)."""
        return dict(zip(self.metas, self.run_dirs, strict=False))


def prepare(run_dirs: list[str | Path], baseline: str | None = None) -> Inputs:
    """Load the runs (results.RunDirError for a bad run dir), resolve the baseline (ValueError if unknown)."""
    from attnbench import results
    from attnbench.results.rowfile import read_once

    if not run_dirs:
        raise ValueError("no run directories given")
    with read_once():  # the digest is of the rows loaded: each file read and parsed once for both
        sums = rendered_from.digests(run_dirs)
        df = results.load(*run_dirs)
    given = results.load_meta(*run_dirs)
    if len(given) < len(run_dirs):
        raise ValueError("the same run is given twice (run ids must differ)")
    # one order for every part of the page: its run ids' (they begin with the time each run started), the
    # order groupby gives the findings and the sections, not the order of the command line
    drawn = sorted(zip(given, (str(d) for d in run_dirs), sums, strict=True))
    metas = {rid: given[rid] for rid, _, _ in drawn}
    numerics = {rid: results.load_numerics(d) for rid, d, _ in drawn}
    dirs, in_order = tuple(d for _, d, _ in drawn), tuple(s for _, _, s in drawn)
    return Inputs(df, metas, numerics, resolve_baseline(df, baseline), dirs, in_order)


def refuse_empty(inputs: Inputs) -> Inputs:
    """`inputs`, or a ValueError (one line) naming a run of them with no measured cell (no rows.jsonl, or an
    empty one), as compare and `history add` say it (results.store.no_cells_text): a report of it would
    draw nothing and count '0 of 0 cells'."""
    from attnbench.results.store import no_cells_text

    for rid, d in inputs.dirs.items():
        if not (inputs.df["run_id"] == rid).any():
            raise ValueError(no_cells_text(d, inputs.metas[rid]))
    return inputs


# ---- the sections of the page --------------------------------------------------------------------------
# A report is for looking: its findings, then every section's figures, then every section's tables. Each
# builder returns a section.Section (its blocks among the figures and among the tables, and the figures it
# saved); render() lays them out. A part with nothing to show adds no blocks, and its heading stays off.

METHOD = (
    "Method, in short: only ok cells enter fits, rankings and speed-ups; a cell's time is the median of its "
    "timed calls (p25–p75: spread). Time is fitted by a weighted power law over the ok N within "
    f"the top {fitmod.ASYMPTOTIC_OCTAVES} octaves (N ≥ the largest / {2**fitmod.ASYMPTOTIC_OCTAVES}, at "
    f"least {fitmod.MIN_FIT_POINTS} N), or from the run's time_fit_from up; in rounds, Theil-Sen through "
    f"every visit. Memory fits c + a·N^b over the top {fitmod.MEMORY_OCTAVES} octaves. CIs are 95% (none "
    "from two N); each fit's N: {fits}. 'vs theory': N² (decode: N_k) for time, N or N² (decode: N_k) for "
    "memory. 'largest N "
    "that fits' reads the memory fit to the device's memory, never beyond "
    f"{fitmod.EXTRAPOLATION_LIMIT}× the largest N measured; '% of peak' is the TFLOP/s at the largest ok N "
    "over the run's calibrated matmul. In full: {docs} ('Fits', 'Reading a report'){where}."
)
METHOD_DOC = "docs/method.md"
# the docs beside this code in a checkout (an editable install): reports/render.py -> the project's root
PROJECT_ROOT = Path(__file__).resolve().parents[1]


def method_href(out_dir: str | Path) -> str | None:
    """The link from a report in `out_dir` to docs/method.md: relative where the report lies inside the
    project checkout that holds the docs (reports/reference/...), so that it works in the repository and in
    any copy of it; None elsewhere (no documentation URL is configured: the page names the file)."""
    doc, out = PROJECT_ROOT / METHOD_DOC, Path(out_dir).resolve()
    if not doc.is_file() or not out.is_relative_to(PROJECT_ROOT):
        return None
    return Path(os.path.relpath(doc, out)).as_posix()


def method_para(has_fits: bool, docs_href: str | None = None) -> pg.Para:
    """The method in one paragraph, its fits.csv linked where the report wrote one (a file beside the page
    is the one link that works wherever the report folder is copied), and docs/method.md where `docs_href`
    (method_href) reaches it."""
    head, tail = METHOD.split("{fits}")
    middle, end = tail.split("{docs}")
    where = "" if docs_href else " in attnbench's source repository (no documentation URL is configured)"
    end = end.replace("{where}", where)
    docs: tuple = (pg.Link(METHOD_DOC, docs_href, relative=True),) if docs_href else (METHOD_DOC,)
    if not has_fits:
        return pg.Para((head + "the fits table's fit_seq_lens" + middle, *docs, end))
    return pg.Para((head, pg.Link("fits.csv", "fits.csv"), " (fit_seq_lens)" + middle, *docs, end))


def _write_csvs(df, scaling, out: Path) -> None:
    """fits.csv (the scaling table) and best.csv (the fastest variant per cell), without the columns no
    run here varies: device_group only when some run is split into device groups (results.devices),
    model only when the sweep named published models, seq_k only where some cell's keys are not its
    queries."""
    unsplit = quiet_columns(df)
    if decode.decode_rows(df).empty:
        unsplit.append("seq_k")
    if not scaling.empty:
        held = ["seq_len"] if scaling["seq_len"].isna().all() else []  # the N_q of decode series only
        drop = ["_time_fit", "_mem_fit", *held, *[c for c in unsplit if c in scaling.columns]]
        scaling.drop(columns=drop).to_csv(out / "fits.csv", index=False)
    best_variant(df).drop(columns=unsplit).to_csv(out / "best.csv", index=False)
    ranking(df).drop(columns=unsplit).to_csv(out / "ranking.csv", index=False)


def _scaling_blocks(
    df,
    summary: pg.Table,
    metas: dict[str, dict[str, Any]],
    has_fits: bool = True,
    docs_href: str | None = None,
) -> list:
    """The first of the tables: fitted exponents against theory, after the method in short, the axes every
    cell shares and where a run's time fits start (when its preset says)."""
    blocks: list = [pg.Heading("Scaling: fitted exponents vs theory"), method_para(has_fits, docs_href)]
    fixed = fixed_axes(df, COMBO_AXES)
    if fixed and len(df):
        every = trim_title(label({a: df.iloc[0][a] for a in fixed}))  # 'causal' said once
        blocks.append(pg.Para(f"Every cell here: {every}."))
    starts = {rid: fitmod.time_fit_from(meta) for rid, meta in metas.items()}
    said = [
        f"{rid if len(metas) > 1 else 'This run'}'s time fits start at N = {n} (its time_fit_from setting)."
        for rid, n in starts.items()
        if n
    ]
    unknown = fitmod.no_theory_text(metas)
    if not packed_rows(df).empty:  # said once, for every packed series of the table
        blocks.append(pg.Para(PACKED_N))
    return [*blocks, *(pg.Para(s) for s in [*said, *([unknown] if unknown else [])]), summary]


FIGURE_KINDS = ("time", "memory", "throughput", "speedup", "status")  # a group's figures, in page order


def group_figures(
    gkey: dict[str, Any],
    group,
    meta: dict[str, Any],
    fits,
    base: str | None,
    head: str,
    kinds: tuple[str, ...] = FIGURE_KINDS,
) -> list:
    """A group's figures of `kinds` (FIGURE_KINDS), drawn (not yet saved) in page order: (kind, title,
    (figure, data), caption). The speed-up figure is drawn only where the baseline ran ok beside another
    variant."""
    from . import plots

    device, dtype = str(gkey["device"]), str(gkey["dtype"])
    figs = []
    legend = "with its 95% CI, or why its growth was not measured, as the findings say"
    if "time" in kinds:
        windowed = "window" in group.columns and (group["window"] > 0).fillna(False).any()
        window = (
            "; a window panel's guides: a window of W keys does N² work while N ≤ W and N·W (∝N) once N ≫ W"
            if windowed
            else ""
        )
        figs.append(
            (
                "time",
                "Time vs seq_len",
                plots.time_figure(group, fits, f"Time per call · {head}"),
                f"Median time with its p25–p75 band; legend: the exponent fitted over the asymptotic points "
                f"{legend}{window}.",
            )
        )
    if "memory" in kinds:
        dev_mem = device_memory(meta, device, group["gpu_name"].dropna().unique())
        figs.append(
            (
                "memory",
                "Peak memory vs seq_len",
                plots.memory_figure(group, fits, f"Peak memory · {head}", dev_mem),
                f"Peak memory of one call; legend: the fitted exponent {legend}; line: the device's memory.",
            )
        )
    if "throughput" in kinds:
        peak = calibrated_peak(meta, device, dtype, group["where"].dropna().unique())
        figs.append(
            (
                "throughput",
                "Achieved TFLOP/s",
                plots.throughput_figure(group, f"Throughput · {head}", peak),
                "FLOPs by the harness's FLOP convention over median time; dashed: calibrated matmul peak.",
            )
        )
    ranked_against = base is not None and (ok_rows(group)["variant"] == base).any()
    if "speedup" in kinds and ranked_against and group["variant"].nunique() > 1:
        figs.append(
            (
                "speedup",
                f"Speed-up over {base}",
                plots.speedup_figure(group, f"Speed-up over {base} · {head}", base),
                f"{base} median time / variant median time; grey text: why a cell has no ratio.",
            )
        )
    if "status" in kinds:
        figs.append(
            (
                "status",
                "Cell status",
                plots.status_figure(group, f"Cell status · {head}"),
                "Only ok cells enter fits, rankings and speed-ups.",
            )
        )
    return figs


def _group_section(
    gkey: dict[str, Any], group, meta: dict[str, Any], fits, base: str | None, multi: bool, out: Path
) -> Section:
    """One group (device, dtype, pass, ...): its figures (after the timing note, when it was timed in two
    ways) among the figures; the fastest variant per N and the first call against the steady state among
    the tables."""
    head, stem = group_head(gkey, group, multi), file_stem(gkey, multi)
    figures: list = [pg.Heading(head)]
    note = _timing_note(group)
    if note is not None:
        figures.append(note)
    kinds = FIGURE_KINDS
    if (group["status"] == "ok").all():  # the status figure would be one colour: a sentence says it
        kinds = tuple(k for k in FIGURE_KINDS if k != "status")
    elif not (group["status"] == "ok").any():  # time, memory and throughput would be empty axes
        kinds = ("status",)
        figures.append(
            pg.Para(f"None of the {len(group)} cells of this group ran ok: its status figure alone.")
        )
    drawn_figures, files = saved_figures(group_figures(gkey, group, meta, fits, base, head, kinds), out, stem)
    figures += drawn_figures
    if "status" not in kinds:
        figures.append(pg.Para(f"All {len(group)} cells of this group are ok: no status figure."))
    tables: list = [pg.Heading(f"Fastest variant · {head}"), best_table(group)]
    first = _first_call_table(group)
    if first.rows:
        tables.append(first)
    return Section(figures, tables, files)


def _numerics_section(numerics: dict[str, dict[str, Any]], multi: bool, out: Path) -> Section:
    """Per run: the large-logit probe against float64 and one head's attention weights (a sanity view of the
    masks) among the figures; the probe's results that are not ok among the tables."""
    from . import plots
    from .style import save

    figures: list = [pg.Heading("Numerics")]
    tables: list = []
    files = []
    for rid, num in numerics.items():
        probe = num.get("probe") or []
        stem_r = slug(rid) if multi else "run"
        if probe:
            fig, data = plots.numerics_figure(probe, f"Error against float64 · {rid}")
            files.append(
                save(
                    fig,
                    data,
                    out,
                    f"numerics-{stem_r}",
                    "Numerics probe",
                    "Large-logit probe: q scaled by 1, 10, 100; the unstable softmax overflows first.",
                )
            )
            figures.append(pg.Figure(files[-1]))
        else:
            figures.append(pg.Para(f"{rid}: no numerics probe in this run."))
        bad, left_out = trust.probe_left_out([*probe, *(num.get("tiles") or [])])
        if bad:
            tables.append(_probe_table(bad, rid if multi else ""))
        tables += [pg.Para(said) for said in left_out]  # a packs-only variant: once, not a row per problem
        example = num.get("example_weights")
        if example and example.get("weights"):
            fig, data = plots.weights_figure(example, f"Attention weights (naive, one head) · {rid}")
            files.append(
                save(
                    fig,
                    data,
                    out,
                    f"weights-{stem_r}",
                    "Attention weights, causal and padding masks",
                    "Sanity view: zero above the diagonal (causal) and right of the padding line.",
                )
            )
            figures.append(pg.Figure(files[-1]))
    if tables:
        tables.insert(0, pg.Heading("Numerics probe: results that are not ok"))
    return Section(figures, tables, files)


def findings_of(inputs: Inputs, scaling=None) -> findmod.Findings:
    """The report's findings, as render() puts them first, without drawing or writing anything (scaling:
    fitmod.scaling_table of the inputs, when the caller has it)."""
    if scaling is None:
        scaling = fitmod.scaling_table(inputs.df, inputs.metas)
    multi = len(inputs.metas) > 1
    left = trust.unfinished_sentences(inputs.df, inputs.metas, inputs.run_dirs)
    changed = trust.changed_sentences(inputs.run_dirs)
    failed = {
        rid: tile_failed(num.get("tiles") or [], num.get("probe") or [])
        for rid, num in inputs.numerics.items()
    }
    wrong = tuple(said for rid, f in failed.items() for said in tile_sentences(f, rid if multi else ""))
    wrong_at = {(rid, name): n for rid, f in failed.items() for name, n in tile_wrong(f).items()}
    return findmod.build(
        inputs.df, scaling, lambda gkey, group: group_head(gkey, group, multi), inputs.dirs, left, changed,
        imported_runs(inputs.metas), wrong, lambda gkey, rows: decode.copy_of(gkey, rows, inputs.metas),
        wrong_at, accuracy.emulations(inputs.metas),
    )  # fmt: skip


def render(inputs: Inputs, out_dir: str | Path, into: str | Path | None = None) -> Report:
    """Fit, draw every figure and write README.md + report.html (and the CSVs) into out_dir, or into `into`
    where the caller moves them to out_dir once complete (results.whole.written_whole): the Report and
    its links name out_dir."""
    df, metas, numerics, base = inputs.df, inputs.metas, inputs.numerics, inputs.baseline
    multi = len(metas) > 1
    out = Path(out_dir if into is None else into)
    out.mkdir(parents=True, exist_ok=True)

    scaling = fitmod.scaling_table(df, metas)
    fits = fitmod.fit_index(scaling)
    _write_csvs(df, scaling, out)
    summary = summary_table(scaling)
    page = pg.Page(pg.REPORT_TITLE + ", ".join(metas))
    readme, html_page = (out / name for name in pg.PAGE_FILES["report"])
    final = Path(out_dir)
    report = Report(final, final / readme.name, final / html_page.name, summary=summary, baseline=base)
    devgroups = trust.device_groups(df, metas)

    # the findings first (issue 26): what the figures and tables below say, in sentences
    report.findings = findings_of(inputs, scaling)
    page.add(*findmod.blocks(report.findings))
    # every section draws and saves its figures as it is built, in one palette: every variant of the report
    # keeps its colour across them all, plug-ins included
    names = {str(v) for v in df["variant"].dropna()}
    names |= {str(r.get("variant")) for num in numerics.values() for r in num.get("probe") or []}
    with palette(names):
        sections = [
            _group_section(gkey, group, metas.get(str(gkey["run_id"]), {}), fits, base, multi, out)
            for gkey, group in groups(df)
        ]
        sections += [panel.section(df, metas, out) for panel in PANELS]
        sections.append(_numerics_section(numerics, multi, out))
    # a report is for looking: every figure before any table, and the sections on trust last
    for section in sections:
        page.add(*section.figures)
        report.figures.extend(section.files)
    page.add(*_scaling_blocks(df, summary, metas, not scaling.empty, method_href(final)))
    for section in sections:
        page.add(*section.tables)
    page.add(*trust.blocks(df, metas, devgroups, inputs.run_dirs))

    readme.write_text(pg.to_markdown(page), encoding="utf-8")
    html_page.write_text(pg.to_html(page, out), encoding="utf-8")
    rendered_from.write(out, list(metas), inputs.run_dirs, inputs.rows_sha256)
    return report
