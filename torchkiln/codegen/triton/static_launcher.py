"""One C launcher for every compiled Triton kernel (CUDA, Triton 3.6).

Triton 3.6 builds a C launcher per kernel signature with the host compiler (a ``gcc``
run of about a second per distinct signature on a cold cache), and each launch through
it parses the arguments with ``PyArg_ParseTuple`` and asks the driver about every pointer
(``cuPointerGetAttribute``).  This module's launcher is compiled once per machine (cached
by Triton's build cache) and takes the argument types as a byte string made once per
binding: ``launch(function, threads, shared, codes, grid, stream, *args)`` with ``codes``
one byte per jit parameter (``p`` pointer, ``i``/``l``/``I``/``L`` 32/64-bit ints, ``b``
/``B``/``h``/``H`` 8/16-bit ints, ``f``/``d`` floats, ``c`` a constexpr, skipped), then
the two scratch pointers Triton 3.6 appends to every kernel (null: only kernels that need
no scratch use it).  TorchInductor's ``StaticallyLaunchedCudaKernel`` does the same for
its kernels.

:func:`bind` returns the bound launch for a compiled kernel, or None where the kernel
needs what only Triton's launcher does (another Triton release, clusters, cooperative
or PDL launches, scratch memory, tensor descriptors, fp16 scalars): the caller then uses
Triton's.  ``TORCHKILN_STATIC_LAUNCHER=0`` turns it off.
"""
from __future__ import annotations

import functools
import os

SOURCE = r"""
#include "cuda.h"
#include <stdint.h>
#include <string.h>
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define KILN_MAX_ARGS 256

static PyObject *data_ptr_str = NULL;

static int kiln_pointer(PyObject *obj, uint64_t *out) {
  if (PyLong_Check(obj)) {
    *out = PyLong_AsUnsignedLongLong(obj);
    return PyErr_Occurred() ? -1 : 0;
  }
  if (obj == Py_None) {
    *out = 0;
    return 0;
  }
  PyObject *ret = PyObject_CallMethodNoArgs(obj, data_ptr_str);
  if (!ret)
    return -1;
  *out = PyLong_AsUnsignedLongLong(ret);
  Py_DECREF(ret);
  return PyErr_Occurred() ? -1 : 0;
}

static int kiln_context(void) {
  CUcontext ctx = NULL;
  if (cuCtxGetCurrent(&ctx) != CUDA_SUCCESS)
    return -1;
  if (!ctx) {
    CUdevice device;
    if (cuDeviceGet(&device, 0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, device) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
      return -1;
  }
  return 0;
}

/* launch(function, threads, shared, codes, grid, stream, *args) */
static PyObject *kiln_launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs < 6 || !PyBytes_Check(args[3])) {
    PyErr_SetString(PyExc_TypeError, "launch(function, threads, shared, codes: bytes, grid, stream, *args)");
    return NULL;
  }
  CUfunction function = (CUfunction)(uintptr_t)PyLong_AsUnsignedLongLong(args[0]);
  unsigned int threads = (unsigned int)PyLong_AsUnsignedLong(args[1]);
  unsigned int shared = (unsigned int)PyLong_AsUnsignedLong(args[2]);
  const char *codes = PyBytes_AS_STRING(args[3]);
  Py_ssize_t ncodes = PyBytes_GET_SIZE(args[3]);
  long long grid = PyLong_AsLongLong(args[4]);
  CUstream stream = (CUstream)(uintptr_t)PyLong_AsUnsignedLongLong(args[5]);
  if (PyErr_Occurred())
    return NULL;
  if (nargs - 6 != ncodes || ncodes > KILN_MAX_ARGS) {
    PyErr_Format(PyExc_TypeError, "launch: %zd kernel arguments for %zd parameters", nargs - 6, ncodes);
    return NULL;
  }
  uint64_t slots[KILN_MAX_ARGS + 2];
  void *params[KILN_MAX_ARGS + 2];
  int n = 0;
  for (Py_ssize_t i = 0; i < ncodes; i++) {
    PyObject *a = args[6 + i];
    uint64_t *slot = &slots[n];
    *slot = 0;
    switch (codes[i]) {
    case 'c':
      continue;
    case 'p':
      if (kiln_pointer(a, slot) < 0)
        return NULL;
      break;
    case 'i': { int32_t v = (int32_t)PyLong_AsLong(a); memcpy(slot, &v, sizeof v); break; }
    case 'I': { uint32_t v = (uint32_t)PyLong_AsUnsignedLong(a); memcpy(slot, &v, sizeof v); break; }
    case 'l': { int64_t v = (int64_t)PyLong_AsLongLong(a); memcpy(slot, &v, sizeof v); break; }
    case 'L': { uint64_t v = (uint64_t)PyLong_AsUnsignedLongLong(a); memcpy(slot, &v, sizeof v); break; }
    case 'b': { int8_t v = (int8_t)PyLong_AsLong(a); memcpy(slot, &v, sizeof v); break; }
    case 'B': { uint8_t v = (uint8_t)PyLong_AsUnsignedLong(a); memcpy(slot, &v, sizeof v); break; }
    case 'h': { int16_t v = (int16_t)PyLong_AsLong(a); memcpy(slot, &v, sizeof v); break; }
    case 'H': { uint16_t v = (uint16_t)PyLong_AsUnsignedLong(a); memcpy(slot, &v, sizeof v); break; }
    case 'f': { float v = (float)PyFloat_AsDouble(a); memcpy(slot, &v, sizeof v); break; }
    case 'd': { double v = PyFloat_AsDouble(a); memcpy(slot, &v, sizeof v); break; }
    default:
      PyErr_Format(PyExc_TypeError, "launch: unknown argument code %c", codes[i]);
      return NULL;
    }
    if (PyErr_Occurred())
      return NULL;
    params[n] = slot;
    n++;
  }
  slots[n] = 0; params[n] = &slots[n]; n++;  /* global scratch */
  slots[n] = 0; params[n] = &slots[n]; n++;  /* profile scratch */
  if (grid <= 0)
    Py_RETURN_NONE;
  CUresult err;
  Py_BEGIN_ALLOW_THREADS;
  err = kiln_context() < 0 ? CUDA_ERROR_INVALID_CONTEXT
                           : cuLaunchKernel(function, (unsigned int)grid, 1, 1, threads, 1, 1, shared, stream, params, NULL);
  Py_END_ALLOW_THREADS;
  if (err != CUDA_SUCCESS) {
    const char *text = NULL;
    cuGetErrorString(err, &text);
    PyErr_Format(PyExc_RuntimeError, "Triton Error [CUDA]: %s", text ? text : "unknown error");
    return NULL;
  }
  Py_RETURN_NONE;
}

static PyMethodDef kiln_methods[] = {
    {"launch", (PyCFunction)(void (*)(void))kiln_launch, METH_FASTCALL, "launch a compiled Triton kernel"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef kiln_module = {PyModuleDef_HEAD_INIT, "kiln_launcher", NULL, -1, kiln_methods};

PyMODINIT_FUNC PyInit_kiln_launcher(void) {
  data_ptr_str = PyUnicode_InternFromString("data_ptr");
  if (!data_ptr_str)
    return NULL;
  return PyModule_Create(&kiln_module);
}
"""

# Triton parameter type -> argument code (see SOURCE)
_CODES = {"i1": "b", "i8": "b", "i16": "h", "i32": "i", "i64": "l", "u1": "B", "u8": "B", "u16": "H",
          "u32": "I", "u64": "L", "fp32": "f", "f32": "f", "fp64": "d", "constexpr": "c"}


def enabled() -> bool:
    """Whether this Triton release's kernels can be launched here (3.6, on CUDA)."""
    if os.environ.get("TORCHKILN_STATIC_LAUNCHER", "1") == "0":
        return False
    import triton

    return triton.__version__.startswith("3.6.")


@functools.cache
def module():
    """The compiled launcher module (built with the host compiler at the first call of a
    machine; Triton's build cache keeps it)."""
    from triton.backends.nvidia import driver as nv
    from triton.runtime.build import compile_module_from_src

    return compile_module_from_src(src=SOURCE, name="kiln_launcher", library_dirs=nv.library_dirs(),
                                   include_dirs=nv.include_dirs, libraries=nv.libraries)


def arg_codes(signature: dict) -> bytes | None:
    """The launcher's argument codes for a compiled kernel's signature (parameter name ->
    Triton type, in order), or None when a type needs Triton's own launcher."""
    codes = []
    for ty in signature.values():
        if isinstance(ty, str) and ty.startswith("*"):
            codes.append("p")
        elif isinstance(ty, str) and ty in _CODES:
            codes.append(_CODES[ty])
        else:
            return None
    return "".join(codes).encode()


def supported(kernel) -> bytes | None:
    """Argument codes when ``kernel`` (a Triton ``CompiledKernel``) can use this launcher."""
    md = kernel.metadata
    if (getattr(md, "num_ctas", 1) != 1 or getattr(md, "launch_cooperative_grid", False)
            or getattr(md, "launch_pdl", False) or getattr(md, "global_scratch_size", 0)
            or getattr(md, "profile_scratch_size", 0) or getattr(md, "tensordesc_meta", None)
            or getattr(md, "cluster_dims", (1, 1, 1)) not in ((1, 1, 1), [1, 1, 1])):
        return None
    return arg_codes(kernel.src.signature)


def bind(kernel):
    """``launch(grid, stream, *args)`` for ``kernel`` through this module's launcher, or
    None (see :func:`supported`).  Loads the binary into the current context as Triton
    does, raising Triton's ``OutOfResources`` where the device lacks shared memory or
    threads for it."""
    codes = supported(kernel)
    if codes is None:
        return None
    from triton.runtime.driver import driver
    from triton.runtime.errors import OutOfResources

    utils = driver.active.utils
    device = driver.active.get_current_device()
    md = kernel.metadata
    max_shared = _max_shared(device)
    if md.shared > max_shared:
        raise OutOfResources(md.shared, max_shared, "shared memory")
    launch = module().launch
    _mod, function, _regs, _spills, max_threads = utils.load_binary(kernel.name, kernel.kernel, md.shared, device)
    threads = md.num_warps * 32
    if threads > max_threads:
        raise OutOfResources(threads, max_threads, "threads")
    return functools.partial(launch, function, threads, md.shared, codes)


@functools.lru_cache(maxsize=None)
def _max_shared(device: int) -> int:
    from triton.runtime.driver import driver

    return driver.active.utils.get_device_properties(device)["max_shared_mem"]
