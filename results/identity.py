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
