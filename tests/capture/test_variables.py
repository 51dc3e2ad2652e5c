"""Variable trackers: containers, dataclasses/ModelOutput, nn.Module containers and
APIs, user objects, torch.Size/dtype/device — each compared with eager, one graph."""
import collections
import dataclasses

import pytest
import torch

from capture_helpers import check, randn


def test_module_containers():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.seq = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU(), torch.nn.Linear(3, 3))
            self.mods = torch.nn.ModuleDict({"a": torch.nn.Linear(3, 3), "b": torch.nn.Tanh()})
            self.pdict = torch.nn.ParameterDict({"w": torch.nn.Parameter(torch.randn(3))})
            self.plist = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(3)) for _ in range(2)])

        def forward(self, x):
            x = self.seq(x)
            x = self.seq[0](x) + self.seq[-1](x)
            for name, mod in self.mods.items():
                x = mod(x)
            x = self.mods["a"](x) * self.pdict["w"]
            for p in self.plist:
                x = x + p
            return x, len(self.seq), "a" in self.mods, self.seq[1:](x)

    check(M(), randn(2, 3), frames=1)


def test_parameters_and_named_apis_in_order_deduplicated():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(2, 2)
            self.b = self.a  # shared
            self.register_buffer("buf", torch.ones(2))

        def forward(self, x):
            total = x
            for p in self.parameters():
                total = total + p.sum()
            names = [n for n, _ in self.named_parameters()]
            mods = [n for n, _ in self.named_modules()]
            kids = len(list(self.children()))
            for b in self.buffers():
                total = total * b
            return total, names, mods, kids

    check(M(), randn(2), frames=1)


def test_namedtuple_dataclass_and_defaultdict_outputs():
    Pair = collections.namedtuple("Pair", "a b")

    @dataclasses.dataclass
    class Out:
        y: torch.Tensor
        n: int = 1

    def f(x):
        d = collections.defaultdict(list)
        d["k"].append(x)
        od = collections.OrderedDict(a=x + 1)
        return Pair(x, x * 2), Out(x.relu()), dict(d), od, Pair(1, 2)

    def g(x):
        pair, out, d, od, consts = f(x)
        assert type(out) is Out and type(pair) is Pair and type(od) is collections.OrderedDict
        return pair, (out.y, out.n), d, od, consts

    cnt = check(g, torch.ones(2), frames=1)
    assert cnt.op_count == 3


def test_hf_model_output_built_in_frame():
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_outputs import BaseModelOutput

    def f(x):
        out = BaseModelOutput(last_hidden_state=x * 2)
        return out, out[0] + out.last_hidden_state, out.to_tuple(), out["last_hidden_state"]

    check(f, randn(2), frames=1)


def test_size_dtype_device_and_sets():
    def f(x):
        s = x.shape
        t = torch.Size([s[0], 2])
        kinds = {x.dtype, torch.float32}
        return (x.new_ones(t), s[1:], s.numel(), s + (1,), (1,) + s, x.view(s[:-1] + (2, 2)), x.to(device=x.device, dtype=torch.float64), len(kinds),
                x.dtype is torch.float32, x.device.type, torch.float32.is_floating_point)

    check(f, randn(3, 4), frames=1)


def test_user_callable_object_and_property():
    class Scale:
        def __init__(self, k):
            self.k = k

        @property
        def double(self):
            return self.k * 2

        def __call__(self, x):
            return x * self.double

    s = Scale(3)

    def f(x):
        return s(x) + Scale(1)(x)

    check(f, randn(2), frames=1)


def test_parameter_isinstance_and_tensor_attributes():
    lin = torch.nn.Linear(2, 2)

    def f(x):
        w = lin.weight
        return (isinstance(w, torch.nn.Parameter), isinstance(x, torch.nn.Parameter), w.requires_grad,
                x @ w.T, w.is_leaf, x.ndim)

    check(f, randn(1, 2), frames=1)


def test_functools_partial_and_methods_of_constants():
    import functools

    def scale(x, k):
        return x * k

    p = functools.partial(scale, k=4)

    def f(x):
        return p(x), "{}-{}".format("a", 1).upper()

    check(f, randn(2), fullgraph=False)


def test_grad_mode_decorated_function_weakref_and_environ():
    import os
    import weakref

    lin = torch.nn.Linear(2, 2)
    ref = weakref.ref(lin)

    @torch.no_grad()
    def frozen(x):
        return x * 2

    def f(x):
        y = frozen(x)
        flag = os.environ.get("TORCHKILN_TEST_UNSET_VARIABLE", "off")
        return ref()(x) + y, y.requires_grad, flag

    check(f, randn(1, 2, requires_grad=True), frames=1)


def test_model_output_passed_in():
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_outputs import BaseModelOutput

    def f(out):
        return out.last_hidden_state * 2, out.keys(), out[0].sum()

    check(f, BaseModelOutput(last_hidden_state=randn(2)), frames=1)


def test_inspect_signature_of_known_callables():
    import inspect

    lin = torch.nn.Linear(2, 2)

    def helper(a, b, c=1):
        return a

    def f(x):
        n = len(inspect.signature(helper).parameters) + len(inspect.signature(lin.forward).parameters)
        return x * n

    check(f, randn(2), frames=1)


def test_allow_in_graph_function_is_one_graph_call():
    import torchkiln
    from torchkiln.testing import CompileCounter, same

    def opaque(x):
        return x.sin() * 2  # not traced into: one call_function node

    torchkiln.allow_in_graph(opaque)

    def f(x):
        return opaque(x + 1) - 1

    torchkiln.reset()
    cnt = CompileCounter()
    x = randn(3)
    assert same(torchkiln.compile(f, backend=cnt, fullgraph=True)(x), f(x))
    assert cnt.frame_count == 1 and cnt.op_count == 3
