"""Python side effects in a custom ``Function.backward`` and in hooks, under compiled autograd.

The captured graph holds a ``call_backward`` node for each Python backward; compiling the
graph with ``torchkiln.compile`` inlines it, so its tensor work joins the graph and its
side effects are replayed on every backward (or, where capture cannot trace them, run at a
graph break).  Each case runs the same steps eagerly and compiled (3+ backwards) and
compares the side effects and the gradients.
"""
import pytest
import torch

import torchkiln
from torchkiln.compiled_autograd import protocol
from torchkiln.utils.counters import counters

pytestmark = pytest.mark.skipif(protocol.unverified_reason() is not None,
                                reason=str(protocol.unverified_reason()))  # backwards run eagerly there

STEPS = 3


def _compiler(fullgraph=False, backend="eager"):
    return lambda gm: torchkiln.compile(gm, backend=backend, fullgraph=fullgraph)


def _run(make, compiled, compiler_fn=None, steps=STEPS):
    """``make()`` -> ``(step, record)``: ``step(i)`` does one forward+backward and
    returns the gradients; ``record()`` the side effects observed so far."""
    step, record = make()
    grads = []
    if compiled:
        torchkiln.reset()
        counters.clear()
        with torchkiln.compiled_autograd.enable(compiler_fn or _compiler()):
            for i in range(steps):
                grads.append(step(i))
    else:
        for i in range(steps):
            grads.append(step(i))
    return grads, record()


def _check(make, compiler_fn=None, steps=STEPS):
    eager_grads, eager_record = _run(make, False, steps=steps)
    grads, record = _run(make, True, compiler_fn, steps=steps)
    assert record == eager_record
    torch.testing.assert_close(grads, eager_grads)
    assert counters["compiled_autograd"]["captures"] >= 1  # it did go through compiled autograd
    return record


def _apply_steps(fn_cls, size=3):
    def step(i):
        x = torch.arange(1.0, size + 1, requires_grad=True)
        fn_cls.apply(x * (i + 1)).sum().backward()
        return x.grad

    return step


_LOG: list = []
_CALLS = 0


def test_list_append():
    def make():
        _LOG.clear()

        class Logged(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, grad):
                _LOG.append(1)
                return grad * 2

        return _apply_steps(Logged), lambda: list(_LOG)

    assert _check(make) == [1] * STEPS


def test_list_append_fullgraph():
    # the seed's compiler_fn: fullgraph=True, dynamic=True, an AOT backend
    def make():
        log = []

        class Logged(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x.sin()

            @staticmethod
            def backward(ctx, grad):
                (x,) = ctx.saved_tensors
                log.append(len(log))
                return grad * x.cos()

        return _apply_steps(Logged), lambda: list(log)

    compiler_fn = lambda gm: torchkiln.compile(gm, backend="aot_eager", fullgraph=True, dynamic=True)  # noqa: E731
    assert _check(make, compiler_fn) == list(range(STEPS))
    assert counters["stats"]["unique_graphs"] >= 1  # inlined: the graph compiled, no fallback


def test_nonlocal_counter():
    def make():
        calls = 0

        class Counted(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 3

            @staticmethod
            def backward(ctx, grad):
                nonlocal calls
                calls += 1
                return grad * calls  # the gradient depends on the counter too

        return _apply_steps(Counted), lambda: calls

    assert _check(make) == STEPS


def test_global_counter():
    def make():
        global _CALLS
        _CALLS = 0

        class Counted(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x + 1

            @staticmethod
            def backward(ctx, grad):
                global _CALLS
                _CALLS += 1
                return grad

        return _apply_steps(Counted), lambda: _CALLS

    assert _check(make) == STEPS


def test_attribute_on_owned_object():
    class Stats:
        def __init__(self):
            self.calls = 0
            self.last = None

    def make():
        stats = Stats()

        class Owned(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, grad):
                stats.calls += 1
                stats.last = grad.shape[0]
                return grad * 2

        return _apply_steps(Owned), lambda: (stats.calls, stats.last)

    assert _check(make) == (STEPS, 3)


def test_attribute_on_ctx_with_retain_graph():
    # the ctx is the grad_fn: an attribute the backward sets is visible after it, and a
    # retained graph's backward sees the previous backward's value
    def make():
        seen = []

        class OnCtx(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.calls = 0
                return x * 2

            @staticmethod
            def backward(ctx, grad):
                ctx.calls += 1
                return grad * ctx.calls

        x = torch.ones(3, requires_grad=True)
        y = OnCtx.apply(x)

        def step(i):
            x.grad = None
            y.sum().backward(retain_graph=True)
            seen.append(y.grad_fn.calls)
            return x.grad

        return step, lambda: list(seen)

    assert _check(make) == [1, 2, 3]


def test_ctx_value_read_changes_between_backwards():
    # ctx.scale is not in the engine's key: capture guards on it (a new value recompiles)
    def make():
        class Scaled(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, scale):
                ctx.scale = scale
                return x * scale

            @staticmethod
            def backward(ctx, grad):
                return grad * ctx.scale, None

        def step(i):
            x = torch.ones(3, requires_grad=True)
            Scaled.apply(x, float(i + 2)).sum().backward()
            return x.grad

        return step, lambda: None

    _check(make)


def test_print(capsys):
    def make():
        class Printed(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, grad):
                print("backward", grad.shape[0])
                return grad * 2

        return _apply_steps(Printed), lambda: capsys.readouterr().out

    assert _check(make) == "backward 3\n" * STEPS


def test_print_fullgraph(capsys):
    # fullgraph=True refuses the break at print(): the graph runs uncompiled, print and all
    def make():
        class Printed(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, grad):
                print("backward")
                return grad * 2

        return _apply_steps(Printed), lambda: capsys.readouterr().out

    with pytest.warns(UserWarning, match="running it uncompiled"):
        assert _check(make, _compiler(fullgraph=True)) == "backward\n" * STEPS


def test_side_effect_depends_on_tensor_value():
    def make():
        log = []

        class Branchy(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * 1

            @staticmethod
            def backward(ctx, grad):
                (x,) = ctx.saved_tensors
                if x.sum() > 10:  # data-dependent: capture breaks the graph here
                    log.append(("big", x.sum().item()))
                else:
                    log.append(("small", x.sum().item()))
                return grad * 2

        return _apply_steps(Branchy), lambda: list(log)

    assert [kind for kind, _ in _check(make, steps=4)] == ["small", "big", "big", "big"]


def test_tensor_hook_side_effects():
    def make():
        log = []
        w = torch.nn.Parameter(torch.ones(3))
        w.register_hook(lambda g: log.append(("w", g.sum().item())))
        w.register_post_accumulate_grad_hook(lambda p: log.append(("acc", p.grad.sum().item())))

        def step(i):
            x = torch.full((3,), float(i + 1), requires_grad=True)
            y = x * w
            y.register_hook(lambda g: log.append(("y", len(log))) or g * 2)
            y.sum().backward()
            return x.grad, w.grad.clone()

        return step, lambda: list(log)

    record = _check(make)
    assert [name for name, _ in record] == ["y", "w", "acc"] * STEPS


@pytest.mark.filterwarnings("ignore:Full backward hook is firing")  # torch's: the input needs no grad
def test_module_backward_hook_side_effects():
    def make():
        calls = []
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
        model[0].register_full_backward_hook(lambda m, gi, go: calls.append(tuple(go[0].shape)))

        def step(i):
            model.zero_grad()
            model(torch.ones(2, 4) * (i + 1)).sum().backward()
            return [p.grad.clone() for p in model.parameters()]

        return step, lambda: list(calls)

    assert _check(make) == [(2, 4)] * STEPS


def _static_outputs_compiler(held_ptrs):
    """A compiler whose graph returns the same output tensors on every call, overwritten
    in place (as a CUDA graph replay's static outputs)."""
    def compiler_fn(gm):
        static = []

        def run(*args):
            outs = gm(*args)
            if not static:
                static.extend(o.clone() if isinstance(o, torch.Tensor) else o for o in outs)
            else:
                for s, o in zip(static, outs):
                    if isinstance(s, torch.Tensor):
                        s.copy_(o)
            held_ptrs.extend(s.untyped_storage().data_ptr() for s in static if isinstance(s, torch.Tensor))
            return list(static)

        return run

    return compiler_fn


def _record_ptrs_compiler(ptrs):
    def compiler_fn(gm):
        def run(*args):
            outs = gm(*args)
            # the storages (not the tensors) are kept: their memory is not reused for a copy
            ptrs.extend(o.untyped_storage() for o in outs if isinstance(o, torch.Tensor))
            return outs

        return run

    return compiler_fn


@pytest.mark.parametrize("static", [True, False])
def test_grad_assigned_from_a_graph_output_held_elsewhere_is_a_copy(static):
    # eager's AccumulateGrad steals a new gradient only when nothing else holds it: a
    # static output (CUDA graphs) assigned to .grad would be overwritten by the next backward
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    ptrs = []
    compiler_fn = _static_outputs_compiler(ptrs) if static else _record_ptrs_compiler(ptrs)
    kept, expected = [], []
    torchkiln.reset()
    with torchkiln.compiled_autograd.enable(compiler_fn):
        for i in range(3):
            model.zero_grad(set_to_none=True)
            x = torch.randn(2, 4)
            model(x).square().sum().backward()
            kept.append([p.grad for p in model.parameters()])
            with torchkiln.compiled_autograd.disable():
                ref = torch.nn.Linear(4, 3)
                ref.load_state_dict(model.state_dict())
                ref(x).square().sum().backward()
            expected.append([p.grad for p in ref.parameters()])
    torch.testing.assert_close(kept, expected)
    held = {s.data_ptr() if not isinstance(s, int) else s for s in ptrs}
    stolen = any(g.untyped_storage().data_ptr() in held for step in kept for g in step)
    assert stolen is not static  # an output owned by the wrapper alone is stolen (no copy)
