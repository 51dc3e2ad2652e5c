"""Imports read top-down (DESIGN.md; issue 10 must-have 5): no stage imports a later
one (capture -> aot -> codegen; shapes below capture), and inside capture the frame
modules form no circle: convert_frame -> symbolic_convert -> codegen / resume -> frame.
Lazy imports inside functions count too."""
import ast
import pathlib

import torchkiln

ROOT = pathlib.Path(torchkiln.__file__).parent


def _imports(path: pathlib.Path) -> set[str]:
    """Absolute module names ``path`` imports (``torchkiln.x.y``), lazy imports included."""
    package = ".".join(("torchkiln",) + path.relative_to(ROOT).with_suffix("").parts[:-1])
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            names.add(module)
            names.update(f"{module}.{a.name}" for a in node.names)
    return {n for n in names if n.startswith("torchkiln")}


def _stage_files(stage):
    return sorted((ROOT / stage).rglob("*.py"))


def test_no_stage_imports_a_later_one():
    later = {"shapes": ("torchkiln.capture", "torchkiln.aot", "torchkiln.codegen"),
             "capture": ("torchkiln.aot", "torchkiln.codegen"),
             "aot": ("torchkiln.codegen", "torchkiln.capture")}
    hits = [f"{p.relative_to(ROOT)}: {name}" for stage, banned in later.items() for p in _stage_files(stage)
            for name in _imports(p) if name.startswith(banned)]
    assert not hits, "\n".join(hits)


def test_capture_frame_modules_import_top_down():
    order = ["convert_frame", "symbolic_convert", "codegen", "resume", "frame"]
    hits = []
    for i, mod in enumerate(order):
        above = tuple(f"torchkiln.capture.{m}" for m in order[:i] if m != mod)
        hits += [f"{mod}: {n}" for n in _imports(ROOT / "capture" / f"{mod}.py")
                 if n.startswith(above) and n.split(".")[2] in order[:i]]
    assert not hits, "\n".join(hits)
