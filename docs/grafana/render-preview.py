#!/usr/bin/env python3
"""Draw the queries of velo-dashboard.json from a real Prometheus server.

This is not Grafana: it runs each panel's PromQL through the server's
query_range API and draws the series as SVG lines in a page laid out like
the dashboard, for a headless browser to save as a picture. It is how
velo-dashboard.png was made, on a machine where Grafana is not packaged:

  # a Prometheus server scraping two nodes once a second
  #   (prometheus from Debian's package; job "velo", targets
  #   127.0.0.1:9464 labelled instance=frontend, :9465 instance=engine)
  prometheus --config.file=prom.yml --storage.tsdb.path=data &
  # the load: two velo nodes serving their registries for 3 minutes
  VELO_DASHBOARD_LOAD=3m go test -run TestDashboardLoad -count=1 .
  # the page, then the picture
  python3 docs/grafana/render-preview.py --prom http://127.0.0.1:9090 \\
      --minutes 3 --out /tmp/velo-dashboard.html
  chromium --headless --no-sandbox --disable-gpu --hide-scrollbars \\
      --window-size=1600,2000 --screenshot=docs/grafana/velo-dashboard.png \\
      file:///tmp/velo-dashboard.html

The dashboard's variables are given fixed values: $instance matches every
instance and $__rate_interval is --rate-interval (10s by default).
Only the standard library is used.
"""

import argparse
import html
import json
import os
import re
import time
import urllib.parse
import urllib.request

COLORS = ["#73bf69", "#f2cc0c", "#5794f2", "#ff780a", "#b877d9", "#f2495c",
          "#8ab8ff", "#fade2a", "#96d98d", "#ffb357", "#ca95e5", "#ff7383"]


def query_range(prom, expr, start, end, step):
    q = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{prom}/api/v1/query_range?{q}", timeout=30) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body}")
    return body["data"]["result"]


def legend(fmt, labels):
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt).strip() or "value"


def fmt_value(v, unit):
    if unit == "s":
        for scale, suffix in ((1, "s"), (1e-3, "ms"), (1e-6, "µs")):
            if abs(v) >= scale or scale == 1e-6:
                return f"{v / scale:.3g} {suffix}"
    if unit == "Bps":
        for scale, suffix in ((1 << 20, "MiB/s"), (1 << 10, "KiB/s"), (1, "B/s")):
            if abs(v) >= scale or scale == 1:
                return f"{v / scale:.3g} {suffix}"
    suffix = {"ops": " /s", "reqps": " req/s"}.get(unit, "")
    for scale, k in ((1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{v / scale:.3g}{k}{suffix}"
    return f"{v:.3g}{suffix}"


def chart(panel, series, start, end, w=760, h=230):
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
    pad_l, pad_r, pad_t, pad_b = 70, 10, 10, 22
    pw, ph = w - pad_l - pad_r, h - pad_t - pad_b
    vals = [v for _, pts in series for _, v in pts]
    top = max(vals) if vals else 1.0
    top = top * 1.1 if top > 0 else 1.0
    out = [f'<svg width="{w}" height="{h}" xmlns="http://www.w3.org/2000/svg">']
    for i in range(5):
        y = pad_t + ph - ph * i / 4
        out.append(f'<line x1="{pad_l}" y1="{y:.1f}" x2="{w - pad_r}" y2="{y:.1f}" stroke="#2c3235"/>')
        out.append(f'<text x="{pad_l - 6}" y="{y + 4:.1f}" fill="#9fa7b3" font-size="11" text-anchor="end">'
                   f'{html.escape(fmt_value(top * i / 4, unit))}</text>')
    for i in range(4):
        t = start + (end - start) * i / 3
        x = pad_l + pw * i / 3
        out.append(f'<text x="{x:.1f}" y="{h - 6}" fill="#9fa7b3" font-size="11" text-anchor="middle">'
                   f'{time.strftime("%H:%M:%S", time.gmtime(t))}</text>')
    for n, (_, pts) in enumerate(series):
        if not pts:
            continue
        path = " ".join(f"{pad_l + pw * (t - start) / (end - start):.1f},{pad_t + ph - ph * v / top:.1f}" for t, v in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{COLORS[n % len(COLORS)]}" stroke-width="1.5"/>')
    if not vals:
        out.append(f'<text x="{pad_l + pw / 2}" y="{pad_t + ph / 2}" fill="#9fa7b3" font-size="13" text-anchor="middle">No data</text>')
    out.append("</svg>")
    return "".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prom", default="http://127.0.0.1:9090")
    ap.add_argument("--dashboard", default=os.path.join(os.path.dirname(__file__), "velo-dashboard.json"))
    ap.add_argument("--minutes", type=float, default=3)
    ap.add_argument("--end", type=float, default=0, help="unix time of the right edge (default: now)")
    ap.add_argument("--rate-interval", default="10s")
    ap.add_argument("--out", default="velo-dashboard.html")
    a = ap.parse_args()
    dash = json.load(open(a.dashboard))
    end = a.end or time.time()
    start = end - a.minutes * 60
    step = max(1, int(a.minutes * 60 / 180))
    cells = []
    for p in dash["panels"]:
        if p.get("type") == "row":
            continue
        series = []
        for tg in p.get("targets", []):
            expr = tg["expr"].replace("$__rate_interval", a.rate_interval).replace("$instance", ".*")
            for r in query_range(a.prom, expr, start, end, step):
                pts = [(float(t), float(v)) for t, v in r["values"] if v not in ("NaN", "+Inf", "-Inf")]
                series.append((legend(tg.get("legendFormat", ""), r["metric"]), pts))
        series.sort(key=lambda s: s[0])
        keys = "".join(f'<span class="key"><i style="background:{COLORS[n % len(COLORS)]}"></i>{html.escape(name)}</span>'
                       for n, (name, _) in enumerate(series))
        cells.append(f'<div class="panel"><div class="title">{html.escape(p["title"])}</div>'
                     f'{chart(p, series, start, end)}<div class="legend">{keys}</div></div>')
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(dash['title'])}</title>
<style>
body {{ background:#111217; color:#ccccdc; font-family: Inter, Helvetica, Arial, sans-serif; margin:12px; }}
h1 {{ font-size:18px; font-weight:500; margin:4px 4px 2px; }}
.note {{ font-size:12px; color:#9fa7b3; margin:0 4px 10px; }}
.grid {{ display:grid; grid-template-columns: repeat(2, 780px); gap:8px; }}
.panel {{ background:#181b1f; border:1px solid #2c3235; border-radius:3px; padding:6px 8px; height:300px; overflow:hidden; }}
.title {{ font-size:13px; font-weight:500; margin-bottom:4px; }}
.legend {{ font-size:11px; line-height:16px; }}
.key {{ margin-right:12px; white-space:nowrap; }}
.key i {{ display:inline-block; width:12px; height:3px; margin:0 4px 3px 0; }}
</style></head><body>
<h1>{html.escape(dash['title'])} — the queries of velo-dashboard.json over a real run</h1>
<div class="note">Drawn by docs/grafana/render-preview.py from a Prometheus 2.42 server that scraped two velo nodes
(frontend, engine) once a second; not a Grafana screenshot. $__rate_interval = {a.rate_interval}, $instance = all.
{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(start))} to {time.strftime('%H:%M:%S UTC', time.gmtime(end))}.</div>
<div class="grid">{''.join(cells)}</div></body></html>"""
    with open(a.out, "w") as f:
        f.write(page)


if __name__ == "__main__":
    main()
