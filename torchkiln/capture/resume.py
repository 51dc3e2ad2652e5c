"""Resume functions: the rest of a frame's bytecode after a graph break.

A resume function's code is the original code object with a prologue: it takes the
values live on the stack (``___stack0``…, NULLs are re-pushed with PUSH_NULL) and the
live locals as parameters, pushes the stack, and jumps to the instruction after the
break.  The original exception table is kept, so ``with``/``try`` regions around the
resume point still work (as TorchDynamo's ``ContinueExecutionCache`` arranges).
Every code object made here passes :func:`~.verify.verify_code` before it is used.
Code objects are cached per (code, resume position, stack layout, live locals) so
the frontend's per-code cache is shared across recompiles.  A resume function that
breaks again resumes from the *original* code (each resume code remembers, per
instruction, where it came from), as TorchDynamo's ``ContinueExecutionCache`` does: a
break inside a loop then reuses one resume function for every iteration instead of
nesting a new one (and a new capture) per iteration.
"""
from __future__ import annotations

import types

from bytecode import Bytecode, Instr, Label
from bytecode.instr import InstrLocation

from .verify import verify_code

_cache: dict[tuple, types.CodeType] = {}
# resume code -> (original code, its abstract Bytecode, the original's items, the body items it kept)
_origins: dict[types.CodeType, tuple] = {}


def resume_code(code: types.CodeType, position: int, stack_nulls: tuple[bool, ...], local_names: tuple[str, ...],
                lineno: int, cell_names: tuple[str, ...] = (), raising: bool = False) -> types.CodeType:
    """Code resuming ``code`` at item ``position`` of ``Bytecode.from_code(code)``.

    ``stack_nulls[i]`` is True where stack slot ``i`` holds CPython's NULL.  The new code
    takes ``(*non-null stack values, *local_names)`` positionally; the locals named in
    ``cell_names`` are passed as cell objects, so their MAKE_CELL is dropped.

    ``raising=True`` makes a *handler resume*: it takes the exception first
    (``(___exc, *stack values, *locals)``) and raises it from just before item
    ``position``, inside the same exception-table range, so the frame's own
    ``except``/``finally``/``with`` handlers see it exactly as when the breaking
    instruction raised there eagerly (CPython pops the stack to the handler's depth).
    The raise sits behind a jump, so code reaching ``position`` by falling through (a
    loop's next iteration) runs on unchanged.
    """
    key = (code, position, stack_nulls, local_names, cell_names, raising)
    cached = _cache.get(key)
    if cached is not None:
        return cached
    # The stack at every instruction after the resume point is the original's, so the
    # exception table keeps the original depths (the library's default decodes them as 0).
    bc, items = _source_items(code)
    items = list(items)
    header_end = next(i for i, ins in enumerate(items) if isinstance(ins, Instr) and ins.name == "RESUME")
    header = [ins for ins in items[: header_end + 1]
              if not (isinstance(ins, Instr) and ins.name == "MAKE_CELL" and ins.arg.name in cell_names)]
    target = Label()
    body = items[header_end + 1:]
    body.insert(position - header_end - 1, target)
    if raising:
        # The target label sits right before item ``position``, after any TryBegin of its range.
        at = body.index(target)
        skip = Label()
        body[at: at + 1] = [Instr("JUMP_FORWARD", skip, lineno=lineno), target,
                            Instr("LOAD_FAST", "___exc", lineno=lineno), Instr("LOAD_CONST", None, lineno=lineno),
                            Instr("STORE_FAST", "___exc", lineno=lineno), Instr("RAISE_VARARGS", 1, lineno=lineno),
                            skip]
    stack_names = [f"___stack{i}" for i, null in enumerate(stack_nulls) if not null]
    prologue = []
    names = iter(stack_names)
    for null in stack_nulls:
        prologue.append(Instr("PUSH_NULL", lineno=lineno) if null else Instr("LOAD_FAST", next(names), lineno=lineno))
    prologue.append(Instr("JUMP_FORWARD", target, lineno=lineno))
    new = Bytecode(header + prologue + body)
    new.argnames = ["___exc"] * raising + stack_names + list(local_names)
    new.argcount = len(new.argnames)
    new.posonlyargcount = 0
    new.kwonlyargcount = 0
    new.name = f"torchkiln_{'handle' if raising else 'resume'}_in_{code.co_name}_at_{lineno}"
    if hasattr(new, "qualname"):
        new.qualname = new.name
    new.filename = bc.filename
    new.first_lineno = bc.first_lineno
    new.flags = bc.flags & ~0x0C  # no *args / **kwargs
    new.freevars = list(bc.freevars)
    new.cellvars = list(bc.cellvars)
    new.docstring = None
    result = new.to_code(stacksize=code.co_stacksize + len(stack_nulls) + 2, compute_exception_stack_depths=False)
    verify_code(result, _placeholder_closure(result))  # raises InvalidCode: never run a bad object
    _cache[key] = result
    _origins[result] = (code, new, items, body)  # where its instructions came from (see translator_items, origin)
    return result


_SOURCE_ITEMS: dict[int, tuple] = {}


def _source_items(code: types.CodeType):
    """``Bytecode.from_code(code)`` (with the exception table's depths) and its items,
    decoded once per code: every break of a frame resumes from the same original.  The
    items are shared by the resume codes built from them; nothing mutates them."""
    hit = _SOURCE_ITEMS.get(id(code))
    if hit is None or hit[0] is not code:
        bc = Bytecode.from_code(code, conserve_exception_block_stackdepth=True)
        hit = _SOURCE_ITEMS[id(code)] = (code, bc, tuple(map(_encodable, bc)))  # keeps ``code`` alive
    return hit[1], hit[2]


def _encodable(item):
    """``item`` with a location the ``bytecode`` library encodes as CPython reads it.

    The library (0.19.1) writes a location one or two lines below the previous one with
    columns 128..255 in the "one-line" form, whose column bytes CPython requires below
    128: CPython's line iterator (``co_lines``, tracebacks, ``f_lineno``) then takes a
    column byte for the start of the next entry and every line after it is shifted, the
    last range running past the code (found on transformers' ``deprecate_kwarg`` wrapper,
    whose f-string messages start past column 128; verify_code rightly refused it).
    Such an instruction keeps its lines and drops its columns (tracebacks lose the
    caret under it, nothing else)."""
    loc = getattr(item, "location", None)
    if loc is None or loc.col_offset is None or (loc.col_offset < 128 and (loc.end_col_offset or 0) < 128):
        return item
    item = item.copy()
    item.location = InstrLocation(loc.lineno, None, None, None)
    return item


def translator_items(code: types.CodeType):
    """For a resume code made here: the abstract items it was assembled from (header,
    prologue, the original's body with the target label) and, per item, its position
    in the original's items (None for the header and prologue).  The translator reads
    these instead of decoding the new code again (for a long function, decoding each
    resume code cost more than tracing it); None for any other code."""
    found = _origins.get(code)
    if found is None:
        return None
    _, new, items, body = found
    original_pos = {id(ins): pos for pos, ins in enumerate(items)}
    body_ids = set(map(id, body))
    return list(new), [original_pos.get(id(it)) if id(it) in body_ids else None for it in new]


def origin(code: types.CodeType, position: int | None) -> tuple[types.CodeType, int]:
    """``(code to resume from, position)``: a resume code's positions (as the translator
    reads them, see :func:`translator_items`) are its original's; other codes' are their own."""
    found = _origins.get(code)
    if found is not None:
        code = found[0]
    if position is None:
        from .variables.base import unsupported

        unsupported("graph break in a resume function's prologue")
    return code, position


def _placeholder_closure(code: types.CodeType):
    return tuple(types.CellType() for _ in code.co_freevars) or None


def resume_function(fn: types.FunctionType, position: int, stack_nulls, local_names, lineno,
                    cell_names=(), raising=False) -> types.FunctionType:
    """The resume function of ``fn`` (see :func:`resume_code`), with ``fn``'s globals and
    closure.  Raises :class:`~.verify.InvalidCode` when the code fails verification."""
    root, position = origin(fn.__code__, position)
    code = resume_code(root, position, tuple(stack_nulls), tuple(local_names), lineno, tuple(cell_names), raising)
    if len(code.co_freevars) != len(fn.__closure__ or ()):
        verify_code(code, fn.__closure__)  # raises: the closure does not fit
    return types.FunctionType(code, fn.__globals__, code.co_name, None, fn.__closure__)
