"""Guards read a module's instance attributes (training, eps, hook dicts, plain config
values) from its ``__dict__`` (guard_reads: no ``slot_tp_getattr_hook`` per read); every
change eager sees still recompiles or is read fresh: checked against eager."""
import torch

import torchkiln


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = torch.nn.LayerNorm(4)
        self.bn = torch.nn.BatchNorm1d(4)
        self.lin = torch.nn.Linear(4, 4)
        self.scale = 2.0

    def forward(self, x):
        return self.lin(self.bn(self.ln(x))) * self.scale


def _check(change):
    torchkiln.reset()
    torch.manual_seed(0)
    m = Net().eval()
    cm = torchkiln.compile(m, backend="eager")
    x = torch.randn(3, 4)
    with torch.no_grad():
        torch.testing.assert_close(cm(x), m(x))
        assert any("__dict__['training']" in e.guard.source_text or "['training']" in e.guard.source_text
                   for fc in torchkiln.capture.eval_frame._frame_caches.values() for _, e in fc.entries)
        change(m)
        torch.testing.assert_close(cm(x), m(x))
        torch.testing.assert_close(cm(x), m(x))


def test_training_flag():
    _check(lambda m: m.bn.train())


def test_eps_and_plain_attribute():
    def change(m):
        m.ln.eps = 0.5
        m.scale = 3.0
    _check(change)


def test_forward_hook_added_later():
    _check(lambda m: m.lin.register_forward_hook(lambda mod, args, out: out + 1))


def test_forward_pre_hook_added_later():
    _check(lambda m: m.ln.register_forward_pre_hook(lambda mod, args: (args[0] * 3,)))


def test_class_property_shadows_instance_attribute():
    def change(m):
        class Scaled(Net):
            scale = property(lambda self: 5.0)  # a data descriptor wins over the instance dict
        m.__class__ = Scaled
    _check(change)


def test_class_property_added_on_layernorm_subclass():
    class LN(torch.nn.LayerNorm):
        pass

    def change(m):
        LN.eps = property(lambda self: 0.25)
    torchkiln.reset()
    torch.manual_seed(0)
    m = Net().eval()
    m.ln = LN(4)
    cm = torchkiln.compile(m, backend="eager")
    x = torch.randn(3, 4)
    with torch.no_grad():
        torch.testing.assert_close(cm(x), m(x))
        change(m)
        torch.testing.assert_close(cm(x), m(x))


def test_instance_attribute_moved_to_a_buffer():
    def change(m):
        del m.__dict__["scale"]
        m.register_buffer("scale", torch.tensor(4.0))
    _check(change)
