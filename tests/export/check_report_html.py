#!/usr/bin/python3
"""The HTML report of `strata analyze mutex` on a busy program (pt_workload
contend, 8 threads), checked in its source and in headless Chromium:
the heading matches --top; the timeline shows the --top threads that
waited most, the others folded; labels are HTML (never clipped); a
histogram bar is at most 48 px and its box as wide as its caption; zoom
(links to #zoomN, CSS only) widens the timeline: screenshots at 1x and 16x
are both pictures and differ.

usage: check_report_html.py STRATA PT_WORKLOAD WORKDIR"""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from speedscope_harness import CHROMIUM_FLAGS, png_pixels  # noqa: E402
from timeline_check import fail, record_contend, run  # noqa: E402


def main():
    strata, workload, work = sys.argv[1:4]
    chromium = shutil.which("chromium")
    if not chromium:
        print("SKIP: needs chromium (scripts/deps.sh installs it)")
        return 77
    trace = record_contend(strata, workload, work, 8)
    html = os.path.join(work, "report.html")
    run([strata, "analyze", "mutex", trace, "--top", "3", "--report=" + html])
    page = open(html).read()
    if "Per-thread timeline of the top 3 locks</h2>" not in page:
        fail("heading: %r" % re.findall(r"<h2 id=timeline>[^<]*", page))
    one = os.path.join(work, "one.html")
    run([strata, "analyze", "mutex", trace, "--top", "1", "--report=" + one])
    if "Per-thread timeline of the top 1 lock</h2>" not in open(one).read():
        fail("heading under --top 1")
    blocks = re.findall(r"<div class=tln>(.*?)</div><div class=tls>", page)
    rows = [re.findall(r"<div>([^<]*)</div>", b) for b in blocks]
    if len(rows) != 2 or len(rows[0]) != 3 or len(rows[0]) + len(rows[1]) != 8:
        fail("timeline rows: %r (want 3 shown, the other contenders folded)" % rows)
    m = re.search(r"<details><summary>(\d+) more thread", page)
    if not m or int(m.group(1)) != len(rows[1]):
        fail("folded threads not announced: %r" % m)
    if not all(re.match(r"pt_workload\[\d+\] tid \d+$", r) for r in rows[0] + rows[1]):
        fail("row labels %r" % rows)
    for svg in re.findall(r"<svg[^>]*><title>wait distribution</title>.*?</svg>", page, re.S):
        width = int(re.search(r"width='(\d+)'", svg).group(1))
        bars = [float(w) for w in re.findall(r"<rect x='[\d.]+' y='\d+' width='([\d.]+)'", svg)]
        if width < 460 or not bars or max(bars) > 46:
            fail("histogram box %d px, bars %r" % (width, bars))
    for z in ("4", "16", "64"):
        if "href='#zoom%s'" % z not in page or "id='zoom%s'" % z not in page:
            fail("zoom %sx missing" % z)
    shots = []
    for frag in ("timeline", "zoom16"):
        png = os.path.join(work, "report-%s.png" % frag)
        subprocess.run([chromium] + CHROMIUM_FLAGS + ["--user-data-dir=" + os.path.join(work, "chromium"),
                                                      "--window-size=1300,900", "--screenshot=" + png,
                                                      "file://" + html + "#" + frag],
                       capture_output=True, timeout=120)
        w, h, px = png_pixels(png)
        colours = {p for row in px for p in row}
        if len(colours) < 16:
            fail("screenshot %s is (nearly) empty: %d colours" % (frag, len(colours)))
        shots.append(px)
    if shots[0] == shots[1]:
        fail("zoom 16x changed nothing on screen")
    print("ok: heading, top-3 rows with 5 folded, histogram bounds, zoom checked in Chromium")
    return 0


if __name__ == "__main__":
    sys.exit(main())
