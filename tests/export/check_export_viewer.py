#!/usr/bin/python3
"""`strata export --format json` opened in a viewer that is not ours:
speedscope, installed from the npm registry into a cache under the build
tree, served on loopback and loaded in headless Debian Chromium
(speedscope_harness.py).

Oracles: the page speedscope builds lists one profile per thread that has
slices, named by our process and thread names (the DOM after load);
speedscope's parsed profiles hold each thread's slices by name and number
(the fixture's futex syscall, span, lock wait, monitor wait); a screenshot
of the flame chart is a real picture (not one colour).

usage: check_export_viewer.py STRATA NPM_CACHE WORKDIR
exit 77 (skip) when npm or chromium is not installed."""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_timeline_fixture  # noqa: E402
import speedscope_harness as ss  # noqa: E402
from timeline_check import check_json, fail  # noqa: E402


def main():
    strata, cache, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    try:
        site = ss.site(cache, work)
    except ss.Skip as e:
        print("SKIP: %s" % e)
        return 77
    trace = os.path.join(work, "trace")
    make_timeline_fixture.make(trace)
    js = os.path.join(work, "strata.json")
    r = subprocess.run([strata, "export", "--format=json", "-o", js, trace], capture_output=True, text=True,
                       timeout=60)
    if r.returncode != 0:
        fail("export: " + r.stderr)
    evs = check_json(js)
    want = set()
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in evs if e["ph"] == "M"}
    for e in evs:
        if e["ph"] in "BX":
            want.add(ss.thread_profile_name(names[(e["pid"], None)], e["pid"], names[(e["pid"], e["tid"])], e["tid"]))

    png = os.path.join(work, "speedscope.png")
    dom, parsed = ss.load(site, js, work, screenshot=png)
    got = set(re.findall(r"<span>([^<]*\(pid -?\d+\), [^<]*\(tid -?\d+\))</span>", dom))
    if got != want:
        fail("speedscope's profiles %r, want the threads with slices %r" % (sorted(got), sorted(want)))
    if parsed is None:
        fail("speedscope's parsed profiles were not found in the page")
    calls = {p["name"]: ss.calls_by_name(p) for p in parsed["profiles"]}
    # The fixture's thread-track slices (make_timeline_fixture.py): the
    # worker's wait encloses its raw and named futex syscalls; each closes
    # in speedscope (an E named as its B), so each is one call.  The
    # zero-length slices that flows join (release, monitor released and
    # acquired) are parsed but weigh nothing: speedscope draws no call.
    want_calls = {
        "app (pid 500), app (tid 501)": {"app:work": 1},
        "app (pid 500), worker (tid 502)": {"wait mutex 0xa000": 1, "syscall 202": 1, "futex": 1},
        "java (pid 700), main (tid 701)": {},
        "java (pid 700), Worker-1 (tid 702)": {"monitor enter int[]@7645a180": 1},
        "CPUs (pid 0), CPU 0 (tid 0)": {"java": 1, "app": 1},
        "CPUs (pid 0), CPU 1 (tid 1)": {"worker": 1},
    }
    for name, want_c in want_calls.items():
        if calls.get(name) != want_c:
            fail("speedscope's calls of %s: %r, want %r" % (name, calls.get(name), want_c))
    w, h, n = ss.check_picture(png)
    print("ok: speedscope shows %d thread profiles with their slices; screenshot %dx%d with %d colours" %
          (len(got), w, h, n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
