"""The symbolic bytecode interpreter (TorchDynamo's InstructionTranslator).

:class:`InstructionTranslator` walks one frame's instructions (CPython 3.11 and 3.12,
decoded with the ``bytecode`` library) over a stack of variable trackers, recording
tensor operations into the frame's :class:`~.output_graph.OutputGraph` and guards as
values are read.  Calls to user functions are inlined by a nested
:class:`InliningInstructionTranslator`.  When an instruction cannot be traced, the
frame is re-traced and stopped at that instruction: the graph so far is compiled and
the transformed code runs the instruction in Python, then continues in a resume
function (see :mod:`.codegen` and :mod:`.resume`).
"""
from __future__ import annotations

import dis
import operator
import sys
import types

import torch
from bytecode import Bytecode, Instr, Label, TryBegin, TryEnd
from bytecode.instr import CellVar, FreeVar

from ..config import config
from ..exc import SkipFrame, Unsupported
from .codegen import RuntimeCodegen, breaking_code, reads_caller_frame, returning_code, wrap_callee
from .guards import entry_global_state, global_state
from .frame import SKIP_MODULES, BreakReason, CacheEntry, LazyLocal, bind_locals, call_with_locals
from . import warm_start
from .resume import resume_function, translator_items
from .source import attr_source, global_source, globals_dict_name, item_source, local_source
from .variables.base import NULL, CellVariable, ConstantVariable, NullVariable, VariableTracker, unsupported
from .variables.builder import wrap, wrap_constant_like
from .variables.builtin import BuiltinVariable
from .variables.containers import (BaseListVariable, DictVariable, DictViewVariable, ListIteratorVariable, ListVariable,
                                   SetVariable, SizeVariable, SliceVariable, TupleVariable, dict_key)
from .variables.ctx_manager import AutocastVariable, GradModeVariable
from .variables.functions import NestedUserFunctionVariable, UserFunctionVariable, bind_args
from .variables.misc import SuperVariable
from .variables.nn_module import NNModuleVariable
from .variables.tensor import SymNodeVariable, TensorVariable
from .variables.user_defined import NewObjectVariable, UserDefinedObjectVariable

PY312 = sys.version_info >= (3, 12)
MAX_INLINE_DEPTH = 48

_BINARY = {
    "ADD": operator.add, "SUBTRACT": operator.sub, "MULTIPLY": operator.mul, "TRUE_DIVIDE": operator.truediv,
    "FLOOR_DIVIDE": operator.floordiv, "REMAINDER": operator.mod, "POWER": operator.pow,
    "MATRIX_MULTIPLY": operator.matmul, "AND": operator.and_, "OR": operator.or_, "XOR": operator.xor,
    "LSHIFT": operator.lshift, "RSHIFT": operator.rshift,
    "INPLACE_ADD": operator.iadd, "INPLACE_SUBTRACT": operator.isub, "INPLACE_MULTIPLY": operator.imul,
    "INPLACE_TRUE_DIVIDE": operator.itruediv, "INPLACE_FLOOR_DIVIDE": operator.ifloordiv,
    "INPLACE_REMAINDER": operator.imod, "INPLACE_POWER": operator.ipow, "INPLACE_MATRIX_MULTIPLY": operator.imatmul,
    "INPLACE_AND": operator.iand, "INPLACE_OR": operator.ior, "INPLACE_XOR": operator.ixor,
    "INPLACE_LSHIFT": operator.ilshift, "INPLACE_RSHIFT": operator.irshift,
}
_INPLACE_TO_BINARY = {operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
                      operator.itruediv: operator.truediv, operator.ifloordiv: operator.floordiv,
                      operator.imod: operator.mod, operator.ipow: operator.pow, operator.imatmul: operator.matmul,
                      operator.iand: operator.and_, operator.ior: operator.or_, operator.ixor: operator.xor,
                      operator.ilshift: operator.lshift, operator.irshift: operator.rshift}
_COMPARE = {"LT": "<", "LE": "<=", "EQ": "==", "NE": "!=", "GT": ">", "GE": ">="}
_CMP_FN = {"<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt,
           ">=": operator.ge}
_DUNDER = {operator.add: "__add__", operator.sub: "__sub__", operator.mul: "__mul__", operator.matmul: "__matmul__",
           operator.truediv: "__truediv__", operator.eq: "__eq__", operator.ne: "__ne__"}


class _Return(Exception):
    def __init__(self, value):
        self.value = value


class Yielded(Exception):
    """YIELD_VALUE of a lazily run generator (see variables/generators.py)."""

    def __init__(self, value):
        self.value = value


class RestartAt(Exception):
    """Raised by the root translator: re-trace the frame and break at instruction ``ip``."""

    def __init__(self, ip, reason, user_stack):
        self.ip = ip
        self.reason = reason
        self.user_stack = user_stack


_DECODED: dict[int, tuple] = {}


def decode(code):
    """Instructions of ``code`` (labels resolved to indices) and their try regions.
    Decoded once per code object (every trace of a frame, every inlined call and every
    restart at a graph break reads the same instructions; nothing mutates them)."""
    hit = _DECODED.get(id(code))
    if hit is not None and hit[0] is code:
        return hit[1]
    if len(_DECODED) > 4096:
        _DECODED.clear()
    result = _decode(code)
    _DECODED[id(code)] = (code, result)  # the entry keeps ``code`` alive: its id stays unique
    return result


def _decode(code):
    made = translator_items(code)  # a resume code: its items as built, positions in the original
    if made is not None:
        bc, item_positions = made
    else:
        bc = Bytecode.from_code(code)
        item_positions = range(len(bc))
    instructions, positions, regions = [], [], []
    labels = {}
    region_stack = []
    for pos, item in zip(item_positions, bc):
        if isinstance(item, Label):
            labels[item] = len(instructions)
        elif isinstance(item, TryBegin):
            region_stack.append(item)
        elif isinstance(item, TryEnd):
            if region_stack:
                region_stack.pop()
        elif isinstance(item, Instr):
            instructions.append(item)
            positions.append(pos)
            regions.append(region_stack[-1] if region_stack else None)
    return bc, instructions, positions, regions, labels


class InstructionTranslatorBase:
    steps = 0  # on the root: instructions traced (see step)

    def __init__(self, code, f_globals, symbolic_locals, output, root, cells, depth=0):
        self.code = code
        self.bc, self.instructions, self.positions, self.regions, self.labels = decode(code)
        self.f_globals = f_globals
        self.symbolic_locals: dict[str, VariableTracker] = symbolic_locals
        self.output = output
        self.root = root
        self.cells: dict[str, object] = cells  # name -> CellVariable | RealCell
        self.stack: list[VariableTracker] = []
        self.ip = 0
        self.kw_names = None
        self.depth = depth
        self.lineno = code.co_firstlineno
        self.yielded = None

    # -- driver ---------------------------------------------------------------------------
    def user_stack(self) -> str:
        return f"{self.code.co_filename}:{self.lineno}"

    def push(self, vt):
        self.stack.append(vt)

    def pop(self):
        return self.stack.pop()

    def popn(self, n):
        if n == 0:
            return []
        items = self.stack[-n:]
        del self.stack[-n:]
        return items

    def jump(self, inst):
        self.ip = self.labels[inst.arg]

    def step(self):
        root = self.root
        root.steps += 1
        if root.steps > config.trace_step_limit:
            raise TraceTooLong(f"capture traced more than config.trace_step_limit={config.trace_step_limit} "
                               f"instructions")
        if self.ip >= len(self.instructions):
            unsupported(f"execution ran past the last instruction of {self.code.co_name}")
        inst = self.instructions[self.ip]
        if inst.lineno is not None:
            self.lineno = inst.lineno
        self.ip += 1
        handler = getattr(self, inst.name, None)
        if handler is None:
            unsupported(f"unsupported bytecode {inst.name}")
        handler(inst)

    def run_body(self):
        try:
            while True:
                start = self.ip
                try:
                    self.step()
                except Unsupported as e:
                    if not hasattr(e, "user_stack"):
                        e.user_stack = self.user_stack()
                    self.on_unsupported(start, e)
                    raise
        except _Return as r:
            return r.value

    def on_unsupported(self, ip, e):
        pass

    # -- globals, locals, cells -----------------------------------------------------------
    def globals_name(self):
        if self.f_globals is self.root.f_globals:
            return "G"
        name = globals_dict_name(self.f_globals.get("__name__", "mod"))
        self.output.guards.env[name] = self.f_globals
        return name

    def load_global(self, name):
        pending = self.output.side_effects.load_global(self.f_globals, name)
        if pending is not None:
            return pending
        if name in self.f_globals:
            if self.f_globals.get("__torchkiln_polyfill__"):  # capture's own polyfills: no guards
                return wrap_constant_like(self, self.f_globals[name])
            return wrap(self, self.f_globals[name], global_source(name, self.globals_name()))
        builtins_dict = self.f_globals.get("__builtins__", __builtins__)
        if isinstance(builtins_dict, types.ModuleType):
            builtins_dict = builtins_dict.__dict__
        if name in builtins_dict:
            return wrap_constant_like(self, builtins_dict[name])
        unsupported(f"NameError: name '{name}' is not defined")

    def _cell(self, arg):
        name = arg.name if isinstance(arg, (CellVar, FreeVar)) else arg
        cell = self.cells.get(name)
        if cell is None:
            unsupported(f"unknown cell {name}")
        return cell

    # -- generic operations used by trackers ----------------------------------------------
    def call(self, fn_vt, args, kwargs):
        return fn_vt.call_function(self, list(args), dict(kwargs))

    def getattr(self, obj, name):
        return obj.var_getattr(self, name)

    def attr_error_is_fatal(self, obj, name):
        return False

    def hasattr(self, obj, name):
        value = getattr(obj, "value", None)
        if isinstance(obj, (UserDefinedObjectVariable, NNModuleVariable)) and value is not None:
            if self.output.side_effects.load_attr(obj, name) is not None:
                return True
            result = hasattr(value, name)
            if obj.source is not None:
                self.output.guards.add(f"hasattr({obj.source}, {name!r}) is {result}")
            return result
        if isinstance(obj, TensorVariable):
            if obj.source is None or hasattr(torch.Tensor, name):
                return hasattr(obj.example, name)
            # maybe an attribute set on the input tensor (the fake example has none): ask it
            result = self.output.guards.source_has_attr(obj.source, name)
            if result is None:
                unsupported(f"hasattr on tensor {obj.source} for {name!r}")
            self.output.guards.add(f"hasattr({obj.source}, {name!r}) is {result}")
            return result
        if isinstance(obj, NewObjectVariable):
            return name in obj.attrs or hasattr(obj.cls, name)
        if obj.is_python_constant():
            return hasattr(obj.as_python_constant(), name)
        try:
            obj.var_getattr(self, name)
            return True
        except Unsupported:
            # the tracker does not model it: CPython's answer is known only when the type
            # alone decides (instances without __dict__ or __getattr__), or from the real
            # object a tracker stands for (a deep copy made at trace time); else graph break
            if value is not None and obj.source is None:
                return hasattr(value, name)
            try:
                ptype = obj.python_type()
            except Unsupported:
                ptype = None
            if ptype is None or "__dict__" in dir(ptype) or hasattr(ptype, "__getattr__"):
                raise
            return hasattr(ptype, name)

    def setattr(self, obj, name, value, generic=False):
        if isinstance(obj, NewObjectVariable) and not generic:
            from .variables.user_defined import mro_lookup

            setter = mro_lookup(obj.python_type(), "__setattr__")
            if isinstance(setter, types.FunctionType):  # a user __setattr__: inlined
                from .variables.functions import UserFunctionVariable

                UserFunctionVariable(setter).call_function(self, [obj, ConstantVariable(name), value], {})
                return
        if isinstance(obj, NewObjectVariable) or hasattr(obj, "store_attr"):
            obj.store_attr(self, name, value)
            return
        if isinstance(obj, (NNModuleVariable, UserDefinedObjectVariable)) and obj.source is not None:
            from .variables.user_defined import mro_lookup

            setter = mro_lookup(type(obj.value), "__setattr__")
            if setter not in (object.__setattr__, torch.nn.Module.__setattr__):
                unsupported(f"custom __setattr__ on {type(obj.value).__name__}")
            self.output.side_effects.store_attr(obj, name, value)
            return
        unsupported(f"setattr on {obj}")

    def isinstance_check(self, vt, cls_vt):
        cls = cls_vt.as_python_constant()
        if isinstance(vt, NullVariable):
            return False
        return issubclass(vt.python_type(), cls) if isinstance(cls, type) else any(
            issubclass(vt.python_type(), c) for c in _flatten_types(cls))

    def contains(self, items, x):
        from .variables.builtin import vt_equal

        if isinstance(x, (TensorVariable,)):
            return ConstantVariable(any(i is x for i in items))
        return ConstantVariable(any(vt_equal(self, i, x) for i in items))

    def getitem(self, obj, index):
        if isinstance(obj, (TensorVariable,)):
            return obj.call_method(self, "__getitem__", [index], {})
        if isinstance(obj, (BaseListVariable, DictVariable)):
            return obj.call_method(self, "__getitem__", [index], {})
        return obj.call_method(self, "__getitem__", [index], {})

    def binary_op(self, op, a, b):
        from .variables.containers import container_binary_op

        result = container_binary_op(self, op, _INPLACE_TO_BINARY.get(op, op), a, b)
        if result is not None:
            return result
        if a.is_python_constant() and b.is_python_constant():
            try:
                return wrap_constant_like(self, op(a.as_python_constant(), b.as_python_constant()))
            except Exception as e:  # noqa: BLE001
                unsupported(f"{op.__name__} raised {type(e).__name__}: {e}")
        if isinstance(a, (TensorVariable, SymNodeVariable)) or isinstance(b, (TensorVariable, SymNodeVariable)):
            if op in _INPLACE_TO_BINARY and not isinstance(a, TensorVariable):
                op = _INPLACE_TO_BINARY[op]
            return self.output.call_function(self, op, [a, b], {})
        base = _INPLACE_TO_BINARY.get(op, op)
        if base in (operator.eq, operator.ne):
            return self.compare_op("==" if base is operator.eq else "!=", a, b)
        dunder = _DUNDER.get(base)
        if dunder and isinstance(a, (UserDefinedObjectVariable, NewObjectVariable, NNModuleVariable)):
            return a.call_method(self, dunder, [b], {})
        unsupported(f"{base.__name__} on {a} and {b}")

    def compare_op(self, op, a, b):
        from .variables.builtin import vt_equal

        if op in ("is", "is not"):
            # identity of the objects: a tracker made in the frame is its own object
            result = a is b or getattr(a, "value", a) is getattr(b, "value", b)
            return ConstantVariable(result if op == "is" else not result)
        if op in ("in", "not in"):
            if isinstance(b, (BaseListVariable, DictVariable, SetVariable)):
                result = b.call_method(self, "__contains__", [a], {}).truth(self)
            elif isinstance(b, (NNModuleVariable,)) or getattr(b, "python_type", None) and not b.is_python_constant():
                result = b.call_method(self, "__contains__", [a], {}).as_python_constant()
            else:
                result = a.as_python_constant() in b.as_python_constant()
            return ConstantVariable(result if op == "in" else not result)
        fn = _CMP_FN[op]
        if a.is_python_constant() and b.is_python_constant():
            try:
                return ConstantVariable(fn(a.as_python_constant(), b.as_python_constant()))
            except Exception as e:  # noqa: BLE001
                unsupported(f"comparison raised {type(e).__name__}: {e}")
        from .variables.user_defined import user_compare

        result = user_compare(self, op, a, b)
        if result is not None:
            return result
        if isinstance(a, (TensorVariable, SymNodeVariable)) or isinstance(b, (TensorVariable, SymNodeVariable)):
            return self.output.call_function(self, fn, [a, b], {})
        if op in ("==", "!="):
            if isinstance(a, BaseListVariable) and isinstance(b, BaseListVariable):
                equal = len(a.items) == len(b.items) and all(
                    self.compare_op("==", x, y).truth(self) for x, y in zip(a.items, b.items))
                return ConstantVariable(equal if op == "==" else not equal)
            if isinstance(a, ConstantVariable) or isinstance(b, ConstantVariable) or (
                    hasattr(a, "value") and hasattr(b, "value")):
                equal = vt_equal(self, a, b)
                return ConstantVariable(equal if op == "==" else not equal)
        unsupported(f"comparison {op} between {a} and {b}")

    def inline_user_function(self, fn_vt, args, kwargs):
        if self.depth >= MAX_INLINE_DEPTH:
            unsupported("inlining too deep (recursion)")
        code = fn_vt.get_code()
        if code.co_flags & (inspect_CO_COROUTINE | inspect_CO_ASYNC_GEN | inspect_CO_ITERABLE_COROUTINE):
            unsupported("inlining a coroutine")
        src = None
        if isinstance(fn_vt, UserFunctionVariable):
            fn = fn_vt.fn
            src = fn_vt.source
            if (fn.__module__ or "").split(".")[0] in SKIP_MODULES:
                unsupported(f"call to skipped function {fn.__module__}.{fn.__qualname__}")
            if src is None and _holds_mutable_values(fn):
                # a function reached without a source (a method of an object made in the
                # frame): named by a guard constant, so that what its cells and defaults hold
                # is guarded and a list/dict/object there is the real one (its mutations are
                # replayed, not dropped with a copy)
                src = self.output.guards.const(fn)
            defaults = [wrap(self, d, item_source(attr_source(src, "__defaults__"), i)) if src else
                        wrap_constant_like(self, d) for i, d in enumerate(fn.__defaults__ or ())]
            kwdefaults = {k: wrap(self, v, item_source(attr_source(src, "__kwdefaults__"), k)) if src else
                          wrap_constant_like(self, v) for k, v in (fn.__kwdefaults__ or {}).items()}
            cells = {}
            for i, (name, cell) in enumerate(zip(code.co_freevars, fn.__closure__ or ())):
                cells[name] = RealCell(cell, f"{src}.__closure__[{i}].cell_contents" if src else None,
                                       f"{src}.__closure__[{i}]" if src else None)
            f_globals = fn.__globals__
            name = fn.__qualname__
        else:
            defaults = fn_vt.defaults.items if fn_vt.defaults is not None else []
            kwdefaults = ({k.as_python_constant(): v for k, v in fn_vt.kwdefaults.items.values()}
                          if fn_vt.kwdefaults is not None else {})
            cells = {}
            for name_, cell in zip(code.co_freevars, fn_vt.closure.items if fn_vt.closure else ()):
                cells[name_] = cell
            f_globals = fn_vt.f_globals
            name = fn_vt.qualname
        bound = bind_args(self, code, defaults, kwdefaults, args, kwargs, name)
        # (code, globals, whether its defaults were read through a source: guarded)
        self.output.inlined.append((code, f_globals, isinstance(fn_vt, UserFunctionVariable) and src is not None))
        sub = InliningInstructionTranslator(code, f_globals, bound, self.output, self.root, cells, self.depth + 1)
        sub.parent = self
        if code.co_flags & 0x20:  # CO_GENERATOR: runs lazily, one yield per next()
            from .variables.generators import GeneratorVariable

            sub.yielded = True
            return GeneratorVariable(sub, fn_vt, list(args), dict(kwargs))
        return sub.run_body()

    # -- opcodes: stack and constants ------------------------------------------------------
    def NOP(self, inst): pass
    def RESUME(self, inst): pass
    def EXTENDED_ARG(self, inst): pass
    def CACHE(self, inst): pass
    def PRECALL(self, inst): pass

    def POP_TOP(self, inst):
        self.pop()

    def PUSH_NULL(self, inst):
        self.push(NULL)

    def COPY(self, inst):
        self.push(self.stack[-inst.arg])

    def SWAP(self, inst):
        self.stack[-1], self.stack[-inst.arg] = self.stack[-inst.arg], self.stack[-1]

    def LOAD_CONST(self, inst):
        if type(inst.arg) is frozenset:  # this very object at runtime: its table is known
            self.push(SetVariable.of_existing(inst.arg, [wrap_constant_like(self, v) for v in inst.arg],
                                              same_object=True))
            return
        self.push(wrap_constant_like(self, inst.arg) if isinstance(inst.arg, (tuple, frozenset)) else ConstantVariable(inst.arg))

    def RETURN_CONST(self, inst):
        self.push(ConstantVariable(inst.arg))
        self.RETURN_VALUE(inst)

    def RETURN_VALUE(self, inst):
        raise _Return(self.pop())

    def RETURN_GENERATOR(self, inst):
        self.push(ConstantVariable(None))

    def YIELD_VALUE(self, inst):
        if self.yielded is None:
            unsupported("yield in a compiled frame")
        raise Yielded(self.pop())

    # -- locals ----------------------------------------------------------------------------
    def LOAD_FAST(self, inst):
        name = inst.arg
        if name not in self.symbolic_locals:
            unsupported(f"UnboundLocalError: local variable '{name}' referenced before assignment")
        value = self.symbolic_locals[name]
        if isinstance(value, LazyLocal):
            value = self.symbolic_locals[name] = self.resolve(value)
        self.push(value)

    LOAD_FAST_CHECK = LOAD_FAST

    def LOAD_FAST_AND_CLEAR(self, inst):
        self.push(self.resolve(self.symbolic_locals.pop(inst.arg, NULL)))

    def resolve(self, value):
        """The tracker of a local, wrapping an argument on its first read (installing guards)."""
        if isinstance(value, LazyLocal):
            return wrap(self, value.value, value.source)
        return value

    def STORE_FAST(self, inst):
        value = self.pop()
        if isinstance(value, NullVariable):
            self.symbolic_locals.pop(inst.arg, None)
        else:
            self.symbolic_locals[inst.arg] = value

    STORE_FAST_MAYBE_NULL = STORE_FAST

    def DELETE_FAST(self, inst):
        self.symbolic_locals.pop(inst.arg, None)

    def MAKE_CELL(self, inst):
        name = inst.arg.name
        value = self.symbolic_locals.pop(name, None)
        self.cells[name] = CellVariable(self.resolve(value) if value is not None else None)

    def COPY_FREE_VARS(self, inst):
        pass

    def LOAD_CLOSURE(self, inst):
        self.push(self._cell(inst.arg))

    def LOAD_DEREF(self, inst):
        cell = self._cell(inst.arg)
        if isinstance(cell, CellVariable):
            if cell.value is None:
                unsupported(f"free variable '{inst.arg.name}' referenced before assignment")
            self.push(cell.value)
        else:
            self.push(cell.load(self))

    def STORE_DEREF(self, inst):
        cell = self._cell(inst.arg)
        value = self.pop()
        if isinstance(cell, CellVariable):
            cell.value = value
        else:
            cell.store(self, value)

    def LOAD_GLOBAL(self, inst):
        push_null, name = inst.arg if isinstance(inst.arg, tuple) else (False, inst.arg)
        if push_null and not PY312:
            self.push(NULL)
        value = self.load_global(name)
        if push_null and PY312:
            self.push(NULL)
        self.push(value)

    def STORE_GLOBAL(self, inst):
        gname = self.globals_name()
        self.output.side_effects.store_global(self.f_globals, gname, inst.arg, self.pop())

    def IMPORT_NAME(self, inst):
        fromlist = self.pop().as_python_constant()
        level = self.pop().as_python_constant()
        module = __import__(inst.arg, self.f_globals, None, fromlist, level)
        self.push(wrap_constant_like(self, module))

    def IMPORT_FROM(self, inst):
        self.push(self.getattr(self.stack[-1], inst.arg))

    # -- attributes ------------------------------------------------------------------------
    def LOAD_ATTR(self, inst):
        if isinstance(inst.arg, tuple):
            is_method, name = inst.arg
        else:
            is_method, name = False, inst.arg
        obj = self.pop()
        value = self.getattr(obj, name)
        if is_method:
            self.push(NULL)
        self.push(value)

    def LOAD_METHOD(self, inst):
        obj = self.pop()
        self.push(NULL)
        self.push(self.getattr(obj, inst.arg))

    def LOAD_SUPER_ATTR(self, inst):
        is_method, _, name = inst.arg
        obj = self.pop()
        cls = self.pop()
        self.pop()  # the global `super`
        value = SuperVariable(cls.as_python_constant(), obj).var_getattr(self, name)
        if is_method:
            self.push(NULL)
        self.push(value)

    def STORE_ATTR(self, inst):
        obj = self.pop()
        value = self.pop()
        self.setattr(obj, inst.arg, value)

    # -- operators -------------------------------------------------------------------------
    def BINARY_OP(self, inst):
        b = self.pop()
        a = self.pop()
        self.push(self.binary_op(_BINARY[inst.arg.name], a, b))

    def BINARY_SUBSCR(self, inst):
        index = self.pop()
        obj = self.pop()
        self.push(self.getitem(obj, index))

    def STORE_SUBSCR(self, inst):
        index = self.pop()
        obj = self.pop()
        value = self.pop()
        obj.call_method(self, "__setitem__", [index, value], {})

    def DELETE_SUBSCR(self, inst):
        index = self.pop()
        obj = self.pop()
        obj.call_method(self, "__delitem__", [index], {})

    def BINARY_SLICE(self, inst):
        stop = self.pop()
        start = self.pop()
        obj = self.pop()
        self.push(self.getitem(obj, self._slice([start, stop])))

    def STORE_SLICE(self, inst):
        stop = self.pop()
        start = self.pop()
        obj = self.pop()
        value = self.pop()
        obj.call_method(self, "__setitem__", [self._slice([start, stop]), value], {})

    def _slice(self, parts):
        if all(p.is_python_constant() for p in parts):
            return ConstantVariable(slice(*[p.as_python_constant() for p in parts]))
        return SliceVariable(parts)

    def BUILD_SLICE(self, inst):
        self.push(self._slice(self.popn(inst.arg)))

    def UNARY_NEGATIVE(self, inst):
        self.push(BuiltinVariable(operator.neg).call_function(self, [self.pop()], {}) if not self.stack[-1].is_python_constant()
                  else self._unary_const(operator.neg, self.pop()))

    def UNARY_POSITIVE(self, inst):
        value = self.pop()
        self.push(self._unary_const(operator.pos, value) if value.is_python_constant()
                  else self.output.call_function(self, operator.pos, [value], {}))

    def UNARY_INVERT(self, inst):
        value = self.pop()
        self.push(self._unary_const(operator.invert, value) if value.is_python_constant()
                  else self.output.call_function(self, operator.invert, [value], {}))

    def _unary_const(self, op, value):
        """``op`` of constant data run for real; the result may be a container (``-Counter``).
        Another object's dunder (a user class) is not run at trace time: graph break."""
        real = value.as_python_constant()
        if type(real).__module__ not in ("builtins", "collections", "torch"):
            unsupported(f"{op.__name__} of a {type(real).__name__} constant")
        try:
            return wrap_constant_like(self, op(real))
        except Exception as e:  # noqa: BLE001 - raised again when the instruction runs natively
            unsupported(f"{op.__name__} raised {type(e).__name__}: {e}")

    def UNARY_NOT(self, inst):
        value = self.pop()
        if isinstance(value, SymNodeVariable):
            self.push(self.output.call_function(self, operator.not_, [value], {}))
            return
        self.push(ConstantVariable(not value.truth(self)))

    def COMPARE_OP(self, inst):
        b = self.pop()
        a = self.pop()
        name = inst.arg.name if hasattr(inst.arg, "name") else dis.cmp_op[inst.arg]
        self.push(self.compare_op(_COMPARE.get(name, name), a, b))

    def IS_OP(self, inst):
        b = self.pop()
        a = self.pop()
        self.push(self.compare_op("is not" if inst.arg else "is", a, b))

    def CONTAINS_OP(self, inst):
        b = self.pop()
        a = self.pop()
        self.push(self.compare_op("not in" if inst.arg else "in", a, b))

    # -- jumps -----------------------------------------------------------------------------
    def JUMP_FORWARD(self, inst):
        self.jump(inst)

    JUMP_BACKWARD = JUMP_BACKWARD_NO_INTERRUPT = JUMP_ABSOLUTE = JUMP = JUMP_FORWARD

    def _pop_jump(self, inst, jump_if):
        value = self.pop()
        if jump_if in (None, "not_none"):
            is_none = isinstance(value, ConstantVariable) and value.value is None
            if not is_none and value.is_python_constant() and value.as_python_constant() is None:
                is_none = True
            if is_none == (jump_if is None):
                self.jump(inst)
            return
        if value.truth(self) == jump_if:
            self.jump(inst)

    def POP_JUMP_IF_TRUE(self, inst): self._pop_jump(inst, True)
    def POP_JUMP_IF_FALSE(self, inst): self._pop_jump(inst, False)
    def POP_JUMP_IF_NONE(self, inst): self._pop_jump(inst, None)
    def POP_JUMP_IF_NOT_NONE(self, inst): self._pop_jump(inst, "not_none")
    POP_JUMP_FORWARD_IF_TRUE = POP_JUMP_BACKWARD_IF_TRUE = POP_JUMP_IF_TRUE
    POP_JUMP_FORWARD_IF_FALSE = POP_JUMP_BACKWARD_IF_FALSE = POP_JUMP_IF_FALSE
    POP_JUMP_FORWARD_IF_NONE = POP_JUMP_BACKWARD_IF_NONE = POP_JUMP_IF_NONE
    POP_JUMP_FORWARD_IF_NOT_NONE = POP_JUMP_BACKWARD_IF_NOT_NONE = POP_JUMP_IF_NOT_NONE

    def JUMP_IF_TRUE_OR_POP(self, inst):
        if self.stack[-1].truth(self):
            self.jump(inst)
        else:
            self.pop()

    def JUMP_IF_FALSE_OR_POP(self, inst):
        if not self.stack[-1].truth(self):
            self.jump(inst)
        else:
            self.pop()

    # -- iteration -------------------------------------------------------------------------
    def GET_ITER(self, inst):
        value = self.pop()
        if isinstance(value, ListIteratorVariable) or hasattr(value, "next_item"):
            self.push(value)
        elif isinstance(value, (DictVariable, SetVariable, DictViewVariable)):
            # its size is checked as CPython's dict/set iterator does
            from .variables.iterators import build_iter

            self.push(build_iter(self, value) or ListIteratorVariable(value.unpack_var_sequence(self)))
        else:
            from .variables.iterators import LAZY_RANGE, build_iter

            if type(value) is ConstantVariable and type(value.value) is range and len(value.value) > LAZY_RANGE:
                self.push(build_iter(self, value))
                return
            self.push(ListIteratorVariable(value.unpack_var_sequence(self),
                                           container=value if type(value) in (ListVariable, TupleVariable) else None))

    def FOR_ITER(self, inst):
        it = self.stack[-1]
        if not hasattr(it, "next_item"):
            unsupported(f"FOR_ITER over {it}")
        item = it.next_item(self)
        if item is None:
            if PY312:
                self.push(NULL)  # END_FOR pops the iterator and this
            else:
                self.pop()
            self.jump(inst)
        else:
            self.push(item)

    def END_FOR(self, inst):
        self.popn(2)

    def UNPACK_SEQUENCE(self, inst):
        seq = self.pop()
        items = seq.unpack_var_sequence(self)
        if len(items) != inst.arg:
            unsupported(f"ValueError: unpacking {len(items)} values into {inst.arg}")
        for item in reversed(items):
            self.push(item)

    def UNPACK_EX(self, inst):
        items = self.pop().unpack_var_sequence(self)
        before, after = inst.arg & 0xFF, inst.arg >> 8
        if len(items) < before + after:
            unsupported("ValueError: not enough values to unpack")
        middle = ListVariable(items[before: len(items) - after])
        result = items[:before] + [middle] + items[len(items) - after:]
        for item in reversed(result):
            self.push(item)

    # -- building containers ---------------------------------------------------------------
    def BUILD_TUPLE(self, inst):
        self.push(TupleVariable(self.popn(inst.arg)))

    def BUILD_LIST(self, inst):
        self.push(ListVariable(self.popn(inst.arg)))

    def BUILD_SET(self, inst):
        self.push(SetVariable(self.popn(inst.arg)))

    def BUILD_MAP(self, inst):
        items = self.popn(2 * inst.arg)
        self.push(DictVariable.from_pairs(zip(items[::2], items[1::2])))

    def BUILD_CONST_KEY_MAP(self, inst):
        keys = self.pop().as_python_constant()
        values = self.popn(inst.arg)
        self.push(DictVariable.from_pairs([(ConstantVariable(k), v) for k, v in zip(keys, values)]))

    def BUILD_STRING(self, inst):
        parts = self.popn(inst.arg)
        self.push(ConstantVariable("".join(p.as_python_constant() for p in parts)))

    def FORMAT_VALUE(self, inst):
        spec = self.pop().as_python_constant() if inst.arg & 0x04 else ""
        value = self.pop()
        if isinstance(value, SymNodeVariable):
            value = value.specialize()  # guarded, as torch.compile does
        if not value.is_python_constant():
            unsupported("f-string of a non-constant value")
        value = value.as_python_constant()
        conv = inst.arg & 0x03
        if conv == 1:
            value = str(value)
        elif conv == 2:
            value = repr(value)
        elif conv == 3:
            value = ascii(value)
        self.push(ConstantVariable(format(value, spec)))

    def LIST_APPEND(self, inst):
        value = self.pop()
        self.stack[-inst.arg].call_method(self, "append", [value], {})

    def SET_ADD(self, inst):
        value = self.pop()
        self.stack[-inst.arg].call_method(self, "add", [value], {})

    def MAP_ADD(self, inst):
        value = self.pop()
        key = self.pop()
        self.stack[-inst.arg].call_method(self, "__setitem__", [key, value], {})

    def LIST_EXTEND(self, inst):
        value = self.pop()
        self.stack[-inst.arg].call_method(self, "extend", [value], {})

    def SET_UPDATE(self, inst):
        value = self.pop()
        self.stack[-inst.arg].call_method(self, "update", [value], {})

    def DICT_UPDATE(self, inst):
        value = self.pop()
        self.stack[-inst.arg].call_method(self, "update", [value], {})

    DICT_MERGE = DICT_UPDATE

    def LIST_TO_TUPLE(self, inst):
        self.push(TupleVariable(self.pop().unpack_var_sequence(self)))

    def CALL_INTRINSIC_1(self, inst):
        kind = int(inst.arg)
        if kind == 6:  # INTRINSIC_LIST_TO_TUPLE
            self.LIST_TO_TUPLE(inst)
        elif kind == 5:  # INTRINSIC_UNARY_POSITIVE
            self.UNARY_POSITIVE(inst)
        else:
            unsupported(f"CALL_INTRINSIC_1 {kind}")

    # -- calls -----------------------------------------------------------------------------
    def KW_NAMES(self, inst):
        self.kw_names = inst.arg if isinstance(inst.arg, tuple) else self.code.co_consts[inst.arg]

    def pop_call(self, argc):
        """Pop a CALL's operands: (fn tracker, positional trackers, keyword trackers)."""
        kw_names = self.kw_names or ()
        self.kw_names = None
        args = self.popn(argc)
        callable_ = self.pop()
        maybe_self = self.pop()
        if not isinstance(maybe_self, NullVariable):
            fn, args = maybe_self, [callable_] + args
        else:
            fn = callable_
        kwargs = {}
        if kw_names:
            kwargs = dict(zip(kw_names, args[len(args) - len(kw_names):]))
            args = args[: len(args) - len(kw_names)]
        return fn, args, kwargs

    def CALL(self, inst):
        fn, args, kwargs = self.pop_call(inst.arg)
        self.push(self.call_any(fn, args, kwargs))

    def CALL_FUNCTION_EX(self, inst):
        kwargs_vt = self.pop() if inst.arg & 1 else None
        args_vt = self.pop()
        fn = self.pop()
        if isinstance(self.stack[-1] if self.stack else None, NullVariable):
            self.pop()
        args = args_vt.unpack_var_sequence(self)
        kwargs = {}
        if kwargs_vt is not None:
            if not isinstance(kwargs_vt, DictVariable):
                unsupported("** of a non-dict")
            kwargs = {k.as_python_constant(): v for k, v in kwargs_vt.items.values()}
        self.push(self.call_any(fn, args, kwargs))

    def call_any(self, fn, args, kwargs):
        if isinstance(fn, BuiltinVariable) and fn.fn is super:
            return self.make_super(args)
        if isinstance(fn, BuiltinVariable) and fn.fn is object.__setattr__:
            self.setattr(args[0], args[1].as_python_constant(), args[2], generic=True)
            return ConstantVariable(None)
        return fn.call_function(self, args, kwargs)

    def make_super(self, args):
        if args:
            return SuperVariable(args[0].as_python_constant(), args[1])
        cell = self.cells.get("__class__")
        if cell is None:
            unsupported("super() without __class__ cell")
        cls = cell.value.as_python_constant() if isinstance(cell, CellVariable) else cell.cell.cell_contents
        first = self.code.co_varnames[0] if self.code.co_argcount else None
        if first is None:
            unsupported("super() without arguments")
        obj = self.resolve(self.symbolic_locals.get(first))
        if obj is None and first in self.cells:
            obj = self.cells[first].value
        return SuperVariable(cls, obj)

    def MAKE_FUNCTION(self, inst):
        code = self.pop().as_python_constant()
        flags = inst.arg
        closure = self.pop() if flags & 0x08 else None
        annotations = self.pop() if flags & 0x04 else None
        kwdefaults = self.pop() if flags & 0x02 else None
        defaults = self.pop() if flags & 0x01 else None
        self.push(NestedUserFunctionVariable(code, self.f_globals, code.co_qualname, defaults, kwdefaults, closure,
                                             annotations))

    # -- match statements ------------------------------------------------------------------
    def GET_LEN(self, inst):
        self.push(BuiltinVariable(len).call_function(self, [self.stack[-1]], {}))

    def MATCH_MAPPING(self, inst):
        import collections.abc

        self.push(ConstantVariable(issubclass(self.stack[-1].python_type(), collections.abc.Mapping)))

    def MATCH_SEQUENCE(self, inst):
        import collections.abc

        t = self.stack[-1].python_type()
        self.push(ConstantVariable(issubclass(t, collections.abc.Sequence) and not issubclass(t, (str, bytes,
                                                                                                  bytearray))))

    def MATCH_KEYS(self, inst):
        from .variables.user_defined import match_keys

        self.push(match_keys(self, self.stack[-2], self.stack[-1]))

    def MATCH_CLASS(self, inst):
        from .variables.user_defined import match_class

        names = self.pop()
        cls = self.pop()
        subject = self.pop()
        self.push(match_class(self, subject, cls, inst.arg, names.as_python_constant()))

    # -- with blocks -----------------------------------------------------------------------
    def BEFORE_WITH(self, inst):
        ctx = self.pop()
        if not isinstance(ctx, (GradModeVariable, AutocastVariable)):
            from .variables.user_defined import enter_user_context

            exit_vt, value = enter_user_context(self, ctx)
            if self.root is self and hasattr(exit_vt, "enter_ip"):  # where a break in the block restarts
                exit_vt.enter_ip = self.ip - 1
            self.push(exit_vt)
            self.push(value)
            return
        exit_vt = ctx.enter(self)
        self.root.active_contexts.append(ctx)
        self.push(exit_vt)
        self.push(ConstantVariable(None))

    def exit_context(self, exit_vt):
        if self.root.active_contexts and self.root.active_contexts[-1] is exit_vt.ctx:
            self.root.active_contexts.pop()


def _holds_mutable_values(fn) -> bool:
    """Whether a closure cell or default of ``fn`` holds a mutable object (a list, dict,
    set, a user object): tracked as a copy, its mutations would be lost."""
    from .variables.builder import is_constant

    values = list(fn.__defaults__ or ()) + list((fn.__kwdefaults__ or {}).values())
    for cell in fn.__closure__ or ():
        try:
            values.append(cell.cell_contents)
        except ValueError:  # an empty cell
            pass
    return any(not is_constant(v) and not callable(v)
               and not isinstance(v, (tuple, frozenset, torch.Tensor, types.ModuleType, torch.dtype, torch.device))
               for v in values)


class RealCell(VariableTracker):
    """A closure cell of a pre-existing function: ``source`` names its contents,
    ``cell_source`` the cell object itself (None: the captured function's own closure)."""

    def __init__(self, cell, source, cell_source=None):
        self.cell = cell
        self.source = source
        self.cell_source = cell_source

    def load(self, tx):
        pending = tx.output.side_effects.load_cell(self.cell)
        if pending is not None:
            return pending
        try:
            value = self.cell.cell_contents
        except ValueError:
            unsupported("empty closure cell")
        return wrap(tx, value, self.source)

    def store(self, tx, value):
        tx.output.side_effects.store_cell(self, value)

    def reconstruct(self, cg):
        if self.cell_source is not None:
            return cg.from_source(self.cell_source)
        cell = self.cell
        return lambda rt: cell




class InliningInstructionTranslator(InstructionTranslatorBase):
    """Traces a called user function's bytecode into the caller's graph."""

    def on_unsupported(self, ip, e):
        # The caller restarts and breaks at its call; the callee is then captured as its
        # own frame and would trace up to here just to restart: note where it breaks.
        if not self.code.co_flags & 0x20 and not str(e).startswith("inlining") and not isinstance(e, TraceTooLong):
            note_inlined_break(self.code, ip, BreakReason(str(e), e.user_stack))


# code -> {instruction index: reason}: where a function broke while inlined, for its own
# capture (capture_frame starts from these break points instead of finding each one by a
# trace that restarts).  A break point is always sound: at worst an extra graph break.
_INLINED_BREAKS: dict[int, tuple] = {}


def note_inlined_break(code, ip, reason):
    if len(_INLINED_BREAKS) > 1024:
        _INLINED_BREAKS.clear()
    hit = _INLINED_BREAKS.get(id(code))
    if hit is None or hit[0] is not code:
        hit = _INLINED_BREAKS[id(code)] = (code, {})  # keeps ``code`` alive: its id stays unique
    hit[1].setdefault(ip, reason)


def forget_inlined_breaks() -> None:
    _INLINED_BREAKS.clear()


def take_inlined_breaks(code) -> dict:
    """The break points noted for ``code`` while it was inlined (consumed: used once)."""
    hit = _INLINED_BREAKS.pop(id(code), None)
    return dict(hit[1]) if hit is not None and hit[0] is code else {}


def _flatten_types(cls):
    if isinstance(cls, tuple):
        for c in cls:
            yield from _flatten_types(c)
    else:
        yield cls


inspect_CO_COROUTINE = 0x80
inspect_CO_ITERABLE_COROUTINE = 0x100
inspect_CO_ASYNC_GEN = 0x200


class TraceTooLong(Unsupported):
    """More than ``config.trace_step_limit`` instructions traced: the frame runs eagerly
    (a break there would re-trace up to the limit again, per restart and per resume)."""


class _HandledBefore(VariableTracker):
    """The exception handled before PUSH_EXC_INFO (restored by POP_EXCEPT): in a resume
    function, the one its caller handles (the transformed code's)."""

    def reconstruct(self, cg):
        return lambda rt: sys.exc_info()[1]


class _ExitWithException(Unsupported):
    """WITH_EXCEPT_START: a graph break there even while an exception is handled."""


_HANDLED_BEFORE = _HandledBefore()


class _Finished(Exception):
    def __init__(self, entry):
        self.entry = entry


def _chain(exc, context):
    """Set ``exc.__context__`` as raising it while ``context`` is handled does."""
    if exc is context:
        return
    link = context
    while link is not None:  # no cycle: CPython cuts ``exc`` out of the chain
        if link.__context__ is exc:
            link.__context__ = None
            break
        link = link.__context__
    exc.__context__ = context


def enter_context(mgr):
    """``(exit, value)`` as CPython's BEFORE_WITH makes them: ``__enter__`` and ``__exit__``
    looked up on the type (TypeError naming the missing one), ``__exit__`` bound first."""
    cls = type(mgr)
    for name in ("__enter__", "__exit__"):
        if not hasattr(cls, name):
            raise TypeError(f"'{cls.__name__}' object does not support the context manager protocol")
    exit_ = cls.__exit__.__get__(mgr, cls)
    return exit_, cls.__enter__.__get__(mgr, cls)()


_BREAKABLE = {"BEFORE_WITH", "WITH_EXCEPT_START", "CALL", "CALL_FUNCTION_EX", "POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE", "POP_JUMP_FORWARD_IF_TRUE",
              "POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_FALSE",
              "JUMP_IF_TRUE_OR_POP", "JUMP_IF_FALSE_OR_POP"}


_FRAME_BUILTINS = {locals, globals, vars, dir, eval, exec, super, sys._getframe}

# Names whose use means the frame observes what a graph break changes: object lifetimes
# (the transformed code keeps the frame's values referenced until the resume function
# returns) and frames/tracebacks (resume functions and torchkiln frames appear in them).
_RUNTIME_OBSERVERS = frozenset({
    "weakref", "ref", "proxy", "WeakSet", "WeakValueDictionary", "WeakKeyDictionary", "WeakMethod", "finalize",
    "getweakrefcount", "getrefcount", "gc", "gc_collect", "get_referrers", "get_referents",
    "__traceback__", "tb_frame", "tb_next", "extract_tb", "format_tb", "walk_tb", "extract_stack",
    "format_stack", "print_stack", "walk_stack", "f_back", "currentframe", "_getframe",
    "getsizeof", "__sizeof__"})  # containers rebuilt at a break have their own memory layout
_OBSERVES: dict = {}


def observes_runtime_state(code) -> bool:
    """Whether ``code`` (or a function defined in it) uses :data:`_RUNTIME_OBSERVERS`: such
    a frame runs eagerly rather than graph-break (it would see a difference)."""
    result = _OBSERVES.get(code)
    if result is None:
        result = not _RUNTIME_OBSERVERS.isdisjoint(code.co_names) or any(
            isinstance(c, types.CodeType) and observes_runtime_state(c) for c in code.co_consts)
        _OBSERVES[code] = result
    return result


class InstructionTranslator(InstructionTranslatorBase):
    """The translator of the frame being captured (the root of inlining)."""

    def __init__(self, fn, f_locals, *, backend, fullgraph, dynamic, compile_wrapper, break_points):
        from .guards import GuardBuilder
        from .output_graph import OutputGraph

        code = fn.__code__
        output = OutputGraph(code.co_name)
        output.guards = GuardBuilder({"G": fn.__globals__}, f_locals)
        output.tensor_inputs = []
        output.inlined = []  # (code, globals) of every function inlined: the warm start's record names them
        self.fn = fn
        self.backend = backend
        self.fullgraph = fullgraph
        self.dynamic = dynamic
        self.compile_wrapper = compile_wrapper
        self.break_points = break_points
        self.steps = 0  # instructions traced, inlined ones included (config.trace_step_limit)
        self.active_contexts = []
        self.f_globals = fn.__globals__
        self.root = self
        symbolic_locals = {}
        cells = {}
        made_cells = {i.arg.name for i in decode(code)[1] if i.name == "MAKE_CELL"}
        for name, value in f_locals.items():
            if name in code.co_freevars:
                idx = code.co_freevars.index(name)
                cells[name] = RealCell(fn.__closure__[idx], local_source(name))
            elif name in code.co_cellvars and name not in made_cells and isinstance(value, types.CellType):
                # a resume function receives the frame's cells themselves
                cells[name] = RealCell(value, f"{local_source(name)}.cell_contents", local_source(name))
            else:
                symbolic_locals[name] = LazyLocal(value, local_source(name))
        super().__init__(code, fn.__globals__, symbolic_locals, output, self, cells)

    def step(self):
        if self.ip in self.break_points:
            if self.raise_ip is not None and self.instructions[self.ip].name != "WITH_EXCEPT_START":
                # no break while an exception is handled: see on_unsupported
                raise RestartAt(self.raise_ip, self.break_points[self.ip].reason, self.user_stack())
            raise _Finished(self.finish_break(self.ip))
        super().step()

    def on_unsupported(self, ip, e):
        if self.fullgraph:
            raise Unsupported(f"{e}\n  (at {e.user_stack}; fullgraph=True does not allow graph breaks)") from e
        if isinstance(e, (TraceTooLong, SkipFrame)):
            raise e  # not a graph break: the whole frame runs eagerly (see TraceTooLong)
        if self.raise_ip is not None and not isinstance(e, _ExitWithException):
            # Nothing between a raise and the end of its handler can be a graph break (the
            # thread's exception state is not rebuilt in a resume function): the break is
            # at the raise instead, and the handler runs natively.
            raise RestartAt(self.raise_ip, f"{e} (while handling an exception)", e.user_stack) from e
        raise RestartAt(ip, str(e), e.user_stack) from e

    # -- exceptions ------------------------------------------------------------------------
    # A handler resume function (resume.resume_code with raising=True) re-raises the
    # exception of a breaking call inside its try range; the root translator follows the
    # exception table as CPython's unwinder does, so the frame's own except clauses and the
    # code after them are captured.  From the raise until its handler's POP_EXCEPT every
    # Unsupported moves the break to the raise (the handler then runs natively, correct as
    # before); an exception leaving the frame does the same.
    raise_ip = None  # the instruction that raised the exception being handled, or None
    exc_stack: list = []  # the exceptions being handled (PUSH_EXC_INFO .. POP_EXCEPT)

    def _unwind(self, exc_vt):
        """Jump to the handler of the current instruction with ``exc_vt`` raised."""
        ip = self.ip - 1
        region = self.regions[ip]
        if self.raise_ip is None:
            self.raise_ip = ip
            self.exc_stack = []
        try:
            is_exc = isinstance(exc_vt.value, BaseException) and exc_vt.source is not None
        except AttributeError:
            is_exc = False
        if not is_exc:
            unsupported("raise of an exception made during capture")
        depth = region.stack_depth if region is not None else None
        if not isinstance(depth, int) or depth > len(self.stack) or translator_items(self.code) is None:
            unsupported("an exception leaving the captured frame")
        del self.stack[depth:]
        if region.push_lasti:
            self.push(ConstantVariable(0))  # lasti: a native RERAISE reports the line of instruction 0
        self.push(exc_vt)
        self.ip = self.labels[region.target]

    def RAISE_VARARGS(self, inst):
        if inst.arg == 1:
            # only the handler resume's own raise (in its prologue) or a re-raise of the
            # exception being handled: any other raise would set __context__/__traceback__
            first = self.raise_ip is None and self.positions[self.ip - 1] is None
            if not (first or self.exc_stack and self.stack[-1] is self.exc_stack[-1]):
                unsupported("raise of an exception other than the one handled")
            self._unwind(self.pop())
        elif inst.arg == 0 and self.exc_stack:
            self._unwind(self.exc_stack[-1])
        else:
            unsupported(f"RAISE_VARARGS {inst.arg}")

    def RERAISE(self, inst):
        self._unwind(self.pop())

    def PUSH_EXC_INFO(self, inst):
        if self.raise_ip is None:
            unsupported("PUSH_EXC_INFO outside a captured exception")
        exc = self.pop()
        self.push(_HANDLED_BEFORE)
        self.push(exc)
        self.exc_stack.append(exc)

    def POP_EXCEPT(self, inst):
        before = self.pop()
        if before is _HANDLED_BEFORE and self.exc_stack:
            self.exc_stack.pop()
            if not self.exc_stack:
                self.raise_ip = None
        elif self.exc_stack or translator_items(self.code) is None:
            unsupported("POP_EXCEPT of an exception state not captured")
        # else: a resume function that starts inside a handler (after WITH_EXCEPT_START): its
        # thread state is its caller's, the one POP_EXCEPT restores (``_HandledBefore``)

    def WITH_EXCEPT_START(self, inst):
        # ``__exit__(type, exc, tb)`` runs natively, at a graph break (see finish_break)
        raise _ExitWithException("__exit__ of a with block called with an exception")

    def CHECK_EXC_MATCH(self, inst):
        match = self.pop().as_python_constant()
        types_ = tuple(_flatten_types(match))
        if not all(isinstance(t, type) and issubclass(t, BaseException) for t in types_):
            unsupported("TypeError: catching classes that do not inherit from BaseException")
        self.push(ConstantVariable(issubclass(self.stack[-1].python_type(), types_)))

    def guard_global_state(self, key):
        """Guard the global state ``key`` (see :func:`.guards.global_state`) on the
        value it had when the frame was entered (a context entered in the frame changed it
        for real while tracing, so the entry value is the one taken in ``run``)."""
        self.output.guards.global_state(key, self.entry_state[key] if key in self.entry_state else global_state(key))

    def run(self):
        self.initial_grad = torch.is_grad_enabled()
        self.entry_state = entry_global_state()
        try:
            try:
                result = self.run_body()
            except _Finished as f:
                return f.entry
            return self.finish_return(result)
        finally:
            for ctx in reversed(self.active_contexts):
                if isinstance(ctx, AutocastVariable) and ctx.real is not None:
                    ctx.real.__exit__(None, None, None)
            torch._C._set_grad_enabled(self.initial_grad)

    # -- finishing -------------------------------------------------------------------------
    def _leave_grad_mode(self):
        """The graph ends in the grad mode it started in (so any backend may drop
        global-state nodes); the grad mode the frame leaves behind — the one from before
        the contexts re-entered at a break — is set by the transformed code after the
        graph, as TorchDynamo's epilogue does.  Returns that mode."""
        target = torch.is_grad_enabled()
        grad_ctxs = [c for c in self.active_contexts if isinstance(c, GradModeVariable)]
        if grad_ctxs:
            target = grad_ctxs[0].initial
        if torch.is_grad_enabled() != self.initial_grad:
            self.output.create_node("call_function", torch._C._set_grad_enabled, (self.initial_grad,), {})
        for ctx in reversed(self.active_contexts):
            if isinstance(ctx, AutocastVariable):
                self.output.create_node("call_function", torch.amp.autocast_mode._exit_autocast, (ctx.node,), {})
        self.leave_grad = target

    def _epilogue(self, side):
        """Side-effect replay preceded by setting the grad mode the frame leaves behind."""
        if self.leave_grad == self.initial_grad:
            return side
        mode = self.leave_grad

        def apply(rt):
            torch._C._set_grad_enabled(mode)
            if side is not None:
                side(rt)
        return apply

    def _guard(self, returns=None):
        g = self.output.guards
        g.grad_mode(self.initial_grad)
        g.default_dtype(self.entry_state["default_dtype"])
        sources = self.output.tensor_inputs
        if len(sources) > 1 and not g.keyed_sources.issuperset(sources):  # keyed ones are distinct
            g.add(f"len({{{', '.join(f'id({s})' for s in sources)}}}) == {len(sources)}",
                  lambda L: "tensor inputs alias each other (duplicate inputs)")
        self._shape_env_guards(g)
        return g.build(returns)

    def _shape_env_guards(self, g):
        shape_env = self.output.shape_env
        if not self.output.symbol_sources:
            return
        placeholders = [i.node.meta["example_value"] for i in self.output.inputs]
        # A size specialized during the trace (a dict key, an f-string) reads as an int now;
        # TENSOR_MATCH was made before and left it free: ShapeEnv guards its value then.
        replaced = shape_env.replacements
        specialized = any(getattr(replaced.get(sym), "is_number", False) for sym in self.output.symbol_sources)
        if not specialized and not any(isinstance(p, torch.SymInt) or isinstance(p, torch.Tensor) and any(
                not isinstance(s, int) for s in p.shape) for p in placeholders):
            return
        from .variables.builder import _DynamicSource

        sources = [_DynamicSource(i.source) for i in self.output.inputs]
        exprs = shape_env.produce_guards(placeholders, sources, ignore_static=not specialized)
        for expr in exprs:
            g.add(expr, relation=True)

    def _entry(self, run, gm, break_reasons):
        # the guard hands the graph inputs it read to the transformed code (run(L, checked))
        guard = self._guard([i.source for i in self.output.inputs] if getattr(run, "takes_checked", False) else None)
        entry = CacheEntry(guard=guard, fn=None, run=run, graphs=[gm] if gm is not None else [],
                           break_reasons=break_reasons)
        fn = self.fn
        entry.fn = lambda *args, **kwargs: run(bind_locals(fn, args, kwargs))
        return entry

    def finish_return(self, result_vt):

        self._leave_grad_mode()
        cg = RuntimeCodegen(self)
        result = cg.recipe(result_vt)
        side = self._epilogue(self.output.side_effects.replay_recipe(cg))
        if self.output.count_ops() == 0 and side is None:
            fn = self.fn
            return self._entry(lambda L: call_with_locals(fn, L), None, [])
        compiled, gm = self.output.compile(self.backend, cg.outputs, self.fullgraph)
        entry = self._entry(returning_code(compiled, cg.inputs_getter(), cg.read_sources(), side, result), gm, [])
        entry.warm = warm_start.describe(self, cg, compiled, side, result_vt)  # the frame record (warm start)
        return entry

    def finish_break(self, ip):

        reason = self.break_points[ip]
        inst = self.instructions[ip]
        region = self.regions[ip]
        if self.code.co_flags & 0x20:
            unsupported("graph break in a generator")
        for v in self.stack:
            # A @contextmanager context entered during capture cannot be rebuilt mid-block
            # (its generator is suspended at the yield): break at its BEFORE_WITH instead,
            # where it is entered for real and the block resumes in a captured frame.
            enter_ip = getattr(v, "enter_ip", None)
            if enter_ip is not None and enter_ip not in self.break_points:
                raise RestartAt(enter_ip, f"{reason.reason} (inside a contextlib.contextmanager block)",
                                reason.user_stack)
        if observes_runtime_state(self.code):
            unsupported("graph break in a frame that observes object lifetimes or frames (weakref, gc, tracebacks)")
        name = inst.name
        if name not in _BREAKABLE or (region is None and any(  # a user __exit__ must see exceptions: the handler
                getattr(v, "user_context_exit", False) for v in self.stack)) or (  # resume (below) shows them
                name == "CALL" and self._calls_frame_builtin(inst.arg)):
            return self.finish_native_tail(ip, reason)
        if name == "CALL":
            fn_vt, arg_vts, kw_vts = self.pop_call(inst.arg)
        elif name == "CALL_FUNCTION_EX":
            kw_vt = self.pop() if inst.arg & 1 else None
            args_vt = self.pop()
            fn_vt = self.pop()
            if self.stack and isinstance(self.stack[-1], NullVariable):
                self.pop()
            arg_vts, kw_vts = [args_vt], ({"**": kw_vt} if kw_vt is not None else {})
        elif name in ("BEFORE_WITH", "WITH_EXCEPT_START"):
            mgr_vt = self.pop() if name == "BEFORE_WITH" else None
        else:
            cond_vt = self.pop()
        self._leave_grad_mode()
        cg = RuntimeCodegen(self)
        stack_vts = list(self.stack)
        stack_nulls = [isinstance(v, NullVariable) for v in stack_vts]
        stack_recipes = [cg.recipe(v) for v in stack_vts if not isinstance(v, NullVariable)]
        # Cell variables travel as the cells themselves (the resume code skips MAKE_CELL
        # for them), so closures made before the break keep sharing them.
        local_names, local_recipes, cell_names = self._live_locals(cg)
        wrapper = self.compile_wrapper
        fn = self.fn
        lineno = self.lineno

        brk = {"stack": [v for v in stack_vts if not isinstance(v, NullVariable)], "cells": cell_names,
               "locals": [self.symbolic_locals[n] for n in local_names if n not in cell_names], "resume": []}

        def resume_at(index, extra_nulls):
            pos = self.positions[index]
            brk["resume"].append((pos, stack_nulls + extra_nulls, local_names, lineno, cell_names, False))
            rfn = resume_function(fn, pos, stack_nulls + extra_nulls, local_names, lineno, cell_names)
            return wrapper(rfn)

        handler = None
        if region is not None:
            # Inside try/with: an exception of the breaking call (or of the branch's bool())
            # is re-raised inside the same exception-table range of a native copy of the
            # frame, so the frame's own handlers see it as eagerly (see resume_code).
            handler_pos = self.positions[self._instruction_start(ip)]
            brk["handler"] = (handler_pos, stack_nulls, local_names, lineno, cell_names, True)
            handler = wrapper(resume_function(fn, handler_pos, stack_nulls, local_names, lineno, cell_names,
                                              raising=True))
        if name in ("CALL", "CALL_FUNCTION_EX"):
            fn_r = cg.recipe(fn_vt)
            arg_rs = [cg.recipe(a) for a in arg_vts]
            kw_rs = {k: cg.recipe(v) for k, v in kw_vts.items()}
            resume = resume_at(ip + 1, [False])
            star = name == "CALL_FUNCTION_EX"
            brk.update(kind="call_ex" if star else "call", fn=fn_vt, args=arg_vts, kwargs=kw_vts)

            def step(rt, values):
                target = wrap_callee(fn_r(rt), wrapper)
                if star:
                    kw = kw_rs["**"](rt) if kw_rs else {}
                    result = target(*arg_rs[0](rt), **kw)
                else:
                    result = target(*[a(rt) for a in arg_rs], **{k: v(rt) for k, v in kw_rs.items()})
                return values + [result], resume
        elif name == "BEFORE_WITH":
            mgr_r = cg.recipe(mgr_vt)
            brk["kind"] = "with"
            resume = resume_at(ip + 1, [False, False])

            def step(rt, values):
                return values + list(enter_context(mgr_r(rt))), resume
        elif name == "WITH_EXCEPT_START":
            resume = resume_at(ip + 1, [False])
            brk["kind"] = "with_exit"

            def step(rt, values):  # stack: exit, lasti, exception handled before, exception
                exit_, exc = values[-4], values[-1]
                try:
                    result = exit_(type(exc), exc, exc.__traceback__)
                except BaseException as e:
                    _chain(e, exc)  # raised while ``exc`` is handled, as CPython chains it
                    raise
                return values + [result], resume
        else:
            cond_r = cg.recipe(cond_vt)
            jump_index = self.labels[inst.arg]
            jump_if = "TRUE" in name
            keep = name.startswith("JUMP_IF")
            on_jump = resume_at(jump_index, [False] if keep else [])
            fall = resume_at(ip + 1, [])
            brk.update(kind="jump", cond=cond_vt, jump_if=jump_if, keep=keep)

            def step(rt, values):
                value = cond_r(rt)
                if bool(value) == jump_if:
                    return (values + [value] if keep else values), on_jump
                return values, fall
        side = self._epilogue(self.output.side_effects.replay_recipe(cg))
        compiled, gm = self.output.compile(self.backend, cg.outputs, self.fullgraph)
        run = breaking_code(compiled, cg.inputs_getter(), cg.read_sources(), side, stack_recipes, local_recipes, step, handler)
        entry = self._entry(run, gm, [reason])
        entry.warm = warm_start.describe_break(self, cg, compiled, side, brk)  # the frame record (warm start)
        return entry

    def _instruction_start(self, ip):
        """Index of the first instruction of the breaking instruction ``ip`` (a CALL's
        PRECALL / KW_NAMES set state the CALL reads: nothing may run between them)."""
        start = ip
        while start > 0 and self.instructions[start - 1].name in ("PRECALL", "KW_NAMES"):
            start -= 1
        return start

    def _live_locals(self, cg):
        """Names and recipes of the locals a resume function takes (cells as cells)."""
        local_names = [n for n in self.symbolic_locals if not isinstance(self.symbolic_locals[n], NullVariable)
                       and not n.startswith("___stack") and n != "___exc"]  # a resume prologue's temporaries are dead
        cell_names = [c for c in self.cells if c in self.code.co_cellvars]
        local_names = [n for n in local_names if n not in cell_names]
        recipes = [cg.recipe(self.symbolic_locals[n]) for n in local_names]
        recipes += [cg.recipe(self.cells[c]) for c in cell_names]
        return local_names + cell_names, recipes, cell_names

    def finish_native_tail(self, ip, reason):
        """Graph so far, then the rest of the frame runs natively from the breaking
        instruction (used inside try blocks, whose handlers must see exceptions, and for
        instructions that are not a call or a jump).  A breaking call's callee still goes
        through ``compile_wrapper``."""
        if observes_runtime_state(self.code):
            unsupported("graph break in a frame that observes object lifetimes or frames (weakref, gc, tracebacks)")
        start = self._instruction_start(ip)
        inst = self.instructions[ip]
        callee_slot = None
        if inst.name == "CALL":
            callee_slot = len(self.stack) - inst.arg - 2  # the method, or NULL below the callable
            if isinstance(self.stack[callee_slot], NullVariable):
                callee_slot += 1
        elif inst.name == "CALL_FUNCTION_EX":
            callee_slot = len(self.stack) - (3 if inst.arg & 1 else 2)
        self._leave_grad_mode()
        cg = RuntimeCodegen(self)
        stack_vts = list(self.stack)
        stack_nulls = [isinstance(v, NullVariable) for v in stack_vts]
        stack_recipes = []
        for i, v in enumerate(stack_vts):
            if isinstance(v, NullVariable):
                continue
            r = cg.recipe(v)
            if i == callee_slot:
                wrapper = self.compile_wrapper
                r = (lambda inner: lambda rt: wrap_callee(inner(rt), wrapper))(r)
            stack_recipes.append(r)
        local_names, local_recipes, cell_names = self._live_locals(cg)
        resume = resume_function(self.fn, self.positions[start], stack_nulls, local_names, self.lineno, cell_names)
        kept = [v for v in stack_vts if not isinstance(v, NullVariable)]
        brk = {"kind": "native", "stack": kept, "cells": cell_names,
               "locals": [self.symbolic_locals[n] for n in local_names if n not in cell_names],
               "resume": [(self.positions[start], stack_nulls, local_names, self.lineno, cell_names, False)],
               "callee": None if callee_slot is None else  # its index among the non-NULL values
               sum(not isinstance(v, NullVariable) for v in stack_vts[:callee_slot])}

        def step(rt, values):
            return values, resume  # runs natively: not through compile_wrapper
        side = self._epilogue(self.output.side_effects.replay_recipe(cg))
        compiled, gm = self.output.compile(self.backend, cg.outputs, self.fullgraph)
        run = breaking_code(compiled, cg.inputs_getter(), cg.read_sources(), side, stack_recipes, local_recipes, step)
        entry = self._entry(run, gm, [reason])
        entry.warm = warm_start.describe_break(self, cg, compiled, side, brk)  # the frame record (warm start)
        return entry

    def _calls_frame_builtin(self, argc):
        """Whether the breaking CALL's callee reads its caller's frame (``locals()``,
        ``eval(s)``...): made from the transformed code it would see that code's frame,
        so it runs in the resume function instead."""
        slots = (len(self.stack) - argc - 1, len(self.stack) - argc - 2)  # [NULL, fn] (3.11) / [fn, NULL] (3.12)
        for i in slots:
            fn = getattr(self.stack[i], "fn", None) if 0 <= i < len(self.stack) else None
            if fn in _FRAME_BUILTINS or reads_caller_frame(fn):  # e.g. namedtuple's __module__
                return True
        return False

    def _is_context_region(self, region):
        target = self.labels.get(region.target)
        if target is None:
            return False
        names = [i.name for i in self.instructions[target: target + 2]]
        return names[:1] != ["PUSH_EXC_INFO"] or "WITH_EXCEPT_START" in names


def capture_frame(fn, f_locals, *, backend, fullgraph, dynamic, compile_wrapper):
    """Capture ``fn`` called with ``f_locals``; returns a CacheEntry (see convert_frame)."""
    from ..utils.counters import counters
    from ..utils import trace
    from ..utils.logging import get_artifact_logger
    from .guards import Guard
    from .variables.user_defined import CLASS_LOOKUPS

    if fn.__code__.co_flags & 0x3A0:
        unsupported("generator or coroutine frame")
    break_points: dict[int, BreakReason] = {} if fullgraph else take_inlined_breaks(fn.__code__)
    log = get_artifact_logger("graph_breaks")
    for _ in range(64):
        tx = InstructionTranslator(fn, f_locals, backend=backend, fullgraph=fullgraph, dynamic=dynamic,
                                   compile_wrapper=compile_wrapper, break_points=break_points)
        CLASS_LOOKUPS.append(tx.output.guards)
        try:
            entry = tx.run()
        except RestartAt as r:
            reason = BreakReason(r.reason, r.user_stack)
            if r.ip in break_points:
                counters["graph_break"][r.reason] += 1
                log.debug("Graph break (skipping frame %s): %s", fn.__qualname__, reason)
                if trace.enabled:
                    trace.emit("graph_break", _break_record(fn, reason, r.ip, skipped_frame=True))
                return CacheEntry(guard=Guard.always(), fn=fn, run=lambda L: call_with_locals(fn, L),
                                  break_reasons=[*break_points.values(), reason])
            break_points[r.ip] = reason
            continue
        finally:
            CLASS_LOOKUPS.pop()
        for reason in entry.break_reasons:
            counters["graph_break"][reason.reason] += 1
            log.debug("Graph break in %s: %s", fn.__qualname__, reason)
            if trace.enabled:
                ip = next((i for i, r in break_points.items() if r is reason), None)
                trace.emit("graph_break", _break_record(fn, reason, ip))
        return entry
    unsupported("too many graph breaks in one frame")


def _break_record(fn, reason, ip, skipped_frame=False) -> dict:
    """The ``graph_break`` trace record: reason, user file:line, bytecode offset."""
    filename, _, line = reason.user_stack.rpartition(":")
    instrs = [i for i in dis.get_instructions(fn.__code__) if i.opname != "EXTENDED_ARG"]
    offset = instrs[ip].offset if ip is not None and ip < len(instrs) else None
    return {"frame": fn.__qualname__, "reason": reason.reason, "user_stack": reason.user_stack,
            "filename": filename, "lineno": int(line) if line.isdigit() else None, "offset": offset,
            "skipped_frame": skipped_frame}
