"""The generated guard's cheaper forms give the same answers as the parts they stand for:
a constant read from the object it held at capture passes on identity (another object
is checked by type and value), and the check hands the graph inputs it read to the
transformed code."""
import torch

import torchkiln
from torchkiln.capture import eval_frame
from torchkiln.testing import CompileCounter


def _entries():
    return [e for fc in eval_frame._frame_caches.values() for _, e in fc.entries]


def test_constant_identity_fast_path_keeps_value_checks():
    torchkiln.reset()
    ln = torch.nn.LayerNorm(4, eps=1e-5)
    cnt = CompileCounter()
    compiled = torchkiln.compile(ln, backend=cnt)
    x = torch.randn(2, 4)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), ln(x))
        (entry,) = _entries()
        assert "is ___c" in entry.guard.source_text and " or (type(" in entry.guard.source_text
        ln.eps = float("1e-5")  # another object, the same value: passes by its type and value
        torch.testing.assert_close(compiled(x), ln(x))
        assert cnt.frame_count == 1
        ln.eps = 10.0
        torch.testing.assert_close(compiled(x), ln(x))
        assert cnt.frame_count == 2


def test_zero_sign_still_checked_behind_identity():
    torchkiln.reset()

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.k = 0.0

        def forward(self, x):
            return x / self.k  # inf or -inf

    m = M()
    compiled = torchkiln.compile(m, backend="eager")
    x = torch.ones(2)
    torch.testing.assert_close(compiled(x), m(x))
    m.k = -0.0
    torch.testing.assert_close(compiled(x), m(x))


def test_guard_returns_the_inputs_it_read():
    torchkiln.reset()
    lin = torch.nn.Linear(3, 3)
    compiled = torchkiln.compile(lin, backend="eager")
    x = torch.randn(2, 3)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), lin(x))
        (entry,) = _entries()
        assert entry.guard.returns_inputs
        checked = entry.guard.check({"self": lin, "input": x})
        assert type(checked) is tuple and any(t is lin.weight for t in checked) and any(t is x for t in checked)
        lin.weight = torch.nn.Parameter(torch.ones(3, 3))  # read again by the next check
        torch.testing.assert_close(compiled(x), lin(x))


def test_class_with_a_metaclass_changed_after_compile():
    """The version-tag class check covers classes of any metaclass (ABCMeta here)."""
    import abc

    class Scale(abc.ABC):
        def k(self):
            return 2.0

    class Impl(Scale):
        pass
    torchkiln.reset()
    obj = Impl()

    def f(x, o):
        return x * o.k()
    compiled = torchkiln.compile(f, backend="eager")
    x = torch.ones(2)
    torch.testing.assert_close(compiled(x, obj), f(x, obj))
    Scale.k = lambda self: 5.0
    torch.testing.assert_close(compiled(x, obj), f(x, obj))
