"""speedscope (a viewer from the npm registry, not ours) in headless Debian
Chromium, shared by the tests that open `strata export --format json` in it
(check_export_viewer.py, check_viewer_pthread.py, tests/jvm's
check_crosslayer.py).

speedscope is installed once into a cache under the build tree, copied into
a work directory, served on loopback and loaded with the JSON as its
profileURL.  Two readings of what it made of the file:
- the DOM after load (--dump-dom): the page title and the profile names;
- speedscope's own parsed profiles: the copy's bundle is given one statement
  that keeps its profile-group store in `window.__strataProfileGroup`, and a
  script added to index.html walks each profile with speedscope's
  Profile.forEachCall (what its flame chart draws) once loaded, counting
  the calls of each frame name, and writes that as JSON into a
  <pre id="strata-oracle"> the DOM dump carries out.
The pinned version's bundle must contain the statement patched; if it does
not the test fails (a new speedscope needs a new look)."""
import functools
import glob
import html
import http.server
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import threading
import urllib.parse
import zlib

SPEEDSCOPE = "speedscope@1.25.0"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--virtual-time-budget=15000"]
STORE = 'He=new La(null,"profileGroup");'
PROBE = """<script>
(function probe() {
  var pg = window.__strataProfileGroup && window.__strataProfileGroup.state;
  if (!pg || !pg.profiles.length) { setTimeout(probe, 50); return; }
  var out = {name: pg.name, profiles: []};
  pg.profiles.forEach(function (p) {
    var calls = {};
    p.profile.forEachCall(function (node) {
      var n = node.frame.name;
      calls[n] = (calls[n] || 0) + 1;
    }, function () {});
    out.profiles.push({name: p.profile.getName(), calls: calls});
  });
  var pre = document.createElement("pre");
  pre.id = "strata-oracle";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>
"""


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class Skip(Exception):
    pass


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import fail  # noqa: E402,F401  (the checks import it from here too)


def site(cache, work):
    """A patched copy of speedscope's release in WORK/site (installed into
    CACHE first if need be); its path.  Raises Skip without npm or chromium."""
    npm, chromium = shutil.which("npm"), shutil.which("chromium")
    if not npm or not chromium:
        raise Skip("needs npm and chromium (scripts/deps.sh installs chromium)")
    release = os.path.join(cache, "node_modules", "speedscope", "dist", "release")
    if not os.path.exists(os.path.join(release, "index.html")):
        r = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix", cache, SPEEDSCOPE],
                           capture_output=True, text=True, timeout=240)
        if r.returncode != 0:
            fail("npm install %s: %s" % (SPEEDSCOPE, r.stderr[-2000:]))
    out = os.path.join(work, "site")
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(release, out)
    bundles = glob.glob(os.path.join(out, "speedscope-*.js"))
    patched = 0
    for b in bundles:
        with open(b) as f:
            text = f.read()
        if STORE in text:
            with open(b, "w") as f:
                f.write(text.replace(STORE, STORE + "window.__strataProfileGroup=He;", 1))
            patched += 1
    if patched != 1:
        fail("speedscope's bundle (%r) has not one %r to hook: another version than %s?" %
             (bundles, STORE, SPEEDSCOPE))
    index = os.path.join(out, "index.html")
    with open(index) as f:
        text = f.read()
    with open(index, "w") as f:
        f.write(text.replace("</body>", PROBE + "</body>", 1))
    return out


def load(site_dir, json_path, work, screenshot=None):
    """Loads JSON_PATH (copied into the site) in speedscope in headless
    Chromium: (the DOM after load, speedscope's parsed profiles as
    {"name", "profiles": [{"name", "calls": {frame name: calls}}]} or None).
    With SCREENSHOT (a path) also takes a 1200x800 screenshot there."""
    name = os.path.basename(json_path)
    shutil.copyfile(json_path, os.path.join(site_dir, name))
    handler = functools.partial(_Quiet, directory=site_dir)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        base = "http://127.0.0.1:%d/" % httpd.server_address[1]
        url = base + "index.html#profileURL=" + urllib.parse.quote(base + name, safe="")
        common = [shutil.which("chromium")] + CHROMIUM_FLAGS + \
            ["--user-data-dir=" + os.path.join(work, "chromium")]
        dom = subprocess.run(common + ["--dump-dom", url], capture_output=True, text=True, timeout=300).stdout
        if screenshot:
            subprocess.run(common + ["--window-size=1200,800", "--screenshot=" + screenshot, url],
                           capture_output=True, timeout=300)
    finally:
        httpd.shutdown()
    if "<title>%s - speedscope</title>" % name not in dom:
        fail("speedscope did not load %s: %s" % (name, re.findall(r"<title>.*?</title>", dom)))
    m = re.search(r'<pre id="strata-oracle">(.*?)</pre>', dom, re.S)
    return dom, json.loads(html.unescape(m.group(1))) if m else None


def frame_name(key):
    """A frame's name as our JSON wrote it: speedscope names a frame of a
    Chrome trace by the event's name, then a space and its args as JSON."""
    return key.split(' {"', 1)[0]


def calls_by_name(profile):
    """{our slice name: calls} of one parsed profile."""
    out = {}
    for k, n in profile["calls"].items():
        out[frame_name(k)] = out.get(frame_name(k), 0) + n
    return out


def thread_profile_name(procname, pid, thread, tid):
    """The name speedscope gives a thread's profile (its chrome importer;
    an empty name counts as none)."""
    procname, thread = procname or None, thread or None
    if procname is not None and thread is not None:
        return "%s (pid %d), %s (tid %d)" % (procname, pid, thread, tid)
    if procname is not None:
        return "%s (pid %d, tid %d)" % (procname, pid, tid)
    if thread is not None:
        return "%s (pid %d, tid %d)" % (thread, pid, tid)
    return "pid %d, tid %d" % (pid, tid)


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


def check_picture(png):
    """Fails unless the screenshot is a picture (at least 16 colours, none
    on 98% of it); (width, height, colours)."""
    w, h, rows = png_pixels(png)
    colours = {}
    for row in rows:
        for p in row:
            colours[p] = colours.get(p, 0) + 1
    background = max(colours.values())
    if len(colours) < 16 or background > 0.98 * w * h:
        fail("the screenshot is (nearly) empty: %d colours, %d of %d pixels alike" % (len(colours), background, w * h))
    return w, h, len(colours)
