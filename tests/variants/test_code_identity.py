"""A variant's code identity (variants.origin.code_suffix, read by results.identity.code_differs): one rule
for a file imported by pytest or a script and one loaded with --variant-file, that sees an edited helper."""

from __future__ import annotations

import importlib
import textwrap

from attnbench.reports.compare_load import setup_differences
from attnbench.results import identity
from attnbench.results.steps import differ
from attnbench.variants import origin, registry

KERNEL = textwrap.dedent("""
    from attnbench import variants

    def _core(q, k, v):  # where the kernel's work lives
        return (q @ k.transpose(-2, -1)).softmax(-1) @ v

    @variants.register("team_tiled_{tag}")
    def team_tiled(q, k, v):
        return _core(q, k, v)
""")


def _sources(tmp_path, monkeypatch, tag: str, text: str) -> tuple[str, str]:
    """team_tiled's source as pytest's import of the file records it, and as --variant-file's does."""
    path = tmp_path / f"mykernels_{tag}.py"
    path.write_text(text.replace("{tag}", tag))
    registry._load_builtins()
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module(path.stem)  # a test file's `import mykernels`
    imported = registry._REGISTRY[f"team_tiled_{tag}"].source
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    del registry._REGISTRY[f"team_tiled_{tag}"]
    registry.load_variant_file(path)
    return imported, registry._REGISTRY[f"team_tiled_{tag}"].source


def test_one_file_imported_or_loaded_is_one_code_and_an_edited_helper_is_another(tmp_path, monkeypatch):
    """Trial W M3: the identical file gave two hashes (pytest's import: the function's text; --variant-file:
    the file), so compare said the code changed; and an edit to the helper the kernel calls went unseen."""
    imported, loaded = _sources(tmp_path, monkeypatch, "a", KERNEL)
    assert imported.startswith("defined in mykernels_a") and loaded.startswith("file ")
    assert imported.rsplit(" ", 1)[1] == loaded.rsplit(" ", 1)[1]  # one digest, by one rule
    assert identity.code_differs(imported, loaded) is False
    meta = lambda source: {"variant_capabilities": {"team_tiled": {"source": source}}}  # noqa: E731
    assert "team_tiled's source" not in setup_differences(meta(imported), meta(loaded))

    edited, _ = _sources(tmp_path, monkeypatch, "b", KERNEL.replace("softmax(-1)", "softmax(-1) * 1.0"))
    same, _ = _sources(tmp_path, monkeypatch, "c", KERNEL)
    assert identity.code_of(edited) != identity.code_of(same)  # only the helper was edited
    assert identity.code_differs(edited, same) is True
    assert differ({"variant_source": imported}, {"variant_source": loaded}) == {}


def test_an_older_attnbenchs_hash_of_the_function_alone_is_not_comparable(tmp_path, monkeypatch):
    """A run recorded by the old rule (an imported function's own text) is no code change against today's."""
    imported, _ = _sources(tmp_path, monkeypatch, "d", KERNEL)
    old = "defined in mykernels_d, source sha256 c1757c89423f"
    assert identity.code_differs(old, imported) is None
    assert differ({"variant_source": old}, {"variant_source": imported}) == {}
    meta = lambda source: {"variant_capabilities": {"team_tiled": {"source": source}}}  # noqa: E731
    said = setup_differences(meta(old), meta(imported))["team_tiled's source"]
    assert said[0].endswith(f"({identity.NOT_COMPARABLE})") and identity.NOT_COMPARABLE not in said[1]
    # an older attnbench's variant file was hashed whole, as today's: the same file is the same code
    old_file = "file mykernels_d.py, source sha256 " + identity.code_of(imported)[1]
    assert identity.code_differs(old_file, imported) is False
    assert identity.code_differs(old, "defined in mykernels_d, source sha256 9f9f9f9f9f9f") is True


def test_results_reads_the_markers_variants_writes():
    assert (identity.FILE_HASHED, identity.TEXT_HASHED, identity.OLD_HASHED) == (
        origin.HASHED, origin.TEXT_HASHED, origin.OLD_HASHED,
    )  # fmt: skip
