"""A differential fuzzer of the default backend: random programs, compiled vs eager.

A program is Python source: input lines (random shapes with sizes 0 and 1, dtypes,
non-contiguous strides, storage offsets, expanded inputs, index tensors) and a chain of
op lines (pointwise, broadcasting binary ops, reductions, views, slicing, indexing, cat,
matmul, in-place ops on inputs and intermediates), each kept only if eager runs it.
:func:`check` runs it eagerly and through ``torchkiln.compile(backend="inductor")``
and compares outputs and the inputs' final values (:mod:`.compare`: float64 eager
re-judges rounding noise; an eager exception must be matched by the same type).  A
failing program is shrunk (delta debugging over its op lines, then its input sizes) and
written as a pytest regression test.  Everything is deterministic by seed.

Run: ``python -m torchkiln.testing.fuzz --seed 0 --count 1000 --out repro_dir``.
"""
from __future__ import annotations

import argparse
import dataclasses
import random
import re
import sys
import time
import traceback
import warnings

import torch

from .compare import Mismatch, compare_outputs

DTYPES = [torch.float32] * 4 + [torch.float64, torch.bfloat16, torch.int64, torch.int32, torch.bool]
SIZES = [1, 2, 3, 4, 5, 7, 8, 16] * 3 + [0]


@dataclasses.dataclass
class Program:
    """``inputs``: ``name = expr`` lines (run under ``torch.manual_seed(seed)``);
    ``ops``: ``vN = expr`` lines; ``outputs``: names returned."""
    seed: int
    inputs: list[str]
    ops: list[str]
    outputs: list[str]

    def fn_source(self) -> str:
        params = ", ".join(_names(self.inputs))
        body = "".join(f"    {line}\n" for line in self.ops) or "    pass\n"
        return f"def fn({params}):\n{body}    return ({''.join(o + ', ' for o in self.outputs)})\n"

    def inputs_source(self) -> str:
        lines = "".join(f"    {line}\n" for line in self.inputs)
        return (f"def make_inputs():\n    torch.manual_seed({self.seed})\n{lines}"
                f"    return [{', '.join(_names(self.inputs))}]\n")

    def source(self) -> str:
        return self.inputs_source() + "\n\n" + self.fn_source()


def _names(lines):
    return [line.split(" = ", 1)[0] for line in lines]


# ---------------------------------------------------------------------------------------
# Generation

class _Gen:
    def __init__(self, seed: int, max_ops: int):
        self.rng = random.Random(seed)
        self.seed = seed
        self.max_ops = max_ops

    def shape(self, ndim=None):
        ndim = self.rng.choice([0, 1, 2, 2, 3, 3, 4]) if ndim is None else ndim
        return [self.rng.choice(SIZES) for _ in range(ndim)]

    def input_line(self, name: str) -> str:
        r = self.rng
        dtype = r.choice(DTYPES)
        shape = self.shape()
        layout = r.choice(["plain", "plain", "slice", "permute", "expand", "offset"]) if shape else "plain"
        full = list(shape)
        post = ""
        if layout == "slice":
            d = r.randrange(len(shape))
            step = r.choice([2, 3])
            full[d] = shape[d] * step
            post = "[" + ", ".join(":" for _ in range(d)) + f"{', ' if d else ''}::{step}]"
        elif layout == "offset":
            full = [shape[0] + 2] + shape[1:]
            post = "[2:]"
        elif layout == "permute" and len(shape) > 1:
            perm = list(range(len(shape)))
            r.shuffle(perm)
            full = [0] * len(shape)
            for i, p in enumerate(perm):
                full[p] = shape[i]
            post = f".permute({perm})"
        elif layout == "expand":
            d = r.randrange(len(shape))
            full[d] = 1
            post = f".expand({shape})"
        make = _make(dtype, full)
        return f"{name} = {make}{post}"

    def program(self) -> Program:
        r = self.rng
        inputs = [self.input_line(f"a{i}") for i in range(r.choice([1, 1, 2, 2, 3]))]
        if r.random() < 0.3:  # an index tensor
            inputs.append(f"a{len(inputs)} = torch.randint(0, 4, ({r.choice([1, 2, 3, 5])},))")
        env = _run_lines(self.seed, inputs, [])
        assert env is not None
        ops: list[str] = []
        exact = {name: True for name in _names(inputs)}
        tries = 0
        while len(ops) < self.max_ops and tries < self.max_ops * 8:
            tries += 1
            vals = {k: v for k, v in env.items() if isinstance(v, torch.Tensor)}
            out = f"v{len(ops)}"
            line = _op_line(r, out, vals)
            if line is None:
                continue
            refs = [n for n in re.findall(r"\b[av]\d+\b", line.split(" = ", 1)[1]) if n in vals]
            if _DISCONTINUOUS.search(line) and not all(exact[n] for n in refs):
                continue  # rounding noise would flip the result: no judge could tell
            new_env = _run_lines(self.seed, inputs, ops + [line])
            if new_env is None:
                continue
            ops.append(line)
            env = new_env
            result = env[out]
            exact[out] = all(exact[n] for n in refs) and (
                bool(_EXACT.match(line)) or not (result.is_floating_point() or result.is_complex()))
        produced = [f"v{i}" for i in range(len(ops))]
        outputs = produced[-1:] + r.sample(produced[:-1], min(len(produced) - 1, r.choice([0, 0, 1, 2])))
        return Program(self.seed, inputs, ops, outputs or _names(inputs)[:1])


def _make(dtype, shape) -> str:
    s = f"({', '.join(map(str, shape))}{',' if len(shape) == 1 else ''})"
    if dtype == torch.bool:
        return f"(torch.randn({s}) > 0)"
    if dtype in (torch.int64, torch.int32):
        return f"torch.randint(-5, 6, {s}, dtype={dtype})"
    return f"torch.randn({s}).to({dtype})"


# Ops whose result jumps with an ulp of their float input (floor, comparisons, argmax,
# integer conversion...): only applied to exact values (inputs and results of exact ops),
# since fused code may round differently from eager without being wrong.
_DISCONTINUOUS = re.compile(r"floor|round|remainder|fmod|sign|argmax|[<>]|==|\.any|\.all|logical_not|[&|]"
                            r"|\.to\(torch\.int|\.to\(torch\.bool|\.to\(torch\.bfloat16")
# Ops that only move, select or compare values (exact results from exact inputs).
_EXACT = re.compile(r"^\w+ = (\w+\[|\w+\.(reshape|t|transpose|unsqueeze|squeeze|contiguous|flatten|permute|"
                    r"expand|view|narrow|select|clone|zero_|fill_|copy_|amax|amin|max|index_select|neg_|clamp_)\b"
                    r"|torch\.(cat|stack|take|gather|abs|neg|relu|maximum|minimum|where|clamp|floor|round|sign)\b"
                    r"|\w+\.to\(torch\.float64\))")

_UNARY = ["torch.sin({x})", "torch.exp({x})", "torch.abs({x})", "torch.neg({x})", "torch.relu({x})",
          "torch.sigmoid({x})", "torch.tanh({x})", "torch.sqrt(torch.abs({x}))", "torch.log1p(torch.abs({x}))",
          "torch.floor({x})", "torch.reciprocal({x})", "torch.clamp({x}, -0.5, 0.5)", "({x} * 3)", "({x} + 1)",
          "{x}.to(torch.float32)", "{x}.to(torch.float64)", "{x}.to(torch.bfloat16)", "{x}.to(torch.int64)",
          "({x} > 0)", "torch.logical_not({x})", "torch.sign({x})", "torch.square({x})", "torch.erf({x})",
          "torch.rsqrt(torch.abs({x}) + 1)", "torch.nan_to_num({x})", "{x}.clone()", "torch.round({x})"]
_BINARY = ["({x} + {y})", "({x} - {y})", "({x} * {y})", "({x} / {y})", "torch.maximum({x}, {y})",
           "torch.minimum({x}, {y})", "torch.where({x} > 0, {x}, {y})", "torch.remainder({x}, {y})",
           "torch.floor_divide({x}, {y})", "({x} & {y})", "({x} | {y})", "({x} < {y})", "({x} == {y})",
           "torch.pow({x}, {y})", "torch.atan2({x}, {y})", "torch.fmod({x}, {y})"]
_INPLACE = ["{x}.add_(1)", "{x}.mul_(2)", "{x}.clamp_(-1, 1)", "{x}.neg_()", "{x}.copy_({y})", "{x}.add_({y})",
            "{x}.zero_()", "{x}.fill_(3)"]


def _op_line(r: random.Random, out: str, vals: dict):
    names = list(vals)
    produced = [n for n in names if n.startswith("v")]
    # mostly chain on the newest value, so that ops feed each other (and fuse)
    x = produced[-1] if produced and r.random() < 0.6 else r.choice(names)
    t = vals[x]
    nd = t.dim()
    dim = r.randrange(-nd, nd) if nd else 0
    kind = r.choice(["unary"] * 4 + ["binary"] * 4 + ["reduce"] * 3 + ["view"] * 4 + ["slice", "index", "index",
                     "cat", "matmul", "inplace", "inplace", "scalar"])
    if kind == "unary":
        return f"{out} = " + r.choice(_UNARY).format(x=x)
    if kind == "binary":
        # a broadcasting partner: another value, or a slice of this one reduced to size 1 in a dim
        y = r.choice(names)
        if r.random() < 0.3 and nd:
            y = f"{x}.narrow({dim}, 0, 1)" if t.shape[dim] else x
        elif r.random() < 0.2:
            y = r.choice(["2", "0.5", "-1", "True"])
        return f"{out} = " + r.choice(_BINARY).format(x=x, y=y)
    if kind == "scalar":
        return f"{out} = " + r.choice(["({x} * {x}.sum())", "({x} - {x}.mean())", "({x} / ({x}.abs().max() + 1))"]).format(x=x)
    if kind == "reduce":
        keep = r.choice(["", ", keepdim=True"])
        d = f"{dim}" if nd else "0"
        if not nd:
            d = "()"
        forms = [f"{x}.sum({d}{keep})", f"{x}.mean({d}{keep})", f"{x}.amax({d}{keep})", f"{x}.amin({d}{keep})",
                 f"{x}.prod({dim if nd else 0}{keep})", f"{x}.argmax({dim if nd else 0}{keep})",
                 f"{x}.var({d}{keep})", f"{x}.std({d}{keep})", f"torch.logsumexp({x}, {d}{keep})",
                 f"torch.softmax({x}, {dim})", f"torch.log_softmax({x}, {dim})", f"torch.cumsum({x}, {dim})",
                 f"{x}.any({dim if nd else 0}{keep})", f"{x}.all()", f"{x}.sum()", f"{x}.max()",
                 f"torch.norm({x})", f"{x}.sum(({dim}, {(dim + 1) % nd if nd else 0}){keep})"]
        return f"{out} = " + r.choice(forms)
    if kind == "view":
        shape = list(t.shape)
        forms = [f"{x}.reshape(-1)", f"{x}.t()" if nd <= 2 else f"{x}.transpose(0, {nd - 1})",
                 f"{x}.unsqueeze({r.randrange(-nd - 1, nd + 1)})", f"{x}.squeeze()", f"{x}.contiguous()",
                 f"{x}.flatten()"]
        if nd >= 2:
            perm = list(range(nd))
            r.shuffle(perm)
            forms += [f"{x}.permute({perm})", f"{x}.flatten(0, 1)", f"{x}.transpose({dim}, {r.randrange(nd)})"]
        if nd and shape[dim] == 1:
            new = list(shape)
            new[dim] = r.choice([2, 3])
            forms.append(f"{x}.expand({new})")
        if nd and shape[dim] % 2 == 0 and shape[dim]:
            new = list(shape)
            new[dim:dim + 1] = [2, shape[dim] // 2]
            forms.append(f"{x}.view({new})" if r.random() < 0.5 else f"{x}.reshape({new})")
        forms.append(f"{x}.view({x}.dtype)")
        return f"{out} = " + r.choice(forms)
    if kind == "slice":
        if not nd:
            return None
        lo = r.choice([0, 1])
        step = r.choice([1, 2, 3])
        hi = r.choice(["", "-1", "3"])
        pre = ":, " * (dim % nd)
        return f"{out} = " + r.choice([f"{x}[{pre}{lo}:{hi}:{step}]", f"{x}.select({dim}, {r.choice([0, -1])})",
                                       f"{x}.narrow({dim}, {lo}, {max(t.shape[dim] - lo - 1, 0)})",
                                       f"{x}[..., None]", f"{x}[{pre}{r.choice([-1, 0, 1])}]"])
    if kind == "index":
        idx = [n for n in names if vals[n].dtype == torch.int64 and vals[n].dim() == 1 and n.startswith("a")]
        if not nd:
            return None
        if idx and r.random() < 0.7:
            i = idx[0]
            return f"{out} = " + r.choice([f"{x}[{i}]", f"{x}.index_select({dim}, {i})",
                                           f"{x}[{':, ' * (dim % nd)}{i}]", f"{x}[{i}.clamp(max=0)]",
                                           f"torch.take({x}, {i})", f"{x}.index_put(({i},), {x}[{i}] * 2)",
                                           f"{x}.index_add(0, {i}, {x}[{i}])", f"{x}[{i}, None]"])
        if r.random() < 0.5:
            return f"{out} = torch.gather({x}, {dim}, torch.zeros_like({x}, dtype=torch.int64))"
        # (no boolean-mask indexing: data-dependent sizes run eagerly by design for now)
        return f"{out} = torch.where({x} > 0, {x}, 0)"
    if kind == "cat":
        others = [n for n in names if vals[n].dim() == nd and vals[n].dtype == t.dtype]
        y = r.choice(others)
        return f"{out} = " + r.choice([f"torch.cat([{x}, {y}], {dim})", f"torch.stack([{x}, {y}], {dim})",
                                       f"torch.cat([{x}, {x}.sin()], {dim})" if t.is_floating_point() else f"torch.cat([{x}, {x}], 0)"])
    if kind == "matmul":
        if not t.is_floating_point() or nd == 0:
            return None
        return f"{out} = " + r.choice([f"({x} @ {x}.transpose(-1, -2))" if nd >= 2 else f"({x} @ {x})",
                                       f"torch.nn.functional.linear({x}, torch.ones(3, {t.shape[-1]}, dtype={x}.dtype))",
                                       f"({x}.transpose(-1, -2) @ {x})" if nd >= 2 else f"torch.outer({x}, {x})"])
    if kind == "inplace":
        y = r.choice(names)
        return f"{out} = " + r.choice(_INPLACE).format(x=x, y=y)
    return None


def _run_lines(seed, inputs, ops):
    """The namespace after running ``inputs`` and ``ops`` eagerly, or None if one raises
    (or warns: deprecated or ill-defined uses are not programs we want)."""
    ns = {"torch": torch}
    torch.manual_seed(seed)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for line in inputs + ops:
                exec(line, ns)
    except Exception:
        return None
    for v in ns.values():
        if isinstance(v, torch.Tensor) and v.numel() > 1_000_000:
            return None
    return ns


# ---------------------------------------------------------------------------------------
# Checking

def _clone(t: torch.Tensor, upcast: bool = False) -> torch.Tensor:
    """``t``'s values in a new storage with its strides and storage offset."""
    storage = t.untyped_storage().clone()
    out = torch.empty(0, dtype=t.dtype).set_(storage, t.storage_offset(), t.shape, t.stride())
    if upcast and t.dtype in (torch.float32, torch.bfloat16, torch.float16):
        out = out.to(torch.float64)
    return out


def _compile_fn(program: Program):
    ns = {"torch": torch}
    exec(compile(program.fn_source(), f"<fuzz program {program.seed}>", "exec"), ns)
    return ns["fn"]


def _make_inputs(program: Program):
    ns = {"torch": torch}
    exec(program.inputs_source(), ns)
    return ns["make_inputs"]()


def _call(fn, inputs, upcast=False):
    args = [_clone(t, upcast) for t in inputs]
    try:
        return fn(*args), args, None
    except Exception as e:
        return None, args, e


def check(program: Program) -> str | None:
    """None if compiled and eager agree, else a one-line description of the failure
    (``"mismatch: ..."``, ``"error: <Type>: ..."``, ``"fallback: ..."``)."""
    return check_functions(_make_inputs(program), lambda: _compile_fn(program))


def check_functions(inputs, make_fn) -> str | None:
    """:func:`check` of ``make_fn()`` (a fresh function per call) on ``inputs``."""
    import torchkiln
    from ..codegen import metrics

    fn = make_fn()
    eager, eager_args, eager_err = _call(fn, inputs)
    torchkiln.reset()
    compiled = torchkiln.compile(make_fn(), backend="inductor", dynamic=False)
    fallbacks = metrics.eager_fallbacks
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res, res_args, res_err = _call(compiled, inputs)
    torchkiln.reset()
    if eager_err is not None or res_err is not None:
        if eager_err is None:
            return f"error: {type(res_err).__name__}: {str(res_err).splitlines()[0][:200] if str(res_err) else ''}"
        if res_err is None:
            return f"mismatch: eager raises {type(eager_err).__name__}, torchkiln returns"
        if not isinstance(res_err, type(eager_err)):
            return f"mismatch: eager raises {type(eager_err).__name__}, torchkiln {type(res_err).__name__}"
        return None
    if metrics.eager_fallbacks != fallbacks:
        return "fallback: a graph ran eagerly"
    ref, ref_args, ref_err = _call(fn, inputs, upcast=True)
    if ref_err is not None:
        ref, ref_args = None, None
    try:
        compare_outputs("output", list(eager), list(res), list(ref) if ref is not None else None)
        compare_outputs("input", eager_args, res_args, ref_args)
    except Mismatch as e:
        return f"mismatch: {str(e)[:300]}"
    return None


def _same_failure(a: str, b: str | None) -> bool:
    """Failures of one kind: for errors, the same exception type; for mismatches, any."""
    if b is None:
        return False
    if a.startswith("error:") or b.startswith("error:"):
        return a.split(":")[:2] == b.split(":")[:2]
    return a.split(":")[0] == b.split(":")[0]


def _valid(program: Program) -> bool:
    try:
        return _run_lines(program.seed, program.inputs, program.ops) is not None and _outputs_ok(program)
    except Exception:
        return False


def _outputs_ok(program):
    defined = set(_names(program.inputs)) | set(_names(program.ops))
    return bool(program.outputs) and all(o in defined for o in program.outputs)


def _still_fails(program: Program, failure: str) -> bool:
    if not _valid(program):
        return False
    try:
        return _same_failure(failure, check(program))
    except Exception:
        return False


def _with_ops(program: Program, ops: list[str]) -> Program:
    defined = set(_names(program.inputs)) | set(_names(ops))
    outputs = [o for o in program.outputs if o in defined]
    if not outputs and ops:
        outputs = [_names(ops)[-1]]
    return dataclasses.replace(program, ops=ops, outputs=outputs)


def shrink(program: Program, failure: str, budget_s: float = 300.0) -> Program:
    """A smaller program with the same kind of failure: delta debugging (ddmin) over the
    op lines, then the outputs, the unused inputs and each input size (to 1, 0, halved)."""
    deadline = time.monotonic() + budget_s

    def fails(p):
        return time.monotonic() < deadline and _still_fails(p, failure)

    ops = list(program.ops)
    n = 2
    while len(ops) >= 1 and time.monotonic() < deadline:
        chunk = max(len(ops) // n, 1)
        reduced = False
        for start in range(0, len(ops), chunk):
            trial = ops[:start] + ops[start + chunk:]
            if fails(_with_ops(program, trial)):
                ops, n, reduced = trial, max(n - 1, 2), True
                break
        if not reduced:
            if chunk == 1:
                break
            n = min(n * 2, len(ops))
    program = _with_ops(program, ops)
    for o in list(program.outputs):
        trial = dataclasses.replace(program, outputs=[x for x in program.outputs if x != o])
        if trial.outputs and fails(trial):
            program = trial
    used = set(re.findall(r"\ba\d+\b", " ".join(program.ops + program.outputs)))
    trial = dataclasses.replace(program, inputs=[line for line in program.inputs if line.split(" = ")[0] in used])
    if trial.inputs != program.inputs and fails(trial):
        program = trial
    # input sizes: each number of an input line's shape tuple or ``expand([...])``,
    # tried as 0, 1 and halved
    for k in range(len(program.inputs)):
        j = 0
        while time.monotonic() < deadline:
            line = program.inputs[k]
            spots = [m for span in re.finditer(r"\(([\d, ]+)\)|expand\(\[([\d, ]*)\]", line)
                     for m in re.finditer(r"\d+", line[:span.end()]) if m.start() >= span.start()]
            if j >= len(spots):
                break
            m = spots[j]
            value = int(m.group(0))
            for new in sorted({0, 1, value // 2}):
                if new >= value:
                    continue
                cand = line[:m.start()] + str(new) + line[m.end():]
                trial = dataclasses.replace(program, inputs=program.inputs[:k] + [cand] + program.inputs[k + 1:])
                if fails(trial):
                    program = trial
                    break
            j += 1
    return program


def regression_test(program: Program, failure: str, name: str) -> str:
    """The pytest source of a reproducer (uses :func:`check_program`)."""
    src = program.source().replace("\n", "\n    ").rstrip()
    return (f"def test_{name}():\n"
            f"    # found by torchkiln.testing.fuzz (seed {program.seed}): {failure[:150]!r}\n"
            f"    {src}\n\n"
            f"    check_program(make_inputs, fn)\n")


def check_program(make_inputs, fn) -> None:
    """Assert that ``fn`` compiled matches eager on ``make_inputs()`` (outputs, final
    input values, exception type), for the regression tests the fuzzer writes."""
    def fresh():  # a new function object (and cache entry) per use
        return type(fn)(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)

    failure = check_functions(make_inputs(), fresh)
    assert failure is None, failure


def generate(seed: int, max_ops: int = 8) -> Program:
    """The program of ``seed`` (deterministic)."""
    return _Gen(seed, max_ops).program()


def run(seeds, out=None, time_limit: float | None = None, log=print, shrink_budget_s: float = 150.0):
    """Checks the programs of ``seeds``; returns ``(programs, failures)``, failures as
    ``[(seed, failure, shrunk Program)]``.  ``out``: a file the reproducers are appended
    to as pytest tests."""
    start = time.monotonic()
    count, failures, seen = 0, [], set()
    for seed in seeds:
        if time_limit is not None and time.monotonic() - start > time_limit:
            break
        program = generate(seed)
        count += 1
        if count % 25 == 0:
            log(f"programs {count} (seed {seed}), failures {len(failures)}, {time.monotonic() - start:.0f} s")
        try:
            failure = check(program)
        except Exception as e:  # the harness itself: report, never stop
            failure = f"error: {type(e).__name__}: harness {e}"
            log(traceback.format_exc())
        if failure is None:
            continue
        log(f"seed {seed}: {failure}")
        small = shrink(program, failure, shrink_budget_s)
        key = (failure.split(":")[0], tuple(small.ops))
        log(f"  shrunk to {len(small.ops)} ops:\n" + small.source())
        if key in seen:
            continue
        seen.add(key)
        failures.append((seed, failure, small))
        if out:
            with open(out, "a") as f:
                f.write("\n\n" + regression_test(small, failure, f"seed_{seed}"))
    return count, failures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--time-limit", type=float, default=None, help="seconds")
    parser.add_argument("--out", default=None, help="append reproducers (pytest tests) to this file")
    args = parser.parse_args(argv)
    count, failures = run(range(args.seed, args.seed + args.count), args.out, args.time_limit,
                          log=lambda m: print(m, flush=True))
    print(f"programs: {count}, failures: {len(failures)}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
