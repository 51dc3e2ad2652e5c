"""The Python entry of generated C++ kernels: a small CPython extension, ``_kiln_launch``.

A launch through ctypes cost about 4 K instructions (ctypes converts each argument
through its argtype, builds a call frame with libffi), and the wrapper read every
buffer's ``data_ptr()`` in Python before it: at hooked_small's backward (9 launches a
step) that was about 40 K instructions a step.  ``_kiln_launch.make`` instead wraps a
kernel's *packed entry* (``extern "C" int64_t <kernel>_kl(const int64_t* args)``, which
every translation unit defines for each of its kernels, see :data:`ENTRY_HELPER`) in a
vectorcall object that the wrapper calls with the tensors themselves: it reads each
tensor's data pointer in C, each size argument as int64 or double (bit-copied into the
packed array), releases the GIL and calls the entry, as ctypes did.

The data pointer is what ``tensor.data_ptr()`` returns: for the tensor types whose
``data_ptr`` attribute is ``TensorBase.data_ptr`` (``torch.Tensor``,
``nn.Parameter``: checked when the module is set up) the extension calls that method's
C function directly (what the method descriptor does after checking the type), for any
other object it calls ``obj.data_ptr()``; a Python int is taken as the address.

The extension is built once per Python, compiler and source (about 0.1 s of ``gcc -x c``;
its source is below), cached under ``cpp/`` of the cache directory like the kernels,
checksummed, and its build overlaps the first graph's kernel build.  Where it cannot be
built or loaded (no Python headers, another compiler), :func:`module` returns None and
the kernels are called through ctypes (``cpp/__init__.py``), slower, with the same
results.
"""
from __future__ import annotations

import concurrent.futures
import hashlib
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import sysconfig
import tempfile
import threading
import warnings

import torch

from ...utils.paths import cache_dir
from .. import config

# Defined in every translation unit: the packed entry of kernel ``k`` is
# ``extern "C" int64_t k_kl(const int64_t* a) { return kiln_entry(k, a[0], ...); }``,
# each argument cast to the parameter type the kernel declares (doubles come bit-copied).
ENTRY_HELPER = r"""
template <typename... P, typename... A>
static inline int64_t kiln_entry(void (*kernel)(P...), A... args) { kernel(((P)args)...); return 0; }
template <typename... P, typename... A>
static inline int64_t kiln_entry(int (*kernel)(P...), A... args) { return kernel(((P)args)...); }
static inline double kiln_f64(int64_t bits) { double d; __builtin_memcpy(&d, &bits, 8); return d; }
"""


def packed_entry(name: str, nbuf: int, kinds: str) -> str:
    """The packed entry of kernel (or launch group) ``name`` with ``nbuf`` pointer
    parameters followed by size parameters of ``kinds`` (``"i"`` int64, ``"f"`` double)."""
    args = [f"a[{i}]" for i in range(nbuf)]
    args += [f"kiln_f64(a[{nbuf + j}])" if kind == "f" else f"a[{nbuf + j}]" for j, kind in enumerate(kinds)]
    return f'extern "C" int64_t {name}_kl(const int64_t* a) {{ return kiln_entry({", ".join([name] + args)}); }}'


_SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef int64_t (*kiln_packed)(const int64_t*);

static PyCFunction data_ptr_fn = NULL;  /* TensorBase.data_ptr's C function (METH_NOARGS) */
static PyObject* data_ptr_descr = NULL;
static PyObject* fast_types = NULL;     /* exact types whose data_ptr is that descriptor */
static PyObject* data_ptr_name = NULL;

typedef struct {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  kiln_packed entry;
  Py_ssize_t nargs;
  int status;       /* return the entry's int (index-check status) instead of None */
  PyObject* kinds;  /* bytes, one a parameter: 't' tensor, 'i' int64, 'f' double */
  PyObject* keep;   /* what keeps the library mapped */
  PyObject* name;
} Launch;

static int pointer_of(PyObject* t, int64_t* out) {
  PyObject* r;
  if (data_ptr_fn != NULL) {
    PyObject* tp = (PyObject*)Py_TYPE(t);
    Py_ssize_t n = PyTuple_GET_SIZE(fast_types);
    for (Py_ssize_t i = 0; i < n; i++) {
      if (tp == PyTuple_GET_ITEM(fast_types, i)) {
        r = data_ptr_fn(t, NULL);
        goto have;
      }
    }
  }
  if (t == Py_None) { *out = 0; return 0; }
  if (PyLong_Check(t)) { Py_INCREF(t); r = t; }
  else r = PyObject_CallMethodNoArgs(t, data_ptr_name);
have:
  if (r == NULL) return -1;
  void* p = PyLong_AsVoidPtr(r);
  Py_DECREF(r);
  if (p == NULL && PyErr_Occurred()) return -1;
  *out = (int64_t)(intptr_t)p;
  return 0;
}

static PyObject* launch_call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  Launch* l = (Launch*)self;
  Py_ssize_t n = PyVectorcall_NARGS(nargsf);
  if (n != l->nargs || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
    PyErr_Format(PyExc_TypeError, "%U takes %zd positional arguments (%zd given)", l->name, l->nargs, n);
    return NULL;
  }
  int64_t stack[64];
  int64_t* a = stack;
  if (n > 64 && (a = (int64_t*)PyMem_Malloc(n * sizeof(int64_t))) == NULL) return PyErr_NoMemory();
  const char* kinds = PyBytes_AS_STRING(l->kinds);
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject* v = args[i];
    if (kinds[i] == 't') {
      if (pointer_of(v, &a[i]) < 0) goto fail;
    } else if (kinds[i] == 'i') {
      long long x = PyLong_AsLongLong(v);
      if (x == -1 && PyErr_Occurred()) goto fail;
      a[i] = x;
    } else {
      double d = PyFloat_AsDouble(v);
      if (d == -1.0 && PyErr_Occurred()) goto fail;
      memcpy(&a[i], &d, sizeof d);
    }
  }
  int64_t r;
  Py_BEGIN_ALLOW_THREADS
  r = l->entry(a);
  Py_END_ALLOW_THREADS
  if (a != stack) PyMem_Free(a);
  if (l->status) return PyLong_FromLongLong(r);
  Py_RETURN_NONE;
fail:
  if (a != stack) PyMem_Free(a);
  return NULL;
}

static void launch_dealloc(PyObject* self) {
  Launch* l = (Launch*)self;
  Py_XDECREF(l->kinds);
  Py_XDECREF(l->keep);
  Py_XDECREF(l->name);
  PyObject_Free(self);
}

static PyObject* launch_repr(PyObject* self) {
  return PyUnicode_FromFormat("<C++ kernel %U>", ((Launch*)self)->name);
}

static PyTypeObject LaunchType = {
  PyVarObject_HEAD_INIT(NULL, 0)
  .tp_name = "_kiln_launch.Launch",
  .tp_basicsize = sizeof(Launch),
  .tp_dealloc = launch_dealloc,
  .tp_vectorcall_offset = offsetof(Launch, vectorcall),
  .tp_repr = launch_repr,
  .tp_call = PyVectorcall_Call,
  .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
};

/* make(name, address of the packed entry, kinds, status, keep) */
static PyObject* make(PyObject* module, PyObject* args) {
  PyObject *name, *kinds, *keep;
  unsigned long long address;
  int status;
  if (!PyArg_ParseTuple(args, "UKSpO", &name, &address, &kinds, &status, &keep)) return NULL;
  Launch* l = PyObject_New(Launch, &LaunchType);
  if (l == NULL) return NULL;
  l->vectorcall = launch_call;
  l->entry = (kiln_packed)(uintptr_t)address;
  l->nargs = PyBytes_GET_SIZE(kinds);
  l->status = status;
  Py_INCREF(kinds); l->kinds = kinds;
  Py_INCREF(keep); l->keep = keep;
  Py_INCREF(name); l->name = name;
  return (PyObject*)l;
}

/* setup(TensorBase.data_ptr, exact types whose data_ptr it is) -> whether the direct call is used */
static PyObject* setup(PyObject* module, PyObject* args) {
  PyObject *descr, *types;
  if (!PyArg_ParseTuple(args, "OO!", &descr, &PyTuple_Type, &types)) return NULL;
  if (!Py_IS_TYPE(descr, &PyMethodDescr_Type) || ((PyMethodDescrObject*)descr)->d_method->ml_flags != METH_NOARGS)
    Py_RETURN_FALSE;
  Py_INCREF(descr); Py_XSETREF(data_ptr_descr, descr);
  Py_INCREF(types); Py_XSETREF(fast_types, types);
  data_ptr_fn = ((PyMethodDescrObject*)descr)->d_method->ml_meth;
  Py_RETURN_TRUE;
}

static PyMethodDef methods[] = {
  {"make", make, METH_VARARGS, NULL},
  {"setup", setup, METH_VARARGS, NULL},
  {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_kiln_launch", NULL, -1, methods};

PyMODINIT_FUNC PyInit__kiln_launch(void) {
  if (PyType_Ready(&LaunchType) < 0) return NULL;
  data_ptr_name = PyUnicode_InternFromString("data_ptr");
  if (data_ptr_name == NULL) return NULL;
  return PyModule_Create(&module_def);
}
"""

_lock = threading.Lock()
_future: concurrent.futures.Future | None = None


def _locate() -> tuple[list[str], str]:
    from .build import _compiler_id

    include = sysconfig.get_paths()["include"]
    cmd = [config.cpp_cxx, "-x", "c", "-O2", "-shared", "-fPIC", "-w", f"-I{include}"]
    key = hashlib.sha256("\0".join([_SOURCE, sys.version, sysconfig.get_config_var("EXT_SUFFIX") or "",
                                    _compiler_id(cmd[0]), " ".join(cmd)]).encode()).hexdigest()[:40]
    return cmd, os.path.join(cache_dir("cpp"), f"launch-{key}.so")


def _load(path: str):
    loader = importlib.machinery.ExtensionFileLoader("_kiln_launch", path)
    spec = importlib.util.spec_from_file_location("_kiln_launch", path, loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    descr = torch._C.TensorBase.__dict__["data_ptr"]
    mod.setup(descr, tuple(t for t in (torch.Tensor, torch.nn.Parameter) if getattr(t, "data_ptr") is descr))
    return mod


def _build():
    """Load the cached extension, or build it (under a file lock, published with its
    checksum as the kernel libraries are); None with one warning where that fails."""
    from .build import _digest, _publish

    try:
        cmd, path = _locate()
        if not _verified(path, _digest):
            from filelock import FileLock

            with FileLock(path + ".lock"):
                if not _verified(path, _digest):
                    directory = os.path.dirname(path)
                    src = os.path.join(directory, os.path.basename(path)[:-3] + ".c")
                    with open(src, "w") as f:
                        f.write(_SOURCE)
                    fd, tmp = tempfile.mkstemp(suffix=".so", dir=directory)
                    os.close(fd)
                    result = subprocess.run(cmd + [src, "-o", tmp], capture_output=True, text=True)
                    if result.returncode != 0:
                        os.unlink(tmp)
                        raise RuntimeError(result.stderr[-2000:])
                    _publish(tmp, path)
        return _load(path)
    except Exception as e:  # noqa: BLE001 - any failure means: call the kernels through ctypes
        warnings.warn(f"torchkiln: the C++ kernels' Python entry could not be built ({type(e).__name__}: "
                      f"{str(e)[:300]}); calling them through ctypes (slower)")
        return None


def _verified(path: str, digest) -> bool:
    try:
        with open(path + ".sha256") as f:
            return digest(path) == f.read().strip()
    except OSError:
        return False


def start() -> None:
    """Start loading (or building) the extension on a worker thread, once per process."""
    global _future
    with _lock:
        if _future is None:
            _future = concurrent.futures.Future()
            threading.Thread(target=_run, args=(_future,), name="torchkiln-launch", daemon=True).start()


def _run(future: concurrent.futures.Future) -> None:
    mod = None
    try:
        mod = _build()
    finally:
        future.set_result(mod)


def module():
    """The loaded ``_kiln_launch`` module, or None where it could not be built."""
    start()
    return _future.result()


def _forget() -> None:
    global _future, _lock
    _lock = threading.Lock()
    if _future is not None and not _future.done():
        _future = None  # its thread did not survive the fork


os.register_at_fork(after_in_child=_forget)
