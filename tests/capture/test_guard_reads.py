"""Guards read submodules, parameters and buffers from the module's dicts, past
``nn.Module.__getattr__`` (capture/guard_reads.py), and the TENSOR_MATCH parts run in a
cheaper, equivalent form.  Each test changes what the plain read depended on and checks
that the compiled call recompiles or gives eager's result, never a stale one."""
import torch

import torchkiln
from torchkiln.testing import CompileCounter, same


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("shift", torch.ones(4))

    def forward(self, x):
        return self.lin(x) + self.shift


def compiled(module):
    cnt = CompileCounter()
    return torchkiln.compile(module, backend=cnt), cnt


def check(opt, module, x):
    assert same(opt(x), module(x))


def fresh_class(name="Net", base=Net):
    return type(name, (base,), {})  # each test mutates its own class


def test_guard_reads_parameters_without_getattr_and_stays_correct():
    torchkiln.reset()
    net, x = Net(), torch.randn(2, 4)
    opt, cnt = compiled(net)
    check(opt, net, x)
    check(opt, net, x)
    assert cnt.frame_count == 1
    entry = torchkiln.capture.eval_frame._frame_caches[Net.forward.__code__].entries[0][1]
    assert "__dict__" in str(entry.guard)  # the rewritten reads
    assert not any("__dict__['_parameters']" in p for p in entry.guard.code_parts)  # printed parts stay plain


def test_reassigned_submodule_and_replaced_parameter():
    torchkiln.reset()
    net, x = Net(), torch.randn(2, 4)
    opt, cnt = compiled(net)
    check(opt, net, x)
    net.lin.weight = torch.nn.Parameter(torch.randn(4, 4))  # same metadata: a graph input, read again
    check(opt, net, x)
    net.lin = torch.nn.Linear(4, 4, bias=False)  # bias None: another graph
    check(opt, net, x)
    assert cnt.frame_count == 2
    net.lin.weight = torch.nn.Parameter(torch.randn(8, 4)[::2])  # strided: TENSOR_MATCH fails
    check(opt, net, x)
    assert cnt.frame_count == 3


def test_instance_attribute_shadowing_a_submodule():
    torchkiln.reset()
    net, x = Net(), torch.randn(2, 4)
    opt, cnt = compiled(net)
    check(opt, net, x)
    other = torch.nn.Linear(4, 4)
    object.__setattr__(net, "lin", other)  # the instance dict now wins over _modules
    assert net.lin is other
    check(opt, net, x)
    object.__setattr__(net, "shift", torch.zeros(4))  # a plain attribute over the buffer
    check(opt, net, x)


def test_buffer_moved_to_parameters_and_removed():
    torchkiln.reset()
    net, x = Net(), torch.randn(2, 4)
    opt, cnt = compiled(net)
    check(opt, net, x)
    del net._buffers["shift"]
    net.shift = torch.nn.Parameter(torch.full((4,), 3.0))  # _parameters is read first
    check(opt, net, x)
    del net._parameters["shift"]
    net._modules["shift"] = None
    try:
        net(x)
    except TypeError as e:  # eager fails: the compiled call must fail the same way
        expected = type(e)
    try:
        opt(x)
        raise AssertionError("the compiled call did not raise")
    except expected:
        pass


def test_class_getattr_monkeypatched():
    torchkiln.reset()
    cls = fresh_class()
    net, x = cls(), torch.randn(2, 4)
    opt, cnt = compiled(net)
    check(opt, net, x)
    doubled = torch.nn.Linear(4, 4)
    cls.__getattr__ = lambda self, name: doubled if name == "lin" else torch.nn.Module.__getattr__(self, name)
    try:
        check(opt, net, x)
        assert cnt.frame_count == 2
    finally:
        del cls.__getattr__


def test_module_getattr_function_changed():
    torchkiln.reset()
    net, x = Net(), torch.randn(2, 4)
    opt, cnt = compiled(net)
    check(opt, net, x)
    original = torch.nn.Module.__getattr__

    def patched(self, name):
        value = original(self, name)
        return value * 2 if name == "shift" else value

    torch.nn.Module.__getattr__ = patched
    try:
        entry = torchkiln.capture.eval_frame._frame_caches[Net.forward.__code__].entries[0][1]
        reason = entry.guard.failure_reason({"self": net, "x": x})
        assert reason.startswith("a class's attribute lookup changed: "), reason
        check(opt, net, x)
        assert cnt.frame_count == 2
    finally:
        torch.nn.Module.__getattr__ = original


def test_class_getattribute_added():
    torchkiln.reset()
    cls = fresh_class()
    net, x = cls(), torch.randn(2, 4)
    opt, cnt = compiled(net)
    check(opt, net, x)

    def getattribute(self, name):
        value = object.__getattribute__(self, name)
        return value
    cls.__getattribute__ = getattribute
    entry = torchkiln.capture.eval_frame._frame_caches[cls.forward.__code__].entries[0][1]
    assert entry.guard.failure_reason({"self": net, "x": x}).startswith("a class's attribute lookup changed: ")
    check(opt, net, x)
    assert cnt.frame_count == 1  # captured again: a module with a __getattribute__ graph-breaks


def test_same_named_data_descriptor_added_to_class():
    torchkiln.reset()
    cls = fresh_class()
    net, x = cls(), torch.randn(2, 4)
    opt, cnt = compiled(net)
    check(opt, net, x)
    other = torch.nn.Linear(4, 4)
    cls.lin = property(lambda self: other)  # a data descriptor wins over __getattr__
    assert net.lin is other
    check(opt, net, x)
    # (deleting the property again is not checked: capture does not guard a class
    # attribute it read through a property, with or without these reads)


def test_class_gains_a_base_with_a_same_named_descriptor():
    torchkiln.reset()
    cls = fresh_class()
    net, x = cls(), torch.randn(2, 4)
    opt, cnt = compiled(net)
    check(opt, net, x)
    base = fresh_class("Base", torch.nn.Module)
    base.shift = property(lambda self: torch.full((4,), 5.0))
    cls.__bases__ = (Net, base)  # a new class in the MRO
    assert same(net.shift, torch.full((4,), 5.0))
    check(opt, net, x)


def test_hasattr_on_module_flips():
    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            y = self.lin(x)
            if hasattr(self.lin, "scale"):
                y = y * self.lin.scale
            if hasattr(self, "lin"):
                y = y + 1
            return y

    torchkiln.reset()
    net, x = Scaled(), torch.randn(2, 4)
    opt, cnt = compiled(net)
    check(opt, net, x)
    net.lin.register_buffer("scale", torch.full((4,), 3.0))  # hasattr False -> True
    check(opt, net, x)
    assert cnt.frame_count == 2
    del net.lin._buffers["scale"]
    net.lin.scale = torch.nn.Parameter(torch.full((4,), 2.0))  # still True, from _parameters
    check(opt, net, x)
    del net.lin._parameters["scale"]
    check(opt, net, x)  # back to False


def test_module_list_items_and_slices():
    class Stack(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(3)])

        def forward(self, x):
            for layer in self.layers[:2]:
                x = layer(x)
            return self.layers[-1](x)

    torchkiln.reset()
    net, x = Stack(), torch.randn(2, 4)
    opt, cnt = compiled(net)
    check(opt, net, x)
    net.layers[0] = torch.nn.Linear(4, 4, bias=False)
    check(opt, net, x)
    net.layers.append(torch.nn.Linear(4, 4))  # [-1] is another module now
    check(opt, net, x)
    net.layers[-1].weight = torch.nn.Parameter(torch.randn(4, 8)[:, ::2])
    check(opt, net, x)


def test_tensor_rank_and_device_checks_still_fail():
    torchkiln.reset()

    def f(x):
        return x * 2

    cnt = CompileCounter()
    opt = torchkiln.compile(f, backend=cnt)
    x = torch.randn(2, 4)
    assert same(opt(x), f(x))
    y = torch.randn(8)  # another rank, the same number of elements
    assert same(opt(y), f(y))
    assert cnt.frame_count == 2
    entry = torchkiln.capture.eval_frame._frame_caches[f.__code__].entries[0][1]
    assert ".is_cpu" in str(entry.guard) and ".dim()" not in str(entry.guard)
    assert any(".dim() == 1" in p for p in entry.guard.code_parts)
    assert "rank mismatch" in entry.guard.failure_reason({"x": torch.randn(2, 4)})
    assert not entry.guard.check({"x": torch.randn(8, device="meta")})


class Deep(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Net() for _ in range(12)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def test_steady_state_call_runs_no_module_getattr():
    # the guard and the graph inputs' getter both read past nn.Module.__getattr__, also in
    # the long alias check of many tensor inputs (``len({id(...), ...}) == n``)
    import sys

    calls = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is torch.nn.Module.__getattr__.__code__:
            calls.append(frame.f_locals["name"])

    torchkiln.reset()
    deep = Deep()
    opt_deep, _ = compiled(deep)
    torchkiln.reset()
    net, x = Net(), torch.randn(2, 4)
    opt, cnt = compiled(net)
    check(opt, net, x)
    check(opt_deep, deep, x)
    sys.setprofile(profile)
    try:
        opt(x)
        opt_deep(x)
    finally:
        sys.setprofile(None)
    assert calls == []
    net.lin.weight = torch.nn.Parameter(torch.randn(4, 4))  # a new input object, read again
    check(opt, net, x)
    assert cnt.frame_count == 1


# -- transformers configs: __getattribute__ chains of guard_reads._PASS_THROUGH ---------------

def _config_model():
    import pytest

    transformers = pytest.importorskip("transformers")

    class TinyConfig(transformers.PreTrainedConfig):
        model_type = "torchkiln_tiny"
        attribute_map = {"width": "hidden"}
        offset = 1.0  # read from the class
        shift = 0.5  # a class default the instance shadows

        def __init__(self, scale=2.0, hidden=4, **kwargs):
            self.scale = scale
            self.shift = 0.25
            self.hidden = hidden
            super().__init__(**kwargs)

    class TinyModel(torch.nn.Module):
        def __init__(self, config):
            super().__init__()
            self.config = config
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            y = self.lin(x) * self.config.scale + self.config.offset - self.config.shift
            if self.config.use_return_dict:  # a property: stays a plain read
                y = y + 1
            if hasattr(self.config, "extra"):
                y = y + self.config.extra
            return y

    return TinyConfig, TinyModel


def _uses_config_reads(opt_code):
    entry = torchkiln.capture.eval_frame._frame_caches[opt_code].entries[0][1]
    return "___oga(" in str(entry.guard)


def test_config_reads_skip_getattribute_and_follow_changes():
    from torchkiln.capture.guard_reads import _config_layout

    TinyConfig, TinyModel = _config_model()
    torchkiln.reset()
    model, x = TinyModel(TinyConfig()), torch.randn(2, 4)
    opt, cnt = compiled(model)
    check(opt, model, x)
    if _config_layout(TinyConfig) is not None:  # this transformers version's lookup is known
        assert _uses_config_reads(TinyModel.forward.__code__)
    model.config.scale = 3.0  # an instance attribute changes
    check(opt, model, x)
    model.config.extra = 5.0  # hasattr False -> True
    check(opt, model, x)
    del model.config.extra
    check(opt, model, x)
    TinyConfig.attribute_map["scale"] = "hidden"  # the read name is renamed now
    try:
        check(opt, model, x)
    finally:
        del TinyConfig.attribute_map["scale"]
    check(opt, model, x)
    model.config.__dict__["attribute_map"] = {"scale": "hidden"}  # an instance attribute_map
    check(opt, model, x)
    del model.config.__dict__["attribute_map"]
    check(opt, model, x)


def test_config_class_changes():
    TinyConfig, TinyModel = _config_model()
    torchkiln.reset()
    model, x = TinyModel(TinyConfig()), torch.randn(2, 4)
    opt, cnt = compiled(model)
    check(opt, model, x)
    TinyConfig.scale = property(lambda self: 7.0)  # a data descriptor wins over the instance dict
    assert model.config.scale == 7.0
    check(opt, model, x)
    del TinyConfig.scale
    check(opt, model, x)
    TinyConfig.offset = 2.0  # the class value read
    check(opt, model, x)
    TinyConfig.offset = property(lambda self: 3.0)
    check(opt, model, x)
    TinyConfig.offset = 1.0
    TinyConfig.shift = property(lambda self: 4.0)  # over the shadowing instance value
    assert model.config.shift == 4.0
    check(opt, model, x)
    TinyConfig.shift = 0.5
    check(opt, model, x)

    def getattribute(self, key):
        value = super(TinyConfig, self).__getattribute__(key)
        return value * 10 if key == "scale" else value
    TinyConfig.__getattribute__ = getattribute  # the lookup is no longer the known chain
    assert model.config.scale == 20.0
    check(opt, model, x)
    del TinyConfig.__getattribute__
    check(opt, model, x)


def test_config_heterogeneity_spec_set():
    import types as pytypes

    TinyConfig, TinyModel = _config_model()
    torchkiln.reset()
    model, x = TinyModel(TinyConfig()), torch.randn(2, 4)
    opt, cnt = compiled(model)
    check(opt, model, x)
    model.config.__dict__["_heterogeneity_spec"] = pytypes.SimpleNamespace(per_layer_attributes=set())
    check(opt, model, x)
    model.config.__dict__["_heterogeneity_spec"] = pytypes.SimpleNamespace(per_layer_attributes={"scale"})
    model.config.__dict__["allow_global_per_layer_attribute_access"] = False
    try:
        model(x)
        eager_error = None
    except Exception as e:  # noqa: BLE001 - transformers' AmbiguousGlobalPerLayerAttributeError
        eager_error = type(e)
    if eager_error is None:
        check(opt, model, x)
    else:
        try:
            opt(x)
            raise AssertionError("the compiled call did not raise as eager did")
        except eager_error:
            pass
