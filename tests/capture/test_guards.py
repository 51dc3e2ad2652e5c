"""Guards: each kind is installed when a value is read, fails when it changes (causing a
recompile) and names its source in the failure reason the way torch.compile does."""
import sys

import torch

import torchkiln
from torchkiln.capture.convert_frame import convert_frame
from torchkiln.capture.frame import bind_locals
from torchkiln.shapes.policy import DynamicPolicy
from torchkiln.testing import CompileCounter, same

MODE = "relu"
FLAG = 2


def capture(fn, *args, dynamic=None):
    entry = convert_frame(fn, args, {}, backend=CompileCounter(), fullgraph=True,
                          dynamic=dynamic or DynamicPolicy(), compile_wrapper=lambda f: f)
    assert entry.guard.check(bind_locals(fn, args, {}))
    return entry


def reason(entry, fn, *args):
    f_locals = bind_locals(fn, args, {})
    assert not entry.guard.check(f_locals)
    return entry.guard.failure_reason(f_locals)


def add(x, y):
    return x + y


def test_tensor_dtype_size_stride_requires_grad():
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    e = capture(add, x, y)
    assert reason(e, add, x, y.double()) == "tensor 'L['y']' dtype mismatch. expected Float, actual Double"
    assert reason(e, add, x, torch.randn(5, 4)) == "tensor 'L['y']' size mismatch at index 0. expected 3, actual 5"
    assert reason(e, add, x, torch.randn(4, 3).t()) == "tensor 'L['y']' stride mismatch at index 0. expected 4, actual 1"
    assert reason(e, add, x, y.requires_grad_()) == "tensor 'L['y']' requires_grad mismatch. expected requires_grad=0"
    assert reason(e, add, torch.randn(3), y) == "tensor 'L['x']' rank mismatch. expected 2, actual 1"
    assert e.guard.size_failures(bind_locals(add, (x, torch.randn(3, 7)), {})) == {"L['y']": {1}}
    assert e.guard.size_failures(bind_locals(add, (x, y.double()), {})) is None


def test_requires_grad_reason_names_expected_one():
    x = torch.randn(3, requires_grad=True)
    e = capture(add, x, x.detach().clone().requires_grad_())
    assert reason(e, add, x, torch.randn(3)) == "tensor 'L['y']' requires_grad mismatch. expected requires_grad=1"


def test_aliasing_between_arguments():
    x = torch.randn(3)
    e = capture(add, x, x)
    assert "L['x'] is L['y']" in e.guard.code_parts
    assert reason(e, add, x, torch.randn(3)) == "L['x'] is L['y']"
    e2 = capture(add, x, torch.randn(3))
    assert reason(e2, add, x, x) == "tensor inputs alias each other (duplicate inputs)"


def test_constant_specialisation_and_none():
    def f(x, n, s, opt):
        y = x * n
        if s == "double":
            y = y * 2
        return y if opt is None else y + opt

    x = torch.randn(2)
    e = capture(f, x, 3, "double", None)
    assert reason(e, f, x, 4, "double", None) == "L['n'] == 3"
    assert reason(e, f, x, 3, "half", None) == "L['s'] == 'double'"
    assert reason(e, f, x, 3, "double", x) == "L['opt'] is None"
    assert reason(e, f, x, 3.0, "double", None) == "type(L['n']) is int"


def test_globals_read_are_guarded():
    def f(x):
        return x * FLAG if MODE == "relu" else x

    global MODE
    x = torch.randn(2)
    e = capture(f, x)
    assert "G['MODE'] == 'relu'" in e.guard.code_parts
    MODE = "gelu"
    try:
        assert reason(e, f, x) == "G['MODE'] == 'relu'"
    finally:
        MODE = "relu"


def test_closure_cells_are_guarded():
    def make(scale):
        def f(x):
            return x * scale
        return f

    f = make(2)
    e = capture(f, torch.randn(2))
    assert "L['scale'] == 2" in e.guard.code_parts


def test_module_training_and_recompile():
    m = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Dropout(0.5))
    torchkiln.reset()
    cnt = CompileCounter()
    opt = torchkiln.compile(m, backend=cnt)
    x = torch.randn(2, 3)
    m.eval()
    assert same(opt(x), m(x))
    m.train()
    opt(x)
    assert cnt.frame_count == 2


def test_grad_mode_is_guarded():
    torchkiln.reset()
    cnt = CompileCounter()
    opt = torchkiln.compile(lambda x: x * 2, backend=cnt)
    x = torch.randn(2, requires_grad=True)
    assert opt(x).requires_grad
    with torch.no_grad():
        assert not opt(x).requires_grad
    assert cnt.frame_count == 2


def test_hooks_dicts_are_guarded():
    lin = torch.nn.Linear(2, 2)

    def fn(x):
        return lin(x)

    torchkiln.reset()
    cnt = CompileCounter()
    opt = torchkiln.compile(fn, backend=cnt)
    x = torch.randn(1, 2)
    assert same(opt(x), fn(x))
    handle = lin.register_forward_hook(lambda mod, inp, out: out * 10)
    try:
        assert same(opt(x), fn(x))
        assert cnt.frame_count == 2
    finally:
        handle.remove()


def test_forward_hooks_and_pre_hooks_with_kwargs_and_prepend():
    lin = torch.nn.Linear(2, 2)
    order = []
    lin.register_forward_pre_hook(lambda m, args: (args[0] * 2,))
    lin.register_forward_pre_hook(lambda m, args, kwargs: ((args[0] + 1,), kwargs), with_kwargs=True, prepend=True)
    lin.register_forward_hook(lambda m, args, out: out - 1)
    lin.register_forward_hook(lambda m, args, kwargs, out: out * 3, with_kwargs=True)
    del order

    def fn(x):
        return lin(x)  # hooks of a module called inside the frame are inlined

    torchkiln.reset()
    cnt = CompileCounter()
    opt = torchkiln.compile(fn, backend=cnt, fullgraph=True)
    x = torch.randn(1, 2)
    assert same(opt(x), lin(x))
    assert cnt.frame_count == 1


def test_dynamic_shapes_guard_on_symbols():
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    e = capture(add, x, y, dynamic=DynamicPolicy(assume_static=False))
    assert e.guard.check(bind_locals(add, (torch.randn(5, 4), torch.randn(5, 4)), {}))
    assert not e.guard.check(bind_locals(add, (torch.randn(5, 4), torch.randn(6, 4)), {}))
    assert not e.guard.check(bind_locals(add, (torch.randn(1, 4), torch.randn(1, 4)), {}))  # 0/1 specialised
    out = e.run(bind_locals(add, (torch.ones(5, 4), torch.ones(5, 4)), {}))
    assert same(out, torch.full((5, 4), 2.0))


def test_guard_source_is_printable():
    e = capture(add, torch.randn(2), torch.randn(2))
    assert "def ___guard(L):" in str(e.guard)
    assert any("L['x'].dtype" in part for part in e.guard.code_parts)


def test_guard_reads_no_module_attribute_through_getattr():
    # Every check of L['self'].block.lin.weight used to walk the module path again through
    # nn.Module.__getattr__ (a Python call per step); the generated guard computes each
    # shared prefix once and reads submodules and parameters from the module's dicts.
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.norm = torch.nn.LayerNorm(4)

        def forward(self, x):
            return self.norm(self.lin(x))

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.block = Block()

        def forward(self, x):
            return self.block(x) + 1

    net = Net()
    x = torch.randn(2, 4)
    entry = capture(Net.forward, net, x)
    f_locals = bind_locals(Net.forward, (net, x), {})
    calls = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is torch.nn.Module.__getattr__.__code__:
            calls.append(frame.f_locals["name"])

    sys.setprofile(profile)
    try:
        assert entry.guard.check(f_locals)
    finally:
        sys.setprofile(None)
    assert calls == []
    # a changed tensor deep in the path still fails it, with the usual reason
    net.block.lin.weight = torch.nn.Parameter(torch.randn(4, 5)[:, :4])
    assert "stride mismatch" in reason(entry, Net.forward, net, x)


INF_SCALE = float("-inf")


def test_infinite_float_global_guard_holds():
    # repr(-inf) is '-inf', not a name: the guard must still evaluate (and pass)
    def f(x):
        return torch.clamp(x, min=INF_SCALE)

    counter = CompileCounter()
    compiled = torchkiln.compile(f, backend=counter)
    x = torch.randn(3)
    for _ in range(3):
        same(compiled(x), f(x))
    assert counter.frame_count == 1


def test_guard_builds_no_module_list_slice():
    # self.layers[:2]'s children are read on self.layers: the guard never builds the slice
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))

        def forward(self, x):
            for layer in self.layers[:2]:
                x = layer(x)
            return x

    net = Net()
    x = torch.randn(2, 4)
    entry = capture(Net.forward, net, x)
    assert str(entry.guard).count("slice(") == 0, str(entry.guard)
