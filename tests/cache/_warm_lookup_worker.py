"""Run in a subprocess by tests/cache/test_warm_class_lookups.py (argv[1]: ``cold`` or
``warm``): the cases of tests/capture/test_class_lookup_guards.py across a warm start.
Each case calls its frame, then changes a class the frame's capture looked something up
on (a property, a method, a class attribute, a subclass shadowing its base, a base
reached by ``super()``) and calls again, each result checked against eager.  With
``LC_VARIANT=1`` two classes are defined otherwise (another class constant, a subclass
override), as a source edited between processes.  Prints one JSON line: per case the
warm-start counters its first call moved, whether capture ran and (warm) whether the
installed frame's generated guard has the lines a fresh capture's has."""
import json
import os
import re
import sys

import torch

import torchkiln
from torchkiln import counters

VARIANT = os.environ.get("LC_VARIANT") == "1"


class PropN:
    @property
    def v(self):
        return 3.0


def f_prop(x, n):
    return x * n.v


def prop_replaced(args):
    PropN.v = property(lambda self: 7.0)


def prop_deleted(args):
    del PropN.v
    args[1].__dict__["v"] = 11.0


class MethN:
    def v(self):
        return 3.0


def f_method(x, n):
    return x * n.v()


def method_replaced(args):
    MethN.v = lambda self: 7.0


class PropModule(torch.nn.Module):
    @property
    def scale(self):
        return 2.0

    def shift(self):
        return 1.0

    def forward(self, x):
        return x * self.scale + self.shift()


def shift_replaced(args):
    PropModule.shift = lambda self: 5.0


def scale_deleted(args):
    del PropModule.scale
    args[0].scale = 4.0


class Base:
    def v(self):
        return 3.0


class Child(Base):
    pass


def f_shadow(x, n):
    return x * n.v()


def child_shadows(args):
    Child.v = lambda self: 9.0


class SuperBase(torch.nn.Module):
    def scale(self):
        return 2.0


class SuperModule(SuperBase):
    def scale(self):
        return super().scale() + 1.0

    def forward(self, x):
        return x * self.scale()


def super_replaced(args):
    SuperBase.scale = lambda self: 10.0


class ConstN:
    k = 2.0

    def v(self):
        return self.k


def f_const(x, n):
    return x * n.v()


def const_changed(args):
    ConstN.k = 5.0


class EditedConst:  # another constant in the warm process (LC_VARIANT=1)
    k = 3.0 if VARIANT else 2.0

    def v(self):
        return type(self).k


def f_edited_const(x, n):
    return x * n.v()


class EditedBase:
    def v(self):
        return 3.0


class EditedChild(EditedBase):  # overrides its base's method in the warm process
    if VARIANT:
        def v(self):
            return 9.0


def f_edited_override(x, n):
    return x * n.v()


def edited_base_replaced(args):
    EditedBase.v = lambda self: 4.0


CASES = {  # name -> (frame, arguments, class changes made one after the other)
    "prop": (f_prop, lambda: (torch.ones(2), PropN()), [prop_replaced, prop_deleted]),
    "method": (f_method, lambda: (torch.ones(2), MethN()), [method_replaced]),
    "module": (PropModule, lambda: (torch.ones(3),), [shift_replaced, scale_deleted]),
    "shadow": (f_shadow, lambda: (torch.ones(2), Child()), [child_shadows]),
    "super": (SuperModule, lambda: (torch.ones(2),), [super_replaced]),
    "const": (f_const, lambda: (torch.ones(2), ConstN()), [const_changed]),
    "edited_const": (f_edited_const, lambda: (torch.ones(2), EditedConst()), []),
    "edited_override": (f_edited_override, lambda: (torch.ones(2), EditedChild()), [edited_base_replaced]),
}


def _guard_lines(guard) -> list:
    guard = getattr(guard, "_guard", guard)
    return sorted(re.sub(r"___c\d+", "___c", line) for line in guard.source_text.splitlines())


def _same_guard(frame, module, args) -> bool:
    """The installed entry's guard against a fresh capture of the same call (constants'
    numbering aside; the fresh capture is not installed)."""
    from torchkiln.backends import lookup_backend
    from torchkiln.capture import eval_frame
    from torchkiln.capture.frame import bind_locals
    from torchkiln.capture.symbolic_convert import capture_frame
    from torchkiln.shapes.policy import DynamicPolicy

    fn = frame.forward if module is not None else frame
    call_args = (module, *args) if module is not None else args
    fc = next(fc for fc in eval_frame._frame_caches.values() if fc.code is fn.__code__)
    warm = fc.entries[0][1].guard
    fresh = capture_frame(fn, bind_locals(fn, call_args, {}), backend=lookup_backend("inductor"), fullgraph=False,
                          dynamic=DynamicPolicy(), compile_wrapper=lambda f: f).guard
    return _guard_lines(warm) == _guard_lines(fresh)


def main() -> int:
    phase = sys.argv[1]
    report, ok = {}, True
    for name, (frame, make_args, changes) in CASES.items():
        args = make_args()
        if isinstance(frame, type):  # a module: its forward is the frame, the module the argument
            module = frame()
            eager, compiled, args = module, torchkiln.compile(module), args
            args_for_change = (module,)
        else:
            eager, compiled, args_for_change = frame, torchkiln.compile(frame), args
        before = {k: dict(v) for k, v in counters.items()}
        results = [bool(torch.equal(compiled(*args), eager(*args)))]

        def delta(group, k):
            return counters[group].get(k, 0) - before.get(group, {}).get(k, 0)
        first = {"captured": delta("stats", "unique_graphs"),
                 **{k: delta("warm_start", k) for k in ("hit", "miss", "bypass", "saved", "not_recordable")},
                 "reasons": {r: delta("warm_start_bypass", r) for r in counters["warm_start_bypass"]
                             if delta("warm_start_bypass", r)}}
        if phase == "warm" and first["hit"]:
            first["same_guard"] = _same_guard(frame, module if isinstance(frame, type) else None, args)
        for change in changes:
            change(args_for_change)
            results.append(bool(torch.equal(compiled(*args), eager(*args))))
        ok = ok and all(results)
        report[name] = {"results": results, **first}
    print(json.dumps({"ok": ok, "frames": report}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
