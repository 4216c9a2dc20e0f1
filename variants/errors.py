"""The two errors of a variant: one that cannot be found, registered or loaded, and one that refuses a problem
when called."""

from __future__ import annotations


class VariantError(ValueError):
    """A variant cannot be found, registered or loaded (bad name, bad file, broken plug-in)."""


class UnsupportedError(RuntimeError):
    """Raised by a variant at call time when its backend refuses this problem; the message is the reason."""
