"""What makes two runs comparable: the set-up a resume must share with the run it finishes, and that
`compare` names where its two runs differ. Read from meta.json's fingerprint, without torch;
`harness.measure.fingerprint.resume_identity` takes the same keys of this process."""

from __future__ import annotations

from typing import Any

# What a resume must share with the run it finishes, or its rows would mix two set-ups under one run:
# the hosts, the torch and the attnbench code measured with (its commit, and the sha256 of its files, which
# tells two installs apart where no commit is recorded), and the environment that moves timings.
RESUME_KEYS = ("hosts", "torch", "git_commit", "code_sha256", "allocator_env", "THP_MEM_ALLOC_ENABLE")


def recorded_identity(meta: dict[str, Any]) -> dict[str, Any]:
    """RESUME_KEYS of the run that wrote meta.json: its fingerprint, and its hosts (those of its `devices`
    records, else the fingerprint's hostname). A key the run did not record (older runs) is missing."""
    fp = meta.get("fingerprint") or {}
    hosts = {str(d.get("host")) for d in (meta.get("devices") or {}).values() if d.get("host")}
    out: dict[str, Any] = {"hosts": sorted(hosts or ([fp["hostname"]] if fp.get("hostname") else []))}
    out.update({k: fp[k] for k in RESUME_KEYS if k in fp})
    return out if out["hosts"] else {k: v for k, v in out.items() if k != "hosts"}


def identity_diff(recorded: dict[str, Any], current: dict[str, Any]) -> dict[str, list[Any]]:
    """{key: [recorded, current]} for each RESUME_KEY that differs. A key the run did not record is not
    compared, nor torch, git_commit or code_sha256 when this process cannot tell them (None: no git checkout,
    no commit recorded by pip)."""
    unknown = {k for k in ("torch", "git_commit", "code_sha256") if current.get(k) is None}
    return {
        k: [recorded[k], current.get(k)]
        for k in RESUME_KEYS
        if k in recorded and k not in unknown and recorded[k] != current.get(k)
    }


def short_hash(value: Any) -> str:
    """A commit as its first 10 characters (and -dirty), a sha256 as its first 12, anything else as it is;
    '?' when not recorded: how every line that names the code a run was measured with says it."""
    if value is None:
        return "?"
    text = str(value)
    head, dirty = (text[:-6], "-dirty") if text.endswith("-dirty") else (text, "")
    if len(head) in (40, 64) and all(c in "0123456789abcdef" for c in head):
        return head[: 10 if len(head) == 40 else 12] + dirty
    return text


def diff_text(diff: dict[str, list[Any]]) -> str:
    """'torch 2.12.0 -> 2.13.0, hosts a -> b' for one line of an error (commits and hashes short_hash)."""

    def text(v: Any) -> str:
        if isinstance(v, list):
            return ",".join(map(str, v))
        return "None" if v is None else short_hash(v)  # None is a value here (a variable not set)

    return ", ".join(f"{k} {text(old)} -> {text(new)}" for k, (old, new) in diff.items())


# how a variant's source in meta.json records its code (variants.origin.code_suffix writes it; results imports
# nothing of variants, so the markers are spelled again here, and tests/results/test_code_identity.py holds
# them equal): the sha256 of the file(s) that define and register it, or of its text where no file holds it
FILE_HASHED, TEXT_HASHED = ", file sha256 ", ", text sha256 "
# an older attnbench's marker: a variant file's or an entry point's module file whole (the file rule), but an
# imported function's own text alone (OLD_TEXT: another rule, which no hash of today's can be held against)
OLD_HASHED = ", source sha256 "
OLD_TEXT = "function text (older attnbench)"
NOT_COMPARABLE = "not comparable: recorded by an older attnbench"


def code_of(source: Any) -> tuple[str, str] | None:
    """(rule, digest) of a variant's recorded source: ('file', digest), ('text', digest), (OLD_TEXT, digest)
    for an older attnbench's hash of an imported function alone, ('builtin', ''); None where it records
    none."""
    if source == "builtin":
        return ("builtin", "")
    if not isinstance(source, str):
        return None
    for marker, rule in ((FILE_HASHED, "file"), (TEXT_HASHED, "text")):
        if marker in source:
            return (rule, source.rsplit(marker, 1)[1])
    if OLD_HASHED in source:
        where, digest = source.rsplit(OLD_HASHED, 1)
        return ("file" if where.startswith(("file ", "entry point ")) else OLD_TEXT, digest)
    return None


def code_differs(a: Any, b: Any) -> bool | None:
    """Whether two recorded sources of one variant name another code: False where their hashes agree however
    the file came in (imported by pytest or a script, or a --variant-file), True where they differ by one
    rule (or either records none), None where they were hashed by different rules (an older attnbench's
    hash of the function alone against today's of its file): NOT_COMPARABLE, not a change."""
    if a == b:
        return False
    code_a, code_b = code_of(a), code_of(b)
    if code_a is None or code_b is None or "builtin" in (code_a[0], code_b[0]):
        return True
    if code_a[0] != code_b[0] and OLD_TEXT in (code_a[0], code_b[0]):
        return None
    return code_a != code_b
