"""Polyfills of ``functools`` and ``itertools`` functions (finite iterators only;
``count``/``cycle`` and an endless ``repeat`` are not polyfilled)."""
import functools
import itertools

__torchkiln_polyfill__ = True


class _NoInitial:
    pass


_NO_INITIAL = _NoInitial()


def reduce_(function, iterable, initial=_NO_INITIAL, /):
    it = iter(iterable)
    if initial is _NO_INITIAL:
        value = _NO_INITIAL
        for value in it:
            break
        if value is _NO_INITIAL:
            raise TypeError("reduce() of empty iterable with no initial value")
    else:
        value = initial
    for item in it:
        value = function(value, item)
    return value


def chain_(*iterables):
    for it in iterables:
        for item in it:
            yield item


def chain_from_iterable_(iterables, /):
    for it in iterables:
        for item in it:
            yield item


def accumulate_(iterable, func=None, *, initial=None):
    total = initial
    first = initial is None
    if initial is not None:
        yield initial
    for item in iterable:
        if first:
            total = item
            first = False
        elif func is None:
            total = total + item
        else:
            total = func(total, item)
        yield total


def starmap_(function, iterable, /):
    for args in iterable:
        yield function(*args)


def takewhile_(predicate, iterable, /):
    for item in iterable:
        if not predicate(item):
            return
        yield item


def dropwhile_(predicate, iterable, /):
    dropping = True
    for item in iterable:
        if dropping and predicate(item):
            continue
        dropping = False
        yield item


def compress_(data, selectors):
    for d, s in zip(data, selectors):
        if s:
            yield d


def pairwise_(iterable, /):
    first = True
    prev = None
    for item in iterable:
        if not first:
            yield prev, item
        prev = item
        first = False


def product_(*iterables, repeat=1):
    pools = [tuple(p) for p in iterables] * repeat
    result = [()]
    for pool in pools:
        result = [x + (y,) for x in result for y in pool]
    for prod in result:
        yield prod


def zip_longest_(*iterables, fillvalue=None):
    pools = [list(it) for it in iterables]
    n = max([len(p) for p in pools], default=0)
    for i in range(n):
        yield tuple(p[i] if i < len(p) else fillvalue for p in pools)


def islice_(iterable, *args):
    s = slice(*args)
    start = 0 if s.start is None else s.start
    stop = s.stop
    step = 1 if s.step is None else s.step
    if start < 0 or (stop is not None and stop < 0) or step <= 0:
        raise ValueError("Indices for islice() must be None or an integer: 0 <= x <= sys.maxsize.")
    for i, item in enumerate(iterable):
        if stop is not None and i >= stop:
            return
        if i >= start and (i - start) % step == 0:
            yield item


def repeat_(obj, *args, **kwargs):
    if not args and "times" not in kwargs:
        raise TypeError("endless itertools.repeat is not polyfilled")
    times = args[0] if args else kwargs.pop("times")
    if kwargs or len(args) > 1:
        raise TypeError("repeat() takes at most 2 arguments")
    for _ in range(times):
        yield obj


REGISTRY = {functools.reduce: reduce_, itertools.chain: chain_, itertools.chain.from_iterable: chain_from_iterable_,
            itertools.accumulate: accumulate_, itertools.starmap: starmap_, itertools.takewhile: takewhile_,
            itertools.dropwhile: dropwhile_, itertools.compress: compress_, itertools.pairwise: pairwise_,
            itertools.product: product_, itertools.zip_longest: zip_longest_, itertools.islice: islice_,
            itertools.repeat: repeat_}
