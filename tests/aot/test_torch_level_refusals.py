"""AOT autograd's entry runs a captured graph eagerly where torch's own Autograd-key
decomposition would compute another answer than eager (aot/torch_level_refusals.py), for
every AOT-based backend: "aot_eager" traced multilabel_margin_loss through the
decomposition that counts labels after a target row's first -1 (1.03 where eager says 0.37)."""
import pytest
import torch
import torch.nn.functional as F

import torchkiln


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("requires_grad", [False, True])
def test_multilabel_margin_loss_as_eager(backend, requires_grad):
    torch.manual_seed(0)
    x = torch.randn(2, 3, requires_grad=requires_grad)
    target = torch.tensor([[1, -1, 0], [2, -1, 0]])
    f = lambda x, t: F.multilabel_margin_loss(x, t) * 2  # noqa: E731
    torchkiln.reset()
    torch.testing.assert_close(torchkiln.compile(f, backend=backend)(x, target), f(x, target))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_integer_hardshrink_raises_as_eager(backend):
    i = torch.arange(4)
    with pytest.raises(RuntimeError):
        F.hardshrink(i)
    torchkiln.reset()
    with pytest.raises(RuntimeError):
        torchkiln.compile(lambda i: F.hardshrink(i) + 1, backend=backend)(i)
