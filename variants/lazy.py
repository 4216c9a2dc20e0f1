"""A module global that imports its module at first use: how the built-in variants name torch, so that
registering them (the parent of a run, `attnbench run`'s bad-input errors, a dry run) does not import torch.

    torch = lazy.module("torch", globals())
    F = lazy.module("torch.nn.functional", globals(), "F")

The first attribute read imports the module and puts it in the global's place, so every later read is the
module itself: a timed call never goes through this stand-in (the gate and the first call read it first).
"""

from __future__ import annotations

import importlib
from typing import Any


class _Stand:
    """Stands for module `name` in `owner` (a module's globals) under `alias` until an attribute is read."""

    __slots__ = ("_name", "_owner", "_alias")

    def __init__(self, name: str, owner: dict[str, Any], alias: str) -> None:
        self._name, self._owner, self._alias = name, owner, alias

    def __getattr__(self, attr: str) -> Any:
        real = importlib.import_module(self._name)
        self._owner[self._alias] = real
        return getattr(real, attr)

    def __repr__(self) -> str:
        return f"<module {self._name!r}, imported at first use>"


def module(name: str, owner: dict[str, Any], alias: str | None = None) -> Any:
    """The stand-in for module `name`, bound in `owner` as `alias` (its last dotted part by default)."""
    return _Stand(name, owner, alias or name.rsplit(".", 1)[-1])
