"""Side effects are replayed after the graph, in program order, preserving identity."""
import torch

import torchkiln
from torchkiln.testing import CompileCounter, same

import capture_helpers  # noqa: F401  (puts this directory's helpers on the path)
import _side_effect_globals as other_module

COUNTER = 0
STATE = {"calls": 0}


def _compile(fn):
    torchkiln.reset()
    cnt = CompileCounter()
    return torchkiln.compile(fn, backend=cnt, fullgraph=True), cnt


def test_setattr_on_module_and_new_attribute():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            self.last = x * 2
            return self.lin(x)

    m = M()
    opt, cnt = _compile(m)
    x = torch.randn(1, 2)
    out = opt(x)
    assert same(out, m.lin(x))
    assert m.calls == 1 and same(m.last, x * 2)
    opt(x)
    assert m.calls == 2 and cnt.frame_count == 2  # calls is specialised: 1 then 2


def test_setattr_on_user_object_preserves_identity():
    class Box:
        pass

    box = Box()
    inner = [1]

    def fn(x, b):
        b.value = x + 1
        b.same = inner
        return x * 2

    opt, _ = _compile(fn)
    x = torch.randn(3)
    opt(x, box)
    assert same(box.value, x + 1) and box.same is inner


def test_store_global_same_and_other_module():
    def fn(x):
        global COUNTER
        COUNTER = COUNTER + 1
        other_module.update(5)
        return x + COUNTER + other_module.VALUE

    opt, _ = _compile(fn)
    x = torch.zeros(2)
    out = opt(x)
    assert COUNTER == 1 and other_module.VALUE == 5
    assert same(out, torch.full((2,), 6.0))


def test_list_append_and_dict_setitem_on_existing_containers():
    log = []
    cache = {"a": 1}

    def fn(x):
        log.append(x * 2)
        log.append("done")
        cache["b"] = x + 1
        cache["a"] += 1
        STATE["calls"] += 1
        return x

    opt, _ = _compile(fn)
    before_log, before_cache = log, cache
    x = torch.randn(2)
    opt(x)
    assert log is before_log and cache is before_cache
    assert len(log) == 2 and same(log[0], x * 2) and log[1] == "done"
    assert cache["a"] == 2 and same(cache["b"], x + 1)
    assert STATE["calls"] == 1


def test_list_setitem_and_pop_on_existing_list():
    items = [torch.ones(2), torch.ones(2) * 2, 3]

    def fn(x):
        items[0] = x
        last = items.pop()
        return x * last

    opt, _ = _compile(fn)
    x = torch.randn(2)
    assert same(opt(x), x * 3)
    assert len(items) == 2 and items[0] is x


def test_nonlocal_write():
    count = 0

    def fn(x):
        nonlocal count
        count += 1
        return x + count

    opt, _ = _compile(fn)
    assert same(opt(torch.zeros(1)), torch.ones(1))
    assert count == 1


def test_inplace_ops_on_inputs():
    def fn(x, y):
        x.mul_(2)
        y[0] = 7.0
        return x + y

    opt, _ = _compile(fn)
    x, y = torch.ones(3), torch.zeros(3)
    out = opt(x, y)
    assert same(x, torch.full((3,), 2.0)) and y[0].item() == 7.0
    assert same(out, torch.tensor([9.0, 2.0, 2.0]))


def test_side_effects_before_a_graph_break_happen_once_in_order():
    events = []

    def fn(x):
        events.append("before")
        print("break")
        events.append("after")
        return x + 1

    torchkiln.reset()
    opt = torchkiln.compile(fn, backend=CompileCounter())
    opt(torch.ones(1))
    assert events == ["before", "after"]


def test_failed_capture_leaves_no_half_applied_state():
    box = {"n": 0}

    def fn(x):
        box["n"] = 1
        raise_if_needed = torch.manual_seed  # untraceable: breaks here
        raise_if_needed(0)
        return x

    torchkiln.reset()
    opt = torchkiln.compile(fn, backend=CompileCounter())
    opt(torch.ones(1))
    assert box["n"] == 1


def test_set_grad_enabled_as_a_statement_persists_after_the_frame():
    def fn(x):
        y = x * x
        torch.set_grad_enabled(False)
        return y.clone(), y

    opt, cnt = _compile(fn)
    x = torch.ones(3, requires_grad=True)
    try:
        a, b = opt(x)
        assert not torch.is_grad_enabled()
        assert a.grad_fn is None and b.grad_fn is not None
    finally:
        torch.set_grad_enabled(True)
    opt(x)
    torch.set_grad_enabled(True)
    assert cnt.frame_count == 1  # the guard holds the grad mode at entry, not at exit


def test_value_read_from_an_attribute_later_reassigned_keeps_the_old_object():
    # ExitStack.pop_all: new._cbs = self._cbs; self._cbs = deque(). The rebuilt `new`
    # read self._cbs after the replayed reassignment (an empty deque): callbacks were lost.
    import collections

    class Stack:
        def __init__(self):
            self.cbs = collections.deque()

        def pop_all(self):
            new = type(self)()
            new.cbs = self.cbs
            self.cbs = collections.deque()
            return new

    def f(x, stack):
        new = stack.pop_all()
        return x + len(new.cbs), new

    stack = Stack()
    stack.cbs.append(3)
    expected, _ = f(torch.ones(1), stack)
    stack = Stack()
    stack.cbs.append(3)
    torchkiln.reset()
    got, new = torchkiln.compile(f, backend="eager")(torch.ones(1), stack)
    assert torch.equal(got, expected) and list(new.cbs) == [3] and not stack.cbs


def test_mutation_of_state_reached_through_a_torch_module_attribute():
    # torch.<attr> was folded to a constant: the list append and the object's method ran
    # once, at trace time, on a copy, and no call ever changed the real objects.
    class Queue:
        def __init__(self):
            self.items = []

        def push(self, v):
            self.items.append(v)

    def f(x):
        torch.nn._kiln_test_queue.push(1)
        torch._kiln_test_list.append(2)
        return x + 1

    torch.nn._kiln_test_queue, torch._kiln_test_list = Queue(), []
    try:
        compiled, _ = _compile(f)
        for _ in range(3):
            compiled(torch.ones(2))
        assert torch.nn._kiln_test_queue.items == [1, 1, 1] and torch._kiln_test_list == [2, 2, 2]
    finally:
        del torch.nn._kiln_test_queue, torch._kiln_test_list
