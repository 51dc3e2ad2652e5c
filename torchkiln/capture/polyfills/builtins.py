"""Polyfills of builtins that take functions or iterate: ``max``/``min`` (``key=``,
``default=``), ``sorted``, ``sum``, ``any``/``all``, ``enumerate``, ``zip`` (``strict=``),
``map``, ``filter``.  Each mirrors CPython's C implementation step for step (the
comparison it uses, which element wins a tie, what it raises)."""
import builtins as _b

__torchkiln_polyfill__ = True


class _NoDefault:
    pass


_NO_DEFAULT = _NoDefault()


def _minmax(name, args, key, default, want_greater):
    if not args:
        raise TypeError(f"{name} expected at least 1 argument, got 0")
    if len(args) == 1:
        items = args[0]
    else:
        if default is not _NO_DEFAULT:
            raise TypeError(f"Cannot specify a default for {name}() with multiple positional arguments")
        items = args
    best = _NO_DEFAULT
    best_key = None
    for item in items:
        k = item if key is None else key(item)
        if best is _NO_DEFAULT:
            best, best_key = item, k
        elif want_greater:
            if k > best_key:
                best, best_key = item, k
        elif k < best_key:
            best, best_key = item, k
    if best is _NO_DEFAULT:
        if default is _NO_DEFAULT:
            raise ValueError(f"{name}() iterable argument is empty")
        return default
    return best


def max_(*args, key=None, default=_NO_DEFAULT):
    return _minmax("max", args, key, default, True)


def min_(*args, key=None, default=_NO_DEFAULT):
    return _minmax("min", args, key, default, False)


def sorted_(iterable, /, *, key=None, reverse=False):
    result = list(iterable)
    result.sort(key=key, reverse=reverse)
    return result


def sum_(iterable, /, start=0):
    if isinstance(start, (str, bytes, bytearray)):
        raise TypeError("sum() can't sum strings [use ''.join(seq) instead]")
    total = start
    for item in iterable:
        total = total + item
    return total


def any_(iterable, /):
    for item in iterable:
        if item:
            return True
    return False


def all_(iterable, /):
    for item in iterable:
        if not item:
            return False
    return True


def enumerate_(iterable, start=0):
    if not isinstance(start, int):
        raise TypeError("enumerate() start must be an integer")  # __index__ objects: the native call
    return _enumerate(iter(iterable), start)


def _enumerate(it, n):
    for item in it:
        yield n, item
        n += 1


def _firsts(i):
    return f"s 1-{i}" if i > 1 else " 1"


def zip_(*iterables, strict=False):
    return _zip([iter(i) for i in iterables], strict)


def _zip(iterators, strict):
    if not iterators:
        return
    while True:
        items = []
        for i in range(len(iterators)):
            for value in iterators[i]:
                items.append(value)
                break
            else:
                if strict and i > 0:
                    raise ValueError(f"zip() argument {i + 1} is shorter than argument{_firsts(i)}")
                if strict:
                    for j in range(1, len(iterators)):
                        for _ in iterators[j]:
                            raise ValueError(f"zip() argument {j + 1} is longer than argument{_firsts(j)}")
                        break
                return
        yield tuple(items)


def map_(function, iterable, /, *iterables):
    if not iterables:
        return _map1(function, iter(iterable))
    return _mapn(function, [iter(iterable)] + [iter(i) for i in iterables])


def _map1(function, it):
    for item in it:
        yield function(item)


def _mapn(function, iterators):
    while True:
        items = []
        for it in iterators:
            for value in it:
                items.append(value)
                break
            else:
                return
        yield function(*items)


def filter_(function, iterable, /):
    return _filter(function, iter(iterable))


def _filter(function, it):
    for item in it:
        if function is None:
            if item:
                yield item
        elif function(item):
            yield item


REGISTRY = {_b.max: max_, _b.min: min_, _b.sorted: sorted_, _b.sum: sum_, _b.any: any_, _b.all: all_,
            _b.enumerate: enumerate_, _b.zip: zip_, _b.map: map_, _b.filter: filter_}
