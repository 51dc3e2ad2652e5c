"""The PyTorch boundary of DESIGN.md: torchkiln's code never imports or calls the
system it re-implements (torch._dynamo, torch._inductor, AOT autograd internals,
torch.compile, torch.compiler, torch.export, torch._C._dynamo), except exactly
torch._C._dynamo.compiled_autograd: the autograd engine's capture protocol, which
compiled_autograd/ drives.  Checked on the syntax
tree, so docstrings may name those modules.  The bench harness may call torch.compile
as the peer it is measured against.  A line that only refers to such a function as a
value to recognise (capture folds ``torch.compiler.is_compiling()`` to True) carries
the comment ``# boundary: ok``.
"""
import ast
import pathlib
import re

import torchkiln

FORBIDDEN = re.compile(
    r"^torch\.(_dynamo|_inductor|compile|compiler|export|_export|_C\._dynamo(?!\.compiled_autograd(\.|$)))(\.|$)"
    r"|^torch\._functorch\.(aot_autograd|partitioners|_aot_autograd|compile)(\.|$)"
)
PEER_DIRS = ("bench",)


def _dotted(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _violations(source: str):
    lines = source.splitlines()
    tree = ast.parse(source)
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}  # check whole chains only
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Attribute) and id(node) not in inner:
            dotted = _dotted(node)
            names = [dotted] if dotted else []
        for name in names:
            if FORBIDDEN.search(name) and "boundary: ok" not in lines[node.lineno - 1]:
                yield node.lineno, name


def test_no_forbidden_imports():
    root = pathlib.Path(torchkiln.__file__).parent
    hits = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] in PEER_DIRS:
            continue
        for lineno, name in _violations(path.read_text()):
            hits.append(f"{rel}:{lineno}: {name}")
    assert not hits, "forbidden references:\n" + "\n".join(sorted(set(hits)))


def test_checker_catches_imports():
    assert list(_violations("import torch._dynamo\n"))
    assert list(_violations("from torch._inductor import config\n"))
    assert list(_violations("y = torch.compile(f)\n"))
    assert not list(_violations('"""torch._dynamo is re-implemented here"""\n'))
    assert not list(_violations("f = torch.compiler.is_compiling  # boundary: ok\n"))
    assert list(_violations("torch._C._dynamo.eval_frame.set_eval_frame(None)\n"))
    assert list(_violations("import torch._C._dynamo\n"))
    assert not list(_violations("torch._C._dynamo.compiled_autograd.clear_cache()\n"))
    assert list(_violations("torch._C._dynamo.compiled_autograd_x.clear_cache()\n"))
