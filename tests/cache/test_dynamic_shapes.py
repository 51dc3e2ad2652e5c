"""The AOT autograd cache for graphs with symbolic sizes: keyed by the symbols and the
shape environment's facts; the guards a compile added are checked and added back on a
hit (docs/cache.md)."""
import torch

import torchkiln
from torchkiln import counters
from torchkiln.cache import clear_memory


def fn(x, y):
    return (x * 2).sum(0) + y[: x.shape[0] // 2].sum()


def _new_process():
    """What a new process has: no captured frames, no in-memory entries."""
    torchkiln.reset()
    clear_memory()


def _run(n):
    torch.manual_seed(n)
    x, y = torch.randn(n, 3, requires_grad=True), torch.randn(20)
    x2 = x.detach().clone().requires_grad_(True)
    compiled = torchkiln.compile(fn, dynamic=True)
    out = compiled(x2, y)
    ref = fn(x, y)
    torch.testing.assert_close(out, ref)
    out.sum().backward()
    ref.sum().backward()
    torch.testing.assert_close(x2.grad, x.grad)
    return compiled


def _guards_of(compiled):
    from torchkiln.capture.eval_frame import frame_cache_for

    return [part for _, entry in frame_cache_for(fn).entries for part in entry.guard.code_parts]


def test_symbolic_graph_is_saved_and_hit_for_other_sizes_with_its_guards():
    _run(8)
    assert counters["aot_autograd"]["autograd_cache_miss"] == 1
    assert counters["aot_autograd"]["autograd_cache_saved"] == 1
    assert counters["aot_autograd"]["autograd_cache_bypass"] == 0
    cold_guards = sorted(_guards_of(fn))
    _new_process()
    _run(11)  # another size, same symbols: a hit
    assert counters["aot_autograd"]["autograd_cache_hit"] == 1
    assert counters["inductor"]["fxgraph_cache_hit"] == 2
    # the guards compiling added (here 4 <= size, from the slice) are on the hit's frame too
    assert sorted(_guards_of(fn)) == cold_guards
    assert any("4 <= L['x'].size()[0]" in g for g in cold_guards)


def test_a_size_the_saved_guards_exclude_compiles_again():
    _run(8)
    _new_process()
    counters.clear()
    _run(3)  # 3 < 4: the saved guard is false, so the entry is not used
    assert counters["aot_autograd"]["autograd_cache_hit"] == 0
    assert counters["aot_autograd"]["autograd_cache_miss"] == 1


def test_fx_graph_cache_key_holds_the_size_facts(monkeypatch):
    # (fixed) while 3 <= s0 <= 5 the trace sizes x[-(s0 // 3):] as 1; the recompile for
    # s0 = 7 traced the same graph text and hit that entry: a 1-element result
    import torchkiln.aot

    monkeypatch.setattr(torchkiln.aot.config, "enable_autograd_cache", False)  # the FX graph layer alone

    def tail(x):
        return x[-(x.shape[0] // 3):] * 2

    compiled = torchkiln.compile(tail, dynamic=True)
    for n in (3, 5, 7, 9):
        x = torch.arange(float(n))
        torch.testing.assert_close(compiled(x), tail(x))
    assert counters["inductor"]["fxgraph_cache_hit"] == 0
