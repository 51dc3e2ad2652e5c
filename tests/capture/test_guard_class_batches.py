"""The class checks a guard runs as C-level loops (guards._batched_class_checks) still
see each change of a class capture relied on: eager's result after each."""
import pytest
import torch

import torchkiln
from torchkiln.capture import eval_frame


class Base(torch.nn.Module):
    scale = 3.0


def _make():
    class Inner(torch.nn.Linear):
        pass

    class M(Base):
        scale = None

        def __init__(self):
            super().__init__()
            self.inner = Inner(2, 2)
            self.other = torch.nn.Linear(2, 2)

        def forward(self, x):
            y = self.other(self.inner(x))
            return y * 2 if self.scale is None else y * self.scale
    return M, Inner


def _guard_sources():
    return [e.guard.source_text for fc in eval_frame._frame_caches.values() for _, e in fc.entries]


@pytest.mark.parametrize("change", ["delete_none", "set_subclass_attr", "add_on_base", "replace_forward",
                                    "add_shadowing_name", "new_base"])
def test_class_change_recompiles(change):
    torchkiln.reset()
    M, Inner = _make()
    m = M()
    cm = torchkiln.compile(m, backend="eager")
    x = torch.randn(2, 2)
    with torch.no_grad():
        torch.testing.assert_close(cm(x), m(x))
        assert any("___all(___map(" in g for g in _guard_sources())  # the batched form runs
        if change == "delete_none":
            del M.scale  # Base.scale = 3.0 is found now
        elif change == "set_subclass_attr":
            M.scale = 5.0
        elif change == "add_on_base":
            Inner.forward = lambda self, x: x + 1
        elif change == "replace_forward":
            torch.nn.Linear.forward, orig = (lambda self, x: x - 1), torch.nn.Linear.forward
        elif change == "add_shadowing_name":
            M.inner = property(lambda self: torch.nn.Identity())  # a class attribute wins over __getattr__
        elif change == "new_base":
            M.__bases__ = (torch.nn.Module,)  # another __mro__
        try:
            torch.testing.assert_close(cm(x), m(x))
        finally:
            if change == "replace_forward":
                torch.nn.Linear.forward = orig


def test_class_checks_are_one_version_tag_check_on_cpython():
    """On CPython 3.11/3.12 the class checks run as one check of type version tags, and
    again in full only when a tag changed: a change that leaves what capture relied on
    as it was (torch.fx patches nn.Module and restores it) passes without a recompile;
    a real one recompiles; every result is eager's."""
    from torchkiln.capture import guard_reads

    if guard_reads._TYPE_VERSION_OFFSET is None:
        pytest.skip("no usable type version tags on this interpreter")
    torchkiln.reset()
    M, Inner = _make()
    m = M()
    reasons = []
    cm = torchkiln.optimize("eager", guard_fail_fn=lambda f: reasons.append(f.reason))(m)
    x = torch.randn(2, 2)
    with torch.no_grad():
        torch.testing.assert_close(cm(x), m(x))
        (source,) = _guard_sources()
        assert "___tag_of" in source and "isdisjoint" not in source
        torch.nn.Module.some_flag = 1  # the base of every module class: new tags, nothing relied on changed
        try:
            torch.testing.assert_close(cm(x), m(x))
            assert not reasons
            torch.fx.symbolic_trace(torch.nn.Linear(2, 2))
            torch.testing.assert_close(cm(x), m(x))
            assert not reasons
            Inner.forward = lambda self, x: x * 7  # relied on: recompiles
            torch.testing.assert_close(cm(x), m(x))
            assert reasons and "class" in reasons[0], reasons
        finally:
            del torch.nn.Module.some_flag
