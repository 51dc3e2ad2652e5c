"""Run in a subprocess by tests/cache/test_warm_cost.py (``TRITON_INTERPRET=1``): one
graph through the Triton generator on CPU tensors (Triton's interpreter), inference and
training; prints one JSON line: results against eager, the FX graph cache counters, and
whether the process imported the kernel generator or sympy (a warm start needs neither)."""
import json
import sys

import torch

import torchkiln
from torchkiln.codegen import config as codegen_config
from torchkiln import counters


def f(x, w):
    return torch.nn.functional.gelu(x @ w).sum(-1) * 2 + x.mean()


def main() -> int:
    codegen_config.cpu_backend = "triton"
    torch.manual_seed(0)
    x, w = torch.randn(8, 16), torch.randn(16, 16, requires_grad=True)
    with torch.no_grad():
        ok = torch.allclose(torchkiln.compile(f)(x, w), f(x, w), atol=1e-5)
    out = torchkiln.compile(f)(x, w)  # training: forward and backward graphs
    grad, = torch.autograd.grad(out.sum(), w)
    ok = ok and torch.allclose(out, f(x, w), atol=1e-5)
    ok = ok and torch.allclose(grad, torch.autograd.grad(f(x, w).sum(), w)[0], atol=1e-4)
    print(json.dumps({"ok": bool(ok), "inductor": dict(counters["inductor"]), "warm_start": dict(counters["warm_start"]),
                      "kernel_module": "torchkiln.codegen.triton.kernel" in sys.modules,
                      "generator_module": "torchkiln.codegen.triton.generator" in sys.modules,
                      "sympy": "sympy" in sys.modules}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
