#!/usr/bin/python3
"""`strata export --format json` opened in a viewer that is not ours:
speedscope, installed from the npm registry into a cache under the build
tree, served on loopback and loaded in headless Debian Chromium.

Oracles: the page speedscope builds lists one profile per thread that has
slices, named by our process and thread names (the DOM after load), and a
screenshot of the flame chart is a real picture (not one colour).

usage: check_export_viewer.py STRATA NPM_CACHE WORKDIR
exit 77 (skip) when npm or chromium is not installed."""
import functools
import http.server
import os
import re
import shutil
import struct
import subprocess
import sys
import threading
import urllib.parse
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_timeline_fixture  # noqa: E402
from timeline_check import check_json, fail  # noqa: E402

SPEEDSCOPE = "speedscope@1.25.0"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--virtual-time-budget=15000"]


def png_pixels(path):
    """(width, height, rows of RGB(A) tuples) of an 8-bit RGB/RGBA PNG."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail("not a PNG: %s" % path)
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            if depth != 8 or ctype not in (2, 6):
                fail("PNG type %d/%d not handled" % (depth, ctype))
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        ft = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if ft == 1:
                line[i] = (line[i] + a) & 255
            elif ft == 2:
                line[i] = (line[i] + b) & 255
            elif ft == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif ft == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(w)])
        prev = line
    return w, h, rows


def main():
    strata, cache, work = sys.argv[1:4]
    npm, chromium = shutil.which("npm"), shutil.which("chromium")
    if not npm or not chromium:
        print("SKIP: needs npm and chromium (scripts/deps.sh installs chromium)")
        return 77
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    release = os.path.join(cache, "node_modules", "speedscope", "dist", "release")
    if not os.path.exists(os.path.join(release, "index.html")):
        r = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix", cache, SPEEDSCOPE],
                           capture_output=True, text=True, timeout=240)
        if r.returncode != 0:
            fail("npm install %s: %s" % (SPEEDSCOPE, r.stderr[-2000:]))
    trace = os.path.join(work, "trace")
    make_timeline_fixture.make(trace)
    site = os.path.join(work, "site")
    shutil.copytree(release, site)
    js = os.path.join(site, "strata.json")
    r = subprocess.run([strata, "export", "--format=json", "-o", js, trace], capture_output=True, text=True,
                       timeout=60)
    if r.returncode != 0:
        fail("export: " + r.stderr)
    evs = check_json(js)
    want = set()
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in evs if e["ph"] == "M"}
    for e in evs:
        if e["ph"] in "BX":
            want.add("%s (pid %d), %s (tid %d)" % (names[(e["pid"], None)], e["pid"],
                                                 names[(e["pid"], e["tid"])], e["tid"]))

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=site)
    handler.log_message = lambda *a: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        base = "http://127.0.0.1:%d/" % httpd.server_address[1]
        url = base + "index.html#profileURL=" + urllib.parse.quote(base + "strata.json", safe="")
        common = [chromium] + CHROMIUM_FLAGS + ["--user-data-dir=" + os.path.join(work, "chromium")]
        dom = subprocess.run(common + ["--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
        png = os.path.join(work, "speedscope.png")
        subprocess.run(common + ["--window-size=1200,800", "--screenshot=" + png, url], capture_output=True,
                       timeout=120)
    finally:
        httpd.shutdown()
    if "<title>strata.json - speedscope</title>" not in dom:
        fail("speedscope did not load the trace: %s" % re.findall(r"<title>.*?</title>", dom))
    got = set(re.findall(r"<span>([^<]*\(pid -?\d+\), [^<]*\(tid -?\d+\))</span>", dom))
    if got != want:
        fail("speedscope's profiles %r, want the threads with slices %r" % (sorted(got), sorted(want)))
    w, h, rows = png_pixels(png)
    colours = {}
    for row in rows:
        for p in row:
            colours[p] = colours.get(p, 0) + 1
    background = max(colours.values())
    if len(colours) < 16 or background > 0.98 * w * h:
        fail("the screenshot is (nearly) empty: %d colours, %d of %d pixels alike" % (len(colours), background, w * h))
    print("ok: speedscope shows %d thread profiles; screenshot %dx%d with %d colours" % (len(got), w, h, len(colours)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
