"""Guards: the conditions under which a captured graph may be reused (placeholder)."""
from __future__ import annotations


class Guard:
    """A generated Python predicate over ``f_locals``."""

    def __init__(self, check, code_parts, failure_reason=None):
        self.check = check
        self.code_parts = code_parts
        self._failure_reason = failure_reason

    @classmethod
    def always(cls) -> "Guard":
        return cls(lambda f_locals: True, [])

    def failure_reason(self, f_locals):
        return None if self._failure_reason is None else self._failure_reason(f_locals)

    def size_failures(self, f_locals):
        return None
