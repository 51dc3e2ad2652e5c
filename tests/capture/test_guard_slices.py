"""Guards of a sliced ModuleList / Sequential (``self.layers[:n]``, as transformers'
Llama does) read the children on the sliced container, never build the slice per
call; changing what the slice holds still recompiles or gives eager's answer."""
import pytest
import torch

import torchkiln


class Net(torch.nn.Module):
    def __init__(self, container, stop):
        super().__init__()
        self.layers = container
        self.stop = stop

    def forward(self, x):
        for layer in self.layers[:self.stop]:
            x = layer(x)
        return x + self.layers[:self.stop][-1](x)  # int index into the slice


def _layers(kind, n=3):
    torch.manual_seed(0)
    mods = [torch.nn.Linear(4, 4) for _ in range(n)]
    if kind == "list":
        return torch.nn.ModuleList(mods)
    return torch.nn.Sequential(__import__("collections").OrderedDict((f"l{i}", m) for i, m in enumerate(mods)))


@pytest.mark.parametrize("kind", ["list", "seq"])
@pytest.mark.parametrize("stop", [2, -1])
def test_slice_guards_follow_the_container(kind, stop):
    torchkiln.reset()
    m = Net(_layers(kind), stop)
    cm = torchkiln.compile(m, backend="eager")
    x = torch.randn(2, 4)
    with torch.no_grad():
        torch.testing.assert_close(cm(x), m(x))
        source = torchkiln.capture.eval_frame._frame_caches  # the guard builds no slice
        guards = [e.guard.source_text for fc in source.values() for _, e in fc.entries]
        assert guards and not any("slice(" in g for g in guards)
        # a same-typed layer with other weights: the guard passes, the new weights are used
        key = list(m.layers._modules)[0]
        m.layers._modules[key] = torch.nn.Linear(4, 4)
        torch.testing.assert_close(cm(x), m(x))
        # a layer of another type in the slice: recompiles
        m.layers._modules[key] = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
        torch.testing.assert_close(cm(x), m(x))
        # one more layer: the slice holds other items (stop=-1) or the same (stop=2)
        if kind == "list":
            m.layers.append(torch.nn.Tanh())
        else:
            m.layers.add_module("extra", torch.nn.Tanh())
        torch.testing.assert_close(cm(x), m(x))
        # a parameter's requires_grad and value changed in place
        last = m.layers[:stop][-1]
        if isinstance(last, torch.nn.Linear):
            last.weight.mul_(2)
            torch.testing.assert_close(cm(x), m(x))


def test_patched_getitem_recompiles(monkeypatch):
    torchkiln.reset()
    m = Net(_layers("list"), 2)
    cm = torchkiln.compile(m, backend="eager")
    x = torch.randn(2, 4)
    with torch.no_grad():
        torch.testing.assert_close(cm(x), m(x))
        orig = torch.nn.ModuleList.__getitem__

        def reversed_getitem(self, idx):
            out = orig(self, idx)
            return torch.nn.ModuleList(list(out)[::-1]) if isinstance(idx, slice) else out
        monkeypatch.setattr(torch.nn.ModuleList, "__getitem__", reversed_getitem)
        torch.testing.assert_close(cm(x), m(x))


class Indexed(torch.nn.Module):
    def __init__(self, container):
        super().__init__()
        self.layers = container

    def forward(self, x):
        return self.layers[0](x) + self.layers[-1](x) * 2


@pytest.mark.parametrize("kind", ["list", "seq"])
def test_int_index_reads_the_container_dict(kind):
    torchkiln.reset()
    m = Indexed(_layers(kind))
    cm = torchkiln.compile(m, backend="eager")
    x = torch.randn(2, 4)
    with torch.no_grad():
        torch.testing.assert_close(cm(x), m(x))
        guards = [e.guard.source_text for fc in torchkiln.capture.eval_frame._frame_caches.values()
                  for _, e in fc.entries]
        assert not any("['layers'][0]" in g or ".layers[0]" in g for g in guards)
        key = list(m.layers._modules)[0]
        m.layers._modules[key] = torch.nn.Linear(4, 4)  # same type, other weights
        torch.testing.assert_close(cm(x), m(x))
        m.layers._modules[key] = torch.nn.Tanh()  # another type
        torch.testing.assert_close(cm(x), m(x))
        if kind == "list":  # [-1] is another layer now
            m.layers.append(torch.nn.Linear(4, 4))
        else:
            m.layers.add_module("extra", torch.nn.Linear(4, 4))
        torch.testing.assert_close(cm(x), m(x))
        if kind == "list":
            del m.layers[0]  # renumbers the keys
            torch.testing.assert_close(cm(x), m(x))
