"""Side effects recorded while tracing and replayed after the graph runs.

Mirrors TorchDynamo's SideEffects: nothing user-visible changes during capture; the
transformed code applies, in program order and preserving object identity, attribute
stores on modules and user objects, STORE_GLOBAL, mutations of containers that existed
before the frame (their new contents are assigned in place) and nonlocal (cell) writes.
"""
from __future__ import annotations


class SideEffects:
    def __init__(self):
        self.ops: list[tuple] = []  # ("attr", obj_vt, name) | ("global", gdict, gname, name) | ("cell", cell) | ("mutate", vt)
        self.attr_values: dict[tuple[int, str], tuple] = {}
        self.global_values: dict[tuple[int, str], tuple] = {}
        self.cell_values: dict[int, tuple] = {}
        self._mutated: set[int] = set()

    def __bool__(self):
        return bool(self.ops)

    def is_mutated(self, vt) -> bool:
        return id(vt) in self._mutated

    def mutate(self, vt) -> None:
        """Note that a container tracker's contents changed (replayed if pre-existing)."""
        if getattr(vt, "source", None) is not None and id(vt) not in self._mutated:
            self._mutated.add(id(vt))
            self.ops.append(("mutate", vt))

    def store_attr(self, obj_vt, name: str, value_vt) -> None:
        key = (id(obj_vt), name)
        if key not in self.attr_values:
            self.ops.append(("attr", obj_vt, name))
        self.attr_values[key] = (obj_vt, value_vt)

    def load_attr(self, obj_vt, name: str):
        entry = self.attr_values.get((id(obj_vt), name))
        return None if entry is None else entry[1]

    def store_global(self, gdict: dict, gname: str, name: str, value_vt) -> None:
        key = (id(gdict), name)
        if key not in self.global_values:
            self.ops.append(("global", gdict, gname, name))
        self.global_values[key] = (gdict, value_vt)

    def load_global(self, gdict: dict, name: str):
        entry = self.global_values.get((id(gdict), name))
        return None if entry is None else entry[1]

    def store_cell(self, cell_vt, value_vt) -> None:
        """A write to a pre-existing closure cell (``cell_vt`` rebuilds the cell object)."""
        cell = cell_vt.cell
        if id(cell) not in self.cell_values:
            self.ops.append(("cell", cell))
        self.cell_values[id(cell)] = (cell_vt, value_vt)

    def load_cell(self, cell):
        entry = self.cell_values.get(id(cell))
        return None if entry is None else entry[1]

    def replay_recipe(self, cg):
        """``apply(rt)``: compute every new value first, then apply the stores in order."""
        from .variables.containers import ListIteratorVariable, set_iterator_state

        steps, iterators = [], []
        for op in self.ops:
            kind = op[0]
            if kind == "attr":
                obj_vt, name = op[1], op[2]
                steps.append(("attr", cg.recipe(obj_vt), name, cg.recipe(self.attr_values[(id(obj_vt), name)][1])))
            elif kind == "global":
                gdict, _, name = op[1], op[2], op[3]
                steps.append(("global", gdict, name, cg.recipe(self.global_values[(id(gdict), name)][1])))
            elif kind == "cell":
                cell_vt, value_vt = self.cell_values[id(op[1])]
                steps.append(("cell", cg.recipe(cell_vt), None, cg.recipe(value_vt)))
            elif isinstance(op[1], ListIteratorVariable):  # a pre-existing list/tuple iterator that moved
                iterators.append((cg.from_source(op[1].source), op[1].state()))
            else:
                vt = op[1]
                steps.append(("mutate", cg.from_source(vt.source), type(vt).__name__, cg.contents_recipe(vt)))
        # iterators last: a position is clamped to the length of the (replayed) sequence
        steps += [("iter", it, set_iterator_state, lambda rt, state=state: state) for it, state in iterators]
        if not steps:
            return None

        def apply(rt):
            values = [(kind, a(rt) if kind != "global" else a, b, v(rt)) for kind, a, b, v in steps]
            for kind, target, name, value in values:
                if kind == "attr":
                    setattr(target, name, value)
                elif kind == "global":
                    target[name] = value
                elif kind == "cell":
                    target.cell_contents = value
                elif kind == "iter":
                    name(target, *value)
                elif isinstance(target, list):
                    target[:] = value
                elif isinstance(target, dict):
                    target.clear()
                    target.update(value)
                elif isinstance(target, set):
                    target.clear()
                    target.update(value)

        return apply
