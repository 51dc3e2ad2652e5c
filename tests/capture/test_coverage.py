"""Ordinary Python in model code is captured into the graph (one frame, no graph break)
and computes what eager computes."""
import collections
import contextlib
import copy
import dataclasses
import functools
import operator

import torch

import torchkiln
from torchkiln.testing import CompileCounter

X = torch.ones(3)


def one_graph(fn, *args):
    torchkiln.reset()
    cnt = CompileCounter()
    expected = fn(*args)
    got = torchkiln.compile(fn, backend=cnt)(*args)
    assert repr(got) == repr(expected), f"{got!r} != {expected!r}"
    assert cnt.frame_count == 1, cnt.frame_count
    assert not torchkiln.explain(fn)(*args).break_reasons
    return got


def test_functools_partial_construct_and_call():
    def f(x):
        add2 = functools.partial(torch.add, alpha=2)
        scale = functools.partial(lambda a, b, c=1: a * b + c, 3)
        nested = functools.partial(scale, c=5)
        return add2(x, x), scale(x), nested(x), nested.args, sorted(nested.keywords)

    one_graph(f, X)


def test_partial_argument():
    def f(x, p):
        return p(x)

    one_graph(f, X, functools.partial(torch.mul, 4))


def test_map_filter_zip_with_user_functions():
    def f(x):
        a = list(map(lambda t: t + 1, [x, x * 2]))
        b = list(filter(lambda n: n > 1, [1, 2, 3]))
        c = [p * q for p, q in zip([x, x], [2, 3])]
        return a, b, c

    one_graph(f, X)


def test_operator_module_functions():
    def f(x):
        return (operator.add(x, 1), operator.itemgetter(1)([x, x + 1]), operator.itemgetter(0, 2)((x, 1, 2)),
                operator.attrgetter("shape")(x), operator.methodcaller("sum", dim=0)(x), operator.mul(2, 3),
                operator.neg(x), operator.truth([]))

    one_graph(f, X)


def test_ordereddict_defaultdict_counter_deque_methods():
    def f(x):
        od = collections.OrderedDict(a=1)
        od["b"] = x
        od.move_to_end("a")
        dd = collections.defaultdict(list)
        dd["k"].append(x)
        c = collections.Counter([1, 1, 2])
        dq = collections.deque([1, 2], maxlen=3)
        dq.extend([3, 4])
        dq.popleft()
        return list(od.keys()), od["b"] + dd["k"][0], c.most_common(1), list(dq)

    one_graph(f, X)


NT = collections.namedtuple("NT", "a b")


@dataclasses.dataclass
class DC:
    a: torch.Tensor
    b: int = 2


def test_namedtuple_and_dataclass_construction():
    def f(x):
        n = NT(x, b=3)
        d = DC(x)
        return n.a + n.b + d.a * d.b, n._fields

    one_graph(f, X)


class V:
    def __init__(self, v):
        self.v = v

    def __eq__(self, o):
        return self.v == o.v

    def __lt__(self, o):
        return self.v < o.v

    def __len__(self):
        return 3

    def __getitem__(self, i):
        return self.v + i

    def __iter__(self):
        return iter([self.v, self.v + 1])

    def __contains__(self, o):
        return o == 2

    def __call__(self, t):
        return t * self.v

    def __bool__(self):
        return self.v > 0


def test_user_class_dunder_methods():
    def f(x):
        a, b = V(1), V(2)
        r = [a == b, a != b, a < b, b > a, len(a), a[1], list(a), 2 in a, bool(a), sorted([b, a])[0].v]
        if a:
            x = x + 1
        return r, a(x)

    one_graph(f, X)
    one_graph(lambda v, x: (len(v), v[1], list(v), 3 in v, bool(v), v(x)), V(2), X)


def test_match_statement_every_match_opcode():
    def f(x):
        out = []
        for v in [1, (1, 2), {"k": 3, "j": 4}, NT(1, 2), [1, 2, 3], "s", DC(x), 2.5]:
            match v:
                case 1:
                    out.append("one")
                case (a, b) if not isinstance(v, NT):
                    out.append(a + b)
                case {"k": k, **rest}:
                    out.append((k, rest))
                case NT(a=p, b=q):
                    out.append(p * q)
                case [a, *others]:
                    out.append(len(others))
                case DC(a=t, b=2):
                    out.append(t.sum())
                case str():
                    out.append("str")
                case float(z):
                    out.append(z)
        return out

    one_graph(f, X)


def test_grad_mode_decorators_on_inner_functions():
    def f(x):
        @torch.no_grad()
        def inner(t):
            return t * 2

        @torch.enable_grad()
        def inner2(t):
            return t * 3

        a = inner(x)
        return a.requires_grad, inner2(x).requires_grad, a

    one_graph(f, torch.ones(3, requires_grad=True))


class CM:
    def __init__(self, log):
        self.log = log

    def __enter__(self):
        self.log.append("enter")
        return 2

    def __exit__(self, *exc):
        self.log.append("exit")
        return False


@contextlib.contextmanager
def scaled(log, t):
    log.append("before")
    yield t * 2
    log.append("after")


def test_user_context_managers():
    def f(x):
        log = []
        with CM(log) as k:
            log.append("body")
            x = x * k
        with scaled(log, x) as y:
            log.append("body2")
            x = x + y
        return x, log

    got = one_graph(f, X)
    assert got[1] == ["enter", "body", "exit", "before", "body2", "after"]


def test_generators_consumed_lazily_inside_the_function():
    def f(x):
        log = []

        def gen(n):
            for i in range(n):
                log.append(i)
                yield x + i

        g = gen(3)
        first = next(g)
        log.append("between")
        rest = list(g)
        return first, rest, log, sum(t.sum() for t in gen(2))

    got = one_graph(f, X)
    assert got[2][:5] == [0, "between", 1, 2, 0]


def test_compiled_function_called_from_compiled_function():
    inner = torchkiln.compile(lambda t: t.sin() + 1, backend="eager")

    def f(x):
        return inner(x) * 2

    one_graph(f, X)


class _Config:
    def __init__(self):
        self.is_encoder_decoder = True
        self.decoder_layers = 2
        self.names = ["a", "b"]

    def to_dict(self):
        return dict(self.__dict__)


def test_deepcopy_of_a_plain_data_config_in_the_graph():
    def f(x, cfg):
        c = copy.deepcopy(cfg)
        for key in c.to_dict():
            if key.startswith("decoder"):
                value = getattr(c, key)
                delattr(c, key)
                setattr(c, "num_layers", value)
        c.names.append("c")
        return x * c.num_layers, len(cfg.names), hasattr(cfg, "num_layers")

    cfg = _Config()
    one_graph(f, X, cfg)
    cfg.decoder_layers = 5  # the copied state is guarded: a change recompiles
    torchkiln.reset()
    opt = torchkiln.compile(f, backend="eager")
    opt(X, _Config())
    assert torch.equal(opt(X, cfg)[0], X * 5)


@functools.lru_cache
def _cached_flag():
    return True


def test_lru_cache_function_and_parametrized_weight_norm():
    conv = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(4, 4, 3), dim=2)

    def f(x):
        return conv(x) if _cached_flag() else x

    one_graph(f, torch.randn(1, 4, 10))


def test_break_inside_user_context_manager_block_reaches_its_exit():
    def f(x):
        with contextlib.suppress(TypeError):
            x = x + 1
            len(5)
            x = x + 100
        return x

    torchkiln.reset()
    assert torch.equal(torchkiln.compile(f, backend="eager")(X), f(X))
