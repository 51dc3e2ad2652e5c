"""Render a loaded trace as one self-contained HTML page (styles and script inline).

Layout: a summary, graph breaks and recompiles (with the user's source lines in
context and a suggestion), the per-stage compile-time breakdown, a timeline of stage
times, an index of compile ids, then one collapsible ``<details>`` section per compile
id with every record: frame, recompile reason, graph breaks, captured graphs, guards,
AOT graphs and partition, IR summary, kernels, wrapper, extern calls, cache events,
stage times.  Code is highlighted with Pygments (CSS classes, one stylesheet inline).
"""
from __future__ import annotations

import html
import linecache

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import CppLexer, PythonLexer

from ..utils.break_hints import hint
from .records import Compile, Process

_FORMATTER = HtmlFormatter(cssclass="hl", nowrap=False)
_LEXERS = {"python": PythonLexer(), "cpp": CppLexer()}
_COLORS = {"capture": "#8fb3de", "backend": "#c9b6e4", "aot": "#f2c38b", "codegen": "#9fd49b", "cache": "#e6a0a0",
           "trace": "#d0d0d0"}

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:14px 24px}header h1{margin:0;font-size:20px}
header p{margin:4px 0 0;color:#b9c1d0}main{padding:12px 24px 40px;max-width:1300px}
h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid #d5d9e0;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}
table{border-collapse:collapse;margin:6px 0;background:#fff}td,th{border:1px solid #d5d9e0;padding:3px 8px;
text-align:left;vertical-align:top}td{overflow-wrap:anywhere}th{background:#eef0f4;white-space:nowrap}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
details{background:#fff;border:1px solid #d5d9e0;border-radius:4px;margin:6px 0;padding:2px 10px}
details>summary{cursor:pointer;padding:4px 0;font-weight:600}details details{background:#fbfbfc}
details details>summary{font-weight:500}.item{border-left:4px solid #d94f4f;background:#fff;padding:6px 12px;
margin:8px 0}.item.recompile{border-color:#e0a030}.muted{color:#667085}.tag{display:inline-block;
background:#eef0f4;border-radius:3px;padding:0 6px;margin-right:4px;font-size:12px}
pre{margin:4px 0;overflow-x:auto;font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace}
.src{background:#fafafa;border:1px solid #e3e5ea;padding:4px 0}.src span.line{display:block;padding:0 8px}
.src span.here{background:#ffe4e4;font-weight:600}.hint{color:#22663a}
.bar{display:flex;height:18px;min-width:2px}.bar div{height:100%}.legend span{display:inline-block;width:12px;
height:12px;margin:0 4px 0 12px;vertical-align:middle}.tools{margin:8px 0}button{margin-right:6px}
svg text{font:11px system-ui,sans-serif}
"""

_JS = """
(function(){
  function openTarget(){
    var id=decodeURIComponent(location.hash.slice(1)); if(!id) return;
    var el=document.getElementById(id);
    for(var n=el;n;n=n.parentElement){ if(n.tagName==='DETAILS') n.open=true; }
    if(el) el.scrollIntoView();
  }
  window.addEventListener('hashchange',openTarget);
  document.getElementById('expand-all').addEventListener('click',function(){
    document.querySelectorAll('details').forEach(function(d){d.open=true;});});
  document.getElementById('collapse-all').addEventListener('click',function(){
    document.querySelectorAll('details').forEach(function(d){d.open=false;});});
  openTarget();
})();
"""


def render(processes: list[Process], title: str = "torchkiln compile report") -> str:
    """The report page for ``processes`` (from :func:`torchkiln.report.records.load`)."""
    e = html.escape
    n_compiles = sum(len(p.compiles) for p in processes)
    n_breaks = sum(len(c.of("graph_break")) for p in processes for c in p.compiles)
    n_recompiles = sum(len(c.of("recompile")) for p in processes for c in p.compiles)
    n_kernels = sum(len(c.of("kernel")) for p in processes for c in p.compiles)
    total = sum(sum(p.stage_totals().values()) for p in processes)
    out = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{e(title)}</title>",
           f"<style>{_CSS}{_FORMATTER.get_style_defs('.hl')}</style></head><body>",
           f"<header><h1>{e(title)}</h1><p>{len(processes)} process(es) · {n_compiles} compile ids · "
           f"<span id='n-breaks'>{n_breaks}</span> graph breaks · <span id='n-recompiles'>{n_recompiles}</span> "
           f"recompiles · {n_kernels} kernels · {total:.2f} s compiling</p></header><main>",
           "<div class='tools'><button id='expand-all'>Expand all</button>"
           "<button id='collapse-all'>Collapse all</button></div>"]
    if len(processes) > 1:
        out += _process_table(processes)
    for pi, p in enumerate(processes):
        prefix = f"p{pi}-"
        if len(processes) > 1:
            out.append(f"<h2 id='{prefix}process'>Process {pi}: {e(p.label)}</h2>")
        out += _breaks_and_recompiles(p, prefix)
        out += _stage_table(p)
        out += _timeline(p, prefix)
        out += _index(p, prefix)
        out.append("<h3>Compile ids</h3>")
        out += [_compile_section(c, prefix) for c in p.compiles]
        if p.loose:
            out.append(_loose_section(p, prefix))
    out.append(f"</main><script>{_JS}</script></body></html>")
    return "\n".join(out)


def _process_table(processes: list[Process]) -> list[str]:
    """One row per process (a bench model, mode and phase): counts and seconds per stage group."""
    e = html.escape
    groups = list(_COLORS)
    rows = []
    for pi, p in enumerate(processes):
        by_group = dict.fromkeys(groups, 0.0)
        for name, t in p.stage_totals().items():
            by_group[_stage_group(name)] = by_group.get(_stage_group(name), 0.0) + t
        cells = "".join(f"<td class='num'>{by_group[g]:.2f}</td>" for g in groups)
        rows.append(f"<tr><td><a href='#p{pi}-process'>{e(p.label)}</a></td><td class='num'>{len(p.compiles)}</td>"
                    f"<td class='num'>{sum(len(c.of('graph_break')) for c in p.compiles)}</td>"
                    f"<td class='num'>{sum(len(c.of('recompile')) for c in p.compiles)}</td>"
                    f"<td class='num'>{sum(len(c.of('kernel')) for c in p.compiles)}</td>{cells}"
                    f"<td class='num'>{sum(by_group.values()):.2f}</td></tr>")
    head = "".join(f"<th>{g} s</th>" for g in groups)
    return ["<h2 id='processes'>Processes</h2><table class='processes'><tr><th>process</th><th>compile ids</th>"
            f"<th>breaks</th><th>recompiles</th><th>kernels</th>{head}<th>total s</th></tr>", "".join(rows),
            "</table>"]


def _anchor(prefix: str, cid: str) -> str:
    return f"{prefix}cid-{cid.replace('/', '-')}"


def _source_context(filename: str, lineno: int | None, before: int = 3, after: int = 2) -> str:
    """The user's lines around ``lineno`` (read with linecache), that line marked."""
    if not filename or not lineno:
        return ""
    lines = []
    for n in range(max(1, lineno - before), lineno + after + 1):
        text = linecache.getline(filename, n)
        if not text and n > lineno:
            break
        cls = "line here" if n == lineno else "line"
        lines.append(f"<span class='{cls}'>{n:5d}  {html.escape(text.rstrip())}</span>")
    if not any(lines):
        return "<p class='muted'>(source not available)</p>"
    return "<pre class='src'>" + "".join(lines) + "</pre>"


def _breaks_and_recompiles(p: Process, prefix: str) -> list[str]:
    e = html.escape
    out = ["<h2 id='{}breaks'>Graph breaks and recompiles</h2>".format(prefix)]
    items = 0
    for c in p.compiles:
        link = f"<a href='#{_anchor(prefix, c.cid)}'>[{e(c.cid)}]</a>"
        for br in c.of("graph_break"):
            items += 1
            kind, suggestion = hint(br.get("reason", ""))
            out.append(f"<div class='item break'><b>Graph break</b> {link} in <code>{e(str(br.get('frame')))}</code> "
                       f"at <code>{e(str(br.get('user_stack')))}</code> <span class='muted'>(bytecode offset "
                       f"{br.get('offset')} of the frame)</span><div class='reason'>{e(str(br.get('reason')))}</div>"
                       + (f"<div class='hint'>{e(suggestion)}</div>" if suggestion else "")
                       + _source_context(br.get("filename"), br.get("lineno")) + "</div>")
        for rc in c.of("recompile"):
            items += 1
            fr = c.frame
            values = (f"<div>expected <code>{e(str(rc.get('expected')))}</code>, actual "
                      f"<code>{e(str(rc.get('actual')))}</code></div>") if rc.get("expected") else ""
            out.append(f"<div class='item recompile'><b>Recompile</b> {link} of <code>{e(str(fr.get('name')))}</code> "
                       f"({e(str(fr.get('filename')))}:{fr.get('lineno')})<div>failing guard: "
                       f"<code class='guard'>{e(str(rc.get('guard')))}</code></div><div class='reason'>"
                       f"{e(str(rc.get('reason')))}</div>{values}"
                       + _source_context(fr.get("filename"), fr.get("lineno"), 0, 3) + "</div>")
    if not items:
        out.append("<p class='muted'>None.</p>")
    return out


def _stage_group(name: str) -> str:
    return name.split(".", 1)[0]


def _stage_table(p: Process) -> list[str]:
    totals = p.stage_totals()
    whole = sum(totals.values()) or 1.0
    rows = "".join(f"<tr><td>{html.escape(name)}</td><td class='num'>{t * 1000:.1f}</td>"
                   f"<td class='num'>{100 * t / whole:.1f}%</td></tr>"
                   for name, t in sorted(totals.items(), key=lambda kv: -kv[1]))
    return ["<h3>Compile time per stage</h3><p class='muted'>Each stage without the stages nested in it "
            "(capture excludes its backend call; backend excludes AOT and codegen; trace is the cost of "
            "writing this trace).</p>",
            f"<table class='stages'><tr><th>stage</th><th>ms</th><th>share</th></tr>{rows}"
            f"<tr><th>total</th><th class='num'>{whole * 1000:.1f}</th><th></th></tr></table>"]


def _timeline(p: Process, prefix: str) -> list[str]:
    """An SVG: one row per compile id, one rectangle per stage (nested stages inset)."""
    if not p.stages:
        return []
    t0 = min(s["start"] for s in p.stages)
    t1 = max(s["start"] + s["duration_s"] for s in p.stages)
    span = max(t1 - t0, 1e-6)
    cids = [c.cid for c in p.compiles]
    row, label_w, width = 22, 70, 1000
    parts = [f"<svg class='timeline' width='{label_w + width + 10}' height='{row * len(cids) + 24}' "
             f"xmlns='http://www.w3.org/2000/svg'>"]
    for i, cid in enumerate(cids):
        parts.append(f"<text x='0' y='{i * row + 15}'>[{html.escape(cid)}]</text>")
    for s in sorted(p.stages, key=lambda s: s.get("depth", 0)):  # outer first, nested on top
        if s["cid"] not in cids:
            continue
        i = cids.index(s["cid"])
        inset = min(s.get("depth", 0), 4) * 2
        x = label_w + (s["start"] - t0) / span * width
        w = max(s["duration_s"] / span * width, 0.5)
        color = _COLORS.get(_stage_group(s["name"]), "#bbb")
        parts.append(f"<rect x='{x:.1f}' y='{i * row + 2 + inset}' width='{w:.1f}' height='{row - 4 - 2 * inset}' "
                     f"fill='{color}' stroke='#fff' stroke-width='0.5'><title>[{html.escape(s['cid'])}] "
                     f"{html.escape(s['name'])}: {s['duration_s'] * 1000:.1f} ms</title></rect>")
    parts.append(f"<text x='{label_w}' y='{row * len(cids) + 18}'>0 s</text>"
                 f"<text x='{label_w + width - 60}' y='{row * len(cids) + 18}'>{span:.2f} s</text></svg>")
    legend = "".join(f"<span style='background:{c}'></span>{n}" for n, c in _COLORS.items())
    return [f"<h3 id='{prefix}timeline'>Timeline</h3><div class='legend'>{legend}</div>", "".join(parts)]


def _index(p: Process, prefix: str) -> list[str]:
    e = html.escape
    rows = []
    for c in p.compiles:
        fr = c.frame
        rows.append(f"<tr><td><a href='#{_anchor(prefix, c.cid)}'>[{e(c.cid)}]</a></td><td><code>"
                    f"{e(str(fr.get('name', '?')))}</code></td><td>{e(str(fr.get('filename', '')))}:{fr.get('lineno', '')}"
                    f"</td><td class='num'>{len(c.of('graph'))}</td><td class='num'>{len(c.of('graph_break'))}</td>"
                    f"<td class='num'>{len(c.of('kernel'))}</td><td class='num'>{c.total_s * 1000:.1f}</td></tr>")
    return [f"<h3 id='{prefix}index'>Index of compile ids</h3><table class='index'><tr><th>compile id</th>"
            "<th>frame</th><th>file:line</th><th>graphs</th><th>breaks</th><th>kernels</th><th>ms</th></tr>",
            "".join(rows), "</table>"]


def _code(source: str, language: str = "python") -> str:
    return highlight(source or "", _LEXERS.get(language, _LEXERS["python"]), _FORMATTER)


def _details(summary: str, body: str, cls: str = "", open_: bool = False, id_: str = "") -> str:
    attrs = (f" class='{cls}'" if cls else "") + (f" id='{id_}'" if id_ else "") + (" open" if open_ else "")
    return f"<details{attrs}><summary>{summary}</summary>{body}</details>"


def _table(header: list[str], rows: list[list]) -> str:
    e = html.escape
    head = "".join(f"<th>{e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{e(str(v))}</td>" for v in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _graph_label(ir: dict) -> str:
    lines = ir.get("lines", [])
    return "backward" if any(str(line).startswith("tangents") for line in lines) else "forward/inference"


def _compile_section(c: Compile, prefix: str) -> str:
    e = html.escape
    fr = c.frame
    parts = [f"<p><span class='tag'>frame</span><code>{e(str(fr.get('qualname', '?')))}</code> "
             f"{e(str(fr.get('filename', '')))}:{fr.get('lineno', '')}</p>"]
    for rc in c.of("recompile"):
        parts.append(_details("Recompile reason", f"<p>failing guard <code>{e(str(rc.get('guard')))}</code></p>"
                              f"<p>{e(str(rc.get('reason')))}</p>", "recompile", True))
    for br in c.of("graph_break"):
        kind, suggestion = hint(br.get("reason", ""))
        parts.append(_details(f"Graph break: {e(kind)} at {e(str(br.get('user_stack')))}",
                              f"<p>{e(str(br.get('reason')))} (bytecode offset {br.get('offset')})</p>"
                              + (f"<p class='hint'>{e(suggestion)}</p>" if suggestion else "")
                              + _source_context(br.get("filename"), br.get("lineno")), "graph-break"))
    for i, g in enumerate(c.of("graph")):
        sources = g.get("sources", [])
        shown = ", ".join(sources[:4]) + (f", … ({len(sources)} inputs)" if len(sources) > 4 else "")
        parts.append(_details(f"Captured FX graph {i} ({g.get('ops')} ops; inputs {e(shown)})",
                              _code(g.get("code", "")), "fx-graph"))
    for g in c.of("guards"):
        items = "".join(f"<li><code>{e(str(x))}</code></li>" for x in g.get("guards", []))
        parts.append(_details(f"Guards ({len(g.get('guards', []))})", f"<ul>{items}</ul>", "guards"))
    for g in c.of("aot_graph"):
        parts.append(_details(f"AOT {e(str(g.get('graph')))} graph {g.get('aot_id')}", _code(g.get("code", "")),
                              "aot-graph"))
    for part in c.of("partition"):
        rows = [[r["name"], "×".join(r["shape"]) if r["shape"] else "-", r["dtype"], r["bytes"]] for r in part["saved"]]
        parts.append(_details(f"Partition {part.get('aot_id')}: {len(rows)} saved for backward, "
                              f"{part.get('saved_bytes', 0)} bytes", _table(["saved", "shape", "dtype", "bytes"], rows),
                              "partition"))
    irs = {ir["graph_id"]: ir for ir in c.of("ir")}
    for gid, ir in irs.items():
        body = [f"<p>{ir['buffers']} buffers ({ir['computed']} computed, {ir['inputs']} inputs), "
                f"{ir['kernels']} kernels, {ir['extern_kernels']} extern kernels</p>",
                f"<pre>{e(chr(10).join(map(str, ir.get('lines', []))))}</pre>"]
        kernels = [k for k in c.of("kernel") if k["graph_id"] == gid]
        for k in kernels:
            kbody = (f"<p><span class='tag'>{e(k['kind'])}</span> fused: <code>{e(', '.join(k['fused']))}</code></p>"
                     + _code(k.get("source", ""), k.get("language", "cpp"))
                     + _details("IR", f"<pre>{e(k.get('ir', ''))}</pre>"))
            body.append(_details(f"Kernel {e(k['name'])} ({e(k['kind'])}, {len(k['fused'])} fused)", kbody, "kernel"))
        for x in c.of("extern_calls"):
            if x["graph_id"] == gid and x["calls"]:
                body.append(_details(f"Extern calls ({len(x['calls'])})", _table(
                    ["buffer", "op", "fallback"], [[d["name"], d["op"], d["fallback"]] for d in x["calls"]]), "externs"))
        for w in c.of("wrapper"):
            if w["graph_id"] == gid:
                body.append(_details("Wrapper code", _code(w.get("source", "")), "wrapper"))
        parts.append(_details(f"Codegen graph {gid} ({_graph_label(ir)}): {ir['kernels']} kernels, "
                              f"{ir['extern_kernels']} extern", "".join(body), "codegen"))
    caches = c.of("cache")
    if caches:
        keys = sorted({k for d in caches for k in d})
        parts.append(_details(f"Cache ({len(caches)} events)", _table(keys, [[d.get(k, "") for k in keys]
                                                                            for d in caches]), "cache"))
    stages = [r["data"] for r in c.records if r["kind"] == "stage"]
    if stages:
        rows = [[s["name"], f"{s['duration_s'] * 1000:.2f}"] for s in sorted(stages, key=lambda s: s["start"])]
        parts.append(_details("Stage times (ms)", _table(["stage", "ms"], rows), "stage-times"))
    summary = (f"[{e(c.cid)}] {e(str(fr.get('name', '?')))} · {len(c.of('graph_break'))} breaks · "
               f"{len(c.of('kernel'))} kernels · {c.total_s * 1000:.1f} ms")
    return _details(summary, "".join(parts), "compile", id_=_anchor(prefix, c.cid))


def _loose_section(p: Process, prefix: str) -> str:
    rows = [[r["kind"], r.get("ts"), ", ".join(f"{k}={v}" for k, v in r["data"].items()
                                                if k not in ("source", "code", "lines"))[:300]] for r in p.loose]
    return _details(f"Outside any compile id ({len(rows)} records)", _table(["kind", "ts", "data"], rows), "loose",
                    id_=f"{prefix}loose")
