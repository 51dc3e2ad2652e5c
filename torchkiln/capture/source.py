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
    if _IDENT.match(attr) and not keyword.iskeyword(attr) and (not attr.startswith("__") or attr in PLAIN_DUNDERS):
        return f"{base}.{attr}"
    return f"getattr({base}, {attr!r})"


# dunder attributes a source reads with attribute syntax (a chain step: hoisted and shared
# like any other; no name mangling outside a class body); other dunders stay getattr calls
PLAIN_DUNDERS = frozenset({"__code__", "__closure__", "__defaults__", "__kwdefaults__", "__func__", "__self__"})


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


# A source chain: a root (L[...], G[...], ___g_<module>[...]) and its .attr / [key] steps.
_INT_OR_NONE = r"(?:None|-?\d+)"
_ITEM = (r"\[(?:'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|-?\d+"
         r"|slice\(" + _INT_OR_NONE + ", " + _INT_OR_NONE + ", " + _INT_OR_NONE + r"\))\]")
_STEP = re.compile(r"\.[A-Za-z_][A-Za-z0-9_]*|" + _ITEM)
_CHAIN = re.compile(r"(?<![\w.])(?:L|G|___g_\w+)" + _ITEM + r"(?:\.[A-Za-z_][A-Za-z0-9_]*|" + _ITEM + r")*")


def _steps(chain: str) -> list[str]:
    """``L['self'].ln.weight`` -> ``["L['self']", ".ln", ".weight"]``."""
    first = _STEP.match(chain, chain.index("["))
    out = [chain[:first.end()]]
    pos = first.end()
    while pos < len(chain):
        m = _STEP.match(chain, pos)
        out.append(m.group(0))
        pos = m.end()
    return out


def _prefixes(steps: list[str]) -> list[str]:
    """``["L['a']", ".b", ".c"]`` -> ``["L['a']", "L['a'].b", "L['a'].b.c"]``."""
    out, key = [], ""
    for step in steps:
        key += step
        out.append(key)
    return out


def hoist_shared_prefixes(codes: list[str]) -> list[tuple[list[str], str]]:
    """Per expression of ``codes`` (Python source reading sources), the assignments to
    run before it and its text rewritten to use them: every source prefix used more
    than once (``L['self'].ln`` in each check of ``L['self'].ln.weight``) is computed
    once into a local ``___v<n>``, at its first use.  Reading a module attribute goes
    through ``nn.Module.__getattr__`` (about a microsecond); guards and argument getters
    read the same paths many times per call."""
    split: dict[str, tuple[list[str], list[str]]] = {}  # chain -> (steps, prefixes)
    chains = []
    for code in codes:
        part = []
        for m in _CHAIN.finditer(code):
            chain = m.group(0)
            if chain not in split:
                steps = _steps(chain)
                split[chain] = (steps, _prefixes(steps))
            part.append(chain)
        chains.append(part)
    uses: dict[str, int] = {}
    for part in chains:
        for chain in part:
            for key in split[chain][1]:
                uses[key] = uses.get(key, 0) + 1
    names: dict[str, str] = {}

    def rewrite(match) -> str:
        chain = match.group(0)
        steps, prefixes = split[chain]
        for n in range(len(steps), 0, -1):
            name = names.get(prefixes[n - 1])
            if name is not None:
                return name + "".join(steps[n:])
        return chain

    out = []
    for code, part in zip(codes, chains):
        setup = []
        for chain in part:
            steps, prefixes = split[chain]
            for n, key in enumerate(prefixes):
                if uses[key] > 1 and key not in names:
                    parent = prefixes[n - 1] if n else None
                    expr = (names[parent] + steps[n]) if parent in names else key
                    names[key] = f"___v{len(names)}"
                    setup.append(f"{names[key]} = {expr}")
        out.append((setup, _CHAIN.sub(rewrite, code)))
    return out
