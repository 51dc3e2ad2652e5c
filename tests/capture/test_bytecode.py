"""Opcode families of CPython 3.11/3.12 through the symbolic interpreter; every result is
compared with eager and the whole function is one graph (fullgraph=True)."""
import collections
import dataclasses
import math
import operator

import torch

from capture_helpers import check, randn

GLOBAL_SCALE = 3.0
Point = collections.namedtuple("Point", ["x", "y"])


def test_locals_globals_and_arithmetic():
    def f(x, y):
        a = x + y
        b = a * GLOBAL_SCALE - y / 2
        c = b @ y.t()
        d = -c
        d += 1
        d //= 3
        return d ** 2, abs(d) % 5, ~(x > 0), +x

    check(f, randn(3, 3), randn(3, 3), frames=1)


def test_closures_and_cells():
    k = 2.0

    def outer(x):
        scale = 3

        def inner(y):
            return y * scale * k

        return inner(x) + inner(1)

    check(outer, randn(4), frames=1)


def test_nonlocal_in_inlined_closure():
    def f(x):
        total = 0

        def add(v):
            nonlocal total
            total += v

        add(1)
        add(2)
        return x * total

    check(f, randn(3), frames=1)


def _helper(a, b=2, *rest, c, d=4, **extra):
    return a * b + sum(rest) + c * d + sum(extra.values())


def test_calls_with_defaults_kwonly_varargs():
    def f(x):
        r1 = _helper(x, c=1)
        r2 = _helper(x, 3, 5, 6, c=2, d=1, e=7)
        args = (x, 2)
        kw = {"c": 3, "z": 1}
        r3 = _helper(*args, **kw)
        return r1, r2, r3

    check(f, randn(2), frames=1)


def test_compare_is_in():
    def f(x, y, n, s):
        out = x
        if n > 2 and n <= 5 and n != 4:
            out = out + 1
        if s == "relu":
            out = torch.relu(out)
        if y is None:
            out = out * 2
        if y is not None:
            out = out - 1
        if 3 in [1, 2, 3] and "b" not in ("a", "c") and 2 in {1: 0, 2: 0}:
            out = out + 10
        return out, x > y if y is not None else x >= 0

    check(f, randn(3), None, 3, "relu", frames=1)
    check(f, randn(3), randn(3), 7, "gelu", frames=1)


def test_loops_range_list_tuple_dict_zip_enumerate_reversed():
    def f(x):
        for i in range(3):
            x = x + i
        for v in [1, 2]:
            x = x * v
        for v in (0.5,):
            x = x - v
        d = {"a": 1, "b": 2}
        for k in d:
            x = x + d[k]
        for k, v in d.items():
            x = x + v
        for a, b in zip([1, 2], (3, 4)):
            x = x + a * b
        for i, v in enumerate([5, 6], start=1):
            x = x + i * v
        for v in reversed([1, 2, 3]):
            x = x / v
        i = 0
        while i < 3:
            x = x + 1
            i += 1
        for v in range(10):
            if v == 2:
                continue
            if v == 4:
                break
            x = x + v
        else:
            x = x * 100
        return x

    check(f, randn(3), frames=1)


def test_loop_over_tensor_list():
    def f(xs):
        acc = 0
        for t in xs:
            acc = acc + t.sin()
        return acc

    check(f, [randn(2), randn(2), randn(2)], frames=1)


def test_iterate_tensor_rows():
    def f(x):
        return [r * i for i, r in enumerate(x)]

    check(f, randn(3, 2), frames=1)


def test_comprehensions_and_genexps():
    def f(x):
        a = [x * i for i in range(3)]
        b = {i: x + i for i in range(2)}
        c = {i * 2 for i in range(3)}
        d = sum(t.sum() for t in a)
        e = tuple(i for i in range(4) if i % 2)
        return a, b, sorted(c), d, e, any(i > 2 for i in range(4)), all(i < 2 for i in [0, 1])

    check(f, randn(2), frames=1)


def test_unpacking():
    def f(x):
        a, b = x, x + 1
        (c, d), e = (1, 2), 3
        first, *rest = [1, 2, 3, 4]
        *init, last = (x, x * 2, x * 3)
        p, q = x.chunk(2)
        return a + b + c + d + e + first + sum(rest) + last + len(init), p, q

    check(f, randn(4), frames=1)


def test_slicing():
    def f(x, lst):
        y = x[1:3] + x[:2] * x[-2:]
        z = x[::2]
        m = x.view(2, 3)[:, 1:]
        lst2 = lst[1:]
        lst3 = list(lst)
        lst3[0:1] = [9]
        return y, z, m, lst2, lst3, x[None, ..., 0:1]

    check(f, randn(6), [1, 2, 3], frames=1)


def test_build_containers_and_fstrings():
    def f(x, n):
        t = (x, n)
        lst = [x, 1, *[2, 3]]
        s = {1, 2, *{3}}
        d = {"a": x, **{"b": n}}
        name = f"layer_{n}_{'x'!r}_{n:03d}_{1.5:.2f}"
        return x + 1, t, lst, sorted(s), d, name, "%s-%d" % ("a", n), "{}:{}".format("k", n)

    check(f, randn(2), 5, frames=1)


def test_with_grad_mode():
    def f(x):
        with torch.no_grad():
            y = x * 2
        with torch.enable_grad():
            z = x * 3
        with torch.set_grad_enabled(False):
            w = x + 1
        return y, z, w, y.requires_grad, z.requires_grad

    x = randn(3, requires_grad=True)
    cnt = check(f, x, frames=1)
    assert cnt.frame_count == 1


def test_with_autocast():
    def f(x, y):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            z = x @ y
        return z, z.dtype

    check(f, randn(4, 4), randn(4, 4), frames=1)


def test_try_except_without_raise():
    def f(x):
        try:
            y = x + 1
        except ValueError:
            y = x - 1
        finally:
            z = 2
        return y * z

    check(f, randn(3), frames=1)


class Base(torch.nn.Module):
    scale = 2.0

    def forward(self, x):
        return x * self.scale

    @classmethod
    def make(cls, v):
        return v + cls.scale

    @staticmethod
    def helper(v):
        return v - 1

    @property
    def twice(self):
        return self.scale * 2


class Child(Base):
    def forward(self, x):
        y = super().forward(x)
        return y + self.make(1) + self.helper(x) + self.twice + Child.helper(2)

    @classmethod
    def make(cls, v):
        return super().make(v) * 10


def test_super_property_staticmethod_classmethod():
    check(Child(), randn(3), frames=1)


def test_builtins():
    def f(x, lst):
        return (isinstance(x, torch.Tensor), isinstance(lst, (list, tuple)), hasattr(x, "shape"),
                getattr(x, "ndim"), getattr(x, "missing", 7), len(lst), min(lst), max(3, 4), sum(lst),
                sorted(lst, reverse=True), abs(-2), int(2.5), float(3), bool(0), round(2.6), divmod(7, 2),
                list(map(lambda v: v * 2, lst)), list(filter(None, [0, 1, 2])), math.sqrt(16.0),
                operator.add(1, 2), x.size(0) * 2, callable(len), type(3) is int, str(5), tuple(lst))

    check(f, randn(3), [3, 1, 2], frames=0)  # no tensor op: no graph, as torch.compile


def test_namedtuple_and_dataclass():
    @dataclasses.dataclass
    class Out:
        a: torch.Tensor
        b: int = 3

    def f(x):
        p = Point(x, 2)
        o = Out(x + 1)
        return p.x * p.y + p[0], o.a * o.b, Point(*[1, 2])

    check(f, randn(3), frames=1)


def test_tensor_methods_and_attributes():
    def f(x):
        n, c = x.shape
        return (x.view(c, n), x.size(), x.dim(), x.dtype, x.t().contiguous(), x.T, x.float().to(torch.float64),
                x.new_zeros(2), x.sum(1, keepdim=True), x.shape[-1], x.numel(), x.is_floating_point(), x.device,
                x.permute(1, 0).reshape(-1).unsqueeze(0), torch.Size([n, c]), x.transpose(0, 1).is_contiguous())

    check(f, randn(2, 3), frames=1)


def test_tensor_inplace_on_input():
    def f(x):
        x.add_(1)
        x[0] = 5.0
        return x * 2

    check(f, randn(3), frames=1)


def test_torch_functions_and_functional():
    F = torch.nn.functional

    def f(x, w):
        y = F.linear(x, w)
        y = F.gelu(y) + F.softmax(y, dim=-1)
        y = torch.cat([y, y], dim=1)
        z = torch.where(y > 0, y, torch.zeros_like(y))
        return F.layer_norm(z, z.shape[-1:]), torch.finfo(x.dtype).min, torch.is_tensor(x), z.max(dim=1).values

    check(f, randn(2, 4), randn(3, 4), frames=1)


def test_is_compiling_folds_to_true():
    def f(x):
        if torch.compiler.is_compiling():
            return x + 1
        return x - 1

    import torchkiln
    from torchkiln.testing import CompileCounter

    torchkiln.reset()
    cnt = CompileCounter()
    x = randn(3)
    assert torch.equal(torchkiln.compile(f, backend=cnt, fullgraph=True)(x), x + 1)
    assert torch.equal(f(x), x - 1)
    assert cnt.frame_count == 1


def test_string_and_constant_methods():
    def f(x, name):
        parts = name.split(".")
        if name.startswith("layer") and parts[-1].upper() == "W":
            x = x * len(parts)
        return x, ",".join(parts), name.replace(".", "_")

    check(f, randn(2), "layer.1.w", frames=1)


def test_dict_and_list_methods():
    def f(x):
        d = {}
        d["a"] = x
        d.update(b=x + 1)
        d.setdefault("c", 3)
        v = d.pop("c")
        keys = list(d.keys())
        lst = [3, 1, 2]
        lst.append(4)
        lst.extend([5])
        lst.insert(0, 0)
        lst.remove(3)
        lst.sort()
        popped = lst.pop()
        return d["a"] + d.get("b") + v, keys, lst, popped, lst.index(2), lst.count(1), list(d.values())

    check(f, randn(2), frames=1)


def test_user_object_created_in_frame():
    class Acc:
        def __init__(self, start):
            self.total = start

        def add(self, v):
            self.total = self.total + v
            return self

    def f(x):
        acc = Acc(x)
        acc.add(1).add(x)
        return acc.total

    check(f, randn(3), frames=1)


def test_user_object_argument_attributes():
    class Cfg:
        def __init__(self):
            self.scale = 2
            self.act = "relu"

    def f(x, cfg):
        y = x * cfg.scale
        return torch.relu(y) if cfg.act == "relu" else y

    check(f, randn(3), Cfg(), frames=1)


def test_lambda_and_nested_function_defaults():
    def f(x):
        g = lambda a, b=2: a * b  # noqa: E731

        def h(a, *, k=3):
            return a + k

        return g(x), g(x, 3), h(x), h(x, k=1)

    check(f, randn(2), frames=1)


def test_itertools_and_plain_super_init():
    import itertools

    class Holder:
        def __init__(self, v):
            super().__init__()
            self.v = v

    def f(x):
        out = x
        for a, b in itertools.product([1, 2], (3,)):
            out = out + a * b
        for t in itertools.chain([x], (x * 2,)):
            out = out + t
        return out + Holder(2).v, list(itertools.islice(range(10), 2, 5))

    check(f, randn(2), frames=1)
