"""Adversarial guard cases: after a compiled call, change one thing the frame depends on
(a closure cell, a global, a default, a hook, a parameter, tensor metadata, global state,
a mode, an input container, a class) and check the next call gives eager's result
(through a recompile or an eager run).  Eager is the oracle; each case says what it
changes.  Cases marked (fixed) gave a wrong result before their fix."""
import contextlib
import functools
import math
import sys
import types

import pytest
import torch
import torch.nn.functional as F
from torch.nn.modules import module as nn_module
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import torchkiln
from torchkiln.testing import same

SCALE = 2.0


def helper(x):
    return x + 1


class Case:
    """``fn(*args())`` compiled, called, then ``change()``, called again: both calls equal eager."""

    def __init__(self, fn, args, change, undo=None, backend="eager"):
        self.fn, self.args, self.change, self.undo, self.backend = fn, args, change, undo, backend


def _closure():
    k = 1.0

    def f(x):
        return x * k

    def change():
        nonlocal k
        k = 3.0
    return Case(f, lambda: (torch.ones(4),), change)


def _closure_tensor_shape():
    t = torch.ones(4)

    def f(x):
        return x + t

    def change():
        nonlocal t
        t = torch.full((1,), 5.0)
    return Case(f, lambda: (torch.ones(4),), change)


def _global():
    def f(x):
        return x * SCALE

    def undo():
        globals()["SCALE"] = 2.0
    return Case(f, lambda: (torch.ones(4),), lambda: globals().__setitem__("SCALE", 7.0), undo)


def _global_function():
    def f(x):
        return helper(x) * 2

    old = helper
    return Case(f, lambda: (torch.ones(4),), lambda: globals().__setitem__("helper", lambda x: x - 100),
                lambda: globals().__setitem__("helper", old))


def _module_constant():  # (fixed) a folded module's attributes were read without a guard
    def f(x):
        return x * math.pi

    old = math.pi
    return Case(f, lambda: (torch.ones(4),), lambda: setattr(math, "pi", 10.0), lambda: setattr(math, "pi", old))


def _patched_torch_function():  # (fixed) F.gelu patched after compile
    def f(x):
        return F.gelu(x)

    old = F.gelu
    return Case(f, lambda: (torch.ones(4),), lambda: setattr(F, "gelu", lambda x: x * 100),
                lambda: setattr(F, "gelu", old))


def _backends_flag():  # (fixed) torch.backends.mkldnn.enabled is a property of its module's class
    def f(x):
        return x + 1 if torch.backends.mkldnn.enabled else x - 1

    # through the flags() context manager: a plain assignment raises once any test module
    # has called torch.testing's disable_global_flags() in this process (the OpInfo tests)
    stack = contextlib.ExitStack()
    flip = torch.backends.mkldnn.flags(enabled=not torch.backends.mkldnn.enabled)
    return Case(f, lambda: (torch.ones(4),), lambda: stack.enter_context(flip), stack.close)


def _sys_flags():
    def f(x):
        return x + 1 if sys.flags.optimize == 0 else x

    old = sys.flags
    return Case(f, lambda: (torch.ones(4),), lambda: setattr(sys, "flags", types.SimpleNamespace(optimize=1)),
                lambda: setattr(sys, "flags", old))


def _default_rebound():
    def f(x, k=2.0):
        return x * k
    return Case(f, lambda: (torch.ones(4),), lambda: setattr(f, "__defaults__", (9.0,)))


def _default_mutated():
    def f(x, lst=[1.0]):  # noqa: B006 - the mutable default is the point
        return x * lst[0] * len(lst)
    return Case(f, lambda: (torch.ones(4),), lambda: f.__defaults__[0].append(4.0))


def _kwdefault():
    def f(x, *, k=2.0):
        return x * k
    return Case(f, lambda: (torch.ones(4),), lambda: setattr(f, "__kwdefaults__", {"k": 5.0}))


def _training():
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(1.0)).eval()
    return Case(m, lambda: (torch.ones(4),), m.train)


def _hooks(kind):  # (fixed, global hooks) registering one after capture was not guarded
    lin = torch.nn.Linear(4, 4)
    outer = torch.nn.Sequential(lin, torch.nn.ReLU())
    handles = []
    add = {"forward": lambda: lin.register_forward_hook(lambda m, i, o: o * 10),
           "pre": lambda: lin.register_forward_pre_hook(lambda m, i: (i[0] * 3,)),
           "global_forward": lambda: nn_module.register_module_forward_hook(lambda m, i, o: o * 10),
           "global_pre": lambda: nn_module.register_module_forward_pre_hook(lambda m, i: (i[0] * 3,))}[kind]
    return Case(outer, lambda: (torch.ones(4),), lambda: handles.append(add()), lambda: handles.pop().remove())


def _hook_removed():
    lin = torch.nn.Linear(4, 4)
    handle = lin.register_forward_hook(lambda m, i, o: o * 10)
    return Case(lin, lambda: (torch.ones(4),), handle.remove)


def _parameter_replaced():
    lin = torch.nn.Linear(4, 4)
    return Case(lin, lambda: (torch.ones(4),), lambda: setattr(lin, "weight", torch.nn.Parameter(torch.ones(4, 4))))


def _parameter_to_attribute():
    lin = torch.nn.Linear(4, 4)

    def change():
        del lin.bias
        lin.bias = torch.ones(4)
    return Case(lin, lambda: (torch.ones(4),), change)


def _buffer_replaced():
    bn = torch.nn.BatchNorm1d(4).eval()
    x = torch.randn(2, 4)
    return Case(bn, lambda: (x,), lambda: setattr(bn, "running_mean", torch.ones(4)))


def _submodule_replaced():
    seq = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    x = torch.randn(4)
    return Case(seq, lambda: (x,), lambda: seq.__setitem__(1, torch.nn.Tanh()))


def _module_class_changed():
    class Louder(torch.nn.Linear):
        def forward(self, x):
            return super().forward(x) * 100
    lin = torch.nn.Linear(4, 4)
    return Case(lin, lambda: (torch.ones(4),), lambda: setattr(lin, "__class__", Louder))


def _tensor(change_kind, backend="eager"):
    base = torch.randn(20)
    cur = {"a": torch.randn(4, 4)}
    new = {"requires_grad": lambda a: a.detach().requires_grad_(),
           "dtype": lambda a: a.double(),
           "contiguity": lambda a: a.t(),
           "storage_offset": lambda a: base[4:20].view(4, 4),
           "inference": lambda a: _inference_copy(a)}[change_kind]

    def f(a, b):
        return a * 2 + b
    return Case(f, lambda: (cur["a"], torch.ones(4, 4)), lambda: cur.__setitem__("a", new(cur["a"])),
                backend=backend)


def _inference_copy(a):
    with torch.inference_mode():
        return a.clone()


def _overlapping_inputs(backend):
    state = {"alias": False}

    def f(a, b):
        a.add_(1)
        return b * 2

    def args():
        base = torch.zeros(8)
        return (base[0:4], base[2:6]) if state["alias"] else (base[0:4], torch.zeros(8)[2:6])
    return Case(f, args, lambda: state.__setitem__("alias", True), backend=backend)


def _grad_mode():
    def f(x):
        return x * 2 if torch.is_grad_enabled() else x
    return Case(f, lambda: (torch.ones(4),), lambda: torch.set_grad_enabled(False),
                lambda: torch.set_grad_enabled(True))


def _deterministic():  # (fixed) the query was folded without a guard
    def f(x):
        return x + 1 if torch.are_deterministic_algorithms_enabled() else x - 1
    old = torch.are_deterministic_algorithms_enabled()
    return Case(f, lambda: (torch.ones(4),), lambda: torch.use_deterministic_algorithms(not old),
                lambda: torch.use_deterministic_algorithms(old))


def _default_dtype(backend):  # (fixed) queried, or baked into a factory call of the graph
    def f(x):
        return (x + torch.ones(4)) * (2 if torch.get_default_dtype() == torch.float32 else 3)
    x = torch.ones(4)  # made once: the input keeps its dtype
    return Case(f, lambda: (x,), lambda: torch.set_default_dtype(torch.float64),
                lambda: torch.set_default_dtype(torch.float32), backend=backend)


def _autocast():
    ctx = torch.autocast("cpu", dtype=torch.bfloat16)

    def f(x):
        return x.view(2, 2) @ x.view(2, 2)
    x = torch.randn(4)
    return Case(f, lambda: (x,), ctx.__enter__, lambda: ctx.__exit__(None, None, None))


class _SinPlus100(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return out + 100 if func is torch.sin else out


class _AtenSinPlus100(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return out + 100 if func is torch.ops.aten.sin.default else out


def _mode(mode, backend):  # (fixed, dispatch mode with generated kernels) the mode saw no op
    def f(x):
        return torch.sin(x) * 2
    return Case(f, lambda: (torch.ones(4),), mode.__enter__, lambda: mode.__exit__(None, None, None),
                backend=backend)


def _dict_key_added():
    d = {"a": torch.ones(2), "b": torch.ones(2)}

    def f(d):
        return sum(d.values()) if "c" not in d else d["a"]
    return Case(f, lambda: (d,), lambda: d.__setitem__("c", torch.ones(2)))


def _list_grown():
    lst = [torch.ones(2), torch.ones(2)]

    def f(lst):
        return sum(lst)
    return Case(f, lambda: (lst,), lambda: lst.append(torch.ones(2)))


def _object_class_changed():
    class A:
        def v(self):
            return 1.0

    class B:
        def v(self):
            return 5.0
    obj = A()

    def f(x, o):
        return x * o.v()
    return Case(f, lambda: (torch.ones(4), obj), lambda: setattr(obj, "__class__", B))


def _class_property_replaced():
    class P:
        @property
        def v(self):
            return 1.0
    obj = P()

    def f(x, o):
        return x * o.v
    return Case(f, lambda: (torch.ones(4), obj), lambda: setattr(P, "v", property(lambda s: 4.0)))


def _instance_shadows_class_attribute():
    class Q:
        v = 1.0
    obj = Q()

    def f(x, o):
        return x * o.v
    return Case(f, lambda: (torch.ones(4), obj), lambda: setattr(obj, "v", 3.0))


def _negative_zero():  # (fixed) -0.0 == 0.0 passed the float guard
    state = {"k": 0.0}

    def f(x, k):
        return x * math.copysign(1.0, k)
    return Case(f, lambda: (torch.ones(4), state["k"]), lambda: state.__setitem__("k", -0.0))


def _tensor_python_attribute():  # (fixed) getattr(t, name, default) on an input tensor had no guard
    t = torch.ones(4)

    def f(a):
        return a * getattr(a, "scale", 1.0)
    return Case(f, lambda: (t,), lambda: setattr(t, "scale", 4.0))


def _id_of_argument():  # (fixed) id(o) was folded with only o's type guarded
    class O:
        pass
    state = {"o": O()}
    first = id(state["o"])

    def f(x, o):
        return x + (1 if id(o) == first else 0)
    return Case(f, lambda: (torch.ones(4), state["o"]), lambda: state.__setitem__("o", O()))


def _partial_keyword():
    p = functools.partial(torch.add, alpha=2)

    def f(x):
        return p(x, x)
    return Case(f, lambda: (torch.ones(4),), lambda: p.keywords.__setitem__("alpha", 5))


CASES = {
    "closure_cell": _closure, "closure_tensor_shape": _closure_tensor_shape, "global": _global,
    "global_function": _global_function, "module_constant": _module_constant,
    "patched_torch_function": _patched_torch_function, "backends_flag": _backends_flag, "sys_flags": _sys_flags,
    "default_rebound": _default_rebound, "default_mutated": _default_mutated, "kwdefault": _kwdefault,
    "training": _training, "forward_hook": lambda: _hooks("forward"), "pre_hook": lambda: _hooks("pre"),
    "global_forward_hook": lambda: _hooks("global_forward"), "global_pre_hook": lambda: _hooks("global_pre"),
    "hook_removed": _hook_removed, "parameter_replaced": _parameter_replaced,
    "parameter_to_attribute": _parameter_to_attribute, "buffer_replaced": _buffer_replaced,
    "submodule_replaced": _submodule_replaced, "module_class_changed": _module_class_changed,
    "requires_grad": lambda: _tensor("requires_grad"), "dtype": lambda: _tensor("dtype"),
    "contiguity": lambda: _tensor("contiguity"), "storage_offset": lambda: _tensor("storage_offset", "aot_eager"),
    "inference_tensor": lambda: _tensor("inference", "aot_eager"),
    "overlapping_inputs": lambda: _overlapping_inputs("aot_eager"), "grad_mode": _grad_mode,
    "deterministic": _deterministic, "default_dtype": lambda: _default_dtype("eager"),
    "default_dtype_generated_code": lambda: _default_dtype("inductor"), "autocast": _autocast,
    "torch_function_mode": lambda: _mode(_SinPlus100(), "eager"),
    "dispatch_mode_generated_code": lambda: _mode(_AtenSinPlus100(), "inductor"),
    "dict_key_added": _dict_key_added, "list_grown": _list_grown, "object_class_changed": _object_class_changed,
    "class_property_replaced": _class_property_replaced,
    "instance_shadows_class_attribute": _instance_shadows_class_attribute, "negative_zero": _negative_zero,
    "tensor_python_attribute": _tensor_python_attribute, "partial_keyword": _partial_keyword, "id_of_argument": _id_of_argument,
}


@pytest.mark.parametrize("name", list(CASES))
def test_change_after_compile_gives_eager_result(name):
    torchkiln.reset()
    case = CASES[name]()
    compiled = torchkiln.compile(case.fn, backend=case.backend)
    try:
        assert same(compiled(*case.args()), case.fn(*case.args()))
        case.change()
        for _ in range(2):
            assert same(compiled(*case.args()), case.fn(*case.args())), name
    finally:
        if case.undo is not None:
            case.undo()


def test_set_default_device_keeps_compiling():
    """Under ``torch.set_default_device`` (a DeviceContext torch function mode) frames are
    still compiled, keyed by that device; a user torch function mode runs them eagerly."""
    torchkiln.reset()
    calls = []

    def backend(gm, example_inputs):
        calls.append(1)
        return gm.forward

    def f(x):
        return x + torch.ones(4)
    compiled = torchkiln.compile(f, backend=backend)
    with torch.device("cpu"):
        assert same(compiled(torch.ones(4)), f(torch.ones(4)))
        compiled(torch.ones(4))
    assert len(calls) == 1
    compiled(torch.ones(4))  # no mode: an entry of its own
    assert len(calls) == 2
    with _SinPlus100():
        compiled(torch.ones(4))
    assert len(calls) == 2


def test_folded_module_reads_are_guarded_once():
    """A torch function read twice is one identity check; a plain constant is checked by value."""
    torchkiln.reset()
    from torchkiln.capture import eval_frame

    def f(x):
        return F.gelu(x) + F.gelu(x) * math.pi
    torchkiln.compile(f, backend="eager")(torch.ones(4))
    (guard,) = [e.guard for fc in eval_frame._frame_caches.values() for _, e in fc.entries]
    parts = guard.code_parts
    assert sum("G['F'].gelu is" in p for p in parts) == 1
    assert "G['math'].pi == 3.141592653589793" in parts


def test_backward_hook_added_to_submodule_after_compile():
    """(fixed) A submodule's backward hook registered after capture was not guarded."""
    torchkiln.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    x = torch.randn(3, 4)
    compiled = torchkiln.compile(model, backend="aot_eager")

    def grads(fn):
        model.zero_grad()
        fn(x).sum().backward()
        return [p.grad.clone() for p in model.parameters()]
    assert same(grads(compiled), grads(model))
    handle = model[2].register_full_backward_hook(lambda m, gi, go: (gi[0] * 10,))
    try:
        assert same(grads(compiled), grads(model))
    finally:
        handle.remove()
