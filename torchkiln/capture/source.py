"""Sources: printable Python expressions naming where a value came from.

A source is a string such as ``L['x']``, ``G['scale']``, ``L['self'].layer.weight`` or
``L['xs'][0]`` (the names torch.compile prints in guards).  ``L`` is the frame's bound
``f_locals``, ``G`` its globals; globals of other modules are ``___g_<module>[...]``.
Guards and transformed code evaluate sources with :func:`compile_getter`.
"""
from __future__ import annotations

import keyword
import re

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def local_source(name: str) -> str:
    return f"L[{name!r}]"


def global_source(name: str, globals_name: str = "G") -> str:
    return f"{globals_name}[{name!r}]"


def attr_source(base: str | None, attr: str) -> str | None:
    if base is None:
        return None
    if _IDENT.match(attr) and not keyword.iskeyword(attr) and not attr.startswith("__"):
        return f"{base}.{attr}"
    return f"getattr({base}, {attr!r})"


def item_source(base: str | None, index) -> str | None:
    if base is None:
        return None
    return f"{base}[{index!r}]"


def globals_dict_name(module_name: str) -> str:
    """The guard-namespace name for the globals dict of another module."""
    return "___g_" + re.sub(r"\W", "_", module_name)


def compile_getter(source: str, env: dict):
    """``fn(L) -> value`` evaluating ``source`` with ``env`` (holding G etc.) as globals."""
    return eval(f"lambda L: {source}", env)
