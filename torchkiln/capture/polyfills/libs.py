"""Polyfills of ``functools`` and ``itertools`` functions.  Each does at construction what
CPython does there (``iter()`` of its arguments, ``product`` reads its pools) and returns a
generator that the capture consumes one item at a time (endless ones included: see
``variables/iterators.py``)."""
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
    return _chain_from(iter(iterables))


def _chain_from(iterables):
    for it in iterables:
        for item in it:
            yield item


def accumulate_(iterable, func=None, *, initial=None):
    return _accumulate(iter(iterable), func, initial)


def _accumulate(it, func, initial):
    total = initial
    first = initial is None
    if initial is not None:
        yield initial
    for item in it:
        if first:
            total = item
            first = False
        elif func is None:
            total = total + item
        else:
            total = func(total, item)
        yield total


def starmap_(function, iterable, /):
    return _starmap(function, iter(iterable))


def _starmap(function, it):
    for args in it:
        yield function(*args)


def takewhile_(predicate, iterable, /):
    return _takewhile(predicate, iter(iterable))


def _takewhile(predicate, it):
    for item in it:
        if not predicate(item):
            return
        yield item


def dropwhile_(predicate, iterable, /):
    return _dropwhile(predicate, iter(iterable))


def _dropwhile(predicate, it):
    dropping = True
    for item in it:
        if dropping and predicate(item):
            continue
        dropping = False
        yield item


def compress_(data, selectors):
    return _compress(iter(data), iter(selectors))


def _compress(data, selectors):
    for d in data:
        for s in selectors:
            break
        else:
            return
        if s:
            yield d


def pairwise_(iterable, /):
    return _pairwise(iter(iterable))


def _pairwise(it):
    for prev in it:
        break
    else:
        return
    for item in it:
        yield prev, item
        prev = item


def product_(*iterables, repeat=1):
    if not isinstance(repeat, int):
        raise TypeError("an integer is required")
    if repeat < 0:
        raise ValueError("repeat argument cannot be negative")
    pools = [tuple(p) for p in iterables] * repeat
    return _product(pools)


def _product(pools):
    result = [()]
    for pool in pools:
        result = [x + (y,) for x in result for y in pool]
    for prod in result:
        yield prod


def zip_longest_(*iterables, fillvalue=None):
    return _zip_longest([iter(i) for i in iterables], fillvalue)


def _zip_longest(iterators, fillvalue):
    if not iterators:
        return
    active = [True] * len(iterators)
    n_active = len(iterators)
    while True:
        items = []
        for i in range(len(iterators)):
            if not active[i]:
                items.append(fillvalue)
                continue
            for value in iterators[i]:
                items.append(value)
                break
            else:
                active[i] = False
                n_active -= 1
                if n_active == 0:
                    return
                items.append(fillvalue)
        yield tuple(items)


def count_(start=0, step=1):
    for value in (start, step):
        if not isinstance(value, (int, float, complex)):
            raise TypeError("a number is required")
    return _count(start, step)


def _count(n, step):
    while True:
        yield n
        n += step


def cycle_(iterable, /):
    return _cycle(iter(iterable))


def _cycle(it):
    saved = []
    for item in it:
        yield item
        saved.append(item)
    if not saved:
        return
    while True:
        for item in saved:
            yield item


def _islice_arg(value, what):
    if value is None:
        return None
    if not isinstance(value, int):  # CPython takes any __index__; the native call does
        raise ValueError(what)
    if value < 0:
        raise ValueError(what)
    return value


def islice_(iterable, *args):
    """CPython's ``islice_next``: consumes exactly the items it skips or yields (never
    the one after ``stop``)."""
    if len(args) == 1:
        start, stop, step = None, args[0], None
        stop = _islice_arg(stop, "Stop argument for islice() must be None or an integer: 0 <= x <= sys.maxsize.")
    elif len(args) in (2, 3):
        start, stop = args[0], args[1]
        step = args[2] if len(args) == 3 else None
        stop = _islice_arg(stop, "Stop argument for islice() must be None or an integer: 0 <= x <= sys.maxsize.")
        start = _islice_arg(start, "Indices for islice() must be None or an integer: 0 <= x <= sys.maxsize.")
    else:
        raise TypeError("islice() takes 2 to 4 arguments")
    start = 0 if start is None else start
    if step is None:
        step = 1
    elif not isinstance(step, int) or step <= 0:
        raise ValueError("Step for islice() must be a positive integer or None.")
    return _islice_gen(iter(iterable), start, stop, step)


def _islice_gen(it, next_index, stop, step):
    count = 0
    while True:
        while count < next_index:
            for _ in it:
                break
            else:
                return
            count += 1
        if stop is not None and count >= stop:
            return
        for item in it:
            break
        else:
            return
        count += 1
        next_index += step
        if stop is not None and next_index > stop:
            next_index = stop
        yield item


def repeat_(obj, times=_NO_INITIAL):
    if times is _NO_INITIAL:
        return _repeat_forever(obj)
    if not isinstance(times, int):
        raise TypeError("an integer is required")
    return _repeat(obj, times)


def _repeat_forever(obj):
    while True:
        yield obj


def _repeat(obj, times):
    for _ in range(times):
        yield obj


REGISTRY = {functools.reduce: reduce_, itertools.chain: chain_, itertools.chain.from_iterable: chain_from_iterable_,
            itertools.accumulate: accumulate_, itertools.starmap: starmap_, itertools.takewhile: takewhile_,
            itertools.dropwhile: dropwhile_, itertools.compress: compress_, itertools.pairwise: pairwise_,
            itertools.product: product_, itertools.zip_longest: zip_longest_, itertools.islice: islice_,
            itertools.repeat: repeat_, itertools.count: count_, itertools.cycle: cycle_}
