"""The public capture API end to end: compile, optimize, OptimizedModule, disable,
graph_break, allow_in_graph, fullgraph, recompiles, each compared with eager."""
import copy
import pickle
import warnings

import pytest
import torch

import torchkiln
from torchkiln.exc import RecompileError, Unsupported
from torchkiln.testing import CompileCounter, same


@pytest.fixture(autouse=True)
def _reset():
    torchkiln.reset()
    yield
    torchkiln.reset()


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)
        self.register_buffer("offset", torch.randn(4))
        self.scale = 2.0

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x))) * self.scale + self.offset


def fn(x, y):
    return torch.sin(x) * y + 1


# --- compile / optimize -----------------------------------------------------------

def test_compile_function_matches_eager_and_caches():
    cnt = CompileCounter()
    cf = torchkiln.compile(fn, backend=cnt)
    x, y = torch.randn(4), torch.randn(4)
    assert same(cf(x, y), fn(x, y))
    assert same(cf(x, y), fn(x, y))
    assert cnt.frame_count == 1
    assert cnt.op_count == 3


def test_compile_as_decorator_keeps_name():
    cnt = CompileCounter()

    @torchkiln.compile(backend=cnt)
    def g(x):
        """doc"""
        return x.cos() + 2

    x = torch.randn(3)
    assert same(g(x), x.cos() + 2)
    assert g.__name__ == "g" and g.__doc__ == "doc"
    assert cnt.frame_count == 1


def test_compile_bound_method():
    class Holder:
        def __init__(self):
            self.w = torch.randn(3)

        def apply(self, x):
            return x * self.w

    h = Holder()
    cnt = CompileCounter()
    ca = torchkiln.compile(h.apply, backend=cnt)
    x = torch.randn(3)
    assert same(ca(x), h.apply(x))
    assert cnt.frame_count == 1


def test_optimize_nopython_raises_unsupported_with_location():
    def breaks(x):
        x = x + 1
        torchkiln.graph_break()
        return x * 2

    with pytest.raises(Unsupported) as info:
        torchkiln.optimize("eager", nopython=True)(breaks)(torch.randn(3))
    assert "test_frontend.py:" in str(info.value)


def test_fullgraph_compile_raises_unsupported():
    def breaks(x):
        print("side effect")
        return x * 2

    with pytest.raises(Unsupported):
        torchkiln.compile(breaks, backend="eager", fullgraph=True)(torch.randn(3))


def test_graph_break_splits_into_two_graphs():
    cnt = CompileCounter()

    def two_parts(x):
        x = x.sin()
        torchkiln.graph_break()
        return x.cos()

    x = torch.randn(4)
    assert same(torchkiln.compile(two_parts, backend=cnt)(x), x.sin().cos())
    assert cnt.frame_count == 2
    assert cnt.op_count == 2


def test_allow_in_graph_is_one_node():
    def helper(a):
        return a * 2 + a.sin()

    torchkiln.allow_in_graph(helper)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def f(x):
        return helper(x) + 1

    x = torch.randn(3)
    assert same(torchkiln.compile(f, backend=backend)(x), f(x))
    targets = [n.target for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert helper in targets


def test_disabled_function_breaks_and_runs_natively():
    calls = []

    @torchkiln.disable
    def native(x):
        calls.append(torch.compiler.is_compiling())
        return x + 1

    cnt = CompileCounter()

    def f(x):
        return native(x.sin()).cos()

    x = torch.randn(3)
    assert same(torchkiln.compile(f, backend=cnt)(x), f(x))
    assert calls[-1] is False
    assert cnt.frame_count == 2


def test_nested_compiled_call_inside_compiled_function():
    cnt = CompileCounter()
    inner = torchkiln.compile(lambda a: a.exp(), backend=cnt)

    def outer(x):
        return inner(x) + 1

    x = torch.randn(3)
    assert same(torchkiln.compile(outer, backend=cnt)(x), x.exp() + 1)


def test_recompile_on_requires_grad_and_guard_fail_fn():
    failures = []
    cnt = CompileCounter()
    f = torchkiln.optimize(cnt, guard_fail_fn=lambda failure: failures.append(failure.reason))(fn)
    x, y = torch.randn(3), torch.randn(3)
    f(x, y)
    y2 = torch.randn(3, requires_grad=True)
    assert same(f(x, y2), fn(x, y2))
    assert cnt.frame_count == 2
    assert failures and "L['y']" in failures[0] and "requires_grad" in failures[0]


def test_error_on_recompile():
    f = torchkiln.compile(fn, backend="eager")
    f(torch.randn(3), torch.randn(3))
    with torchkiln.config.patch(error_on_recompile=True):
        with pytest.raises(RecompileError):
            f(torch.randn(3, dtype=torch.float64), torch.randn(3, dtype=torch.float64))


def test_cache_size_limit_runs_eagerly_with_one_warning():
    cnt = CompileCounter()

    def g(x, n):
        return x * n

    cg = torchkiln.compile(g, backend=cnt)
    x = torch.randn(3)
    with torchkiln.config.patch(cache_size_limit=2), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
            xd = x.to(dtype)
            assert same(cg(xd, 3), g(xd, 3))
    assert cnt.frame_count == 2
    assert len([w for w in caught if "cache_size_limit" in str(w.message)]) == 1


def test_backend_failure_falls_back_to_eager():
    def broken(gm, example_inputs):
        raise ValueError("backend exploded")

    x, y = torch.randn(3), torch.randn(3)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert same(torchkiln.compile(fn, backend=broken)(x, y), fn(x, y))
    with torchkiln.config.patch(suppress_errors=False):
        torchkiln.reset()
        with pytest.raises(torchkiln.exc.BackendCompilerFailed, match="broken"):
            torchkiln.compile(fn, backend=broken)(x, y)


def test_list_backends_and_counters():
    assert "eager" in torchkiln.list_backends()
    torchkiln.compile(fn, backend="eager")(torch.randn(2), torch.randn(2))
    assert torchkiln.counters["stats"]["unique_graphs"] >= 1
    torchkiln.reset()
    assert torchkiln.counters["stats"]["unique_graphs"] == 0


# --- OptimizedModule --------------------------------------------------------------

def test_optimized_module_matches_eager_and_counts_one_frame():
    mod = MLP()
    cnt = CompileCounter()
    opt = torchkiln.compile(mod, backend=cnt)
    assert isinstance(opt, torchkiln.OptimizedModule)
    assert opt._orig_mod is mod
    x = torch.randn(5, 8)
    assert same(opt(x), mod(x))
    assert same(opt(x), mod(x))
    assert cnt.frame_count == 1


def test_optimized_module_passes_attributes_through():
    mod = MLP()
    opt = torchkiln.compile(mod, backend="eager")
    assert opt.scale == 2.0 and opt.fc1 is mod.fc1
    opt.scale = 3.0
    assert mod.scale == 3.0
    opt.new_attr = "hello"
    assert mod.new_attr == "hello"
    del opt.new_attr
    assert not hasattr(mod, "new_attr")
    assert set(dir(mod)) <= set(dir(opt))
    assert [id(p) for p in opt.parameters()] == [id(p) for p in mod.parameters()]
    assert [id(b) for b in opt.buffers()] == [id(b) for b in mod.buffers()]
    x = torch.randn(2, 8)
    assert same(opt(x), mod(x))


def test_optimized_module_state_dict_has_orig_mod_prefix_like_torch():
    mod = MLP()
    opt = torchkiln.compile(mod, backend="eager")
    keys = list(opt.state_dict())
    assert keys == ["_orig_mod." + k for k in mod.state_dict()]
    other = MLP()
    opt2 = torchkiln.compile(other, backend="eager")
    opt2.load_state_dict(opt.state_dict())
    x = torch.randn(2, 8)
    assert same(opt2(x), mod(x))


def test_optimized_module_train_eval_and_to():
    mod = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
    cnt = CompileCounter()
    opt = torchkiln.compile(mod, backend=cnt)
    opt.eval()
    assert not mod.training and not opt.training
    x = torch.randn(3, 4)
    assert same(opt(x), mod(x))
    opt.train()
    assert mod.training
    opt.eval()
    moved = opt.to(dtype=torch.float64)
    assert moved is opt and mod[0].weight.dtype == torch.float64
    xd = x.double()
    assert same(opt(xd), mod(xd))
    assert len(opt) == 2


def test_recompile_wraps_same_module_idempotently():
    mod = MLP()
    cnt = CompileCounter()
    opt = torchkiln.compile(mod, backend=cnt)
    for _ in range(3):
        opt = torchkiln.compile(opt, backend=cnt)
    assert isinstance(opt, torchkiln.OptimizedModule) and opt._orig_mod is mod
    x = torch.randn(2, 8)
    assert same(opt(x), mod(x))
    assert cnt.frame_count == 1


def test_optimized_module_nested_inside_module():
    inner = torchkiln.compile(MLP(), backend="eager")

    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x).sum(-1)

    outer = Outer()
    x = torch.randn(3, 8)
    assert same(torchkiln.compile(outer, backend="eager")(x), outer(x))


def test_optimized_module_pickles_and_deepcopies():
    mod = MLP()
    opt = torchkiln.compile(mod, backend="eager")
    x = torch.randn(2, 8)
    ref = opt(x)
    loaded = pickle.loads(pickle.dumps(opt))
    assert isinstance(loaded, torchkiln.OptimizedModule)
    assert same(loaded(x), ref)
    copied = copy.deepcopy(opt)
    assert isinstance(copied, torchkiln.OptimizedModule) and copied._orig_mod is not mod
    assert same(copied(x), ref)


def test_optimized_module_runs_hooks_like_eager():
    mod = torch.nn.Linear(4, 4)
    seen = []
    mod.register_forward_pre_hook(lambda m, args: (args[0] * 2,))
    handle = mod.register_forward_hook(lambda m, args, out: out + 1)
    opt = torchkiln.compile(mod, backend="eager")
    x = torch.randn(3, 4)
    assert same(opt(x), mod(x))
    handle.remove()
    assert same(opt(x), mod(x))
    mod.register_forward_hook(lambda m, args, out: seen.append(out.shape))
    assert same(opt(x), mod(x))
    assert seen


def test_optimized_module_patched_forward():
    mod = torch.nn.Linear(4, 4)
    opt = torchkiln.compile(mod, backend="eager")
    x = torch.randn(2, 4)
    assert same(opt(x), mod(x))
    mod.forward = lambda inp: inp * 3
    assert same(opt(x), x * 3)


def test_disable_module():
    mod = MLP()
    dis = torchkiln.disable(mod)
    assert isinstance(dis, torchkiln.OptimizedModule)
    x = torch.randn(2, 8)
    assert same(dis(x), mod(x))


def test_lazy_module_initialised_before_capture():
    mod = torch.nn.Sequential(torch.nn.LazyLinear(5), torch.nn.ReLU())
    opt = torchkiln.compile(mod, backend="eager")
    x = torch.randn(3, 7)
    out = opt(x)
    assert mod[0].weight.shape == (5, 7)
    assert same(out, mod(x))


def test_torchkiln_logs_recompiles_env(tmp_path):
    import os
    import subprocess
    import sys

    script = tmp_path / "recompile.py"
    script.write_text(
        "import torch, torchkiln\n"
        "def f(x):\n"
        "    return x * 2\n"
        "cf = torchkiln.compile(f, backend='eager')\n"
        "cf(torch.randn(3))\n"
        "cf(torch.randn(3, requires_grad=True))\n"
    )
    env = dict(os.environ, TORCHKILN_LOGS="recompiles")
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Recompiling function f in" in proc.stderr
    assert "recompile.py:2" in proc.stderr
    assert "triggered by the following guard failure(s):" in proc.stderr
    assert "L['x']" in proc.stderr


def test_optimized_module_hook_kinds_match_eager():
    torch.manual_seed(0)
    mod = torch.nn.Linear(4, 4)
    mod.register_forward_pre_hook(lambda m, args, kwargs: ((args[0] + 1,), kwargs), with_kwargs=True)
    mod.register_forward_hook(lambda m, args, kwargs, out: out * 2, with_kwargs=True)
    mod.register_forward_hook(lambda m, args, out: out - 1, prepend=True)
    grads = []
    mod.register_full_backward_hook(lambda m, gin, gout: grads.append(gout[0].clone()))
    cnt = CompileCounter()
    opt = torchkiln.compile(mod, backend=cnt)
    x1 = torch.randn(3, 4, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    ref = mod(x1)
    ref.sum().backward()
    res = opt(x2)
    res.sum().backward()
    assert same(res, ref)
    assert same(x2.grad, x1.grad)
    assert len(grads) == 2 and same(grads[0], grads[1])
    assert cnt.frame_count >= 1


def test_optimized_module_global_hook():
    mod = torch.nn.Linear(4, 4)
    opt = torchkiln.compile(mod, backend="eager")
    x = torch.randn(2, 4)
    handle = torch.nn.modules.module.register_module_forward_hook(lambda m, args, out: out + 10)
    try:
        ref = mod(x)
        assert same(opt(x), ref)
    finally:
        handle.remove()
    assert same(opt(x), mod(x))


def test_optimized_module_hook_compiled_as_own_frame():
    mod = torch.nn.Linear(4, 4)
    mod.register_forward_hook(lambda m, args, out: out * 2 + 1)
    cnt = CompileCounter()
    opt = torchkiln.compile(mod, backend=cnt)
    x = torch.randn(2, 4)
    assert same(opt(x), mod(x))
    assert cnt.frame_count == 2  # forward, then the hook: as torch.compile captures them


def test_hook_registered_on_optimized_module_itself():
    mod = torch.nn.Linear(4, 4)
    opt = torchkiln.compile(mod, backend="eager")
    opt.register_forward_hook(lambda m, args, out: out * 3)
    x = torch.randn(2, 4)
    assert same(opt(x), mod(x) * 3)
