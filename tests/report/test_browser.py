"""The report in a real browser: headless Chromium over the DevTools protocol."""
from __future__ import annotations

import os

import pytest

from torchkiln.report import write_report

from .browser import Browser, find_chromium

pytest.importorskip("websocket", reason="websocket-client (pip install websocket-client) drives Chromium")
if find_chromium() is None:
    pytest.skip("no Chromium found (apt-get install chromium, or set CHROMIUM=/path/to/chrome)",
                allow_module_level=True)


def test_report_opens_expands_and_has_no_console_errors(traced, tmp_path):
    directory, proc = traced
    page = write_report(str(directory), str(tmp_path / "report.html"))
    with Browser(f"file://{os.path.abspath(page)}") as b:
        assert b.evaluate("document.title") == "torchkiln compile report"
        assert b.evaluate("document.getElementById('n-breaks').textContent") == str(
            sum(len(c.of("graph_break")) for c in proc.compiles))
        section = "p0-cid-" + proc.compiles[0].cid.replace("/", "-")
        assert b.evaluate(f"document.getElementById('{section}').open") is False
        kernel_visible = f"document.querySelector('#{section} details.kernel pre').checkVisibility()"
        assert b.evaluate(kernel_visible) is False  # collapsed
        # the index link opens its section (the page's script), then open the kernel inside it
        b.evaluate(f"document.querySelector(\"a[href='#{section}']\").click(); 1")
        b.evaluate("new Promise(r => setTimeout(r, 200))")
        assert b.evaluate(f"document.getElementById('{section}').open") is True
        b.evaluate(f"document.querySelectorAll('#{section} details').forEach(d => d.open = true); "
                   f"document.querySelector('#{section} details.kernel').scrollIntoView(); 1")
        assert b.evaluate(kernel_visible) is True
        assert "extern" in b.evaluate(f"document.querySelector('#{section} details.kernel pre').textContent")
        # one bar per stage of a compile id (a stage without one, such as codegen.build_wait, is in the totals only)
        cids = {c.cid for c in proc.compiles}
        assert b.evaluate("document.querySelectorAll('svg.timeline rect').length") == sum(
            s["cid"] in cids for s in proc.stages)
        b.evaluate("document.getElementById('collapse-all').click(); 1")
        assert b.evaluate("[...document.querySelectorAll('details')].some(d => d.open)") is False
        b.evaluate("document.getElementById('expand-all').click(); window.scrollTo(0, 0); 1")
        shot = os.environ.get("TORCHKILN_REPORT_SCREENSHOT", str(tmp_path / "report.png"))
        b.screenshot(shot)
        assert os.path.getsize(shot) > 10_000
        assert b.errors == []
