"""Plain-Python reference implementations that capture inlines instead of a builtin.

A builtin, ``functools``/``itertools``/``operator`` function or container method whose
arguments are not all Python constants (a user function as ``key=``, tensors or symbolic
ints among the items) is replaced by the polyfill registered here and the polyfill's
bytecode is traced like user code, as ``torch/_dynamo/polyfills`` does: CPython's
semantics (argument binding, keyword arguments, ``default=``, stability of ``sorted``,
comparison order) come from code that runs the same way eagerly.  A polyfill raises
what the builtin raises; raising is a graph break, after which the call runs natively.

Polyfill modules set ``__torchkiln_polyfill__ = True``: their globals are read as
constants (no guards).  Generators here are consumed lazily by the interpreter.
"""
from __future__ import annotations

from . import builtins as _builtins
from . import containers as _containers
from . import libs as _libs
from . import torch_ops as _torch_ops

POLYFILLS: dict[int, object] = {}
"""``id(real function)`` -> polyfill function."""

for _module in (_builtins, _libs, _torch_ops):
    for _real, _poly in _module.REGISTRY.items():
        if not isinstance(getattr(_real, "__self__", None), type):  # a bound method is made per access
            POLYFILLS[id(_real)] = _poly

CONTAINER_METHODS = _containers.METHODS
"""``(container type, method name)`` -> polyfill for the methods that compare values."""


_BY_OWNER = {(real.__self__, real.__name__): poly for module in (_builtins, _libs)
             for real, poly in module.REGISTRY.items() if isinstance(getattr(real, "__self__", None), type)}


def polyfill_for(fn):
    """The polyfill standing for ``fn``, or None.  A builtin class's bound method
    (``itertools.chain.from_iterable``) is made afresh on each access: matched by owner
    and name."""
    poly = POLYFILLS.get(id(fn))
    if poly is None and isinstance(getattr(fn, "__self__", None), type):
        poly = _BY_OWNER.get((fn.__self__, getattr(fn, "__name__", None)))
    return poly


def call_polyfill(tx, poly, args, kwargs):
    """Inline ``poly``; a generator polyfill (``zip``, ``map``, ``enumerate`` ...) is
    drained at once into a list iterator, which a graph break can rebuild mid-loop."""
    from ..variables.containers import ListIteratorVariable
    from ..variables.functions import UserFunctionVariable
    from ..variables.generators import GeneratorVariable

    result = UserFunctionVariable(poly).call_function(tx, args, kwargs)
    if isinstance(result, GeneratorVariable):
        return ListIteratorVariable(result.unpack_var_sequence(tx))
    return result
