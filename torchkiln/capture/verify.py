"""Checks of the code objects capture generates, before they ever run.

CPython trusts bytecode: a code object whose ``co_stacksize`` is too small, whose
exception table sends an exception to a handler at the wrong stack depth, or whose
cell indices do not match its closure corrupts memory instead of raising.  Capture
builds code objects of its own (resume functions, see :mod:`.resume`), so each one is
checked here first; one that fails is never run: :func:`verify_code` raises
:class:`InvalidCode`, and ``convert_frame`` runs the frame eagerly with one warning.

Checked (CPython 3.11 / 3.12 layouts):

- stack depth: the bytecode is simulated along every path (jumps, fall-through and
  exception-table handlers) with ``dis.stack_effect``; the depth never goes below 0,
  is the same wherever paths meet, and never exceeds ``co_stacksize``;
- exception table: each entry's range lies inside the code and starts/ends on
  instruction boundaries, its handler is an instruction, and the stack is at least the
  entry's depth wherever the entry covers an instruction;
- operands: local, constant, name and cell indices are in range; ``MAKE_CELL`` names a
  cell variable, ``COPY_FREE_VARS`` copies exactly ``co_freevars``; the closure given
  holds one cell per free variable;
- line table: ``co_lines()`` / ``co_positions()`` decode, and their ranges lie in the code.

TorchDynamo relies on its own bytecode analysis (``stacksize_analysis``) when it
builds code; this is the same idea as a separate gate.
"""
from __future__ import annotations

import dis
import sys
import types

PY312 = sys.version_info >= (3, 12)

_UNCONDITIONAL = {"JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP_ABSOLUTE", "JUMP",
                  "JUMP_NO_INTERRUPT"}
_TERMINAL = {"RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE"}
_LOCAL_OPS = {"LOAD_FAST", "STORE_FAST", "DELETE_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR",
              "STORE_FAST_MAYBE_NULL"}
_CELL_OPS = {"LOAD_DEREF", "STORE_DEREF", "DELETE_DEREF", "LOAD_CLOSURE", "MAKE_CELL", "LOAD_CLASSDEREF",
             "LOAD_FROM_DICT_OR_DEREF"}


class InvalidCode(Exception):
    """A generated code object that must not run; the message says which check failed."""


def _exception_entries(code: types.CodeType) -> list:
    return list(dis._parse_exception_table(code))


def verify_code(code: types.CodeType, closure: tuple | None = None) -> None:
    """Raise :class:`InvalidCode` when ``code`` (run with ``closure``) could crash CPython.

    ``closure`` is the tuple of cells the function will get (``None`` for no closure).
    Returns None when every check passes.
    """
    where = f"{code.co_name} ({code.co_filename}:{code.co_firstlineno})"
    try:
        _verify(code, closure)
    except InvalidCode as e:
        raise InvalidCode(f"{where}: {e}") from None
    except Exception as e:  # noqa: BLE001 - dis raises on operands out of range, corrupt tables
        raise InvalidCode(f"{where}: does not decode ({type(e).__name__}: {e})") from None


def _verify(code: types.CodeType, closure) -> None:
    instructions = list(dis.get_instructions(code))
    if not instructions:
        raise InvalidCode("no instructions")
    size = len(code.co_code)
    by_offset = {ins.offset: ins for ins in instructions}
    _check_closure(code, closure)
    for ins in instructions:
        _check_operand(code, ins)
    entries = _exception_entries(code)
    for e in entries:
        if not (0 <= e.start < e.end <= size):
            raise InvalidCode(f"exception-table range {e.start}..{e.end} outside the code (size {size})")
        if e.start not in by_offset:
            raise InvalidCode(f"exception-table range starts inside an instruction ({e.start})")
        if e.target not in by_offset:
            raise InvalidCode(f"exception handler {e.target} is not an instruction")
        if e.depth < 0:
            raise InvalidCode(f"exception handler {e.target} at negative depth {e.depth}")
    _check_stack(code, instructions, by_offset, entries)
    _check_lines(code, size)


def _check_closure(code: types.CodeType, closure) -> None:
    n_free = len(code.co_freevars)
    given = len(closure) if closure else 0
    if given != n_free:
        raise InvalidCode(f"{n_free} free variables {code.co_freevars} but a closure of {given} cells")
    for cell in closure or ():
        if not isinstance(cell, types.CellType):
            raise InvalidCode(f"closure item {cell!r} is not a cell")


def _check_operand(code: types.CodeType, ins) -> None:
    name, arg = ins.opname, ins.arg
    if name in _LOCAL_OPS and not (0 <= arg < code.co_nlocals):
        raise InvalidCode(f"{name} {arg} at {ins.offset}: only {code.co_nlocals} locals")
    if name in ("LOAD_CONST", "RETURN_CONST") and not (0 <= arg < len(code.co_consts)):
        raise InvalidCode(f"{name} {arg} at {ins.offset}: only {len(code.co_consts)} constants")
    if name in _CELL_OPS:
        if ins.argval not in code.co_cellvars and ins.argval not in code.co_freevars:
            raise InvalidCode(f"{name} {ins.argval!r} at {ins.offset} is neither a cell nor a free variable")
        if name == "MAKE_CELL" and ins.argval not in code.co_cellvars:
            raise InvalidCode(f"MAKE_CELL {ins.argval!r} at {ins.offset} is not a cell variable")
    if name == "COPY_FREE_VARS" and arg != len(code.co_freevars):
        raise InvalidCode(f"COPY_FREE_VARS {arg} but {len(code.co_freevars)} free variables")
    if ins.opcode in dis.hasname:
        index = arg >> 1 if name == "LOAD_GLOBAL" or (PY312 and name in ("LOAD_ATTR", "LOAD_SUPER_ATTR")) else arg
        if name == "LOAD_SUPER_ATTR":
            index = arg >> 2
        if not (0 <= index < len(code.co_names)):
            raise InvalidCode(f"{name} {arg} at {ins.offset}: only {len(code.co_names)} names")


def _effect(ins, jump: bool) -> int:
    if ins.opname == "RETURN_GENERATOR":
        return 1  # the generator resumes with the sent value pushed (the POP_TOP after it)
    if ins.opcode < dis.HAVE_ARGUMENT:
        return dis.stack_effect(ins.opcode)
    return dis.stack_effect(ins.opcode, ins.arg, jump=jump)


def _check_stack(code, instructions, by_offset, entries) -> None:
    """Simulate the stack depth along every path from the entry and every handler."""
    index_of = {ins.offset: i for i, ins in enumerate(instructions)}
    depth_at: dict[int, int] = {}
    work = [(instructions[0].offset, 0)]
    max_depth = 0

    def reach(offset, depth, source):
        if offset not in by_offset:
            raise InvalidCode(f"{source}: jump to {offset}, not an instruction")
        if depth < 0:
            raise InvalidCode(f"{source}: stack underflow ({depth})")
        seen = depth_at.get(offset)
        if seen is None:
            depth_at[offset] = depth
            work.append((offset, depth))
        elif seen != depth:
            raise InvalidCode(f"{source}: reaches offset {offset} at stack depth {depth}, elsewhere {seen}")

    while work:
        offset, depth = work.pop()
        i = index_of[offset]
        while True:
            ins = instructions[i]
            max_depth = max(max_depth, depth)
            for e in entries:
                if e.start <= ins.offset < e.end:
                    if depth < e.depth:
                        raise InvalidCode(f"{ins.opname} at {ins.offset}: stack depth {depth} below its exception "
                                          f"handler's {e.depth} (handler {e.target})")
                    reach(e.target, e.depth + int(e.lasti) + 1, f"handler of {ins.opname} at {ins.offset}")
                    break  # the innermost (first matching) entry applies
            name = ins.opname
            is_jump = ins.opcode in dis.hasjrel or ins.opcode in dis.hasjabs
            if is_jump:
                after = depth + _effect(ins, jump=True)
                reach(ins.argval, after, f"{name} at {ins.offset}")
            if name in _TERMINAL or name in _UNCONDITIONAL:
                break
            depth += _effect(ins, jump=False)
            if depth < 0:
                raise InvalidCode(f"{name} at {ins.offset}: stack underflow")
            max_depth = max(max_depth, depth)
            i += 1
            if i >= len(instructions):
                raise InvalidCode(f"execution runs past the last instruction ({name} at {ins.offset})")
            nxt = instructions[i].offset
            seen = depth_at.get(nxt)
            if seen is not None:
                if seen != depth:
                    raise InvalidCode(f"{name} at {ins.offset} falls through to {nxt} at stack depth {depth}, "
                                      f"elsewhere {seen}")
                break
            depth_at[nxt] = depth
    if max_depth > code.co_stacksize:
        raise InvalidCode(f"stack reaches depth {max_depth} but co_stacksize is {code.co_stacksize}")


def _check_lines(code: types.CodeType, size: int) -> None:
    try:
        lines = list(code.co_lines())
        positions = list(code.co_positions())
    except Exception as e:  # noqa: BLE001 - a corrupt table may raise anything
        raise InvalidCode(f"line table does not decode: {e}") from None
    for start, end, _ in lines:
        if not (0 <= start <= end <= size):
            raise InvalidCode(f"line-table range {start}..{end} outside the code (size {size})")
    if len(positions) != size // 2:
        raise InvalidCode(f"position table has {len(positions)} entries for {size // 2} code units")
