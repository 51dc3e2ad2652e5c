"""nn.RNN/GRU/LSTM on CUDA runs eagerly (config.allow_rnn, as torch.compile's) on cuDNN's
fused kernel: called from the frame itself the whole frame runs eagerly (torch.compile's
root frame cannot break there and skips the function), called from an inlined function
it is a graph break at that call; on CPU it is captured."""
from __future__ import annotations

import pytest
import torch

import torchkiln
from torchkiln.testing import same


class _Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Linear(4, 8)
        self.rnn = torch.nn.LSTM(8, 8, batch_first=True)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.rnn(torch.relu(self.emb(x)))[0])


def _explain(model, x):
    torchkiln.reset()
    return torchkiln.explain(model)(x)


def test_rnn_on_cpu_is_captured():
    model, x = _Model(), torch.randn(2, 5, 4)
    assert _explain(model, x).graph_break_count == 0


class _Nested(_Model):
    def run_rnn(self, h):
        return self.rnn(h)[0]

    def forward(self, x):
        return self.head(self.run_rnn(torch.relu(self.emb(x))))


def test_rnn_on_cuda_skips_the_frame(monkeypatch):
    model, x = _Model(), torch.randn(2, 5, 4)
    monkeypatch.setattr(torch.nn.Parameter, "is_cuda", property(lambda self: True))  # the check's view only
    torchkiln.reset()
    cnt = torchkiln.testing.CompileCounter()
    cm = torchkiln.compile(model, backend=cnt)
    assert same(cm(x), model(x)) and same(cm(x), model(x))
    assert cnt.frame_count == 0
    with torchkiln.config.patch(allow_rnn=True):
        assert _explain(model, x).graph_break_count == 0


def test_rnn_on_cuda_in_an_inlined_call_breaks_the_graph(monkeypatch):
    model, x = _Nested(), torch.randn(2, 5, 4)
    monkeypatch.setattr(torch.nn.Parameter, "is_cuda", property(lambda self: True))
    out = _explain(model, x)
    assert out.graph_break_count >= 1 and "allow_rnn" in str(out.break_reasons[0])
    assert out.graph_count >= 2  # the linear layers around the break are captured
    torchkiln.reset()
    assert same(torchkiln.compile(model)(x), model(x))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_rnn_on_cuda_matches_eager():
    torch.manual_seed(0)
    model, x = _Model().cuda(), torch.randn(2, 5, 4, device="cuda")
    torchkiln.reset()
    cm = torchkiln.compile(model)
    out = cm(x)
    out.sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    ref = model(x)
    ref.sum().backward()
    assert same([out] + grads, [ref] + [p.grad for p in model.parameters()], tol=1e-4)
