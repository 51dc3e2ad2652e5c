"""A module class with its own ``__getattribute__``: capture reads module attributes
from the instance and class dicts, so such a module graph-breaks (runs eagerly), and a
class that gains a ``__getattribute__`` after capture fails the guard.  Results are
checked against eager."""
import torch

import torchkiln


def test_module_with_getattribute_matches_eager():
    flag = [1.0]

    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = 2.0

        def __getattribute__(self, name):
            value = super().__getattribute__(name)
            return value * flag[0] if name == "scale" else value

        def forward(self, x):
            return x * self.scale

    m = Scaled()
    compiled = torchkiln.compile(m, backend="eager")
    x = torch.ones(2)
    for f in (1.0, 5.0, 0.5):
        flag[0] = f
        torch.testing.assert_close(compiled(x), m(x))


def test_class_gaining_getattribute_after_capture_recompiles():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)
            self.scale = 2.0

        def forward(self, x):
            return self.lin(x) * self.scale

    net = Net()
    compiled = torchkiln.compile(net, backend="eager")
    x = torch.randn(3, 2)
    torch.testing.assert_close(compiled(x), net(x))

    def tripled(self, name):
        value = torch.nn.Module.__getattribute__(self, name)
        return value * 3 if name == "scale" else value

    Net.__getattribute__ = tripled
    torch.testing.assert_close(compiled(x), net(x))
    del Net.__getattribute__
    torch.testing.assert_close(compiled(x), net(x))
