"""Run in a subprocess by the cache tests: compile a small model (forward and backward)
with torchkiln, check it against eager, print the counters as one JSON line.

    python -m tests.cache._worker [--no-backward]
Exit status 0 only if every result matched eager.
"""
import json
import sys

import torch

import torchkiln
from torchkiln import counters


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = torch.nn.LayerNorm(32)
        self.fc1 = torch.nn.Linear(32, 64)
        self.fc2 = torch.nn.Linear(64, 32)

    def forward(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln(x))))


def main() -> int:
    torch.manual_seed(0)
    model = Block()
    x = torch.randn(8, 32)
    compiled = torchkiln.compile(model)
    out = compiled(x)
    ref = model(x)
    ok = torch.allclose(out, ref, atol=1e-5, rtol=1e-5)
    if "--no-backward" not in sys.argv:
        out.sum().backward()
        got = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        ref.sum().backward()
        ok = ok and all(torch.allclose(a, p.grad, atol=1e-4, rtol=1e-4) for a, p in zip(got, model.parameters()))
    with torch.no_grad():
        ok = ok and torch.allclose(compiled(x * 2), model(x * 2), atol=1e-5, rtol=1e-5)
    print(json.dumps({"ok": bool(ok), "counters": {k: dict(v) for k, v in counters.items()
                                                   if k in ("cache", "inductor", "aot_autograd")}}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
