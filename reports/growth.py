"""The findings' sentences on growth and on the memory wall: per variant how its time and memory grow
(fit.scaling_table's exponents, in words), the largest N its memory fit says fits in the device's memory,
and where its cells were refused for memory. Each takes `marks`: what a sentence says right after a
variant's name (' (wrong at N 300)': findings.build), nothing where absent."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from attnbench.results.formulas import bytes_text

from .busy import SHAKY
from .fit import EXTRAPOLATION_LIMIT
from .style import variant_order
from .tables import length_axis, length_name, ok_rows, present
from .words import exponent_text, growth_word, n_text, names_text

CONSTANT_SHOWN = 1 << 20  # a memory fit's N-independent part worth a word (chunked's block: about 5 MiB)


def says_nothing(exp: Any, lo: Any, hi: Any, name: str = "N") -> str | None:
    """Why an exponent says nothing of how a variant grows: 'two N' (a fit through two points, no CI; `name`:
    the length's) or 'CI too wide to say' (growth_word); None for one that says something."""
    if not present(exp):
        return None
    if not (present(lo) and present(hi)):
        return f"two {name}"
    return "CI too wide to say" if growth_word(exp, lo, hi) == "CI too wide to say" else None


def exponent_said(fit: Any, name: str = "N") -> str:
    """A fitted exponent (fit.PowerFit) as the findings say it, '1.98 [1.90, 2.06]', and where they say its
    growth not measured (says_nothing: two N, a CI too wide to say), no exponent either, as the figures'
    legends: 'growth not measured (two N)', 'growth not measured (CI too wide to say)'; 'n/a (...)' without
    a fit. The history site's findings give a run's exponent so (reports.site_findings)."""
    why = says_nothing(fit.exponent, fit.ci_low, fit.ci_high, name)
    return f"growth not measured ({why})" if why else fit.text()


# a variant with no fit whose wrong cells its panel's first sentence names (findings.wrong_sentence)
SAID_WRONG = "wrong answers, said above"


def growth_sentences(
    fits,
    length: str = "seq_len",
    marks: Mapping[str, str] | None = None,
    shaky: Collection[tuple[str, int]] = (),
    said_wrong: Collection[str] = (),
) -> list[str]:
    """Per variant whose time fit says something: its time and memory exponents with their CIs, in words
    (a memory exponent that says nothing left out); the variants whose time fit says nothing (two N, no
    CI; a CI too wide to say) in one sentence, their exponents in the scaling table; those with no fit in
    another. `length`: the panel's (tables.length_axis), which names N (N_k for a decode panel). `shaky`:
    the (variant, N) cells of a busy machine that drifted or were noisy (findings.shaky_cells): a sentence
    that gives a time exponent fitted through one of them opens with SHAKY, as a ranking read off one does.
    `said_wrong`: the variants whose wrong cells the panel's first sentence names (findings.wrong_sentence):
    their count of wrong cells is not said again where they have no fit."""
    name = length_name(length)
    marks = marks or {}
    out: list[str] = []
    unfit: dict[str, list[str]] = {}  # statuses -> the variants with no fit
    unsaid: dict[str, list[str]] = {}  # why the time fit says nothing -> the variants
    by_name = {str(r["variant"]): r for _, r in fits.iterrows()}
    for v in variant_order(by_name):
        r = by_name[v]
        if not present(r["time_exp"]):
            statuses = str(r["statuses"])
            if v in said_wrong:  # its wrong cells said above: the other statuses, if any, said here
                rest = [s for s in statuses.split(", ") if not s.endswith(" wrong")]
                statuses = ", ".join(rest) if rest else SAID_WRONG
            unfit.setdefault(statuses, []).append(v + marks.get(v, ""))
            continue
        why = says_nothing(r["time_exp"], r["time_ci_low"], r["time_ci_high"], name)
        parts = []
        if why:  # its time in the one sentence below; a memory fit that says something is still said
            unsaid.setdefault(why, []).append(v + marks.get(v, ""))
        else:
            time = exponent_text(r["time_exp"], r["time_ci_low"], r["time_ci_high"], name)
            parts.append(f"time grows as {time}")
        if present(r["mem_exp"]) and not says_nothing(r["mem_exp"], r["mem_ci_low"], r["mem_ci_high"]):
            memory = f"memory {'as' if parts else 'grows as'} "
            memory += exponent_text(r["mem_exp"], r["mem_ci_low"], r["mem_ci_high"], name)
            const = r.get("mem_const_bytes")
            if present(const) and float(const) >= CONSTANT_SHOWN:  # the fit's c + a·N^b
                memory += f" above {bytes_text(int(const))} that does not grow with {name}"
            parts.append(memory)
        if parts:
            said = f"{v + marks.get(v, '')}: {', '.join(parts)}."
            fitted = {(v, int(n)) for n in str(r.get("fit_seq_lens") or "").split()}
            out.append(SHAKY + said if not why and fitted & set(shaky) else said)
    if unsaid:
        each = [f"{names_text(vs)} ({why}{' each' if len(vs) > 1 else ''})" for why, vs in unsaid.items()]
        out.append(f"Time's growth not measured (see the scaling table) for: {'; '.join(each)}.")
    if unfit:
        each = [
            f"{names_text(vs)} ({why}{' each' if len(vs) > 1 and why != SAID_WRONG else ''})"
            for why, vs in unfit.items()
        ]
        out.append(f"No fit (ok at fewer than two {name}): {'; '.join(each)}.")
    return out


GUARD_PREFIX = "memory guard:"  # a row the memory guard skipped opens its message so (harness.measure.guard)


def _refused(panel_rows, length: str):
    """The rows refused for memory: out of memory, or skipped by the memory guard."""
    guard = (
        panel_rows["message"].astype(str).str.startswith(GUARD_PREFIX) if "message" in panel_rows else False
    )
    return panel_rows[(panel_rows["status"] == "oom") | ((panel_rows["status"] == "skipped") & guard)]


def _measured_wall(rows, length: str, n_fit: int) -> int | None:
    """A variant's largest ok N where its own rows contradict its memory fit's wall `n_fit`: refused for
    memory (out of memory, the memory guard) at an N the fit says fits, or ok at an N beyond it; None where
    the rows agree with the fit (or it ran ok nowhere below its refusal)."""
    refused = _refused(rows, length)[length].dropna()
    ok = ok_rows(rows)[length].dropna()
    first_refused = int(refused.min()) if len(refused) else None
    if first_refused is not None:
        ok = ok[ok < first_refused]
    largest = int(ok.max()) if len(ok) else None
    contradicted = (first_refused is not None and n_fit >= first_refused) or (largest or 0) > n_fit
    return largest if contradicted else None


def wall_sentence(fits, panel_rows, marks: Mapping[str, str] | None = None) -> str | None:
    """The largest N that fits in the device's memory per variant (the memory fit read at the device's
    memory, fit.scaling_table), grouped by that N, and the N where a variant was refused for memory (out of
    memory, or skipped by the memory guard). Where a variant's own rows contradict its fit (refused at an N
    the fit says fits, or ok beyond the fit's wall), the largest N it ran ok is said instead, as measured. A
    variant whose memory exponent says nothing (says_nothing: two N, or a CI too wide to say) has no wall
    read off it. A decode panel's N is its N_k (tables.length_name). `marks`: as growth_sentences'."""
    marks = marks or {}
    length = length_axis(panel_rows)
    name = length_name(length)
    walls: dict[int, list[str]] = {}
    beyond: dict[int, list[str]] = {}
    measured: dict[int, list[str]] = {}
    dev_mem = None
    for v in variant_order(str(x) for x in fits["variant"]):
        r = fits[fits["variant"] == v].iloc[0]
        if not present(r["n_max_fit"]) or not present(r["device_mem_bytes"]):
            continue
        if says_nothing(r["mem_exp"], r["mem_ci_low"], r["mem_ci_high"]):  # two N, or a CI too wide
            continue
        n, top = int(r["n_max_fit"]), r["n_max_measured"]
        ran = _measured_wall(panel_rows[panel_rows["variant"] == v], length, n)
        if ran is not None:
            measured.setdefault(ran, []).append(v)
            continue
        dev_mem = int(r["device_mem_bytes"])
        if present(top) and n > EXTRAPOLATION_LIMIT * int(top):
            beyond.setdefault(EXTRAPOLATION_LIMIT * int(top), []).append(v)
        else:
            walls.setdefault(n, []).append(v)

    def fit(vs: list[str]) -> str:
        return f"{_named(vs, marks)} {'fits' if len(vs) == 1 else 'fit'}"

    parts = [f"{fit(vs)} up to {name} = {n_text(n)}" for n, vs in sorted(walls.items())]
    parts += [f"{fit(vs)} past {name} = {n_text(n)}" for n, vs in sorted(beyond.items())]
    if beyond:  # the fit is not read further than that
        each = "its" if len(beyond) > 1 else "the"
        parts[-1] += f" ({EXTRAPOLATION_LIMIT}× {each} largest measured {name}, as far as the fit is read)"
    said = []
    if parts:
        said.append(
            f"Memory wall ({bytes_text(dev_mem)} of device memory, memory fit extrapolated): "
            + "; ".join(parts)
            + "."
        )
    if measured:
        ran = [f"{_named(vs, marks)} ran ok up to {name} = {n_text(n)}" for n, vs in sorted(measured.items())]
        said.append(f"Measured, where the cells contradict the memory fit: {'; '.join(ran)}.")
    said += _refused_sentences(panel_rows, length, name, {v for vs in measured.values() for v in vs}, marks)
    return " ".join(said) or None


def _named(names: list[str], marks: Mapping[str, str]) -> str:
    return names_text([v + marks.get(v, "") for v in names])


def _refused_sentences(
    panel_rows, length: str, name: str, guarded: set[str], marks: Mapping[str, str]
) -> list[str]:
    """'Skipped by the memory guard: naive at N = 16,384.' (for the variants of `guarded`: those whose wall
    was read off their cells) and 'Measured out of memory: ...': each variant at the smallest N it was
    refused."""
    refused = _refused(panel_rows, length)
    refused = refused[(refused["status"] == "oom") | refused["variant"].astype(str).isin(guarded)]
    out = []
    skipped = refused[refused["status"] == "skipped"]
    first: dict[int, list[str]] = {}
    for v in variant_order(str(x) for x in skipped["variant"].unique()):
        first.setdefault(int(skipped[skipped["variant"] == v][length].min()), []).append(v)
    if first:
        at = [f"{_named(vs, marks)} at {name} = {n_text(n)}" for n, vs in sorted(first.items())]
        out.append(f"Skipped by the memory guard: {'; '.join(at)}.")
    oom = refused[refused["status"] == "oom"]
    ran_out = [
        f"{v + marks.get(v, '')} at {name} = {n_text(oom[oom['variant'] == v][length].min())}"
        for v in variant_order(str(x) for x in oom["variant"].unique())
    ]
    if ran_out:
        out.append(f"Measured out of memory: {names_text(ran_out)}.")
    return out
