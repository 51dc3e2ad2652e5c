"""The runtime wrapper: autograd.Function, backward compiled ahead of time, double backward error, None
tangents, non-differentiable outputs, duplicate arguments, the inference path, logging."""
import logging

import pytest
import torch

from torchkiln.aot import aot_function, aot_module_simplified, config, make_boxed_compiler, nop

from ._helpers import GraphRecorder, check

DOUBLE_BACKWARD = "torch.compile with aot_autograd does not currently support double backward"


def test_backward_compiled_with_forward():
    fw, bw = GraphRecorder(), GraphRecorder()
    g = aot_function(lambda x: x.sin().exp(), fw, bw)
    x = torch.randn(3, requires_grad=True)
    y = g(x)
    assert len(fw.graphs) == 1 and len(bw.graphs) == 1  # ahead of time: its build overlaps the forward's
    y.sum().backward()
    g(x).sum().backward()
    assert len(fw.graphs) == 1 and len(bw.graphs) == 1  # cached for the same input metadata


def test_failed_ahead_of_time_backward_compile_is_retried_on_first_use():
    calls = []

    def flaky_bw(gm, example_inputs):
        calls.append(gm)
        if len(calls) == 1:
            raise RuntimeError("backward compiler failed once")
        return gm

    g = aot_function(lambda x: x.sin().exp(), nop, flaky_bw)
    x = torch.randn(3, requires_grad=True)
    y = g(x)  # the forward is unaffected
    assert len(calls) == 1
    torch.testing.assert_close(y, x.sin().exp())
    y.sum().backward()
    assert len(calls) == 2
    torch.testing.assert_close(x.grad, x.cos() * x.sin().exp())


@pytest.mark.parametrize("grad_output", [None, "requires_grad"])
def test_double_backward_raises_at_second_grad(grad_output):
    go = torch.tensor(1.0, requires_grad=True) if grad_output else None
    x = torch.tensor(1.0, requires_grad=True)
    y = aot_function(lambda x: x.sin().exp(), nop)(x)
    (gx,) = torch.autograd.grad(y, x, create_graph=True, grad_outputs=go)
    torch.testing.assert_close(gx, (x.cos() * x.sin().exp()).detach())
    with pytest.raises(RuntimeError, match=DOUBLE_BACKWARD):
        torch.autograd.grad(gx, x)


def test_first_order_grad_without_create_graph():
    x = torch.tensor(1.0, requires_grad=True)
    y = aot_function(lambda x: x.sin().exp(), nop)(x)
    (gx,) = torch.autograd.grad(y, x, create_graph=False)
    assert not gx.requires_grad


def test_unused_output_gets_zero_tangent():
    def f(x, w):
        return x * w, (x + w).sum(), x.argmax()

    g = aot_function(f, nop)
    x, w = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
    a, b, c = g(x, w)
    assert not c.requires_grad and c.dtype == torch.int64
    a.sum().backward()  # b's tangent is None
    torch.testing.assert_close(x.grad, w.detach())
    torch.testing.assert_close(w.grad, x.detach())


def test_non_differentiable_outputs_and_integer_inputs():
    def f(x, idx):
        return x[idx] * 2, idx + 1, x.detach() * 3

    check(f, lambda: [torch.randn(5, requires_grad=True), torch.tensor([0, 2, 4])])


def test_output_not_requiring_grad_marked_non_differentiable():
    def f(x):
        with torch.no_grad():
            z = x * 2
        return x * 3, z

    ref, res, _, _ = check(f, lambda: [torch.randn(3, requires_grad=True)])
    assert not res[1].requires_grad


def test_duplicate_arguments_are_deduplicated():
    rec = GraphRecorder()

    class M(torch.nn.Module):
        def forward(self, a, b):
            return (a * b + a,)

    gm = torch.fx.symbolic_trace(M())
    x = torch.randn(3, requires_grad=True)
    f = aot_module_simplified(gm, [x, x], rec)
    out = f(x, x)[0]
    assert len([n for n in rec.graphs[0].graph.nodes if n.op == "placeholder"]) == 1
    out.sum().backward()
    torch.testing.assert_close(x.grad, (2 * x + 1).detach())


def test_duplicate_argument_mutation():
    class M(torch.nn.Module):
        def forward(self, a, b):
            a.trunc_()
            b.trunc_()
            return (a + b,)

    gm = torch.fx.symbolic_trace(M())
    base = torch.randn(3, 3) * 5
    x, x_ref = base.clone(), base.clone()
    out = aot_module_simplified(gm, [x, x], nop)(x, x)[0]
    torch.testing.assert_close(out, M()(x_ref, x_ref)[0])
    torch.testing.assert_close(x, x_ref)


def test_debug_assert_checks_duplicate_pattern():
    class M(torch.nn.Module):
        def forward(self, a, b):
            return (a + b,)

    gm = torch.fx.symbolic_trace(M())
    x, y = torch.randn(3), torch.randn(3)
    with config.patch(debug_assert=True):
        f = aot_module_simplified(gm, [x, x], nop)
        f(y, y)
        with pytest.raises(AssertionError, match="same tensor"):
            f(x, y)
        g = aot_module_simplified(gm, [x, y], nop)
        with pytest.raises(AssertionError, match="same tensor"):
            g(x, x)


def test_inference_path_when_no_grad_needed():
    fw, bw, inf = GraphRecorder(), GraphRecorder(), GraphRecorder()
    g = aot_function(lambda x, w: (x @ w).relu(), fw, bw, inference_compiler=inf)
    x, w = torch.randn(2, 3), torch.randn(3, 4, requires_grad=True)
    with torch.no_grad():
        out = g(x, w)
    assert not out.requires_grad
    assert len(inf.graphs) == 1 and not fw.graphs
    g(x, w.detach())
    assert len(inf.graphs) == 2 and not fw.graphs
    g(x, w).sum().backward()
    assert len(fw.graphs) == 1 and len(bw.graphs) == 1


def test_inference_compiler_defaults_to_fw_compiler():
    fw = GraphRecorder()
    aot_function(lambda x: x + 1, fw)(torch.randn(2))
    assert len(fw.graphs) == 1


def test_boxed_compiler():
    calls = []

    def compiler(gm, inputs):
        def run(*args):
            calls.append(len(args))
            return gm(*args)
        return run

    check(lambda x: x.cos() * 2, lambda: [torch.randn(3, requires_grad=True)], fw_compiler=make_boxed_compiler(compiler),
          bw_compiler=make_boxed_compiler(compiler))
    assert len(calls) == 2


def test_pytree_inputs_and_outputs():
    def f(d, xs):
        return {"a": d["x"] * xs[0], "b": [xs[1].sin()]}

    check(lambda d, xs: f(d, xs), lambda: [{"x": torch.randn(3, requires_grad=True)}, [torch.randn(3), torch.randn(3, requires_grad=True)]],
          backward=False)


def test_aot_graphs_logging():
    records = []

    class Collect(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logger = logging.getLogger("torchkiln.aot_graphs")
    handler, old_level = Collect(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        aot_function(lambda x: x.sin() * 2, nop)(torch.randn(3, requires_grad=True)).sum().backward()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    text = "\n".join(records)
    assert "joint graph" in text and "forward graph" in text and "backward graph" in text
    assert "torch.ops.aten.sin.default" in text


def test_aot_module_simplified_lifts_attribute_parameters():
    lin = torch.nn.Linear(3, 2)
    gm = torch.fx.symbolic_trace(torch.nn.Sequential(lin, torch.nn.Tanh()))
    x = torch.randn(4, 3)
    f = aot_module_simplified(gm, [x], nop)
    out = f(x)[0]
    out.sum().backward()
    grads = [p.grad.clone() for p in gm.parameters()]
    gm.zero_grad()
    gm(x).sum().backward()
    for a, p in zip(grads, gm.parameters()):
        torch.testing.assert_close(a, p.grad)
    with torch.no_grad():
        lin.weight.mul_(2)  # the current parameter values are used on every call
    torch.testing.assert_close(f(x)[0], gm(x))


def test_captured_graph_compiled_in_its_entry_grad_mode():
    # Captured graphs end in the grad mode they start in; if the backend is called in
    # another mode, aot compiles for the mode the graph runs in.
    g = torch.fx.Graph()
    x = g.placeholder("x")
    mul = g.call_function(torch.mul, (x, x))
    g.call_function(torch._C._set_grad_enabled, (False,))
    clone = g.call_method("clone", (mul,))
    g.call_function(torch._C._set_grad_enabled, (True,))
    g.output((clone, mul))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    x = torch.ones(3, requires_grad=True) * 3
    with torch.no_grad():
        f = aot_module_simplified(gm, [x], nop)
    a, b = f(x)
    assert torch.is_grad_enabled()
    assert a.grad_fn is None and b.grad_fn is not None
    b.sum().backward()


_W = torch.randn(80, 80)


@pytest.mark.parametrize("fn,specialized", [
    (lambda x: (x * 2,), True),
    (lambda x: (x.t() * 3,), True),
    (lambda x: (x.clone(),), False),  # the gradient would be the tangent itself
    (lambda x: (x @ _W,), False),  # a matmul would copy a stride-0 operand on every call
], ids=["scaled", "transposed", "gradient_is_tangent", "matmul"])
def test_broadcast_scalar_tangent_reaches_a_backward_compiled_for_it(fn, specialized):
    # out.sum().backward() passes ones.expand(shape): where only pointwise ops and
    # reductions read it, the backward is compiled once more with that tangent's stride-0
    # layout and gets the expanded tensor itself.
    x = torch.randn(64, 80, requires_grad=True)
    fw, bw = GraphRecorder(), GraphRecorder()
    f = aot_function(fn, fw, bw)
    ref = x.detach().clone().requires_grad_(True)
    for scale in (1.0, 1.0, 2.0, -0.0):
        f(x)[0].sum().mul(scale).backward()
        fn(ref)[0].sum().mul(scale).backward()
        torch.testing.assert_close(x.grad, ref.grad)
    g = torch.randn_like(fn(ref)[0])  # a real tangent afterwards: the contiguous backward
    f(x)[0].backward(g)
    fn(ref)[0].backward(g)
    torch.testing.assert_close(x.grad, ref.grad)
    strides = [[n.meta["val"].stride() for n in gm.graph.nodes if n.op == "placeholder" and n.name.startswith("tangents")]
               for gm in bw.graphs]
    if specialized:
        assert len(bw.graphs) == 2 and strides[1] == [(0, 0)], strides
    else:
        assert len(bw.graphs) == 1, strides


def test_dead_functorch_wrapper_argument_is_unwrapped():
    # the runtime calls the C Function.apply itself (runtime.function_apply): a tensor
    # that outlived its functorch transform still gives eager's values and gradients
    leaked = []

    def f(x):
        leaked.append(x)
        return x.sin().sum()

    torch.func.grad(f)(torch.randn(2, 4))
    x = leaked[0]
    assert torch._C._functorch.is_functorch_wrapped_tensor(x)
    w = torch.nn.Parameter(torch.randn(4, 3))
    g = aot_function(lambda x, w: (x @ w).relu().sum(), nop, nop)
    out = g(x, w)
    out.backward()
    ref_w = w.detach().clone().requires_grad_()
    ref = (torch._C._functorch.unwrap_if_dead(x) @ ref_w).relu().sum()
    ref.backward()
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(w.grad, ref_w.grad)
