"""PyTorch's test/inductor/test_compiled_autograd.py (the seed 001), ported to torchkiln.

``torch._dynamo.compiled_autograd`` -> ``torchkiln.compiled_autograd``, ``torch.compile`` ->
``torchkiln.compile``, ``torch._dynamo.config`` -> ``torchkiln.config``.  The compiler_fn
wraps the captured backward in ``torchkiln.compile(gm, backend=..., fullgraph=True,
dynamic=True)`` as the seed's does; its inner backend is "aot_eager" here to keep the
suite inside its CI budget (``TORCHKILN_CA_TEST_BACKEND=inductor`` runs the seed's
inductor; ``test_basic_inductor`` always does).  Forward models the seed compiles with
``torch.compile`` use ``torchkiln.compile(backend="aot_eager")``.

Counts that follow what PyTorch 2.13's engine does rather than the seed (older torch):
* ``enable(compiler_fn)`` (dynamic=True) makes every size symbolic from the first
  capture, so a size change costs no recapture: test_dynamic_shapes,
  test_accumulate_without_zero and the custom-Function tests that vary sizes capture
  once per structure (the seed says 2, from an engine that started static).
* A custom Function's Python backward is a ``call_backward`` node that capture inlines
  when it compiles the graph; a ctx attribute the engine's cache key does not cover
  (``ctx.shape``) is guarded there, so each new value compiles the graph again.

Not ported (reason):
* test_dynamo_flaky_segfault, test_inputs_aliasing_bytecode_*, test_logging_tensor_flaky,
  test_free_activation_memory*: exercise torch._dynamo internals (bytecode hooks,
  set_locals_to_steal, dynamo reset paths) that torchkiln has no counterpart of.
* test_issue106555, test_custom_fn_output_metadata, test_cudagraphs_*: CUDA (skip on
  this machine; not ported yet).
* test_custom_fn_compiled_fw_bw_graph_break: the seed counts Dynamo's unique_graphs for
  a backward with print() (test_custom_fn_bw_graph_break is ported: capture breaks the
  graph at the print(), which runs once per backward); test_backward_side_effects.py
  checks print and other side effects (list, counter, global, ctx attribute, hooks).
* test_callback_graph_break_throws_error: torch raises for queue_callback with
  fullgraph=False; here a callback queued from a hook or a custom backward runs after
  the backward as eager's do (test_queue_callback), with or without fullgraph.
* test_autograd_cpp_node_*: in test_cpp_nodes.py (one load_inline extension with a
  traceable node and one with saved tensors, saved_data and an opaque backward), marked
  slow: the gcc build takes about a minute on 2 cores.
* The TestAutogradWithCompiledAutograd wrapper of test_autograd.py: not ported.
"""
import io
import logging
import os
import re
import warnings

import pytest
import torch

import torchkiln
import torchkiln.aot
import torchkiln.codegen
from torchkiln.compiled_autograd import protocol as compiled_autograd_protocol
from torchkiln import compiled_autograd
from torchkiln.backends import lookup_backend
from torchkiln.config import config
from torchkiln.utils.counters import counters
from torchkiln.utils.logging import get_artifact_logger, set_logs

# capture needs the engine protocol torchkiln verified; elsewhere enable() runs eagerly
# (test_unverified_fallback.py checks that)
pytestmark = pytest.mark.skipif(compiled_autograd_protocol.unverified_reason() is not None,
                                reason=str(compiled_autograd_protocol.unverified_reason()))

BACKEND = os.environ.get("TORCHKILN_CA_TEST_BACKEND", "aot_eager")


def make_compiler_fn(fullgraph=True, dynamic=True, backend=BACKEND):
    def _compiler_fn(gm):
        """torchkiln.compile, counting the graphs its backend compiles."""
        def _inner_compiler(gm_, example_inputs_):
            counters["compiled_autograd"]["compiles"] += 1
            return lookup_backend(backend)(gm_, example_inputs_)

        return torchkiln.compile(gm, backend=_inner_compiler, fullgraph=fullgraph, dynamic=dynamic)

    return _compiler_fn


compiler_fn = make_compiler_fn()


def hook1(grad):
    return grad * 2


def hook2(grads):
    return (grads[0] + 1,)


def hook3(gI, gO):
    return (torch.sin(gI[0]) + gO[0],)


@pytest.fixture(autouse=True)
def _clean():
    config.compiled_autograd = False
    compiled_autograd.reset()
    torchkiln.reset()  # also clears counters, as torch's TestCase.setUp does
    yield
    set_logs()
    config.compiled_autograd = False
    compiled_autograd.reset()


def assert_equal(expected, actual):
    assert len(expected) == len(actual)
    for e, a in zip(expected, actual):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(a, e)
        elif isinstance(e, (tuple, list)):
            assert_equal(e, a)
        else:
            assert e == a


def check_output_and_recompiles(fn, count=1, compiler_fn=compiler_fn, compile_fn=False):
    captures, compiles = count if isinstance(count, list) else (count, count)
    with torch.autograd.set_multithreading_enabled(False):
        torchkiln.reset()
        counters["compiled_autograd"].clear()
        torch.manual_seed(123)
        expected = list(fn())
        torch.manual_seed(123)
        with compiled_autograd.enable(compiler_fn):
            opt_fn = torchkiln.compile(fn, backend="aot_eager") if compile_fn else fn
            actual = list(opt_fn())
        assert_equal(expected, actual)
        assert counters["compiled_autograd"]["captures"] == captures
        if compiles is not None:
            assert counters["compiled_autograd"]["compiles"] == compiles


def mlp(n=4):
    return torch.nn.Sequential(torch.nn.Linear(n, n), torch.nn.ReLU(), torch.nn.Linear(n, n), torch.nn.ReLU())


def test_basic():
    def fn():
        model = mlp()
        x = torch.randn([2, 4])
        model(x).sum().backward()
        yield from (p.grad for p in model.parameters())

    check_output_and_recompiles(fn)


def test_basic_inductor():
    def fn():
        model = mlp()
        x = torch.randn([2, 4])
        model(x).sum().backward()
        yield from (p.grad for p in model.parameters())

    check_output_and_recompiles(fn, compiler_fn=make_compiler_fn(backend="inductor"))


def test_cache_hit():
    def fn():
        for _ in range(3):
            model = mlp()
            x = torch.randn([2, 4])
            model(x).sum().backward()
            yield from (p.grad for p in model.parameters())

    check_output_and_recompiles(fn)


def test_tensor_grad_hook1():
    def fn():
        for _ in range(3):
            model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
            x = torch.randn([2, 4])
            model[0].weight.register_hook(hook1)
            model(x).sum().backward()
            yield model[0].weight.grad
            yield model[0].bias.grad

    check_output_and_recompiles(fn)


def test_tensor_grad_hook2():
    def fn():
        for _ in range(3):
            model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
            x = torch.randn([1, 4])
            result = model(x).sum()
            result.grad_fn.register_prehook(hook2)
            result.backward()
            yield model[0].weight.grad
            yield model[0].bias.grad

    check_output_and_recompiles(fn)


def test_tensor_grad_hook3():
    def fn():
        for _ in range(3):
            model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
            x = torch.randn([1, 4])
            result = model(x).sum()
            result.grad_fn.register_hook(hook3)
            result.backward()
            yield model[0].weight.grad
            yield model[0].bias.grad

    check_output_and_recompiles(fn)


def test_retain_grad_and_post_accumulate_grad_hook():
    seen = []

    def fn():
        for _ in range(3):
            model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
            w = model[0].weight
            w.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.clone()))
            x = torch.randn([2, 4])
            h = model[0](x)
            h.retain_grad()
            model[1](h).sum().backward()
            yield h.grad
            yield w.grad
            yield model[0].bias.grad

    check_output_and_recompiles(fn)
    assert len(seen) == 6
    for eager, compiled in zip(seen[:3], seen[3:]):
        torch.testing.assert_close(eager, compiled)


def test_torch_compile():
    def fn():
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Sigmoid())
        opt_model = torchkiln.compile(model, fullgraph=True, backend="aot_eager")
        for _ in range(3):
            x = torch.randn([1, 4])
            opt_model(x).sum().backward()
            yield model[0].weight.grad
            yield model[0].bias.grad
            model.zero_grad()

    check_output_and_recompiles(fn)


def _api_fn():
    torch.manual_seed(123)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Sigmoid())
    res = []
    for _ in range(3):
        x = torch.randn([1, 4])
        model(x).sum().backward()
        res.append(model[0].weight.grad)
        res.append(model[0].bias.grad)
        model.zero_grad()
    return res


# seed: 1 capture each.  With "aot_eager" torchkiln's capture compiles the loop body's
# forward into two graphs (the first iteration lies in another resume function than the
# rest), so two CompiledFunction classes, two autograd-graph structures: 2 captures.
@pytest.mark.parametrize("backend,captures", [("aot_eager", 2), ("eager", 1)])
def test_torch_compile_api(backend, captures):
    expected = _api_fn()
    with config.patch(compiled_autograd=True):
        compiled_fn = torchkiln.compile(_api_fn, backend=backend)
    actual = compiled_fn()
    assert_equal(expected, actual)
    assert counters["compiled_autograd"]["captures"] == captures


def test_multiple_torch_compile():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Sigmoid())
    x = torch.randn([1, 4])

    def fn():
        model(x).sum().backward()

    model2 = torch.nn.Linear(4, 4)
    x2 = torch.randn([1, 4])

    def fn2():
        model2(x2).sum().backward()

    torchkiln.compile(fn, backend="aot_eager")()
    assert counters["compiled_autograd"]["captures"] == 0
    counters.clear()
    with config.patch(compiled_autograd=True):
        torchkiln.compile(fn2, backend="aot_eager")()
        assert counters["compiled_autograd"]["captures"] == 1
        counters.clear()
    torchkiln.compile(fn, backend="aot_eager")()
    assert counters["compiled_autograd"]["captures"] == 0


def test_torch_compile_graph_break():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Sigmoid())
    x = torch.randn([1, 4])

    @torchkiln.disable()
    def fn():
        model(x).sum().backward()

    with config.patch(compiled_autograd=True):
        torchkiln.compile(fn, backend="aot_eager")()
    assert counters["compiled_autograd"]["captures"] == 1


def test_torch_compile_graph_break2():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Sigmoid())
    x = torch.randn([1, 4])

    @torchkiln.disable()
    def inner_fn(loss):
        loss.backward()

    def fn():
        inner_fn(model(x).sum())

    with config.patch(compiled_autograd=True):
        torchkiln.compile(fn, backend="aot_eager")()
    assert counters["compiled_autograd"]["captures"] == 1


def test_torch_compile_only_backward_call():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Sigmoid())
    result = model(torch.randn([1, 4])).sum()
    with config.patch(compiled_autograd=True):
        opt_bwd = torchkiln.compile(lambda: result.backward(), backend="aot_eager")
    opt_bwd()
    assert counters["compiled_autograd"]["captures"] == 1


def test_dynamo_boxed():
    def get_placeholders(gm_):
        return [n for n in gm_.graph.nodes if n.op == "placeholder"]

    def eager_with_check(gm, is_bwd):
        def inner_compiler(gm_, example_inputs_):
            placeholders = get_placeholders(gm_)
            # torchkiln's capture lifts each tensor of the backward's input list
            assert len(placeholders) >= 1 if is_bwd else len(placeholders) > 1
            return gm_

        return torchkiln.compile(gm, backend=inner_compiler)

    bwd_compiler_fn = lambda gm: eager_with_check(gm, is_bwd=True)  # noqa: E731

    def fn(inputs):
        args_0, args_1, args_2 = inputs
        out = torch.mm(torch.mm(args_0, args_1), args_2)
        loss = out.sum()
        with compiled_autograd.enable(bwd_compiler_fn):
            loss.backward()
        yield args_0.grad
        yield args_1.grad
        yield args_2.grad

    inputs = [torch.randn([1, 2], requires_grad=True), torch.randn([2, 3], requires_grad=True),
              torch.randn([3, 4], requires_grad=True)]
    grads = list(fn(inputs))
    assert len(grads) == 3 and all(g is not None for g in grads)


def test_output_nodes_all_leaves():
    def fn():
        y = torch.randn(1, 4, requires_grad=True)
        z = torch.randn(1, 4, requires_grad=True)

        def model(x):
            return torch.sigmoid(x * z + torch.sin(y) + torch.cos(y))

        for _ in range(3):
            x = torch.randn([1, 4])
            gy, gz = torch.autograd.grad(model(x).sum(), inputs=[y, z])
            assert y.grad is None
            assert z.grad is None
            yield gy
            yield gz

    check_output_and_recompiles(fn)


class UnreachableBwd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, gO):
        raise RuntimeError


def test_output_nodes_some_leaves():
    def fn():
        y = torch.randn(1, 4, requires_grad=True)
        z = torch.randn(1, 4, requires_grad=True)

        def model(x):
            return torch.sigmoid(UnreachableBwd.apply(y) * z)

        for _ in range(3):
            x = torch.randn([1, 4])
            gz = torch.autograd.grad(model(x).sum(), inputs=[z])
            assert y.grad is None
            assert z.grad is None
            yield gz

    check_output_and_recompiles(fn)


def test_no_output_nodes_all_leaves():
    def fn():
        y = torch.randn(1, 4, requires_grad=True)
        z = torch.randn(1, 4, requires_grad=True)

        def model(x):
            return torch.sigmoid(x * z + torch.sin(y) + torch.cos(y))

        for _ in range(3):
            x = torch.randn([1, 4])
            out = model(x).sum().backward()
            assert out is None
            assert y.grad is not None
            assert z.grad is not None
            yield y.grad
            yield z.grad
            y.grad = None
            z.grad = None

    check_output_and_recompiles(fn)


def test_no_output_nodes_some_leaves():
    def fn():
        y = torch.randn(1, 4, requires_grad=True)
        z = torch.randn(1, 4, requires_grad=True)
        a = torch.randn(1, 4, requires_grad=True)

        def model(x):
            return torch.sigmoid(x * y * z * UnreachableBwd.apply(a))

        for _ in range(3):
            x = torch.randn([1, 4])
            out = model(x).sum().backward(inputs=[y, z])
            assert out is None
            assert y.grad is not None
            assert z.grad is not None
            assert a.grad is None
            yield y.grad
            yield z.grad
            y.grad = None
            z.grad = None

    check_output_and_recompiles(fn)


def test_no_output_nodes_different_leaves_will_recompile():
    def fn():
        def fwd(x, y, z):
            return (x * y * z).sum()

        x = torch.randn(5, requires_grad=True)
        y = torch.randn(5, requires_grad=True)
        z = torch.randn(5, requires_grad=True)
        loss = fwd(x, y, z)
        torchkiln.compile(lambda: torch.autograd.backward(loss, inputs=[x]), backend="aot_eager")()
        yield x.grad
        x.grad = None
        loss = fwd(x, y, z)
        torchkiln.compile(lambda: torch.autograd.backward(loss, inputs=[y]), backend="aot_eager")()
        yield y.grad

    check_output_and_recompiles(fn, 2)


def test_dynamic_shapes():
    def fn():
        model = mlp()
        opt_model = torchkiln.compile(model, dynamic=True, backend="aot_eager")
        for b in range(10, 100, 10):
            x = torch.randn([b, 4])
            opt_model(x).sum().backward()
            yield from (p.grad for p in model.parameters())
            model.zero_grad()

    # seed: 2 (its engine started static); torch 2.13's dynamic=True engine: 1
    check_output_and_recompiles(fn, count=1)


def test_dynamic_shapes_static_engine():
    """enable(dynamic=False): sizes start static, a changed size makes it symbolic (one
    recapture), then no more (what the seed's test_dynamic_shapes counts)."""
    def fn():
        model = mlp()
        for b in range(10, 60, 10):
            model(torch.randn([b, 4])).sum().backward()
            yield from (p.grad for p in model.parameters())
            model.zero_grad()

    with torch.autograd.set_multithreading_enabled(False):
        torch.manual_seed(0)
        expected = list(fn())
        torch.manual_seed(0)
        with compiled_autograd.enable(compiler_fn, dynamic=False):
            actual = list(fn())
    assert_equal(expected, actual)
    assert counters["compiled_autograd"]["captures"] == 2


def test_accumulate_without_zero():
    def fn():
        model = mlp()
        opt_model = torchkiln.compile(model, dynamic=True, backend="aot_eager")
        for _ in range(10):
            x = torch.randn([10, 4])
            opt_model(x).sum().backward()
            yield from (p.grad.clone() for p in model.parameters())

    # seed: 2 (first backward assigns, the others accumulate); torch 2.13: the same
    check_output_and_recompiles(fn, count=2)


def test_inplace_grad_update():
    def fn():
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
        opt_model = torchkiln.compile(model, dynamic=True, backend="aot_eager")
        for _ in range(10):
            w_grad = torch.rand_like(model[0].weight)
            b_grad = torch.rand_like(model[0].bias)
            model[0].weight.grad = w_grad
            model[0].bias.grad = b_grad
            x = torch.randn([10, 4])
            opt_model(x).sum().backward()
            assert model[0].weight.grad is w_grad
            assert model[0].bias.grad is b_grad
            yield w_grad.clone()
            yield b_grad.clone()

    check_output_and_recompiles(fn, count=1)


def test_keep_graph_simple():
    x = torch.tensor([2.0], requires_grad=True)
    y = x ** 2
    y.backward(retain_graph=True)
    torch.testing.assert_close(x.grad, torch.tensor([4.0]))

    def fn():
        x.grad = torch.tensor([0.0])
        y.backward(retain_graph=True)
        torch.testing.assert_close(x.grad, torch.tensor([4.0]))
        return x.grad

    check_output_and_recompiles(fn, count=1)


def test_keep_graph_usage_after_compiled():
    x = torch.tensor([2.0], requires_grad=True)
    y = x ** 2

    def eager_check():
        y.backward(retain_graph=True)
        torch.testing.assert_close(x.grad, torch.tensor([4.0]))
        x.grad = torch.tensor([0.0])

    eager_check()
    for _ in range(5):
        with compiled_autograd.enable(compiler_fn):
            eager_check()
        eager_check()


def test_second_backward_without_retain_graph_raises():
    x = torch.randn(3, requires_grad=True)
    y = (x.sin() * 2).sum()
    with compiled_autograd.enable(compiler_fn):
        y.backward()
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            y.backward()


def test_autograd_grad_leaves_grad_untouched():
    w = torch.randn(4, 4, requires_grad=True)
    w.grad = torch.ones(4, 4)
    x = torch.randn(2, 4)
    with compiled_autograd.enable(compiler_fn):
        (g,) = torch.autograd.grad((x @ w).sum(), inputs=[w])
    torch.testing.assert_close(w.grad, torch.ones(4, 4))
    torch.testing.assert_close(g, x.t() @ torch.ones(2, 4))


def test_create_graph_raises():
    x = torch.randn(3, requires_grad=True)
    with compiled_autograd.enable(compiler_fn):
        with pytest.raises(RuntimeError, match="create_graph"):
            torch.autograd.grad(x.sin().sum(), x, create_graph=True)


def _custom_fn_check(make_fn, count=1, compiler_fn=compiler_fn):
    def fn():
        MyFn = make_fn()
        for i in [10, 100, 10, 15, 20, 25]:
            x = torch.arange(0.0, i, requires_grad=True)
            out = MyFn.apply(x)
            out = out if isinstance(out, torch.Tensor) else sum(out)
            out.sum().backward()
            yield x.grad

    check_output_and_recompiles(fn, count=count, compiler_fn=compiler_fn)


def test_custom_fn_saved_tensors():
    def make():
        class MySin(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return torch.sin(x)

            @staticmethod
            def backward(ctx, gO):
                (x,) = ctx.saved_tensors
                return gO * torch.cos(x)

        return MySin

    _custom_fn_check(make)  # seed: 2 (static first); torch 2.13's engine: 1


def test_custom_fn_saved_multiple_tensors():
    def fn():
        class MyFn(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, y):
                ctx.save_for_backward(x, y)
                return torch.sin(x), torch.sin(y)

            @staticmethod
            def backward(ctx, gO_x, gO_y):
                (x, y) = ctx.saved_tensors
                return gO_x * torch.cos(x), gO_y * torch.cos(y)

        for i in [10, 100, 10, 15, 20, 25]:
            x = torch.arange(0.0, i, requires_grad=True)
            y = torch.arange(0.0, i, requires_grad=True)
            out1, out2 = MyFn.apply(x, y)
            (out1 * out2).sum().backward()
            yield x.grad

    check_output_and_recompiles(fn, count=1)


def test_custom_fn_saved_multiple_tensors_dedup():
    def make():
        class MyFn(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x, x)
                return torch.sin(x)

            @staticmethod
            def backward(ctx, gO):
                (x1, x2) = ctx.saved_tensors
                return gO * torch.cos(x1) * torch.cos(x2)

        return MyFn

    _custom_fn_check(make)


def test_custom_fn_saved_shape_tensor():
    def make():
        class MyFn(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x

            @staticmethod
            def backward(ctx, gO):
                (x,) = ctx.saved_tensors
                return gO * x.shape[0]

        return MyFn

    _custom_fn_check(make)


def test_custom_fn_saved_attr():
    def make():
        class MyFn(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.shape = x.shape
                return x

            @staticmethod
            def backward(ctx, gO):
                return gO * ctx.shape[0]

        return MyFn

    # ctx.shape is not in the engine's key: capture inlines the call_backward node and
    # guards on ctx.shape: one capture, a compile per distinct size (5)
    _custom_fn_check(make, count=[1, 5])


def test_custom_fn_runtime_backward_reads_lifted_saved_tensors():
    # The backward (inlined by capture; it reads ctx.scale, outside the key, guarded) gets
    # the lifted saved tensors: the engine has released the node's own before the graph runs.
    def make():
        class MyFn(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                ctx.scale = x.shape[0]
                return x * x

            @staticmethod
            def backward(ctx, gO):
                (x,) = ctx.saved_tensors
                return gO * x * ctx.scale

        return MyFn

    _custom_fn_check(make, count=[1, 5])  # a compile per distinct ctx.scale


def test_compiled_forward_from_aot_cache(tmp_path, monkeypatch):
    # An AOT autograd cache hit has no backward graph to trace: its backward is a runtime
    # call on the lifted saved tensors (it raised "backward through the graph a second time").
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TORCHKILN_FX_GRAPH_CACHE", "1")
    monkeypatch.setenv("TORCHKILN_AUTOGRAD_CACHE", "1")
    monkeypatch.setattr(torchkiln.codegen.config, "fx_graph_cache", True)
    monkeypatch.setattr(torchkiln.aot.config, "enable_autograd_cache", True)

    torch.manual_seed(0)
    model, x = mlp(), torch.randn([2, 4])
    model(x).sum().backward()
    expected = [p.grad.clone() for p in model.parameters()]
    torchkiln.reset()
    counters.clear()
    with compiled_autograd.enable(make_compiler_fn(fullgraph=False)):
        for _ in range(2):
            torchkiln.reset()  # the second compile is an AOT autograd cache hit
            model.zero_grad()
            torchkiln.compile(model, backend="inductor")(x).sum().backward()
            assert_equal(expected, [p.grad for p in model.parameters()])
    assert counters["aot_autograd"]["autograd_cache_hit"] == 1


def _queue_callback_run(compiler_fn):
    """Eager's order: final callbacks run once the backward is done (leaf .grad set),
    callbacks queued by callbacks too; from a tensor hook and a custom backward."""
    log = []
    x = torch.randn(4, requires_grad=True)

    def final():
        log.append(("final", x.grad.clone()))
        torch.autograd.Variable._execution_engine.queue_callback(lambda: log.append(("nested", None)))

    def hook(g):
        torch.autograd.Variable._execution_engine.queue_callback(final)
        return g * 2

    class MyFn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 3

        @staticmethod
        def backward(ctx, g):
            torch.autograd.Variable._execution_engine.queue_callback(lambda: log.append(("fn", None)))
            return g * 3

    runs = []
    for _ in range(3):
        x.grad = None
        with compiled_autograd.enable(compiler_fn) if compiler_fn else torch.autograd.set_grad_enabled(True):
            y = MyFn.apply(x * 1.0)
            y.register_hook(hook)
            y.sum().backward()
        runs.append(list(log))
        log.clear()
    return runs


@pytest.mark.parametrize("fullgraph", [False, True])
def test_queue_callback(fullgraph):
    expected = _queue_callback_run(None)
    assert [name for name, _ in expected[0]] == ["final", "fn", "nested"]
    counters["compiled_autograd"].clear()
    # fullgraph=True: capture breaks at queue_callback, so the graph runs uncompiled (a warning)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        actual = _queue_callback_run(make_compiler_fn(fullgraph=fullgraph))
    assert_equal(expected, actual)
    assert counters["compiled_autograd"]["captures"] == 1


def test_custom_fn_multiple_grads():
    def fn():
        class MyFn(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, y):
                return x + y, y

            @staticmethod
            def backward(ctx, gO_1, gO_2):
                return gO_1, gO_2

        for i in [10, 100, 10, 15, 20, 25]:
            x = torch.arange(0.0, i, requires_grad=True)
            y = torch.arange(0.0, i, requires_grad=True)
            out1, out2 = MyFn.apply(x, y)
            (out1 + out2).sum().backward()
            yield x.grad
            yield y.grad

    check_output_and_recompiles(fn, count=1)


def test_custom_fn_non_variable_input():
    def fn():
        class MyFn(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, y, z):
                return x * 2, y * 3, z * 4

            @staticmethod
            def backward(ctx, gO_1, gO_2, gO_3):
                return gO_1, gO_2, gO_3

        for i in [10, 100, 10, 15, 20, 25]:
            x = torch.arange(0.0, i, requires_grad=True)
            y = 1
            z = torch.arange(0.0, i, requires_grad=True)
            out1, out2, out3 = MyFn.apply(x, y, z)
            (out1 + out2 + out3).sum().backward()
            yield x
            yield y
            yield z

    check_output_and_recompiles(fn, count=1)


def test_custom_fn_needs_input_grad_and_mark_dirty():
    def fn():
        class MyFn(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, y):
                x.mul_(2)
                ctx.mark_dirty(x)
                ctx.save_for_backward(y)
                return x

            @staticmethod
            def backward(ctx, gO):
                (y,) = ctx.saved_tensors
                gx = gO * 2 if ctx.needs_input_grad[0] else None
                gy = gO * y if ctx.needs_input_grad[1] else None
                return gx, gy

        for _ in range(3):
            a = torch.randn(5, requires_grad=True)
            y = torch.randn(5, requires_grad=True)
            out = MyFn.apply(a.clone(), y)
            (out * out).sum().backward()
            yield a.grad
            yield y.grad

    check_output_and_recompiles(fn, count=1)


def test_custom_fn_with_same_graph():
    def fn():
        class MyFn1(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x

            @staticmethod
            def backward(ctx, gO):
                return gO

        class MyFn2(torch.autograd.Function):  # same as MyFn1, other autograd function id
            @staticmethod
            def forward(ctx, x):
                return x

            @staticmethod
            def backward(ctx, gO):
                return gO

        for myfn in [MyFn1, MyFn2, MyFn1, MyFn2]:
            x = torch.arange(0.0, 10, requires_grad=True)
            myfn.apply(x).sum().backward()
            yield x.grad

    check_output_and_recompiles(fn, count=2)


def test_custom_fn_dynamically_defined_class():
    def fn():
        def create_class(multiplier: int):
            class DynamicFn(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x):
                    return x * multiplier

                @staticmethod
                def backward(ctx, gO):
                    return gO * multiplier

            return DynamicFn

        for multiplier in [10, 20, 30]:
            x = torch.arange(0.0, 10, requires_grad=True)
            create_class(multiplier).apply(x).sum().backward()
            yield x.grad

    check_output_and_recompiles(fn, count=3)


def test_custom_fn_bw_graph_break(capsys):
    def fn():
        class MySin(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return torch.sin(x)

            @staticmethod
            def backward(ctx, gO):
                print("graph break")
                (x,) = ctx.saved_tensors
                return gO * torch.cos(x)

        for i in [10, 100, 10, 15, 20, 25]:
            x = torch.arange(0.0, i, requires_grad=True)
            MySin.apply(x).sum().backward()
            yield x.grad

    # seed: [2, 6] (static first, then dynamic: 2 captures, Dynamo's graphs around the
    # print); torch 2.13's engine: 1 capture; capture breaks its graph at the print()
    check_output_and_recompiles(fn, count=[1, None], compiler_fn=make_compiler_fn(fullgraph=False))
    assert counters["graph_break"] and counters["compiled_autograd"]["compiles"] >= 1
    assert capsys.readouterr().out.count("graph break") == 12  # eager's 6, then 6 compiled: one per backward


def test_custom_fn_compiled_fw_graph_break():
    def fn():
        class MySin(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                print("graph break")
                ctx.save_for_backward(x)
                return torch.sin(x)

            @staticmethod
            def backward(ctx, gO):
                (x,) = ctx.saved_tensors
                return gO * torch.cos(x)

        # torchkiln.compile(MySin.apply) fails in capture (binding the classmethod); a lambda works
        opt_model = torchkiln.compile(lambda x: MySin.apply(x), backend="aot_eager")
        for i in [10, 100, 10, 15, 20, 25]:
            x = torch.arange(0.0, i, requires_grad=True)
            opt_model(x).sum().backward()
            yield x.grad

    check_output_and_recompiles(fn, count=[1, None], compiler_fn=make_compiler_fn(fullgraph=False))


def test_mismatch_fake_tensor_mode():
    x = torch.rand(8, 16)
    y = torch.rand(8, 16, requires_grad=True)

    def f():
        y.grad = None
        out = x + y
        out.sum().backward()
        return out, y.grad

    check_output_and_recompiles(f, compile_fn=True)


def test_accumulate_grad_accuracy():
    def fn():
        model = torch.nn.Sequential(torch.nn.Linear(2, 1, bias=False), torch.nn.Linear(1, 2, bias=False))
        x = torch.randn(2, 2)
        loss = model(x).sum()
        torch.manual_seed(0)
        loss.backward()
        yield model[0].weight.grad
        yield model[1].weight.grad

    check_output_and_recompiles(fn, 1)


def _capture_logs(name):
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = get_artifact_logger(name)
    logger.addHandler(handler)
    return stream, handler, logger


EXPECTED_NODES = ["SumBackward0 (NodeCall 1)", "ReluBackward0 (NodeCall 2)", "AddmmBackward0 (NodeCall 3)",
                  "TBackward0 (NodeCall 4)", "torch::autograd::AccumulateGrad (NodeCall 5)",
                  "ReluBackward0 (NodeCall 6)", "AddmmBackward0 (NodeCall 7)", "TBackward0 (NodeCall 8)",
                  "torch::autograd::AccumulateGrad (NodeCall 9)", "torch::autograd::AccumulateGrad (NodeCall 10)",
                  "torch::autograd::AccumulateGrad (NodeCall 11)"]


def test_verbose_logs_graph():
    def fn():
        model = mlp()
        model(torch.randn([2, 4])).sum().backward()
        yield from (p.grad for p in model.parameters())

    set_logs("compiled_autograd_verbose")
    stream, handler, logger = _capture_logs("compiled_autograd_verbose")
    try:
        check_output_and_recompiles(fn)
    finally:
        logger.removeHandler(handler)
    logs = stream.getvalue()
    assert all(e in logs for e in EXPECTED_NODES), logs


def test_logs_graph_names_origins():
    def fn():
        model = torchkiln.compile(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh()), backend="aot_eager")
        x = torch.randn(3, 4, requires_grad=True)
        x.register_hook(hook1)
        (model(x) * x).sum().backward()
        yield x.grad

    set_logs("compiled_autograd")
    stream, handler, logger = _capture_logs("compiled_autograd")
    try:
        check_output_and_recompiles(fn)
    finally:
        logger.removeHandler(handler)
    logs = stream.getvalue()
    for name in ("CompiledFunctionBackward", "MulBackward0", "call_hook", "aten.mm"):
        assert name in logs, logs


def test_verbose_logs_cpp():
    def fn():
        model = mlp()
        for i in [10, 11, 12]:
            model.zero_grad()
            model(torch.randn([i, 4])).sum().backward()
            yield from (p.grad for p in model.parameters())

    set_logs("compiled_autograd_verbose")
    stream, handler, logger = _capture_logs("compiled_autograd_verbose")
    try:
        with torch.autograd.set_multithreading_enabled(False):
            torch.manual_seed(0)
            expected = list(fn())
            torch.manual_seed(0)
            with compiled_autograd.enable(compiler_fn, dynamic=False):
                actual = list(fn())
    finally:
        logger.removeHandler(handler)
    assert_equal(expected, actual)
    assert counters["compiled_autograd"]["captures"] == 2
    logs = stream.getvalue()
    assert re.search(r"Cache miss due to new autograd node: torch::autograd::GraphRoot \(NodeCall 0\) "
                     r"with key size (\d+), previous key sizes=\[\]", logs), logs
    # the seed's engine named each size ("marking size idx 0 of SumBackward0 (NodeCall 1)
    # as dynamic"); torch 2.13's reports them together:
    assert re.search(r"Cache miss due to changed shapes: marking size idx (\d+) of SumBackward0 "
                     r"\(NodeCall 1\) as dynamic|Cache miss due to (\d+) changed tensor shapes", logs), logs


def test_snapshot_verbose_logs_flag():
    def fn():
        model = mlp()
        model(torch.randn([2, 4])).sum().backward()
        yield from (p.grad for p in model.parameters())

    stream, handler, logger = _capture_logs("compiled_autograd_verbose")
    try:
        with compiled_autograd.enable(compiler_fn):
            set_logs("compiled_autograd_verbose")  # turned on after enable(): not seen
            list(fn())
    finally:
        logger.removeHandler(handler)
    assert not any(e in stream.getvalue() for e in EXPECTED_NODES)
