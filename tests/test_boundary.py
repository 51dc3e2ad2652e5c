"""The PyTorch boundary of DESIGN.md: torchkiln never reaches into the system it
re-implements (torch._dynamo, torch._inductor, AOT autograd internals, torch.compile,
torch.export, torch._C._dynamo).  The bench harness may call torch.compile as a peer.
"""
import pathlib
import re

import torchkiln

FORBIDDEN = re.compile(
    r"torch\._dynamo|torch\._inductor|torch\._functorch\.(aot_autograd|partitioners|_aot_autograd|compile)\b"
    r"|torch\._C\._dynamo|torch\.compile\(|torch\.compiler\b|torch\.export\b|torch\._export\b"
    r"|from\s+torch\s+import\s+.*\b(_dynamo|_inductor|compiler|export)\b"
)
# Lines that only *mention* a forbidden name as data (e.g. to make
# torch._dynamo.is_compiling() fold to True during capture) are marked with this tag.
ALLOW_TAG = "boundary: ok"
PEER_DIRS = ("bench",)


def test_no_forbidden_imports():
    root = pathlib.Path(torchkiln.__file__).parent
    hits = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        if rel.parts[0] in PEER_DIRS:
            continue
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if FORBIDDEN.search(line) and ALLOW_TAG not in line and not line.lstrip().startswith("#"):
                hits.append(f"{rel}:{lineno}: {line.strip()}")
    assert not hits, "forbidden references:\n" + "\n".join(hits)
