"""Registration, capability records, plug-ins (entry points and files) and input validation."""

from __future__ import annotations

import hashlib
import re
import sys
import textwrap

import pytest
import torch
from fakes import stand_in_package

from attnbench import variants
from attnbench.variants import Capability, Problem, VariantError


def test_capability_rejects_bad_values():
    with pytest.raises(VariantError, match="memory"):
        Capability(name="x", memory="cubic")
    with pytest.raises(VariantError, match="device"):
        Capability(name="x", devices=("tpu",))
    with pytest.raises(VariantError, match="dtype"):
        Capability(name="x", dtypes=("float8",))
    with pytest.raises(VariantError, match="name"):
        Capability(name="bad name!")


@pytest.mark.parametrize("flag", ["gqa", "window", "paged", "backward", "default"])
def test_a_capability_flag_that_is_no_bool_is_refused_in_one_line(flag, monkeypatch):
    """Trial L: register(..., gqa="yes") and attnbench.variant(f, gqa="maybe") were accepted ("maybe" read as
    True). A flag is True or False, refused as the other bad declarations are."""
    import attnbench
    from attnbench.variants import registry

    registry._load_builtins()  # a copy made before they load would be empty later
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    def f(q, k, v, *, causal=False, window=None, block_table=None):
        return q

    said = f"^variant flagged: {flag} must be True or False, not 'yes'$"
    with pytest.raises(VariantError, match=said):
        variants.register("flagged", **{flag: "yes"})(f)
    with pytest.raises(ValueError, match=f"{flag} must be True or False, not 'maybe'$"):
        attnbench.variant(f, name="flagged", **{flag: "maybe"})
    assert "flagged" not in registry._REGISTRY


@pytest.mark.parametrize("varlen", ["bogus", True, 1, "tiles:0"])
def test_a_varlen_not_a_known_work_is_one_line_whatever_its_type(varlen):
    """varlen=True (a flag, as paged=True is) gets the line varlen="bogus" gets, not an AttributeError."""
    said = f"variant x: varlen must be padded, masked, exact, tiles:N or rows:N, not {varlen!r}"
    with pytest.raises(VariantError) as err:
        Capability(name="x", varlen=varlen)
    assert str(err.value) == said


def test_capabilities_are_frozen():
    cap = variants.get("naive").cap
    with pytest.raises(AttributeError):
        cap.memory = "linear"


def test_unknown_names_are_all_named():
    with pytest.raises(VariantError, match="'nope'.*'nada'|'nada'.*'nope'"):
        variants.resolve(["naive", "nope", "nada"])


@pytest.mark.parametrize("name", ["sdpa_efficient", "sdpa_cudnn", "xformers"])
def test_gpu_only_variants_explain_why_not_on_cpu(name):
    reason = variants.get(name).availability("cpu")
    assert reason and len(reason) > 20
    if name == "xformers":
        assert "not installed" in reason or "no CPU kernel" in reason
    else:
        assert "CUDA only" in reason


def test_xformers_reason_comes_from_its_operators(tmp_path, monkeypatch):
    """With xformers installed, the CPU reason is read from its forward operators' SUPPORTED_DEVICES in its
    sources, without importing it (its import pulls in torch._dynamo and scipy: `attnbench list`, issue
    26). A stand-in package in xformers' layout, found first whatever xformers this machine has."""
    fmha = tmp_path / "xformers" / "ops" / "fmha"
    fmha.mkdir(parents=True)
    for init in (tmp_path / "xformers", tmp_path / "xformers" / "ops", fmha):
        (init / "__init__.py").write_text("raise ImportError('availability must not import xformers')\n")
    (fmha / "cutlass.py").write_text(
        "class FwOp:\n    SUPPORTED_DEVICES: set = {'cuda'}\n\n\n"
        "class BwOp:\n    SUPPORTED_DEVICES = FwOp.SUPPORTED_DEVICES\n"
    )
    (fmha / "triton_splitk.py").write_text("class FwOp:\n    SUPPORTED_DEVICES = {'cuda'}\n")
    with stand_in_package(monkeypatch, tmp_path, "xformers"):
        reason = variants.get("xformers").availability("cpu")
        assert "no CPU kernel" in reason and "device=cpu (cutlass, triton_splitk)" in reason
        assert variants.get("xformers").cap.available("cuda") is None
        (fmha / "triton_splitk.py").write_text("class FwOp:\n    SUPPORTED_DEVICES = {'cuda', 'cpu'}\n")
        assert variants.get("xformers").cap.available("cpu") is None  # one operator with a CPU kernel
        assert not [m for m in sys.modules if m.split(".")[0] == "xformers"]  # nothing was imported


def test_check_names_the_unsupported_feature():
    dropout = Problem(dropout=0.1)
    assert variants.get("sdpa_flash").check(dropout) == "the CPU flash kernel does not implement dropout"
    assert variants.get("chunked").check(dropout) is None
    assert "head dims" in variants.get("sdpa_flash").check(Problem(d_k=512, d_v=512))
    assert variants.get("naive").check(Problem(causal=True, padding=0.25, pass_="fwdbwd")) is None
    # a built-in without backward is no plug-in its user could declare backward=True for
    backward = Problem(pass_="fwdbwd")
    said = variants.get("fp8_emulated").check(backward)
    assert said == "fp8_emulated does not support backward (a built-in variant with no backward)", said
    from attnbench.variants.shipped import inline

    assert inline(lambda q, k, v: q, name="mine_fwd", backward=False).check(backward) == (
        "mine_fwd does not support backward (declare it with backward=True)"
    )


def test_a_cell_of_a_workload_it_does_not_read_says_the_workload_first():
    """Trial L: a paged cell (a decode step: causal lower-right, grouped heads) on a variant that reads no
    paged cache said "does not support lower-right causal alignment" first; the workload comes first, as a
    packed batch's does."""
    from attnbench.variants.shipped import inline

    def plain(q, k, v, *, causal=False, scale=None):
        return q

    mine = inline(plain, name="plain_kv", dtypes=("float32",))
    paged = Problem(dtype="bfloat16", heads=4, kv_heads=2, seq_len=4, seq_k=100, causal=True,
                    causal_align="lower-right", page_size=16, lengths="uniform")  # fmt: skip
    assert mine.check(paged).startswith("plain_kv does not read a paged K/V cache")
    packed = Problem(dtype="bfloat16", heads=4, kv_heads=2, seq_len=100, seq_k=100, causal=True,
                     lengths="uniform")  # fmt: skip
    assert mine.check(packed).startswith("plain_kv does not take packed variable-length batches")


def test_variant_file_registers_and_runs(tmp_path):
    f = tmp_path / "mine.py"
    f.write_text(
        textwrap.dedent("""
        from attnbench import variants

        @variants.register("mine_scaled", description="naive, but mine", memory="quadratic")
        def mine(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
            return variants.get("naive").fn(q, k, v, causal=causal, key_lengths=key_lengths, scale=scale)
    """)
    )
    assert variants.load_variant_file(f) == ["mine_scaled"]
    assert variants.load_variant_file(f) == ["mine_scaled"]  # loading twice is harmless
    v = variants.get("mine_scaled")
    digest = hashlib.sha256(f.read_bytes()).hexdigest()[:12]  # an edited file is another source (history)
    assert v.source == f"file {f}, file sha256 {digest}"
    q = torch.randn(1, 1, 4, 8)
    assert v(q, q, q).shape == (1, 1, 4, 8)


def test_bad_variant_files(tmp_path):
    with pytest.raises(VariantError, match="does not exist"):
        variants.load_variant_file(tmp_path / "missing.py")
    boom = tmp_path / "boom.py"
    boom.write_text("raise RuntimeError('kaboom')\n")
    with pytest.raises(VariantError, match="failed to import: RuntimeError: kaboom"):
        variants.load_variant_file(boom)
    with pytest.raises(VariantError, match=f"^variant file '{tmp_path}' is a directory, not a file$"):
        variants.load_variant_file(tmp_path)
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    with pytest.raises(VariantError, match="registered no variant"):
        variants.load_variant_file(empty)
    clash = tmp_path / "clash.py"
    clash.write_text("import attnbench\n@attnbench.register('naive')\ndef f(q, k, v, **kw):\n    return q\n")
    # issue 40: an upgrade that adds a built-in of a plug-in's name says how out ("already registered (by
    # builtin)" did not), in today's spelling: @variants.register is 0.1's, which a plug-in file is refused
    said = r"variant name 'naive' is attnbench's own \(.+\); register yours under another name "
    with pytest.raises(VariantError, match=said + r"\(@attnbench.register\(\"my_naive\", ...\)\) or drop it"):
        variants.load_variant_file(clash)
    assert variants.get("naive").source == "builtin"


def test_one_file_registering_two_functions_under_one_name_is_refused(tmp_path, monkeypatch):
    """Trial L: a file that registered flash_v1, then (copy-paste) flash_v2 as "flash" kept v2 and said
    nothing, while the same clash across two files was refused. One line names both functions and the file,
    and the file leaves nothing registered."""
    from attnbench.variants import registry

    registry._load_builtins()  # a copy made before they load would be empty later
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    kernels = "def flash_v1(q, k, v):\n    return v\n\n\ndef flash_v2(q, k, v):\n    return q\n"
    (tmp_path / "kern80.py").write_text(kernels)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "kern80", raising=False)
    dup = tmp_path / "dup.py"
    dup.write_text(
        "from attnbench import register\nimport kern80\n"
        'register("flash80", memory="linear")(kern80.flash_v1)\n'
        'register("flash80", memory="linear")(kern80.flash_v2)\n'
    )
    said = f"variant name 'flash80' is registered twice in file {dup}: to kern80.flash_v1, then to "
    said += "kern80.flash_v2; register each under its own name"
    with pytest.raises(VariantError, match="^" + re.escape(said)):
        variants.load_variant_file(dup)
    assert "flash80" not in registry._REGISTRY


def test_one_process_refuses_two_functions_under_one_name_but_not_one_defined_again(tmp_path, monkeypatch):
    """@register in a script or a notebook: another function under a name the process gave already is
    refused; the same function registered again (its module reloaded, a notebook cell run again after an
    edit) replaces the old one, as before."""
    import importlib

    from attnbench.variants import registry

    registry._load_builtins()  # a copy made before they load would be empty later
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    def cell(code: str):  # what a notebook cell defines: its module is __main__
        namespace = {"__name__": "__main__"}
        exec(code, namespace)
        return namespace

    first = cell("def attn(q, k, v):\n    return v\n")["attn"]
    variants.register("nb80")(first)
    variants.register("nb80")(cell("def attn(q, k, v):\n    return v * 1.0\n")["attn"])  # edited, run again
    assert variants.get("nb80").fn is not first
    (tmp_path / "kern80b.py").write_text("def flash(q, k, v):\n    return v\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "kern80b", raising=False)
    kern = importlib.import_module("kern80b")
    variants.register("mod80")(kern.flash)
    variants.register("mod80")(importlib.reload(kern).flash)
    other = cell("def other(q, k, v):\n    return q\n")["other"]
    said = "^variant name 'nb80' is registered twice in one process: to attn, then to other; register each"
    with pytest.raises(VariantError, match=said):
        variants.register("nb80")(other)
    from attnbench.api import _variant_names  # a run's own variants, named by the call: another call's go

    assert _variant_names({"nb80": other}, "variants") == ["nb80"]
    assert variants.get("nb80")._layers()[-1] is other


def test_entry_point_plugin_is_discovered(tmp_path, monkeypatch):
    """A real installed-distribution layout on sys.path: dist-info with entry_points.txt."""
    pkg = tmp_path / "thirdparty_attn.py"
    pkg.write_text(
        textwrap.dedent("""
        from attnbench import variants

        @variants.register("thirdparty", description="from an entry point", devices=("cpu",))
        def thirdparty(q, k, v, **kw):
            return variants.get("sdpa").fn(q, k, v, **kw)
    """)
    )
    dist = tmp_path / "thirdparty_attn-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: thirdparty-attn\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[attnbench.variants]\nthirdparty = thirdparty_attn\n")
    broken = tmp_path / "broken_attn-1.0.dist-info"
    broken.mkdir()
    (broken / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-attn\nVersion: 1.0\n")
    (broken / "entry_points.txt").write_text("[attnbench.variants]\nbroken = no_such_module_anywhere\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from attnbench.variants import registry

    monkeypatch.setitem(registry._LOADED, "entry_points", False)
    monkeypatch.setattr(registry, "_LOAD_ERRORS", [])
    found = variants.all_variants()
    assert "thirdparty" in found
    assert found["thirdparty"].source.startswith("entry point thirdparty")
    assert any("broken" in e and "ModuleNotFoundError" in e for e in variants.load_errors())
    registry._REGISTRY.pop("thirdparty", None)
    sys.modules.pop("thirdparty_attn", None)


def _plugin_site(site, version: str, kernel: str):
    """An installed plug-in distribution `mykern69` at `version`: its entry point names the package, whose
    kernels module (`kernel`: its body) defines and registers the variant."""
    (site / "mykern69").mkdir(parents=True)
    (site / "mykern69" / "__init__.py").write_text("from . import kernels  # noqa: F401\n")
    (site / "mykern69" / "kernels.py").write_text(
        "from attnbench import variants\n\n"
        '@variants.register("mykern69", description="a plug-in", devices=("cpu",))\n'
        f"def mykern69(q, k, v, **kw):\n    {kernel}\n"
    )
    dist = site / f"mykern69-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: mykern69\nVersion: {version}\n")
    (dist / "entry_points.txt").write_text("[attnbench.variants]\nmykern69 = mykern69\n")
    return site


def test_an_entry_point_variant_records_its_version_and_its_modules_sha256(tmp_path, monkeypatch):
    """As a variant file's source carries its sha256, an entry point's carries its distribution's version
    and the sha256 of the module that defines the variant: an edited, upgraded plug-in is another source to
    history (history.md), not the same 'entry point mykern (mykern)' on a step's two sides."""
    import hashlib

    from attnbench.variants import registry

    clean = dict(registry._REGISTRY)

    def source(site):
        monkeypatch.setattr(registry, "_REGISTRY", dict(clean))
        monkeypatch.setitem(registry._LOADED, "entry_points", False)
        monkeypatch.setattr(registry, "_LOAD_ERRORS", [])
        for name in [m for m in sys.modules if m.startswith("mykern69")]:
            monkeypatch.delitem(sys.modules, name)
        monkeypatch.syspath_prepend(str(site))
        try:
            return variants.all_variants()["mykern69"].source
        finally:
            sys.path.remove(str(site))

    old = _plugin_site(tmp_path / "old", "0.1.0", "return v")
    new = _plugin_site(tmp_path / "new", "0.2.0", "return v * 1.0")
    digest = hashlib.sha256((old / "mykern69" / "kernels.py").read_bytes()).hexdigest()[:12]
    before = source(old)
    assert before == f"entry point mykern69 (mykern69) of mykern69 0.1.0, file sha256 {digest}"
    after = source(new)
    assert after.startswith("entry point mykern69 (mykern69) of mykern69 0.2.0, file sha256 ")
    assert after.split("sha256 ")[1] != digest  # the kernel edited: its module's sha256 moved


def test_a_variant_files_function_without_a_docstring_is_described_by_its_file(tmp_path, monkeypatch):
    """Not by the module the file is imported as ("blocked_v1 from attnbench_variant_file_7756...")."""
    from attnbench.variants import registry

    registry._load_builtins()  # a copy made before they load would be empty later
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    path = tmp_path / "blocked.py"
    path.write_text(
        "import attnbench\n@attnbench.register('blocked_v1')\ndef blocked_v1(q, k, v):\n    return q\n"
    )
    assert variants.load_variant_file(path) == ["blocked_v1"]
    assert variants.get("blocked_v1").cap.description == "blocked_v1 from blocked.py"


def test_an_unknown_name_names_the_plugins_that_failed_to_load(tmp_path, monkeypatch):
    """The plug-in that would have registered `my_flash` failed to import: `run --variants my_flash`, `bench
    my_flash` and the API said only "unknown variant 'my_flash' (did you mean 'sdpa_flash'?)"; the same
    line names each failed plug-in and its error."""
    from conftest import run_cli

    from attnbench.variants import registry

    broken = tmp_path / "my_flash_attn-1.0.dist-info"
    broken.mkdir()
    (broken / "METADATA").write_text("Metadata-Version: 2.1\nName: my-flash-attn\nVersion: 1.0\n")
    (broken / "entry_points.txt").write_text("[attnbench.variants]\nmy_flash = my_flash_missing_module\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(registry._LOADED, "entry_points", False)
    monkeypatch.setattr(registry, "_LOAD_ERRORS", [])
    said = (
        "unknown variant 'my_flash' (did you mean 'sdpa_flash'?); 1 plug-in failed to load: my_flash "
        "(ModuleNotFoundError: No module named 'my_flash_missing_module'): see attnbench list; known: "
    )
    with pytest.raises(VariantError) as err:
        variants.get("my_flash")
    assert str(err.value).startswith(said)
    for args in (("run", "--variants", "my_flash", "--dry-run"), ("bench", "my_flash", "--dry-run")):
        proc = run_cli(*args)
        assert proc.returncode == 2 and proc.stderr.startswith(f"attnbench: error: {said}"), proc.stderr
        assert len(proc.stderr.splitlines()) == 1
    assert "failed to load" not in registry.unknown_names(["x"], ["naive"], [])
    # a name in another case is suggested as it is spelled (trial P: baseline="SDPA")
    assert registry.unknown_names(["SDPA"], ["naive", "sdpa"], []).startswith(
        "unknown variant 'SDPA' (did you mean 'sdpa'?); known: "
    )


@pytest.mark.parametrize(
    "shapes,match",
    [
        (((2, 4, 8), (1, 2, 4, 8), (1, 2, 4, 8)), "q must have 4 dims"),
        (((1, 2, 4, 8), (1, 3, 4, 8), (1, 3, 4, 8)), r"k/v heads \(3\) must divide q heads \(2\)"),
        (((1, 4, 4, 8), (1, 2, 4, 8), (1, 1, 4, 8)), "k and v head counts differ: 2 vs 1"),
        (((1, 2, 4, 8), (1, 2, 4, 16), (1, 2, 4, 8)), "head dims differ"),
        (((1, 2, 4, 8), (1, 2, 5, 8), (1, 2, 4, 8)), "sequence lengths differ"),
        (((2, 2, 4, 8), (1, 2, 4, 8), (1, 2, 4, 8)), "batch sizes differ"),
    ],
)
def test_bad_shapes_are_named(shapes, match):
    q, k, v = (torch.randn(*s) for s in shapes)
    with pytest.raises(ValueError, match=match):
        variants.get("naive")(q, k, v)


def test_bad_dtypes_and_lengths():
    q = torch.randn(1, 1, 4, 8)
    with pytest.raises(ValueError, match="dtypes differ"):
        variants.get("naive")(q, q.half(), q)
    with pytest.raises(ValueError, match="unsupported dtype"):
        variants.get("naive")(*(torch.ones(1, 1, 4, 8, dtype=torch.int32),) * 3)
    with pytest.raises(ValueError, match="does not support float32"):
        variants.get("sdpa_cudnn")(q, q, q)
    with pytest.raises(ValueError, match="key_lengths must lie in 0..4"):
        variants.get("naive")(q, q, q, key_lengths=torch.tensor([5]))
    with pytest.raises(ValueError, match="key_lengths must be integers"):
        variants.get("naive")(q, q, q, key_lengths=torch.tensor([2.0]))
    with pytest.raises(ValueError, match="1-D tensor of 1"):
        variants.get("naive")(q, q, q, key_lengths=torch.tensor([2, 3]))


def test_a_keyword_a_function_does_not_take_is_refused_with_its_value_in_a_few_words():
    """A tensor handed where fn takes no such keyword is named by dtype and shape, not printed."""
    from attnbench.variants.convention import Keywords
    from attnbench.variants.errors import UnsupportedError

    plain = Keywords(lambda q, k, v: q, "plain", frozenset())
    q = torch.zeros(1, 1, 4, 8)
    with pytest.raises(UnsupportedError) as err:
        plain(q, q, q, attn_mask=torch.ones(1, 1, 4, 4, dtype=torch.bool))
    assert (
        str(err.value) == "plain takes no attn_mask= keyword (asked for attn_mask=a bool tensor (1, 1, 4, 4))"
    )
    with pytest.raises(UnsupportedError) as err:
        plain(q, q, q, scale="x" * 100)
    assert str(err.value).endswith(f"(asked for scale='{'x' * 56}...)")
    assert plain(q, q, q, causal=False, key_lengths=None, dropout_p=0.0) is q


def test_a_users_function_is_told_what_declares_each_newer_axis_and_a_builtin_is_not():
    import attnbench
    from attnbench.variants import Variant

    mine = attnbench.variant(lambda q, k, v, causal=False: q, name="mine_axes")
    shipped = Variant(mine.fn, Capability(name="shipped_axes"), source="builtin")
    problems = {
        "gqa=True if it takes k and v with fewer heads than q": Problem(heads=4, kv_heads=2),
        'lower_right=True if it takes causal_align="lower-right"': Problem(
            causal=True, causal_align="lower-right"
        ),
        "window=True if it takes window=": Problem(causal=True, window=8),
        'mods=("alibi",) if it takes mod=': Problem(mod="alibi"),
    }
    for way, problem in problems.items():
        assert f"declare {way}" in mine.check(problem), problem
        refused = shipped.check(problem)
        assert "does not support" in refused and "declare" not in refused, refused


def test_what_a_setup_hook_raises_is_said_to_be_the_hooks():
    """An error in the hook reads as the hook's, not the call's; an UnsupportedError stays the reason."""
    import attnbench
    from attnbench.harness.measure.failures import failure
    from attnbench.variants import UnsupportedError

    def broken(q, k, v, **_):
        return 1 / 0

    def refuses(q, k, v, **_):
        raise UnsupportedError("no plan for this shape")

    q = torch.zeros(1, 1, 4, 8)
    for hook, said in [
        (broken, ("error", "its setup hook raised ZeroDivisionError: division by zero")),
        (refuses, ("unsupported", "no plan for this shape")),
    ]:
        made = attnbench.variant(lambda q, k, v: q, name=f"hooked_{hook.__name__}", setup=hook)
        with pytest.raises(Exception) as err:
            made.bind(q, q, q)
        assert failure(err.value, "cpu") == said


@pytest.mark.parametrize(
    "declared, keyword",
    [
        (dict(window=True), "window"),
        (dict(lower_right=True), "causal_align"),
        (dict(mods=("alibi",)), "mod"),
        (dict(varlen="masked"), "cu_seqlens"),
        (dict(paged=True), "block_table"),
    ],
)
def test_a_declared_workload_whose_keyword_fn_lacks_is_refused_at_declaration(declared, keyword):
    """Declared, a workload's cells hand fn its keyword: fn without it is one line when it is declared, not
    an `unsupported` row in every cell of it. With **kwargs, or the keyword, it is taken."""
    from attnbench.variants.registry import made

    def plain(q, k, v, *, causal=False):
        return q

    with pytest.raises(VariantError) as err:
        made(plain, "plain", declared, "test")
    flag, value = next(iter(declared.items()))
    said = f"{flag}=True" if value is True else f"{flag}={value!r}"
    assert str(err.value) == f"variant 'plain' declares {said}, but takes no {keyword}= keyword"
    made(lambda q, k, v, **kw: q, "any", declared, "test")
    made(eval(f"lambda q, k, v, *, causal=False, {keyword}=None: q"), "named", declared, "test")  # noqa: S307


def test_a_function_that_needs_cu_seqlens_or_block_table_runs_that_workload_only():
    """cu_seqlens= (block_table=) with no default: the variant's other cells are unsupported, saying so,
    not a TypeError each; its own supports hook still judges the rest. Undeclared, it is refused."""
    from attnbench.variants.lengths import PACKED_ONLY, PAGED_ONLY
    from attnbench.variants.registry import made

    def packs(q, k, v, *, causal=False, cu_seqlens):
        return q

    def pages(q, k, v, *, key_lengths=None, block_table):
        return q

    packed, paged, plain = Problem(lengths="uniform"), Problem(page_size=16, seq_len=1), Problem()
    var = made(packs, "packs", dict(varlen="exact"), "test")
    assert var.check(plain) == PACKED_ONLY and var.check(packed) is None
    picky = made(
        packs, "picky", dict(varlen="exact", supports=lambda p: "not causal" if p.causal else None), "t"
    )
    assert (
        picky.check(plain) == PACKED_ONLY
        and picky.check(Problem(lengths="uniform", causal=True)) == "not causal"
    )
    var = made(pages, "pages", dict(paged=True), "test")
    assert var.check(plain) == PAGED_ONLY and var.check(paged) is None
    with pytest.raises(VariantError) as err:
        made(packs, "packs", {}, "test")
    assert str(err.value).startswith("variant 'packs' takes cu_seqlens= with no default: declare varlen= (")


def test_a_parameter_no_cell_hands_without_a_default_is_refused_at_declaration(tmp_path):
    """fn(q, k, v, block_size, *, causal=False) was measured for a sweep's worth of cells, each an error
    ("missing 1 required positional argument"): refused when declared, naming the parameter and the ways
    out. A default, a partial, **kwargs or a keyword a cell hands is taken."""
    import functools

    from attnbench.variants.registry import made

    def blocked(q, k, v, block_size, *, causal=False):
        return q

    def tiled(q, k, v, *, causal=False, tile):
        return q

    for fn, param in ((blocked, "block_size"), (tiled, "tile")):
        with pytest.raises(VariantError) as err:
            made(fn, fn.__name__, {}, "test")
        said = str(err.value)
        assert said.startswith(
            f"variant '{fn.__name__}' takes {param} with no default, which attnbench never"
        )
        assert f"functools.partial(fn, {param}=...)" in said and "\n" not in said
    made(functools.partial(blocked, block_size=64), "bound", {}, "test")

    def qkvmask(q, k, v, mask):  # its mask, which a declaration hands (None where nothing is masked)
        return q

    with pytest.raises(VariantError) as err:
        made(qkvmask, "qkvmask", {}, "test")
    said = str(err.value)
    assert said.startswith(
        "variant 'qkvmask' takes mask with no default, which attnbench hands only as a declared mask: "
        'declare attnbench.variant(fn, mask="bool", mask_arg="mask") if its mask is True where a key is seen'
    ), said
    assert 'mask="additive", mask_arg="mask" if it adds the mask' in said and "partial" not in said
    made(qkvmask, "declared", {"mask": "bool", "mask_arg": "mask"}, "test")  # what it says works
    made(lambda q, k, v, block_size=64, **kw: q, "defaulted", {}, "test")
    made(lambda q, k, v, causal, key_lengths, dropout_p, scale: q, "handed", dict(dropout=True), "test")
    mine = tmp_path / "mine.py"
    mine.write_text("import attnbench\n@attnbench.register('blocked2')\ndef f(q, k, v, bs):\n    return q\n")
    with pytest.raises(VariantError, match="variant 'blocked2' takes bs with no default"):
        variants.load_variant_file(mine)


def test_a_function_that_needs_window_runs_sliding_window_cells_only():
    """window= with no default (local attention, which has no window of 0): its cells without a window are
    unsupported, saying so, not a TypeError each, and bench and profile read it as that workload."""
    from attnbench.variants.handed import WINDOW_ONLY, only_workload
    from attnbench.variants.registry import made

    def local(q, k, v, *, causal=True, window):
        return q

    var = made(local, "local", dict(window=True), "test")
    assert var.check(Problem(causal=True)) == WINDOW_ONLY
    assert var.check(Problem(causal=True, window=16)) is None and only_workload(var) == "window"
    with pytest.raises(
        VariantError, match="variant 'local' takes window= with no default: declare window=True"
    ):
        made(local, "local", {}, "test")


def test_a_variant_registered_without_a_description_is_described_by_its_docstring_or_origin():
    """`attnbench list` says what each variant is: code registered without description= by its docstring's
    first line, else by where it comes from (a third-party function's module, an object's class)."""
    import functools

    import torch.nn.functional as F

    import attnbench

    def documented(q, k, v):
        """Attention in one line.

        More lines that list does not show."""
        return F.scaled_dot_product_attention(q, k, v)

    def plain(q, k, v):
        return F.scaled_dot_product_attention(q, k, v)

    class Attn(torch.nn.Module):
        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v)

    assert attnbench.variant(documented).cap.description == "Attention in one line."
    assert attnbench.variant(plain).cap.description == f"plain from {__name__}"
    assert attnbench.variant(functools.partial(plain), name="p").cap.description == f"plain from {__name__}"
    assert attnbench.variant(Attn(), name="m").cap.description == f"Attn object from {__name__}"
    assert attnbench.variant(plain, description="mine").cap.description == "mine"


def test_a_multihead_attention_layer_is_refused_with_what_to_give_instead():
    """nn.MultiheadAttention takes (N, L, E) and projects them: its answer is not attention over q, k, v,
    and every cell would raise on (B, H, N, d) inputs; refused before any work, naming what to give."""
    import attnbench
    from attnbench.variants import VariantError

    layer = torch.nn.MultiheadAttention(16, 2, batch_first=True)
    with pytest.raises(
        (VariantError, ValueError), match="is a torch.nn.MultiheadAttention layer, whose input"
    ):
        attnbench.variant(layer, name="mha")


@pytest.mark.parametrize(
    "given, meant",
    [("dtype", "dtypes"), ("casual", "causal"), ("take", "takes"), ("Backward", "backward"), ("zzz", None)],
)
def test_an_unknown_capability_says_the_keyword_it_most_likely_meant(given, meant):
    """Trial: `dtype=("float32",)` said only "unknown capability 'dtype'; known: ...", where the rest of the
    API says the keyword it most likely meant; a declared shape's keyword (takes=) may be the one meant."""
    from attnbench.variants.registry import made

    with pytest.raises(VariantError) as err:
        made(lambda q, k, v: q, "f", {given: 1}, "test")
    hint = f" (did you mean {meant!r}?)" if meant else ""
    assert str(err.value).startswith(f"unknown capability {given!r}{hint}; known: description, devices")
