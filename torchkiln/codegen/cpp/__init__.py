"""The C++/OpenMP kernel generator for CPU tensors: one translation unit per graph."""
from __future__ import annotations

import ctypes
import hashlib
import os
import types

import torch

from ...cache.entry import CorruptEntry
from ...cache.store import touch, write_atomic
from ...utils.paths import cache_dir
from .. import config
from ..generators import KernelGenerator


def __getattr__(name: str):
    """``render_kernel`` is imported with the first compile (PEP 562): the kernel renderer
    loads sympy (~1 s), which loading a cached library does not need."""
    if name == "render_kernel":
        from .kernel import render_kernel

        globals()[name] = render_kernel
        return render_kernel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class CppGenerator(KernelGenerator):
    """Renders every kernel of a graph into one C++ file, builds (or loads) the .so.

    The wrapper calls each kernel (or launch group) with its tensors and size ints,
    through the ``_kiln_launch`` extension's entry object (:mod:`.launcher`: about
    0.4 K instructions a launch), or through ctypes where that extension is unavailable.
    """

    def __init__(self, device: torch.device) -> None:
        super().__init__(device)
        self._source = ""
        self._sites: dict[str, list] = {}  # kernel name -> (op, dim) of its index checks
        self._planned: list = []  # LaunchGroups planned (launch_groups.py)
        self._groups: dict = {}   # member kernel name -> its LaunchGroup, for those built

    def compile_kernels(self, kernels: list) -> dict:
        return self.start_compile(kernels).result()

    def start_compile(self, kernels: list) -> "PendingKernels":
        """Render the translation unit and start its build; returns at once (see
        :class:`PendingKernels`).  A cached library is loaded before returning."""
        from . import launcher, vecmath  # the build's modules (and filelock): not needed to load a cached library
        from .build import start_build
        from .prelude import PRELUDE

        launcher.start()  # its first load (or build) overlaps this library's

        render = globals().get("render_kernel") or __getattr__("render_kernel")  # tests patch it
        parts = [vecmath.declarations()[0], PRELUDE]
        for k in kernels:
            sites = []
            parts.append(render(k, sites))
            if sites:
                self._sites[k.name] = sites
        built = list(kernels)
        for group in self._planned:  # a member with index checks returns a status: launched alone
            if not any(k.name in self._sites for k in group.members):
                if not self._groups:
                    from .launch_groups import LAUNCH_HELPER

                    parts.append(LAUNCH_HELPER)
                parts.append(group.render())
                built.append(group)
                self._groups.update((k.name, group) for k in group.members)
        launched = [k for k in built if k.name not in self._groups]  # a group's members run inside it
        parts.append(launcher.ENTRY_HELPER + "\n".join(launcher.packed_entry(k.name, len(k.buffers), _kinds(k))
                                                        for k in launched))
        self._source = "\n\n".join(parts) + "\n"
        return PendingKernels(start_build(self._source) if kernels else None, built, self._sites)

    def plan_launches(self, entries: list) -> None:
        from .launch_groups import plan_launch_groups

        self._planned = [] if config.kernel_profile else plan_launch_groups(entries)

    def launch_groups(self) -> dict:
        return self._groups

    def prologue(self, kernels: list) -> list[str]:
        return ["_kiln_sync_threads()"] if kernels else []

    def call(self, kernel, args: list[str]) -> str:
        """The launch line: the kernel's entry object called with the tensors (it reads
        their data pointers) and the size ints."""
        launch = f"{kernel.name}({', '.join(args)})"
        if kernel.name in self._sites:  # returns 1 when an indirect index was out of range
            return f"if {launch}: _kiln_index_error({kernel.name!r})"
        return launch

    def source(self) -> str:
        return self._source


def _kinds(k) -> str:
    """A kernel's size arguments as ``"i"`` (int64) / ``"f"`` (double, a SymFloat) letters."""
    kinds = getattr(k, "kinds", None)
    if kinds is not None:  # a kernel loaded from the cache
        return kinds
    from ..ir import is_float_symbol

    return "".join("f" if is_float_symbol(s) else "i" for s in k.size_args)


def _bind(lib, kernels: list, sites: dict) -> dict:
    """Each kernel's entry object (:mod:`.launcher`; a ctypes function behind a Python
    function that reads the tensors' ``data_ptr()`` where the extension is unavailable),
    the thread-count synchronizer and the raiser of index errors
    (``_kiln_index_error(kernel_name)``)."""
    from . import launcher

    launch = launcher.module()
    out = {}
    for k in kernels:
        kinds = _kinds(k)
        if launch is not None:
            entry = getattr(lib, f"{k.name}_kl", None)  # None: a launch group's member, never called alone
            if entry is not None:
                out[k.name] = launch.make(k.name, ctypes.cast(entry, ctypes.c_void_p).value,
                                          ("t" * len(k.buffers) + kinds).encode(), k.name in sites, lib)
            continue
        fn = getattr(lib, k.name)
        fn.argtypes = [ctypes.c_void_p] * len(k.buffers) + [ctypes.c_double if kind == "f" else ctypes.c_int64
                                                            for kind in kinds]
        fn.restype = ctypes.c_int if k.name in sites else None
        out[k.name] = _through_ctypes(fn, len(k.buffers))
    if sites:
        getter = lib.kiln_get_index_error
        getter.argtypes = [ctypes.c_void_p]

        def index_error(name):
            info = (ctypes.c_int64 * 3)()
            getter(info)
            op, dim = sites[name][info[0]]
            from .. import bounds

            raise bounds.index_error(op, dim, info[1], info[2])

        out["_kiln_index_error"] = index_error
    setter = lib.kiln_set_num_threads
    setter.argtypes = [ctypes.c_int]
    state = [0]

    def sync_threads():
        n = config.cpp_threads or torch.get_num_threads()
        if n != state[0]:
            setter(n)
            state[0] = n

    out["_kiln_sync_threads"] = sync_threads
    return out


def _through_ctypes(fn, nbuf: int):
    def launch(*args):
        return fn(*[t.data_ptr() for t in args[:nbuf]], *args[nbuf:])
    return launch


class PendingKernels:
    """A graph's kernels while their library builds: ``done()`` says whether
    ``result()`` (``{name: object}`` for the wrapper's globals) would return at once;
    ``result()`` waits for the build and raises ``RuntimeError`` if it failed."""

    def __init__(self, build, kernels: list, sites: dict) -> None:
        self._build = build
        self._kernels = kernels
        self._sites = sites

    def done(self) -> bool:
        return self._build is None or self._build.done()

    def add_done_callback(self, fn) -> None:
        """Call ``fn(self)`` once the build has finished (at once if it has), successfully
        or not; on the build's worker thread."""
        if self._build is None:
            fn(self)
        else:
            self._build.add_done_callback(lambda _: fn(self))

    def result(self) -> dict:
        if self._build is None:
            return {}
        lib, _ = self._build.result()
        return _bind(lib, self._kernels, self._sites)

    def cache_artifacts(self) -> tuple[dict, dict]:
        """For the FX graph cache, once ``result()`` succeeded: ``(meta, blobs)`` with
        each kernel's name and argument counts, and the built library's bytes."""
        if self._build is None:
            return {"kernels": []}, {}
        _, path = self._build.result()
        with open(path, "rb") as f:
            binary = f.read()
        kernels = [[k.name, len(k.buffers), len(k.size_args), _kinds(k)] for k in self._kernels]
        sites = {name: [list(site) for site in s] for name, s in self._sites.items()}
        return {"kernels": kernels, "sites": sites, "so_sha256": hashlib.sha256(binary).hexdigest()}, {"so": binary}


def load_cached_kernels(meta: dict, blobs: dict) -> dict:
    """The wrapper's kernel objects from an FX graph cache entry made by
    :meth:`PendingKernels.cache_artifacts`: the library is written (atomically, named by
    its SHA-256) under ``cpp/`` and loaded, never built.  A file there whose bytes do
    not match is replaced before ``dlopen`` (a damaged mapped library kills the process
    with SIGBUS)."""
    if not meta["kernels"]:
        return {}
    binary = blobs["so"]
    sha = hashlib.sha256(binary).hexdigest()
    if sha != meta["so_sha256"]:
        raise CorruptEntry("library checksum mismatch")
    path = os.path.join(cache_dir("cpp"), f"fx-{sha[:40]}.so")
    try:
        with open(path, "rb") as f:
            ok = hashlib.sha256(f.read()).hexdigest() == sha
    except OSError:
        ok = False
    if not ok:
        write_atomic(path, binary)
    else:
        touch(path)
    kernels = [types.SimpleNamespace(name=name, buffers=[None] * nbuf, size_args=[None] * nsize,
                                     kinds=kinds[0] if kinds else "i" * nsize)
               for name, nbuf, nsize, *kinds in meta["kernels"]]
    sites = {name: [tuple(site) for site in s] for name, s in meta["sites"].items()}
    return _bind(ctypes.CDLL(path), kernels, sites)
