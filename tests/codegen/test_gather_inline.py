"""A gather reads an unrealized pointwise input through its expression: cross-entropy's
forward gathers log_softmax at the targets without writing the full-size log_softmax."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from torchkiln.codegen import compile_fx_inner, config
from torchkiln.codegen.decompositions import decompositions


def _compile(fn, *args):
    gm = make_fx(fn, decomposition_table=decompositions())(*args)
    with config.patch(debug=True):
        return compile_fx_inner(gm, [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"])


def test_gather_of_log_softmax_writes_no_full_size_buffer():
    def f(x, t):
        return (F.log_softmax(x, -1).gather(1, t[:, None]).sum(),)

    x, t = torch.randn(6, 40), torch.randint(0, 40, (6,))
    c = _compile(f, x, t)
    assert "empty_strided((6, 40, )" not in c.source, c.source
    torch.testing.assert_close(c(x, t)[0], f(x, t)[0])


def test_gather_of_a_larger_output_still_reads_a_buffer():
    # more gathered points than inputs: the expression is computed once per input element
    def f(x, t):
        return ((x.exp() + 1).gather(1, t),)

    x, t = torch.randn(3, 4), torch.randint(0, 4, (3, 16))
    c = _compile(f, x, t)
    assert "empty_strided((3, 4, )" in c.source, c.source
    torch.testing.assert_close(c(x, t)[0], f(x, t)[0])
