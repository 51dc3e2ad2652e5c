"""``TORCHKILN_TRACE=DIR``: a structured trace of everything the compiler did.

Each process appends JSON lines to ``DIR/trace_<pid>.jsonl``, one record per event::

    {"ts": 0.0123, "compile_id": "0/1", "kind": "graph_break", "data": {...}}

``ts`` is seconds since the process's first record; ``compile_id`` is
``"<frame id>/<recompile number>"`` as torch's ``[0/1]`` (frame ids count code objects
in the order they are first compiled, recompile numbers count compiles of one code
object), or None for events outside a frame compile (a backward compiled on first
use).  ``torchkiln report DIR`` renders the records as one HTML page.

Stages emit with ``if trace.enabled: trace.emit(kind, {...})`` -- the module-level
flag is checked before any payload is built, so a trace that is off costs one
attribute read.  Kinds and their ``data`` are listed in docs/interfaces.md.
``trace.frame(...)`` and ``trace.stage(name)`` are context managers that set the
compile id and time a stage (``stage`` records; they also feed the terminal progress
display of :mod:`.progress`); both are a shared no-op object when trace and progress are off.
"""
from __future__ import annotations

import contextlib
import itertools
import json
import os
import sys
import threading
import time
import types
import weakref
from typing import Any

from . import progress

enabled = False
"""True while a trace directory is set; check it before building a payload."""

_dir: str | None = None
_file = None
_lock = threading.Lock()
_t0 = 0.0
_ids: list[str] = []  # the compile-id stack (a frame compiled while another captures nests)
_frame_ids: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # code -> [frame id, compiles so far]
_next_frame_id = itertools.count()


def enable(directory: str) -> None:
    """Trace into ``directory`` (created if missing), as ``TORCHKILN_TRACE=directory`` does."""
    global enabled, _dir, _t0
    directory = os.path.abspath(directory)
    if enabled and directory == _dir:
        return
    disable()
    os.makedirs(directory, exist_ok=True)
    _dir = directory
    _t0 = time.perf_counter()
    enabled = True
    _refresh_active()


def disable() -> None:
    """Stop tracing and close the trace file."""
    global enabled, _dir, _file
    with _lock:
        if _file is not None:
            _file.close()
        _file = None
    enabled = False
    _dir = None
    _refresh_active()


def trace_dir() -> str | None:
    """The directory being traced into, or None."""
    return _dir


def path() -> str | None:
    """This process's trace file (it exists after the first record)."""
    return None if _dir is None else os.path.join(_dir, f"trace_{os.getpid()}.jsonl")


def compile_id() -> str | None:
    """The compile id (``"frame/recompile"``) of the frame being compiled, or None."""
    return _ids[-1] if _ids else None


def emit(kind: str, data: dict[str, Any], compile_id: str | None = ...) -> None:
    """Append one record of ``kind`` (see docs/interfaces.md) to the trace.

    ``data`` must be JSON-serialisable (anything else is written as ``str(value)``).
    ``compile_id`` defaults to the current one.  Does nothing when tracing is off;
    never raises for a write error (a trace must not break a compile).
    """
    global _file
    if not enabled:
        return
    cid = (_ids[-1] if _ids else None) if compile_id is ... else compile_id
    with _lock:
        try:
            if _file is None:
                _file = open(path(), "a", buffering=1, encoding="utf-8")
                _file.write(json.dumps({"ts": 0.0, "compile_id": None, "kind": "process", "data": {
                    "pid": os.getpid(), "argv": sys.argv, "label": os.environ.get("TORCHKILN_TRACE_LABEL", ""),
                    "wall_time": time.time()}}) + "\n")
            record = {"ts": round(time.perf_counter() - _t0, 6), "compile_id": cid, "kind": kind, "data": data}
            _file.write(json.dumps(record, default=str) + "\n")
        except OSError:
            pass


class _Null:
    """The shared no-op context manager returned while trace and progress are off."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_NULL = _Null()
_active = False  # trace or progress on


def _refresh_active() -> None:
    global _active
    _active = enabled or progress.enabled


def frame(code: types.CodeType):
    """Context manager around one frame compile: sets the compile id, emits a ``frame``
    record and the ``capture`` stage (the whole frame compile, backend included)."""
    if not _active:
        return _NULL
    return _frame(code)


@contextlib.contextmanager
def _frame(code):
    ids = _frame_ids.get(code)
    if ids is None:
        ids = _frame_ids[code] = [next(_next_frame_id), 0]
    cid = f"{ids[0]}/{ids[1]}"
    ids[1] += 1
    _ids.append(cid)
    top = len(_ids) == 1
    try:
        if enabled:
            emit("frame", {"name": code.co_name, "qualname": getattr(code, "co_qualname", code.co_name),
                           "filename": code.co_filename, "lineno": code.co_firstlineno,
                           "code": repr(code)})
        if top:
            progress.start_frame(f"{code.co_name} [{cid}]")
        with stage("capture"):
            yield cid
    finally:
        _ids.pop()
        if top:
            progress.end_frame()


def stage(name: str):
    """Context manager timing one stage: a ``stage`` record ``{name, start, duration_s}``
    (``start`` in the ``ts`` clock), and the stage shown by the progress display."""
    if not _active:
        return _NULL
    return _stage(name)


@contextlib.contextmanager
def _stage(name):
    outer = progress.current_stage()
    progress.set_stage(name)
    start = time.perf_counter()
    try:
        yield
    finally:
        progress.set_stage(outer)
        if enabled:
            end = time.perf_counter()
            emit("stage", {"name": name, "start": round(start - _t0, 6), "duration_s": round(end - start, 6)})


def _from_env() -> None:
    directory = os.environ.get("TORCHKILN_TRACE")
    if directory:
        enable(directory)
    else:
        _refresh_active()


_from_env()
