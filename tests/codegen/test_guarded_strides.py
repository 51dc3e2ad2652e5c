"""Inputs whose every stride capture's guard checks are not checked again by the wrapper
(``meta["torchkiln_guarded_strides"]``, docs/interfaces.md): a call with other strides
fails the guard and recompiles, and every result is eager's.  A graph compiled without
the flag (compile_fx_inner called directly) keeps its checks, under another cache key."""
from __future__ import annotations

import logging

import torch
from torch.fx.experimental.proxy_tensor import make_fx

import torchkiln
from torchkiln.codegen import compile_fx_inner, config
from torchkiln.codegen.fx_graph_cache import cache_key
from torchkiln.utils.logging import set_logs


def _wrappers(fn, *args):
    """``fn(*args)`` and the wrappers compiled during the call (their Python source)."""
    found = []
    handler = logging.Handler()
    handler.emit = lambda record: found.append(record.getMessage())
    logger = logging.getLogger("torchkiln.output_code")
    set_logs("output_code")
    logger.addHandler(handler)
    try:
        out = fn(*args)
    finally:
        logger.removeHandler(handler)
        set_logs()
    return out, [m.split("\nkernels:\n")[0] for m in found if "def call(" in m]


def test_guarded_inputs_unchecked_and_other_strides_recompile():
    torchkiln.reset()

    def f(x, y):
        return (x * 2 + y).relu()

    cf = torchkiln.compile(f)
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    out, code = _wrappers(cf, x, y)
    assert len(code) == 1 and "restride" not in code[0] and "is_contiguous" not in code[0], code
    torch.testing.assert_close(out, f(x, y))
    xt = torch.randn(16, 8).t()  # the same sizes, other strides: the guard fails
    out, code = _wrappers(cf, xt, y)
    assert len(code) == 1, "a call with other strides must recompile"
    torch.testing.assert_close(out, f(xt, y))
    for a in (x, xt):  # both entries, again
        torch.testing.assert_close(cf(a, y), f(a, y))


def test_training_forward_and_grads_with_other_strides():
    torchkiln.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    cm = torchkiln.compile(model)
    for x in (torch.randn(5, 16), torch.randn(16, 5).t(), torch.randn(5, 32)[:, ::2]):
        model.zero_grad()
        cm(x).square().sum().backward()
        got = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        model(x).square().sum().backward()
        for g, want in zip(got, [p.grad for p in model.parameters()]):
            torch.testing.assert_close(g, want)


def test_symbolic_strides_stay_checked():
    torchkiln.reset()

    def f(x):
        return x.sin() * 2

    cf = torchkiln.compile(f, dynamic=True)
    x = torch.randn(6, 8)
    out, code = _wrappers(cf, x)
    assert code and "restride" in code[0], code
    xt = torch.randn(8, 6).t()
    torch.testing.assert_close(cf(xt), f(xt))
    torch.testing.assert_close(out, f(x))


def test_unflagged_graph_checks_and_keys_differ():
    x = torch.randn(4, 8)
    gm = make_fx(lambda a: (a * 2 + 1,))(x)
    vals = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    with config.patch(fx_graph_cache=False):
        compiled = compile_fx_inner(gm, vals)
    assert "is_contiguous" in compiled.source
    xt = torch.randn(8, 4).t()
    torch.testing.assert_close(compiled(xt)[0], xt * 2 + 1)
    plain = cache_key(gm, vals)
    next(n for n in gm.graph.nodes if n.op == "placeholder").meta["torchkiln_guarded_strides"] = (8, 1)
    assert cache_key(gm, vals) != plain
