"""Class lookups capture depends on are guarded: a method, property or class attribute
changed, added or deleted on the class after a capture recompiles (eager's result), it
never runs the stale graph."""
import torch

import torchkiln


def _compiled(fn):
    torchkiln.reset()
    return torchkiln.compile(fn, backend="eager")


def test_property_replaced_and_deleted_on_plain_class():
    class N:
        @property
        def v(self):
            return 3

    def f(x, n):
        return x * n.v

    n, x = N(), torch.ones(2)
    opt = _compiled(f)
    assert torch.equal(opt(x, n), f(x, n))
    N.v = property(lambda self: 7)
    assert torch.equal(opt(x, n), x * 7)
    del N.v
    n.__dict__["v"] = 11
    assert torch.equal(opt(x, n), x * 11)


def test_method_replaced_on_class():
    class N:
        def v(self):
            return 3

    def f(x, n):
        return x * n.v()

    n, x = N(), torch.ones(2)
    opt = _compiled(f)
    assert torch.equal(opt(x, n), x * 3)
    N.v = lambda self: 7
    assert torch.equal(opt(x, n), x * 7)


def test_module_property_deleted_and_method_replaced():
    class M(torch.nn.Module):
        @property
        def scale(self):
            return 2.0

        def shift(self):
            return 1.0

        def forward(self, x):
            return x * self.scale + self.shift()

    m, x = M(), torch.ones(3)
    opt = _compiled(m)
    assert torch.equal(opt(x), m(x))
    M.shift = lambda self: 5.0
    assert torch.equal(opt(x), m(x))
    del M.scale
    m.scale = 4.0
    assert torch.equal(opt(x), m(x))


def test_base_class_method_shadowed_later():
    class Base:
        def v(self):
            return 3

    class Child(Base):
        pass

    def f(x, n):
        return x * n.v()

    n, x = Child(), torch.ones(2)
    opt = _compiled(f)
    assert torch.equal(opt(x, n), x * 3)
    Child.v = lambda self: 9  # now found before Base's
    assert torch.equal(opt(x, n), x * 9)


def test_super_method_replaced():
    class Base(torch.nn.Module):
        def scale(self):
            return 2.0

    class M(Base):
        def scale(self):
            return super().scale() + 1.0

        def forward(self, x):
            return x * self.scale()

    m, x = M(), torch.ones(2)
    opt = _compiled(m)
    assert torch.equal(opt(x), x * 3)
    Base.scale = lambda self: 10.0
    assert torch.equal(opt(x), x * 11)


def test_unchanged_classes_do_not_recompile():
    class N:
        k = 2

        def v(self):
            return self.k

    calls = []

    def backend(gm, example_inputs):
        calls.append(gm)
        return gm.forward

    torchkiln.reset()

    def f(x, n):
        return x * n.v()

    opt = torchkiln.compile(f, backend=backend)
    n, x = N(), torch.ones(2)
    for _ in range(3):
        assert torch.equal(opt(x, n), x * 2)
    assert len(calls) == 1
    N.k = 5
    assert torch.equal(opt(x, n), x * 5)
