"""Per-call cost of guard checks on the suite's models (run by hand; not a test).

Per model, the model is compiled with ``backend="eager"`` (guards do not depend on the
backend), called once to capture, then once more with every cached entry's guard
wrapped to record the ``f_locals`` it was checked on.  For each frame whose guard
passed on that call: the number of guard parts and the median µs of one call of the
installed guard function on those real ``f_locals`` (``timeit``, thread CPU time).  With ``--profile``,
the functions the guard time goes to (cProfile over repeated checks, top entries by
own time).  With ``--torch``, the same for ``torch.compile(backend="eager")``: the
number of guard lines and µs per ``guard_manager.check(f_locals)`` of the top-level
``forward`` frame (torch's guard manager is C++).  With ``--entry``, the whole frame
entry per call, torchkiln and torch.compile side by side: the model compiled with a
backend whose graphs return the outputs computed at compile time, so a call is only
what surrounds the graphs (wrapper, argument binding, cache lookup and guards, graph
inputs, the transformed code, resume functions, output construction).  torch's guard
runs in C++ but its frame entry does more around it; this column compares what a user
pays per call.

    python benchmarks/guard_overhead.py [--models hf_t5,hf_bert,...] [--mode inference]
        [--profile] [--torch] [--entry] [--number 200]

Uses 1 thread.  Timings are noisy on a shared machine; the part counts are not.
"""
from __future__ import annotations

import argparse
import contextlib
import cProfile
import inspect
import io
import pstats
import statistics
import sys
import time
import timeit

import torch

DEFAULT_MODELS = "hf_t5,hf_bert,hf_gpt2,hf_llama,nanogpt,hooked_small"


def build(name: str):
    if name.startswith("hooked"):
        sys.path.insert(0, __file__.rsplit("/", 1)[0])
        import compiled_autograd_bench

        return compiled_autograd_bench.build(name)
    from torchkiln.bench.models import build as build_model

    return build_model(name, "cpu")


def step(work, call, mode: str, ctx=contextlib.nullcontext):
    if mode == "inference":
        with torch.no_grad():
            call(*work.args, **work.kwargs)
        return
    work.model.zero_grad(set_to_none=True)
    loss = work.loss_fn(call(*work.args, **work.kwargs))
    with ctx():
        loss.backward()


def _time_us(fn, arg, number: int, rounds: int = 7) -> float:
    timer = timeit.Timer(lambda: fn(arg), timer=time.thread_time)  # CPU time: the machine is shared
    return 1e6 * statistics.median(t / number for t in timer.repeat(rounds, number))


def checked_guards(work, compiled, mode: str, ctx=contextlib.nullcontext) -> list[tuple]:
    """``(code, guard, f_locals)`` of every guard that passes on one more step of
    ``compiled`` (the frame caches' hot checks are wrapped for that step, then restored)."""
    from torchkiln.capture import eval_frame

    seen = []
    saved = []
    for fc in eval_frame._frame_caches.values():
        saved.append((fc, list(fc.hot)))
        new = []
        for key, check, run in fc.hot:
            entry = next(e for k, e in fc.entries if e.guard.check is check)

            def recording(f_locals, check=check, fc=fc, entry=entry):
                ok = check(f_locals)
                if ok:
                    seen.append((fc.code, entry.guard, dict(f_locals)))
                return ok
            new.append((key, recording, run))
        fc.hot[:] = new
    try:
        step(work, compiled, mode, ctx)
    finally:
        for fc, hot in saved:
            fc.hot[:] = hot
    return seen


def torchkiln_guards(name: str, mode: str, number: int, profile: bool) -> list[dict]:
    """One row per frame checked on a steady-state call: parts, µs, first-check result."""
    import torchkiln
    from torchkiln.capture import eval_frame

    torchkiln.reset()
    work = build(name)
    compiled = torchkiln.compile(work.model, backend="eager")
    ctx = contextlib.nullcontext
    if name.startswith("hooked") and mode == "training":
        ctx = lambda: torchkiln.compiled_autograd.enable(torchkiln.compiled_autograd.compiler_fn_for_backend("eager"))  # noqa: E731
    if mode == "training":
        work.model.train()
    else:
        work.model.eval()
    for _ in range(2):  # the second training step accumulates: its own capture
        step(work, compiled, mode, ctx)
    seen = checked_guards(work, compiled, mode, ctx)
    rows = []
    for code, guard, f_locals in seen:
        with torch.no_grad() if mode == "inference" else contextlib.nullcontext():  # the guard checks grad mode
            assert guard.check(f_locals), "the recorded guard fails: timing a failing check"
            row = {"frame": code.co_name, "parts": len(guard._parts), "us": _time_us(guard.check, f_locals, number)}
        if profile:
            prof = cProfile.Profile()  # (grad mode on: in inference the check fails at its grad-mode part)
            prof.enable()
            for _ in range(number):
                guard.check(f_locals)
            prof.disable()
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(8)
            row["profile"] = out.getvalue()
        rows.append(row)
    return rows


def torch_guards(name: str, mode: str, number: int) -> dict | None:
    """torch.compile's guard on the top-level ``forward`` frame: lines and µs per check."""
    import torch._dynamo
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    torch._dynamo.reset()
    work = build(name)
    if mode == "training":
        work.model.train()
    else:
        work.model.eval()
    compiled = torch.compile(work.model, backend="eager")
    for _ in range(2):
        step(work, compiled, mode)
    forward = type(work.model).forward
    entries = _debug_get_cache_entry_list(forward.__code__)
    if not entries:
        return None
    bound = inspect.signature(forward, follow_wrapped=False).bind(work.model, *work.args, **work.kwargs)
    bound.apply_defaults()
    f_locals = dict(bound.arguments)
    for cell_name, cell in zip(forward.__code__.co_freevars, forward.__closure__ or ()):
        f_locals[cell_name] = cell.cell_contents  # a decorator's wrapper reads its closure
    with (torch.no_grad() if mode == "inference" else contextlib.nullcontext()):
        ok = [e for e in entries if e.guard_manager.check(f_locals)]
        if not ok:
            return {"frames": len(entries), "parts": None, "us": None}
        gm = ok[0].guard_manager
        us = _time_us(gm.check, f_locals, number)
    return {"frames": len(entries), "parts": len(gm.code_parts), "us": us}


def _canned_backend(gm, example_inputs):
    """Runs the graph once at compile time; every call returns those outputs."""
    outputs = gm(*example_inputs)
    return lambda *args: outputs


def entry_us(name: str, mode: str, number: int, system: str) -> float:
    """µs (thread CPU time, median) of one call of the compiled model around its graphs."""
    if system == "torch":
        from torch import _dynamo

        _dynamo.reset()
        compile_fn = torch.compile
    else:
        import torchkiln

        torchkiln.reset()
        compile_fn = torchkiln.compile
    work = build(name)
    work.model.train() if mode == "training" else work.model.eval()
    compiled = compile_fn(work.model, backend=_canned_backend)
    with (torch.no_grad() if mode == "inference" else contextlib.nullcontext()):
        for _ in range(3):
            compiled(*work.args, **work.kwargs)
        timer = timeit.Timer(lambda: compiled(*work.args, **work.kwargs), timer=time.thread_time)
        return 1e6 * statistics.median(t / number for t in timer.repeat(7, number))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--mode", default="inference", choices=["inference", "training"])
    parser.add_argument("--number", type=int, default=200, help="checks per timed sample")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--torch", action="store_true", help="also torch.compile's guard on the top frame")
    parser.add_argument("--entry", action="store_true", help="also the whole frame entry per call, both systems")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(f"python {sys.version.split()[0]}, torch {torch.__version__}, mode={args.mode}, threads=1")
    print(f"{'model':<14} {'frames':>6} {'parts':>6} {'guard us':>9}   top frame: {'parts':>5} {'us':>7}"
          + ("   torch top: lines     us" if args.torch else "") + ("   entry us: kiln  torch" if args.entry else ""))
    for name in args.models.split(","):
        mode = "training" if name.startswith("hooked") else args.mode
        rows = torchkiln_guards(name, mode, args.number, args.profile)
        parts = sum(r["parts"] for r in rows)
        us = sum(r["us"] for r in rows)
        top = max(rows, key=lambda r: r["parts"]) if rows else {"parts": 0, "us": 0.0}
        line = f"{name:<14} {len(rows):>6} {parts:>6} {us:>9.1f}   {'':>10} {top['parts']:>5} {top['us']:>7.1f}"
        if args.torch:
            try:
                t = torch_guards(name, mode, args.number)
            except Exception as e:  # noqa: BLE001 - report, go on
                t = None
                line += f"   torch: {type(e).__name__}: {e}"[:80]
            if t:
                line += f"   {t['parts'] if t['parts'] is not None else '?':>12} {t['us'] if t['us'] is not None else float('nan'):>6.1f}"
        if args.entry and not name.startswith("hooked"):
            line += f"   {'':>9}{entry_us(name, mode, args.number, 'kiln'):>5.1f} {entry_us(name, mode, args.number, 'torch'):>6.1f}"
        print(line, flush=True)
        if args.profile:
            for r in rows:
                print(f"--- {name} frame {r['frame']}: {r['parts']} parts, {r['us']:.1f} us")
                print("\n".join(r["profile"].splitlines()[:30]))


if __name__ == "__main__":
    main()
