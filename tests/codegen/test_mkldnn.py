"""oneDNN extern kernels (codegen/mkldnn.py): linear layers run
mkldnn._linear_pointwise where its preconditions hold and ATen's addmm/mm otherwise;
eager PyTorch is the oracle."""
from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._python_dispatch import TorchDispatchMode

from torchkiln.codegen import compile_fx_inner, config
from torchkiln.codegen.decompositions import decompositions

aten = torch.ops.aten


class _Ops(TorchDispatchMode):
    """Records the ops the compiled code runs: a mode that says it ignores compile
    internals is on for the compiled artifact (any other mode makes the frame run eagerly,
    as torch.compile does)."""

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True

    def __init__(self):
        super().__init__()
        self.ops = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(func)
        return func(*args, **(kwargs or {}))


def _run(compiled, args):
    with _Ops() as mode:
        out = compiled(*args)
    return out, torch.ops.mkldnn._linear_pointwise.default in mode.ops


def _compile(fn, *args):
    gm = make_fx(fn, decomposition_table=decompositions())(*args)
    with config.patch(debug=True, fx_graph_cache=False, mkldnn_linear_min_macs=0):
        return compile_fx_inner(gm, [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"])


CASES = {
    # name: (fn, args, uses oneDNN)
    "linear": (lambda x, w, b: (torch.nn.functional.linear(x, w, b),), (torch.randn(6, 8), torch.randn(5, 8), torch.randn(5)), True),
    "linear_3d_gelu": (lambda x, w, b: (torch.nn.functional.gelu(torch.nn.functional.linear(x, w, b)),),
                       (torch.randn(2, 3, 8), torch.randn(5, 8), torch.randn(5)), True),
    "no_bias": (lambda x, w: (x @ w.t(),), (torch.randn(6, 8), torch.randn(5, 8)), True),
    "empty_rows": (lambda x, w, b: (torch.nn.functional.linear(x, w, b),), (torch.randn(0, 8), torch.randn(5, 8), torch.randn(5)), True),
    "bias_2d": (lambda x, w, b: (aten.addmm(b, x, w.t()),), (torch.randn(6, 8), torch.randn(5, 8), torch.randn(6, 5)), False),
    "beta_alpha": (lambda x, w, b: (aten.addmm(b, x, w.t(), beta=0.5, alpha=2.0),),
                   (torch.randn(6, 8), torch.randn(5, 8), torch.randn(5)), False),
    # a linear layer's input gradient: oneDNN reads the row-major [K, N] weight through w.t()
    "weight_not_transposed": (lambda x, w: (x @ w,), (torch.randn(6, 8), torch.randn(8, 5)), True),
    "weight_not_transposed_odd": (lambda x, w: (torch.relu(x) @ w,), (torch.randn(7, 9), torch.randn(9, 3)), True),
    "weight_column": (lambda x, w: (x @ w,), (torch.randn(6, 8), torch.randn(8, 1)), False),
    "weight_not_transposed_bias": (lambda x, w, b: (aten.addmm(b, x, w),),
                                   (torch.randn(6, 8), torch.randn(8, 5), torch.randn(5)), True),
    "weight_not_transposed_bias_2d": (lambda x, w, b: (aten.addmm(b, x, w),),
                                      (torch.randn(6, 8), torch.randn(8, 5), torch.randn(6, 5)), False),
    "weight_not_transposed_f64": (lambda x, w: (x @ w,), (torch.randn(6, 8, dtype=torch.float64),
                                                          torch.randn(8, 5, dtype=torch.float64)), False),
    "weight_grad": (lambda g, x: (g.t() @ x,), (torch.randn(6, 5), torch.randn(6, 8)), False),
    "x_transposed_input": (lambda x, w: (x.t() @ w.t(),), (torch.randn(8, 6), torch.randn(5, 8)), False),
    "float64": (lambda x, w, b: (torch.nn.functional.linear(x, w, b),),
                (torch.randn(6, 8, dtype=torch.float64), torch.randn(5, 8, dtype=torch.float64),
                 torch.randn(5, dtype=torch.float64)), False),
}


@pytest.mark.parametrize("name", list(CASES))
def test_linear(name):
    fn, args, onednn = CASES[name]
    compiled = _compile(fn, *args)
    out, used = _run(compiled, args)
    assert used == onednn, compiled.source
    for a, b in zip(out, fn(*args)):
        assert a.shape == b.shape and a.stride() == b.stride()
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_config_off():
    fn, args, _ = CASES["linear"]
    with config.patch(mkldnn_linear=False):
        compiled = _compile(fn, *args)
    assert not _run(compiled, args)[1]


def test_small_matmul_stays_on_aten():
    """Below ``mkldnn_linear_min_macs`` ATen's addmm is faster (oneDNN's per-call cost)."""
    fn = CASES["linear"][0]
    for m, expected in ((16, False), (256, True)):
        args = (torch.randn(m, 256), torch.randn(128, 256), torch.randn(128))
        gm = make_fx(fn, decomposition_table=decompositions())(*args)
        with config.patch(debug=True, fx_graph_cache=False, mkldnn_linear_min_macs=1 << 23):
            compiled = compile_fx_inner(gm, [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"])
        out, used = _run(compiled, args)
        assert used == expected
        torch.testing.assert_close(out[0], fn(*args)[0], atol=1e-4, rtol=1e-4)


def test_symbolic_plain_weight_stays_on_aten():
    """A row-major [K, N] weight with symbolic sizes (which may be 1 at run time) is
    not read through ``w.t()`` by oneDNN."""
    fn = lambda x, w: (x @ w,)  # noqa: E731
    args = (torch.randn(6, 8), torch.randn(8, 5))
    gm = make_fx(fn, decomposition_table=decompositions(), tracing_mode="symbolic")(*args)
    with config.patch(debug=True, fx_graph_cache=False, mkldnn_linear_min_macs=0):
        compiled = compile_fx_inner(gm, [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"])
    placeholders = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    assert all(isinstance(v, torch.Tensor) for v in placeholders)
    out, used = _run(compiled, list(args))
    assert not used, compiled.source
    torch.testing.assert_close(out[0], fn(*args)[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("shape", [(3, 8, 16, 4), (5, 7, 9, 1), (2, 1, 6, 3)])
def test_training_gradients_onednn(shape):
    """Forward linears and the input-gradient ``mm(g, w)`` of the backward through
    oneDNN (sizes forced over the threshold): gradients as eager's."""
    import torchkiln

    b, i, h, o = shape
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(i, h), torch.nn.GELU(), torch.nn.Linear(h, o))
    x = torch.randn(b, i, requires_grad=True)
    model(x).sum().backward()
    ref = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]
    for p in model.parameters():
        p.grad = None
    x.grad = None
    torchkiln.reset()
    with config.patch(debug=True, fx_graph_cache=False, mkldnn_linear_min_macs=0), _Ops() as mode:
        torchkiln.compile(model)(x).sum().backward()
    got = [p.grad for p in model.parameters()] + [x.grad]
    for a, r in zip(got, ref):
        torch.testing.assert_close(a, r, atol=1e-5, rtol=1e-5)
    assert torch.ops.mkldnn._linear_pointwise.default in mode.ops


def test_training_gradients():
    import torchkiln

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = torch.randn(3, 8)
    model(x).sum().backward()
    ref = [p.grad.clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    with config.patch(debug=True):
        torchkiln.compile(model)(x).sum().backward()
    for a, b in zip([p.grad for p in model.parameters()], ref):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_relu_after_a_onednn_linear_is_its_post_op():
    # relu(linear(x)) (through the 3-d view) is one _linear_pointwise with attr "relu", no
    # kernel; a linear result read by anything else keeps its ReLU kernel (and the
    # linear's own result)
    torch.manual_seed(0)
    F = torch.nn.functional
    x, w, b = torch.randn(2, 3, 8), torch.randn(5, 8), torch.randn(5)
    fused = _compile(lambda x, w, b: (F.relu(F.linear(x, w, b)),), x, w, b)
    assert "'relu'" in fused.source and "kernel" not in fused.source.split("def call")[1]
    torch.testing.assert_close(fused(x, w, b)[0], F.relu(F.linear(x, w, b)))

    def shared(x, w, b):
        y = F.linear(x, w, b)
        return (F.relu(y), y * 2)

    kept = _compile(shared, x, w, b)
    assert "'relu'" not in kept.source
    for got, want in zip(kept(x, w, b), shared(x, w, b)):
        torch.testing.assert_close(got, want)


def test_bias_after_a_onednn_linear_is_its_bias():
    # linear of a 3-d input that is not row-major (an LSTM's batch-first output; with a
    # weight that requires grad, matmul folds it through a copy) decomposes to
    # view(mm(x, w.t())) + b: the add becomes the oneDNN linear's bias, no kernel but the
    # copy; a linear result read by anything else, a bias that is not an [N] graph input,
    # or a broadcast over another dim keep the add kernel
    torch.manual_seed(0)
    F = torch.nn.functional
    x, w, b = torch.randn(3, 2, 8), torch.randn(5, 8), torch.randn(5)

    def trace(fn, *args):  # as AOT autograd traces a training graph: the weight requires grad
        gm = make_fx(fn, decomposition_table=decompositions())(args[0], args[1].requires_grad_(), *args[2:])
        args[1].requires_grad_(False)
        with config.patch(debug=True, fx_graph_cache=False, mkldnn_linear_min_macs=0):
            return compile_fx_inner(gm, [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"])

    def kernels(compiled) -> int:
        return compiled.source.split("def call")[1].count("kernel")

    for fn in (lambda x, w, b: (F.linear(x.transpose(0, 1), w, b),),
               lambda x, w, b: (b + (x.transpose(0, 1) @ w.t()),)):
        fused = trace(fn, x, w, b)
        assert kernels(fused) == 1  # the transposing copy
        out, onednn = _run(fused, (x, w, b))
        assert onednn
        torch.testing.assert_close(out[0], fn(x, w, b)[0])

    def shared(x, w, b):
        y = x.transpose(0, 1) @ w.t()
        return (y + b, y * 2)

    def computed_bias(x, w, b):
        return (x.transpose(0, 1) @ w.t() + b * 2,)

    def column_bias(x, w, b):
        return ((x.transpose(0, 1) @ w.t()).transpose(1, 2) + b[:, None],)

    for fn, args in ((shared, (x, w, b)), (computed_bias, (x, w, b)), (column_bias, (x, w, b))):
        kept = trace(fn, *args)
        assert kernels(kept) >= 2
        for got, want in zip(kept(*args), fn(*args)):
            torch.testing.assert_close(got, want)
