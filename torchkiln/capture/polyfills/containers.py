"""Polyfills of the list/tuple methods that compare values (``index``, ``count``,
``remove``, ``sort``, ``in``): CPython compares with ``is`` first, then ``==``; ``sort``
is stable, uses only ``<`` and keeps equal items in order under ``reverse=True``.
Methods that only move items run natively (see ``variables/containers.py``)."""
import sys

__torchkiln_polyfill__ = True


def _bounds(n, start, stop):
    if start < 0:
        start += n
        if start < 0:
            start = 0
    if stop < 0:
        stop += n
        if stop < 0:
            stop = 0
    return start, min(stop, n)


def list_index(self, value, start=0, stop=sys.maxsize, /):
    start, stop = _bounds(len(self), start.__index__(), stop.__index__())
    for i in range(start, stop):
        item = self[i]
        if item is value or item == value:
            return i
    raise ValueError(f"{type(self).__name__}.index(x): x not in {type(self).__name__}")


def seq_count(self, value, /):
    n = 0
    for item in self:
        if item is value or item == value:
            n += 1
    return n


def list_remove(self, value, /):
    for i in range(len(self)):
        item = self[i]
        if item is value or item == value:
            del self[i]
            return None
    raise ValueError("list.remove(x): x not in list")


def seq_contains(self, value, /):
    for item in self:
        if item is value or item == value:
            return True
    return False


def _merge_sort(keys, order):
    """``order`` (indices) stably sorted by ``keys[i]`` with ``<`` only."""
    if len(order) <= 1:
        return order
    mid = len(order) // 2
    left = _merge_sort(keys, order[:mid])
    right = _merge_sort(keys, order[mid:])
    out = []
    i = j = 0
    while i < len(left) and j < len(right):
        if keys[right[j]] < keys[left[i]]:
            out.append(right[j])
            j += 1
        else:
            out.append(left[i])
            i += 1
    return out + left[i:] + right[j:]


def list_sort(self, /, *, key=None, reverse=False):
    items = list(self)
    if reverse:
        items.reverse()
    keys = items if key is None else [key(item) for item in items]
    order = _merge_sort(keys, list(range(len(items))))
    result = [items[i] for i in order]
    if reverse:
        result.reverse()
    self[:] = result
    return None


METHODS = {(list, "index"): list_index, (tuple, "index"): list_index, (list, "count"): seq_count,
           (tuple, "count"): seq_count, (list, "remove"): list_remove, (list, "__contains__"): seq_contains,
           (tuple, "__contains__"): seq_contains, (list, "sort"): list_sort}
