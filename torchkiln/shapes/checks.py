"""User checks on data-dependent values, kept with the error eager would raise.

``torch._check(cond, msg)``, ``torch._check_with(E, cond, msg)``, ``_check_is_size``,
``_check_index`` / ``_check_value`` / ``_check_type`` / ``_check_not_implemented``
on a condition over unbacked symbols (``u0 = t.item()``) cannot be decided while
capturing, so the compiled program asserts it at run time.  Capture records each as a
:class:`UserCheck` on the ShapeEnv (in program order); the wrapper asserts it as soon
as its symbols are bound and raises ``error_type(message)`` as eager does (the
ShapeEnv's own deferred asserts keep neither).  With no message, eager's default
text is followed by the condition and the values that broke it.
"""
from __future__ import annotations

import dataclasses

import sympy

DEFAULT_MESSAGE = ("Expected cond to be True, but got False. (Could this error message be improved? "
                   "If so, please report an enhancement request to PyTorch.)")

_ATTR = "torchkiln_user_checks"


@dataclasses.dataclass(frozen=True)
class UserCheck:
    """``cond`` (a sympy boolean over ShapeEnv symbols) must hold, else ``error_type(message)``;
    ``message`` None is torch's default text."""

    cond: sympy.Basic
    error_type: type
    message: str | None = None


def record(shape_env, check: UserCheck) -> None:
    """Remember ``check`` on ``shape_env`` (once; capture may trace a frame twice)."""
    checks = shape_env.__dict__.setdefault(_ATTR, [])
    if check not in checks:
        checks.append(check)


def user_checks(shape_env) -> list[UserCheck]:
    """The checks recorded on ``shape_env``, in program order."""
    return list(getattr(shape_env, _ATTR, ()))
