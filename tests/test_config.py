import pytest
import torch

import torchkiln
from torchkiln.config import Config
from torchkiln.testing import CompileCounter, rand_strided, same


def test_patch_forms():
    cfg = Config("t", a=1, b=2)
    with cfg.patch("a", 5):
        assert cfg.a == 5
    with cfg.patch({"a": 6}):
        assert cfg.a == 6
    with cfg.patch(a=7, b=8):
        assert (cfg.a, cfg.b) == (7, 8)
    assert (cfg.a, cfg.b) == (1, 2)

    @cfg.patch(a=9)
    def f():
        return cfg.a

    assert f() == 9 and cfg.a == 1
    with pytest.raises(AttributeError):
        cfg.patch(nope=1)
    with pytest.raises(AttributeError):
        cfg.nope = 3


def test_patch_class_decorator():
    cfg = Config("t", a=1)

    @cfg.patch(a=2)
    class T:
        def test_x(self):
            return cfg.a

    assert T().test_x() == 2 and cfg.a == 1


def test_torchkiln_config_patch():
    with torchkiln.config.patch(cache_size_limit=3):
        assert torchkiln.config.cache_size_limit == 3
    assert torchkiln.config.cache_size_limit == 8


def test_same_and_rand_strided():
    t = rand_strided((2, 3), (1, 2))
    assert t.stride() == (1, 2)
    assert same([t, {"a": 1.0}], [t.clone(), {"a": 1.0}])
    assert not same(t, t + 1)


def test_compile_counter_counts_ops():
    gm = torch.fx.symbolic_trace(lambda x: (x.sin() + 1).cos())
    cnt = CompileCounter()
    fn = cnt(gm, [torch.randn(2)])
    assert cnt.frame_count == 1 and cnt.op_count == 3
    x = torch.randn(2)
    assert same(fn(x), (x.sin() + 1).cos())


def test_list_backends():
    names = torchkiln.list_backends()
    assert {"eager", "aot_eager", "inductor"} <= set(names)
