"""The front ends' options, derived from the axis table (results.axes) and the settings table
(harness.sweep.settings): `attnbench run`'s sweep and measurement flags, `attnbench profile`'s cell flags and
the pytest plugin's `--attn-*` options are each this list under a prefix. A front end adds them with its own
parser and hands what it was given to harness.sweep.sweeps.build_sweep, keyed by `Option.key`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from attnbench.harness.sweep.grammar import grammar, read_axis, write_axis
from attnbench.harness.sweep.settings import SETTINGS
from attnbench.harness.sweep.spec import CellSpec, SweepSpec
from attnbench.harness.sweep.sweeps import AXIS_KEYS, build_sweep, flag_name, presets, read_sweep_file
from attnbench.results.axes import SWEEP_AXES


@dataclass(frozen=True)
class Option:
    """One option of a front end: the key build_sweep takes, and how a parser shows it."""

    key: str  # an axis's option name ('seq_len', 'variants', 'pass') or a setting's name
    help: str
    metavar: str | None
    default: Any = None  # the value when not given, as text (what `--help` says), None: the table's
    repeat: bool = False  # given once per value (--env NAME=VALUE ...)
    setting: bool = False  # a measurement setting, not an axis
    switch: bool = False  # a yes/no setting: its flag alone says yes (--energy), or it takes yes or no
    one_help: str = ""  # the help where a front end takes one value; '' = help (results.axes.Axis.one_help)
    one_placeholder: str = ""  # the metavar where a front end takes one value; '' = metavar without ',...'

    def flag(self, prefix: str = "--") -> str:
        """'--seq-len' (prefix '--'), '--attn-seq-len' (prefix '--attn-')."""
        return prefix + self.key.replace("_", "-")

    def one_metavar(self) -> str | None:
        """The placeholder of a flag that takes one value ('N,...' -> 'N', 'cpu,cuda' -> 'cpu|cuda'; the
        axis's own where its words include several values: 'no|yes|lower-right', without 'both')."""
        if self.one_placeholder:
            return self.one_placeholder
        return None if self.metavar is None else self.metavar.replace(",...", "").replace(",", "|")

    def one_value(self, default: str | None = None) -> Option:
        """This option as a front end that takes one value shows it (`attnbench profile`): the help and
        placeholder say no comma list, range or 'both'; `default`, where given, is that front end's."""
        return replace(
            self,
            help=self.one_help or self.help,
            metavar=self.one_metavar(),
            default=self.default if default is None else default,
        )

    def help_with_default(self) -> str:
        """The help, with what it is when not given: '(default: 64)', '(default: = d_k)'."""
        return f"{self.help} (default: {self.default})" if self.default is not None else self.help

    def dest(self, prefix: str = "") -> str:
        """The parser's attribute for it: the key, after a front end's prefix ('attn_seq_len')."""
        return prefix + self.key


def axis_options() -> list[Option]:
    """One option per axis a sweep gives values for, in the table's order."""
    return [
        Option(
            a.option, _help(a, a.help), a.metavar, default=_default_text(a),
            one_help=_help(a, a.one_help) if a.one_help else "", one_placeholder=a.one_metavar,
        )
        for a in SWEEP_AXES
    ]  # fmt: skip


def _help(axis, text: str) -> str:
    """An axis's help text, with the words its grammar knows ('devices: cpu, cuda')."""
    choices = grammar(axis).choices
    return f"{text}: {', '.join(choices)}" if choices else text


def setting_options() -> list[Option]:
    """One option per setting that has a text form (harness.sweep.settings.Setting.flag), in the table's
    order."""
    return [
        Option(s.name, s.help, s.metavar, repeat=s.name == "env", setting=True, switch=s.grammar == "bool")
        for s in SETTINGS
        if s.flag
    ]


def _default_text(axis) -> str | None:
    """An axis's default as an option's text ('256,512,1024,2048', '= d_k' where it follows another axis),
    None where it is empty (every default variant, no model). A default its flag refuses (page size 0: a
    sweep holds it, a flag never gives it) is said in words, what no flag means ('contiguous K/V')."""
    if axis.follows:
        return f"= {axis.follows}"
    if not axis.default:
        return None
    text = ",".join(write_axis(axis, v) for v in axis.default)
    try:
        read_axis(axis, text, flag_name(axis.option))
    except ValueError:
        return ", ".join(axis.text(v) for v in axis.default)
    return text


def preset_defaults(options: Sequence[Option], preset: str) -> tuple[list[Option], str]:
    """These options as a front end whose sweep is a preset shows them (`attnbench bench`, the bench
    preset): each axis the preset sets with the preset's values as its default, and the settings it sets as
    flags ('--rounds 3, --budget-ms 15'), for that front end's help to say."""
    layer = read_sweep_file(presets()[preset])
    axes = {a.name: values for a, values in ((AXIS_KEYS[k], v) for k, v in layer.items() if k in AXIS_KEYS)}
    shown = []
    for option in options:
        axis = AXIS_KEYS.get(option.key)
        if axis is not None and axis.name in axes:
            option = replace(option, default=",".join(write_axis(axis, v) for v in axes[axis.name]))
        shown.append(option)
    settings = layer.get("settings", {})
    said = ", ".join(
        f"{flag_name(name)} {_setting_text(value)}" for name, value in settings.items() if name != "env"
    )
    return shown, said


def _setting_text(value: Any) -> str:
    """A setting's value as its flag takes it: 3, 2, 0.05, yes."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{value:g}" if isinstance(value, float) else str(value)


def given_options(values: Mapping[str, Any], options: Sequence[Option], prefix: str = "") -> dict[str, Any]:
    """{key: what a parser holds under dest(prefix)} for these options: the input of build_sweep."""
    return {o.key: values.get(o.dest(prefix)) for o in options}


def single_cell(
    variant: str,
    given: Mapping[str, Any],
    *,
    defaults: Mapping[str, str] | None = None,
) -> CellSpec:
    """The one cell named by options that each take one value (`attnbench profile`, attnbench.profile): key
    -> the text given or a Python value (a list when a parser collects repeats; None = the default), over
    `defaults` (key -> text). ValueError naming the option given more than one value, or a bad value
    (build_sweep's checks, as `attnbench run` makes them)."""
    texts: dict[str, Any] = dict(defaults or {})
    for key, value in given.items():
        if value is None:
            continue
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        if len(values) != 1:
            said = " and ".join(map(str, values))
            raise ValueError(f"{flag_name(key)} takes one value (profile runs one cell), got {said}")
        texts[key] = values[0]
    spec: SweepSpec = build_sweep(texts)
    for key, text in texts.items():
        axis = AXIS_KEYS.get(key)
        if axis is not None and len(getattr(spec, axis.sweep_field)) > 1:  # '256..1024' is one text
            raise ValueError(f"{flag_name(key)} takes one value (profile runs one cell), got {text!r}")
    (cell,) = spec.cells([variant])
    return cell
