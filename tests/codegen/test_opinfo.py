"""Every op of PyTorch's OpInfo database compiled with the default backend, against eager.

One test per (op, dtype, fwd|grad): the op is called on the first samples of
``op.sample_inputs`` through ``torchkiln.compile(backend="inductor", dynamic=False)``
and its outputs (``fwd``) or the gradients of its outputs with random grad_outputs
(``grad``) are compared with eager's.  Rounding noise is re-judged against eager run
in float64: an element is wrong only if torchkiln's result is farther from the float64
result than eager's own, by more than the dtype's tolerance.  Random or uninitialised
outputs compare shape and dtype only.  A graph that falls back to eager, breaks or
raises a torchkiln error fails like a wrong result; each such op/dtype/mode that still
fails is named, with why, in ``opinfo_expected_failures.py`` (strict: an entry that
passes fails, so the list only shrinks).

Ops of ``python_ref_db`` (the ``_refs.*`` decompositions) are swept forward too.
By default a deterministic shard runs (about 1 test in ``SHARD_EVERY``, plus the ops in
``ALWAYS``, 1 ``_refs`` test in ``REF_SHARD_EVERY``, and 1 test of the narrower integer
dtypes ``INT_DTYPES`` in ``INT_SHARD_EVERY``); ``TORCHKILN_OPINFO_FULL=1`` or ``pytest -m slow`` runs the whole sweep.

Sweeps by hand (see ``opinfo_summary.py`` for the per-dtype table):

- ``TORCHKILN_OPINFO_LOG=file``: one JSON line per case (``{"id", "op", "dtype", "mode",
  "outcome", "message", "seconds"}``; outcome ``pass | xfail | skip | FAIL | XPASS``),
  preceded by a ``"start"`` line, so a case that killed the process is known.
- ``TORCHKILN_OPINFO_SHARD=i/n``: only the cases at positions ``i, i+n, ...`` (crc order).
- ``TORCHKILN_OPINFO_DTYPES=int8,uint8``: sweep these dtypes instead of ``DTYPES + INT_DTYPES``
  (the short names of ``_SHORT``; their cases are sharded as usual).
- ``TORCHKILN_OPINFO_OPS=add,sum``: only these ops (``op_key`` names).
- ``TORCHKILN_OPINFO_BACKEND=triton``: CPU tensors through Triton kernels
  (``cpu_backend="triton"``, needs ``TRITON_INTERPRET=1``) instead of C++.
- ``TORCHKILN_OPINFO_RESUME=1``: cases the log already has an outcome for are left out;
  one the log started but never finished (the process died in it) is logged ``crash``
  and left out too.
"""
from __future__ import annotations

import json
import math
import os
import time
import warnings
import zlib

import pytest
import torch
import torch.utils._pytree as pytree

import torchkiln
import torchkiln.codegen.compile_fx as compile_fx_module
from torchkiln.codegen import metrics
from torchkiln.testing.compare import Mismatch, compare_outputs as _compare
from torchkiln.utils.counters import counters

from opinfo_expected_failures import EXPECTED_FAILURES

common = pytest.importorskip("torch.testing._internal.common_methods_invocations")

DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.bool)
# Swept sparsely (forward only): their kernels are the int64 ones in narrower types, where
# wrapping, promotion and the kernels eager lacks differ (2026-11-25: all 2964 cases of
# these four, C++ backend: 0 wrong, 20 graph breaks of data-dependent ops).
INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.uint8)
INT_SHARD_EVERY = 24
GRAD_DTYPES = (torch.float32, torch.float64)
MAX_SAMPLES = int(os.environ.get("TORCHKILN_OPINFO_SAMPLES", "1"))
# A file each case appends JSON lines to (for sweeps run by hand).
LOG = os.environ.get("TORCHKILN_OPINFO_LOG")
SHARD = os.environ.get("TORCHKILN_OPINFO_SHARD", "")  # "i/n"
RESUME = os.environ.get("TORCHKILN_OPINFO_RESUME", "") not in ("", "0")
SHARD_EVERY = 12
REF_SHARD_EVERY = 50  # python_ref_db in the CI shard: a light sample
FULL = os.environ.get("TORCHKILN_OPINFO_FULL", "") not in ("", "0")
# Always in the CI shard: ops that once gave silent wrong results.
ALWAYS = {"view_as_complex", "fft.ifft", "fft.ihfft", "fft.ihfftn", "stft", "add", "sum",
          "index_put", "gather", "softmax", "nn.functional.layer_norm", "matmul", "cat"}
# Outputs that are random or uninitialised: shape and dtype only.
RANDOM_OPS = {
    "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided",
    "rand_like", "randn_like", "randint_like", "randint", "bernoulli", "multinomial", "normal",
    "uniform", "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d",
    "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout", "nn.functional.rrelu",
    "cauchy", "exponential", "geometric", "log_normal", "torch.empty", "randn", "rand",
}
# Ops with data-dependent output shapes or values: compiled with the settings torch.compile
# needs for them too (config.capture_scalar_outputs / capture_dynamic_output_shape_ops);
# without them both break the graph (issue 14).
DATA_DEPENDENT_OPS = {"argwhere", "bincount", "combinations", "item", "masked_select", "nonzero", "unique",
                      "unique_consecutive", "tensor_split"}
_SHORT = {torch.float32: "float32", torch.float64: "float64", torch.bfloat16: "bfloat16",
          torch.float16: "float16", torch.int64: "int64", torch.int32: "int32", torch.int16: "int16",
          torch.int8: "int8", torch.uint8: "uint8", torch.bool: "bool"}
_BY_SHORT = {v: k for k, v in _SHORT.items()}
if os.environ.get("TORCHKILN_OPINFO_DTYPES"):
    DTYPES = tuple(_BY_SHORT[d] for d in os.environ["TORCHKILN_OPINFO_DTYPES"].split(","))
    INT_DTYPES = ()
OPS = set(filter(None, os.environ.get("TORCHKILN_OPINFO_OPS", "").split(",")))
BACKEND = os.environ.get("TORCHKILN_OPINFO_BACKEND", "cpp")
def op_key(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def _cases():
    """(op, dtype, mode) of ``op_db`` (forward, and gradients for float32/float64), then of
    ``python_ref_db`` (forward: its ``_refs.*`` Python decompositions are traced by capture
    into prims and ATen ops, which op_db's ATen calls never reach)."""
    cases = []
    for op in common.python_ref_db:
        supported = op.supported_dtypes("cpu")
        cases += [(op, dtype, "fwd") for dtype in DTYPES + INT_DTYPES if dtype in supported]
    for op in common.op_db:
        supported = op.supported_dtypes("cpu")
        for dtype in DTYPES + INT_DTYPES:
            if dtype not in supported:
                continue
            modes = ["fwd"]
            if dtype in GRAD_DTYPES and op.supports_autograd:
                modes.append("grad")
            for mode in modes:
                cases.append((op, dtype, mode))
    return cases


def _in_shard(case_id: str, op, dtype) -> bool:
    if dtype in INT_DTYPES:
        return zlib.crc32(case_id.encode()) % INT_SHARD_EVERY == 0
    if op.name.startswith("_refs."):
        return zlib.crc32(case_id.encode()) % REF_SHARD_EVERY == 0
    return op.name in ALWAYS or zlib.crc32(case_id.encode()) % SHARD_EVERY == 0


def _params():
    """Cases in a fixed pseudo-random order (by the crc32 of their id), so that a part of
    the sweep is a fair sample of all of it."""
    params = []
    for op, dtype, mode in _cases():
        if OPS and op_key(op) not in OPS:
            continue
        case_id = f"{op_key(op)}-{_SHORT[dtype]}-{mode}"
        marks = [] if _in_shard(case_id, op, dtype) else [pytest.mark.slow]
        params.append(pytest.param(op, dtype, mode, id=case_id, marks=marks))
    params.sort(key=lambda p: zlib.crc32(p.id.encode()[::-1]))
    if SHARD:
        i, n = (int(x) for x in SHARD.split("/"))
        params = params[i::n]
    if RESUME and LOG:
        done = _logged_outcomes()
        params = [p for p in params if p.id not in done]
    return params


def _logged_outcomes() -> set[str]:
    """Ids of the cases ``LOG`` has an outcome for; a case started but never finished
    (the process died in it) gets a ``crash`` outcome now."""
    if not os.path.exists(LOG):
        return set()
    started, done = {}, set()
    with open(LOG) as f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:  # a line cut short by the crash
                continue
            if rec["outcome"] == "start":
                started[rec["id"]] = rec
            else:
                done.add(rec["id"])
    for case_id, rec in started.items():
        if case_id not in done:
            _write_log({**rec, "outcome": "crash", "message": "the process died in this case"})
            done.add(case_id)
    return done


# ---------------------------------------------------------------------------------------
# Calling an op on one sample, compiled or eager

def _copy(t: torch.Tensor, upcast: bool = False) -> torch.Tensor:
    """A fresh leaf with ``t``'s values, strides and storage offset (float64 if ``upcast``)."""
    if t.layout != torch.strided or t.is_quantized:
        out = t.detach().clone()
    else:
        storage = t.detach().untyped_storage().clone()
        out = torch.empty(0, dtype=t.dtype, device=t.device).set_(storage, t.storage_offset(), t.shape, t.stride())
    if upcast and _upcast(out.dtype):
        out = out.to(_upcast(out.dtype))
    return out.requires_grad_(t.requires_grad)


def _upcast(dtype):
    if dtype in (torch.float32, torch.bfloat16, torch.float16):
        return torch.float64
    if dtype == torch.complex64:
        return torch.complex128
    return None


def _build_fn(op, sample):
    """``(fn, tensors)``: ``fn(*tensors)`` calls ``op`` on ``sample``; the sample's
    non-tensor leaves are constants of ``fn``'s own code (a fresh code object per
    sample, so no cache entry is shared)."""
    tensors, consts = [], []

    def expr(v):
        if isinstance(v, torch.Tensor):
            tensors.append(v)
            return f"t{len(tensors) - 1}"
        if isinstance(v, list):
            return "[" + ", ".join(expr(x) for x in v) + "]"
        if isinstance(v, tuple):
            return "(" + "".join(expr(x) + ", " for x in v) + ")"
        consts.append(v)
        return f"c{len(consts) - 1}"

    call = [expr(sample.input)] + [expr(a) for a in sample.args]
    call += [f"{k}={expr(v)}" for k, v in sample.kwargs.items()]
    params = ", ".join(f"t{i}" for i in range(len(tensors)))
    src = f"def fn({params}):\n    return op({', '.join(call)})\n"
    scope = {"op": op.op, **{f"c{i}": c for i, c in enumerate(consts)}}
    exec(compile(src, f"<opinfo {op_key(op)}>", "exec"), scope)
    return scope["fn"], tensors


def _grad_inputs(args):
    return [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]


def _diff_outputs(out, sample):
    out = sample.output_process_fn_grad(out)
    return [o for o in pytree.tree_leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad]


def _run(fn, tensors, mode, sample, upcast=False, seed=0):
    """Outputs (``fwd``) or gradients (``grad``) of ``fn`` on copies of ``tensors``."""
    args = [_copy(t, upcast) for t in tensors]
    torch.manual_seed(seed)
    out = fn(*args)
    if mode == "fwd":
        return out
    outs = _diff_outputs(out, sample)
    inputs = _grad_inputs(args)
    if not outs or not inputs:
        return None
    gen = torch.Generator().manual_seed(1234)
    # drawn in the 64-bit type so that the float64 reference gets the same values
    grad_outs = [torch.randn(o.shape, generator=gen, dtype=_upcast(o.dtype) or o.dtype) for o in outs]
    grad_outs = [g if upcast else g.to(o.dtype) for g, o in zip(grad_outs, outs)]
    return torch.autograd.grad(outs, inputs, grad_outs, allow_unused=True)


# ---------------------------------------------------------------------------------------
# Judging

def _is_random(op, fn, tensors, mode, sample, eager):
    if op.name in RANDOM_OPS or op.name.split(".")[-1] in RANDOM_OPS:
        return True
    try:  # seeded twice and with another seed: differs -> random or uninitialised
        again = _run(fn, tensors, mode, sample, seed=0)
        other = _run(fn, tensors, mode, sample, seed=1)
        _compare("", eager, again, None, False)
        _compare("", eager, other, None, False)
    except Exception:
        return True
    return False


def check_sample(op, sample, mode):
    """Raises :class:`Mismatch` or a torchkiln error if the compiled op differs."""
    fn, tensors = _build_fn(op, sample)
    try:
        eager = _run(fn, tensors, mode, sample)
    except Exception as e:
        eager_error = e
    else:
        eager_error = None
    torchkiln.reset()
    compiled = torchkiln.compile(fn, backend="inductor", dynamic=False)
    fallbacks = metrics.eager_fallbacks
    compile_fx_module._warned.clear()  # its fallback warning is once per message
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            res = _run(compiled, tensors, mode, sample)
    except Exception as e:
        if eager_error is None:
            raise
        if not isinstance(e, type(eager_error)):
            raise Mismatch(f"eager raises {type(eager_error).__name__}, torchkiln {type(e).__name__}: {e}") from e
        return
    if eager_error is not None:
        raise Mismatch(f"eager raises {type(eager_error).__name__}: {eager_error}; torchkiln returns")
    fell_back = metrics.eager_fallbacks - fallbacks
    kiln_warnings = [str(w.message) for w in caught if "torchkiln" in str(w.message)]
    if fell_back or kiln_warnings:
        raise RuntimeError(f"torchkiln fell back to eager: {kiln_warnings[:1]}")
    if counters["graph_break"]:
        raise RuntimeError(f"graph break: {list(counters['graph_break'])[:2]}")
    shape_only = _is_random(op, fn, tensors, mode, sample, eager)
    ref = None
    if not shape_only:
        if any(_upcast(t.dtype) for t in tensors):
            try:
                ref = _run(fn, tensors, mode, sample, upcast=True)
            except Exception:  # the op has no float64 kernel: judge against eager alone
                ref = None
    _compare("output" if mode == "fwd" else "grad", eager, res, ref, shape_only)


def _samples(op, dtype, mode):
    samples = op.sample_inputs("cpu", dtype, requires_grad=(mode == "grad"))
    out = []
    for s in samples:
        out.append(s)
        if len(out) == MAX_SAMPLES:
            break
    return out


def _call_op(op, *args, **kwargs):
    return op(*args, **kwargs)


@pytest.fixture(autouse=True)
def _strict_capture(monkeypatch):
    """Capture errors raise; OpInfo's ``wrapper_set_seed`` (seeding random ops under
    ``freeze_rng_state``, a graph break) calls the op directly: random outputs are
    compared by shape and dtype only anyway."""
    monkeypatch.setattr(torchkiln.config, "suppress_errors", False)
    monkeypatch.setattr(common, "wrapper_set_seed", _call_op)
    if BACKEND != "cpp":
        monkeypatch.setattr(torchkiln.codegen.config, "cpu_backend", BACKEND)
    yield
    torchkiln.reset()


@pytest.mark.parametrize("op,dtype,mode", _params())
def test_opinfo(op, dtype, mode, monkeypatch):
    key = (op_key(op), _SHORT[dtype], mode)
    expected = EXPECTED_FAILURES.get(key) or EXPECTED_FAILURES.get((op_key(op), "*", mode))
    _log(key, "start", "")
    samples = _samples(op, dtype, mode)
    if not samples:
        _log(key, "skip", "no sample inputs")
        pytest.skip("no sample inputs")
    counters.clear()
    if op.name.removeprefix("_refs.") in DATA_DEPENDENT_OPS:
        monkeypatch.setattr(torchkiln.config, "capture_scalar_outputs", True)
        monkeypatch.setattr(torchkiln.config, "capture_dynamic_output_shape_ops", True)
    try:
        for sample in samples:
            check_sample(op, sample, mode)
    except (Exception, pytest.fail.Exception) as e:  # the latter: pytest-timeout's
        _log(key, "xfail" if expected else "FAIL", f"{type(e).__name__}: {e}")
        if expected:
            pytest.xfail(expected)
        raise
    _log(key, "XPASS" if expected else "pass", "")
    if expected:
        pytest.fail(f"{key} passes now: remove it from opinfo_expected_failures.py", pytrace=False)


_started = [0.0]


def _log(key, outcome, message):
    if not LOG:
        return
    now = time.monotonic()
    if outcome == "start":
        _started[0] = now
    op, dtype, mode = key
    _write_log({"id": f"{op}-{dtype}-{mode}", "op": op, "dtype": dtype, "mode": mode, "outcome": outcome,
                "message": " ".join(message.split())[:300], "seconds": round(now - _started[0], 2)})


def _write_log(rec):
    with open(LOG, "a") as f:
        f.write(json.dumps(rec) + "\n")
