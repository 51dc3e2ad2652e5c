"""``torchkiln report DIR``: the HTML page's content, parsed with html.parser."""
from __future__ import annotations

import html.parser
import linecache

from torchkiln.cli import main

from .conftest import BREAK_LINE, branchy


class _Page(html.parser.HTMLParser):
    """Text per element class, ids, <details> count and external references."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, str]] = []
        self.text_by_class: dict[str, list[str]] = {}
        self.ids: set[str] = set()
        self.details = 0
        self.external: list[str] = []
        self.all_text: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "details":
            self.details += 1
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        for key in ("src", "href"):
            if attrs.get(key) and not attrs[key].startswith("#"):
                self.external.append(attrs[key])
        if tag not in ("br", "meta", "img", "input", "hr", "link"):  # void elements have no end tag
            self.stack.append((tag, attrs.get("class", "")))

    def handle_endtag(self, tag):
        while self.stack:
            t, _ = self.stack.pop()
            if t == tag:
                break

    def handle_data(self, data):
        self.all_text.append(data)
        for _, cls in self.stack:
            for c in cls.split():
                self.text_by_class.setdefault(c, []).append(data)

    def text(self, cls: str) -> str:
        return "".join(self.text_by_class.get(cls, []))


def _render(traced, tmp_path) -> tuple[str, _Page]:
    directory, _ = traced
    out = tmp_path / "report.html"
    assert main(["report", str(directory), "-o", str(out)]) == 0
    page = out.read_text()
    parser = _Page()
    parser.feed(page)
    return page, parser


def test_breaks_and_recompiles_first_with_user_lines(traced, tmp_path):
    page, p = _render(traced, tmp_path)
    assert page.index("Graph breaks and recompiles") < page.index("Index of compile ids")
    assert "data-dependent control flow" in p.text("break")
    user_line = linecache.getline(branchy.__code__.co_filename, BREAK_LINE).strip()
    assert user_line in p.text("here")  # the break's own line, marked
    assert f"{BREAK_LINE:5d}" in p.text("here")
    assert "use torch.where" in p.text("hint")
    assert "L['x'].shape == (4,)" in p.text("guard")
    assert "expected 4, actual 5" in p.text("recompile")


def test_every_compile_id_has_a_collapsible_section(traced, tmp_path):
    _, proc = traced
    _, p = _render(traced, tmp_path)
    for c in proc.compiles:
        assert f"p0-cid-{c.cid.replace('/', '-')}" in p.ids
    assert p.details > 20
    assert p.external == []  # self-contained: no network


def test_kernel_source_highlighted_and_stage_times(traced, tmp_path):
    _, proc = traced
    page, p = _render(traced, tmp_path)
    kernel = next(c for c in proc.compiles if c.of("kernel")).first("kernel")
    first_line = kernel["source"].splitlines()[0]
    assert "extern" in p.text("hl") and kernel["name"] in p.text("hl")
    assert first_line.split("(")[0].split()[-1] == kernel["name"]
    assert "class=\"hl\"" in page and ".hl .k" in page  # Pygments markup and its stylesheet inline
    stages = p.text("stages")
    for name in ("capture", "backend", "aot.trace_joint", "codegen.scheduling", "total"):
        assert name in stages
    assert "<svg class='timeline'" in page
    assert "demo-key" in page  # a cache record (from the cache stage) is shown


def test_report_of_missing_trace_fails_cleanly(tmp_path, capsys):
    assert main(["report", str(tmp_path), "-o", str(tmp_path / "r.html")]) == 1
    assert "no TORCHKILN_TRACE files" in capsys.readouterr().err


def test_explain_prints_user_line_and_suggestion():
    import torch

    import torchkiln

    text = str(torchkiln.explain(branchy)(torch.randn(4)))
    user_line = linecache.getline(branchy.__code__.co_filename, BREAK_LINE).strip()
    assert f"> {BREAK_LINE:4d} | " in text and user_line in text
    assert "Suggestion: data-dependent branch" in text


def test_bench_report_gives_each_worker_its_trace_dir(monkeypatch, tmp_path):
    import subprocess

    from torchkiln.bench import suite
    from torchkiln.bench.run import Options

    seen = {}

    def fake_run(cmd, env, **kwargs):
        seen.update(env)
        raise subprocess.TimeoutExpired(cmd, 1)

    monkeypatch.setenv("TORCHKILN_TRACE", str(tmp_path))
    monkeypatch.setattr(suite.subprocess, "run", fake_run)
    suite._subprocess("mlp", "inference", "cold", Options(), str(tmp_path), 1)
    assert seen["TORCHKILN_TRACE"] == str(tmp_path / "mlp-inference-cold")
    assert seen["TORCHKILN_TRACE_LABEL"] == "mlp inference cold"


def test_several_processes_get_a_table_and_their_own_sections(traced, tmp_path):
    import shutil

    from torchkiln.report import write_report

    directory, proc = traced
    for name in ("mlp-inference-cold", "t5-inference-cold"):
        (tmp_path / "bench" / name).mkdir(parents=True)
        shutil.copy(proc.path, tmp_path / "bench" / name / "trace_1.jsonl")
    page = open(write_report(str(tmp_path / "bench"), str(tmp_path / "r.html"))).read()
    p = _Page()
    p.feed(page)
    assert "mlp-inference-cold" in p.text("processes") and "t5-inference-cold" in p.text("processes")
    assert {"p0-process", "p1-process", "p0-cid-0-0", "p1-cid-0-0"} <= p.ids
