"""Where a sweep comes from: a preset or a sweep file, then a front end's options, layered into one SweepSpec.

`build_sweep(given, preset=..., config=...)` is the one translation every front end uses (the CLI,
`attnbench profile`, the pytest plugin, the Python API): `given` maps option keys (an axis's `option`
name, its sweep field or its name: 'seq_len', 'variants', 'pass'; a setting's name; 'env') to text
('256..4096', 'both') or Python values ([256, 512], True), None meaning "not given". Each value is read by
its grammar (harness.sweep.grammar) and every error is one ValueError naming the option as the CLI's flag
(`--seq-len`, `--out DIR`); a front end that spells its options otherwise says the same message in its own
words with `respell`, once, where it hands the error to its user (the API: `seq_len`, `out=DIR`; the pytest
plugin: `--attn-seq-len`; a sweep file: `[settings] rounds`).

A sweep file is TOML: [sweep] (keys as `given`), [sweep.cuda] (laid over [sweep] when the devices are
exactly cuda), [settings] and [env]. The model rule lives in one place (harness.sweep.models: a model gives
heads, kv_heads, d_k and window together): a layer gives models or those axes, and a layer that names
models replaces the shape of the one below.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from attnbench.harness.sweep import settings as settings_table
from attnbench.harness.sweep.grammar import format_cpus, read_axis, unknown, write_axis
from attnbench.harness.sweep.models import MODEL_AXES, refuse_shape_beside_models
from attnbench.harness.sweep.settings import REMOVED_OPTIONS, Setting, Settings
from attnbench.harness.sweep.spec import CellSpec, SweepSpec
from attnbench.results.axes import SWEEP_AXES, Axis
from attnbench.variants.registry import not_a_file

PRESET_DIR = Path(__file__).parent / "presets"
FILE_TABLES = ("sweep", "settings", "env", "description")
# an option key -> its axis: the option name (--variants), the SweepSpec field (devices) and the axis name
# (device), and the CellSpec attribute (pass_: the API's keyword for --pass, since `pass` is Python's)
AXIS_KEYS: dict[str, Axis] = {
    k: a for a in SWEEP_AXES for k in (a.name, a.option, a.sweep_field, a.field) if k
}
SETTING_KEYS: dict[str, Setting] = dict(settings_table.BY_NAME)


def flag_name(key: str) -> str:
    """The CLI's spelling of an option or keyword: 'seq_len' -> '--seq-len', 'redo_drift' -> '--redo-drift',
    'pass_' -> '--pass'."""
    return "--" + key.rstrip("_").replace("_", "-")


# a flag, and the value that follows it where it is a number, quoted text or a placeholder (--out DIR)
_FLAG = re.compile(r"--([a-z][a-z-]*[a-z])(?: (\d[\w.:%]*|'[^']*'|[A-Z][A-Z_]*(?:,\.\.\.)?)(?![\w']))?")

# a span in backticks: a command line quoted; one of another program's (`ray start --head`) is not respelled
_QUOTED = re.compile(r"(`[^`\n]*`)")

Spelling = Callable[[str, "str | None"], str]  # (option key, the value after its flag or None) -> words


def respell(message: str, spelling: Spelling) -> str:
    """A message that names options as the CLI's flags (`--causal`, `--out DIR`, `--rounds 3`) in another
    front end's words: each flag (and the value after it, where one follows) becomes spelling(key, value),
    key as the option's key ('seq_len', 'pass', 'redo_drift'). A command line quoted in backticks is what to
    type in a shell, and keeps its flags. The one way errors are spelled: every rule words its message once,
    with flags, and each front end respells it where its user reads it."""

    def spell(text: str) -> str:
        if text.startswith("`") and not text.startswith("`--"):
            # a command line, quoted (`attnbench history add RUN... --store PATH`, `ray start --head`): what
            # to type in a shell, in the shell's words; a flag quoted alone (`--out`) is an option, respelled
            return text
        return _FLAG.sub(lambda m: spelling(m.group(1).replace("-", "_"), m.group(2)), text)

    return "".join(spell(part) for part in _QUOTED.split(message))


def in_table(where: str) -> Spelling:
    """A sweep file's spelling of an option: '[settings] rounds 0', '[sweep.cuda] heads'."""
    return lambda key, value: f"{where} {key}" + (f" {value}" if value else "")


def presets() -> dict[str, Path]:
    """Named presets shipped in harness/sweep/presets."""
    return {p.stem: p for p in sorted(PRESET_DIR.glob("*.toml"))}


def preset_description(path: Path) -> str:
    return str(tomllib.loads(path.read_text()).get("description", ""))


def build_sweep(
    given: Mapping[str, Any] | None = None,
    *,
    preset: str | None = None,
    config: str | Path | None = None,
) -> SweepSpec:
    """A validated SweepSpec: a preset or a sweep file (not both), its [sweep.cuda] when the devices are
    exactly cuda, then `given` over them (see the module's docstring)."""
    if preset and config:
        raise ValueError("give --preset or --config, not both")
    base: dict[str, Any] = {}
    below = ""
    if preset:
        known = presets()
        if preset not in known:
            raise ValueError(unknown("preset", preset, known))
        base, below = read_sweep_file(known[preset]), f"the preset {preset}"
    elif config:
        base, below = read_sweep_file(config), f"the config {config}"
    top = read_layer(given or {})
    cuda = base.pop("cuda", None)
    devices = top.get("device", base.get("device", SweepSpec.__dataclass_fields__["devices"].default))
    if cuda and tuple(devices) == ("cuda",):
        try:
            base = _layer(base, cuda, below=f"{below}'s [sweep]")
        except ValueError as exc:
            raise ValueError(respell(str(exc), in_table("[sweep.cuda]"))) from None
    base_settings, top_settings = base.pop("settings", {}), top.pop("settings", {})
    merged = _layer(base, top, below=below)
    settings = {**base_settings, **top_settings}
    if "env" in base_settings and "env" in top_settings:  # --env adds to (or overrides) the file's [env]
        settings["env"] = tuple(sorted({**dict(base_settings["env"]), **dict(top_settings["env"])}.items()))
    return SweepSpec(
        **{AXIS_KEYS[axis].sweep_field: values for axis, values in merged.items()},
        settings=Settings(**settings),
    )


def read_layer(given: Mapping[str, Any]) -> dict[str, Any]:
    """One layer's options -> {axis name: checked values, 'settings': {name: value}}; ValueError naming the
    bad key or value as its flag."""
    out: dict[str, Any] = {}
    settings: dict[str, Any] = {}
    keys: dict[str, str] = {}  # axis name -> the key it was given as (pass, pass_, passes)
    for key, value in given.items():
        if value is None:
            continue
        if key in REMOVED_OPTIONS:
            raise ValueError(REMOVED_OPTIONS[key])
        if key in SETTING_KEYS:
            settings[key] = SETTING_KEYS[key].read(value, flag_name(key))
        elif key in AXIS_KEYS:
            axis = AXIS_KEYS[key]
            if axis.name in out:  # the two spellings given, as given
                raise ValueError(f"{flag_name(key)} is given twice (as {keys[axis.name]} and {key})")
            out[axis.name], keys[axis.name] = read_axis(axis, value, flag_name(key)), key
        else:
            known = [a.option for a in SWEEP_AXES] + list(SETTING_KEYS)
            raise ValueError(unknown("sweep axis or setting", key, known, also=AXIS_KEYS))
    if out.get("model"):
        refuse_shape_beside_models([a for a in MODEL_AXES if a in out])
    if settings:
        out["settings"] = settings
    return out


def _layer(lower: dict[str, Any], upper: dict[str, Any], *, below: str) -> dict:
    """upper's axes over lower's. Models in upper replace lower's head shape (heads, kv_heads, d_k,
    window); a head-shape axis in upper over models in lower is refused (which model would it change?)."""
    shape = [a for a in MODEL_AXES if a in upper]
    if shape and lower.get("model") and "model" not in upper:
        refuse_shape_beside_models(shape, below=f"{below} ({', '.join(lower['model'])})")
    merged = {**lower, **upper}
    if upper.get("model"):
        for axis in MODEL_AXES:
            if axis not in upper:
                merged.pop(axis, None)
    return merged


def read_sweep_file(path: str | Path) -> dict[str, Any]:
    """A sweep file as a layer for build_sweep: its [sweep] axes, its [sweep.cuda] under 'cuda', and its
    [settings] and [env] under 'settings'; ValueError naming the file and what is wrong."""
    p = Path(path)
    why = not_a_file(path)
    if why:
        raise ValueError(f"config file {why}")
    try:
        data = tomllib.loads(p.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"config file {str(path)!r} is not valid TOML: {exc}") from None
    return sweep_file_layer(data, source=str(path))


def sweep_file_layer(data: Mapping[str, Any], source: str = "config") -> dict[str, Any]:
    """A sweep file's parsed TOML as a layer (see read_sweep_file)."""
    unknown = set(data) - set(FILE_TABLES)
    if unknown:
        raise ValueError(
            f"{source}: unknown table(s) {sorted(unknown)}; expected [sweep], [settings] and [env]"
        )
    sweep = dict(data.get("sweep", {}))
    cuda = sweep.pop("cuda", None)
    out = _table(sweep, "[sweep]", source)
    if cuda is not None:
        if not isinstance(cuda, dict):
            raise ValueError(f"{source}: [sweep] cuda must be a table, [sweep.cuda]")
        device = [k for k in cuda if k in AXIS_KEYS and AXIS_KEYS[k].name == "device"]
        if device:
            raise ValueError(
                f"{source}: [sweep.cuda] cannot set {device[0]}: it applies when the devices are exactly cuda"
            )
        out["cuda"] = _table(dict(cuda), "[sweep.cuda]", source)
    settings = dict(data.get("settings", {}))
    if "env" in data:
        if not isinstance(data["env"], dict):
            raise ValueError(f"{source}: [env] must be a table of NAME = value")
        settings["env"] = data["env"]
    removed = sorted(set(settings) & set(REMOVED_OPTIONS))
    if removed:
        raise ValueError(f"{source}: {respell(REMOVED_OPTIONS[removed[0]], in_table('[settings]'))}")
    unknown = set(settings) - set(SETTING_KEYS)
    if unknown:
        raise ValueError(f"{source}: unknown setting(s) {sorted(unknown)}; known: {sorted(SETTING_KEYS)}")
    if settings:
        try:
            out["settings"] = read_layer(settings)["settings"]
        except ValueError as exc:
            raise ValueError(f"{source}: {respell(str(exc), in_table('[settings]'))}") from None
    return out


def _table(table: dict[str, Any], where: str, source: str) -> dict[str, Any]:
    """One [sweep] table's keys (as build_sweep's `given`) as a layer; errors name the file and the key."""
    unknown = [k for k in table if k not in AXIS_KEYS]
    if unknown:
        known = sorted({a.sweep_field for a in SWEEP_AXES})
        raise ValueError(f"{source}: unknown sweep key(s) {sorted(unknown)} in {where}; known: {known}")
    try:
        return read_layer(table)
    except ValueError as exc:
        raise ValueError(f"{source}: {respell(str(exc), in_table(where))}") from None


def cell_given(cell: CellSpec, settings: Settings) -> tuple[dict[str, Any], list[str]]:
    """build_sweep's `given`, as text, for exactly this one cell under these settings, and the names of
    settings that differ from their defaults but have no text form (no flag can say them).

    build_sweep(given) gives a sweep whose cells([cell.variant]) are [cell] and whose settings are `settings`
    when nothing is left over: every value is written out, defaults included, so that a later change of a
    default cannot change what the text measures. One exception: a CPU cell's timing is written as auto
    (CPU cells are timed with perf_counter whatever it says, and a CPU-only sweep takes no other)."""
    values = cell.values()
    given: dict[str, Any] = {}
    for a in SWEEP_AXES:
        if a.name == "model":
            continue  # a label: the cell's shape is given by its axes
        if a.name == "page_size" and not values[a.name]:
            continue  # contiguous K/V, the default: --page-size takes positive sizes only
        if a.name == "seq_k" and values.get("lengths", "none") != "none" and not values.get("page_size"):
            continue  # a packed batch's sequences hold their own keys: --lengths takes no --seq-k (a paged
            # cell's --lengths draws its contexts around --seq-k, which it needs)
        if a.name == "causal":  # the sweep's causal value says the alignment too
            value: Any = "lower-right" if cell.causal and cell.causal_align == "lower-right" else cell.causal
        else:
            value = values[a.name]
        given[a.option] = write_axis(a, value)
    default = Settings()
    left = []
    for s in settings_table.SETTINGS:
        value = getattr(settings, s.name)
        if not s.flag:
            if value != getattr(default, s.name):
                left.append(s.name)
        elif s.name == "env":
            if value:
                given["env"] = [f"{k}={v}" for k, v in value]
        elif s.name == "cpu_affinity":
            if value:
                given[s.name] = format_cpus(value)
        elif s.name == "timing":
            # a CPU cell is timed with perf_counter whatever the run's timing said (a cpu,cuda sweep may say
            # graph), and a sweep of that CPU cell alone refuses any other value than auto
            given[s.name] = value if cell.device == "cuda" else "auto"
        else:
            given[s.name] = repr(value)
    return given, left
