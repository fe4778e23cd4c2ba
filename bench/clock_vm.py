#!/usr/bin/python3
"""The clock link's rows: the VM clock checks run and their figures kept.

usage: clock_vm.py BUILD MODE RUNS [--out FILE] [--note TEXT] [--consumerd PATH]

Runs tests/kernel/check_clock_vm.py MODE (plain, pause, kernel, two,
defaults, defaults_tcp) RUNS times with BUILD's binaries, one at a time,
and appends one row a run to FILE (bench/results/clocks-vm-runs.md): the
commit (with "+" when the tree differs from it), the link kind, the 1-min
load average before and after, whether the check passed (else its first
failure), the probes' map's inversions of the program's messages, the
guest's bound width at the messages (median), the program's fastest
message round trip and the width against it (`defaults` modes; the others
print no such figure), the probes' fastest round trip, the segments that
began with a lost link in the guest's and the host's clocks.json, and the
guest's spin (answers caught of those spun for, CPU ms a probe).  Every
figure is read from the check's own output and files: nothing is typed
by hand.  Prints each row as it is written.  --consumerd: another
daemon than BUILD's for both ends (an older build's, to compare; its
commit column then says "other daemon"), not under /tmp or /run (the
guest's are its own: refused, where the guest's daemon would never start).
"""
import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)
HEADER = ("| commit | mode (link) | load before-after | check | probes' map inverted | bound width at the "
          "messages, median (us) | fastest message RTT (us) | width / fastest message RTT | probes' fastest "
          "RTT (us) | lost-link segments, guest / host | guest's answers caught spinning; spin CPU a probe | "
          "note |\n|" + "---|" * 12 + "\n")


def commit():
    head = subprocess.run(["git", "-C", SRC, "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", SRC, "diff", "--quiet", "HEAD", "--", "consumerd", "libtrace"]).returncode
    return head + ("+" if dirty else "")


def lost_segments(path, role):
    """Segments of the link of `role` in a clocks.json that began with a
    lost link ("-" when the file is missing)."""
    try:
        links = json.load(open(path))["links"]
    except (OSError, ValueError, KeyError):
        return "-"
    return str(sum(1 for lk in links if lk.get("role") == role
                   for s in lk.get("segments", []) if s.get("start") == "link-lost"))


def one_run(build, mode, work, consumerd):
    prog = os.path.join(build, "tests", "e2e", "strata-test-sync-pingpong")
    cmd = ["/usr/bin/python3", os.path.join(SRC, "tests", "kernel", "check_clock_vm.py"), mode,
           os.path.join(build, "cli", "strata"), consumerd, prog, build,
           work]
    load0 = os.getloadavg()[0]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    load1 = os.getloadavg()[0]
    out = r.stdout
    with open(work + ".log", "w") as f:
        f.write(out + r.stderr)

    def find(pattern, group=1):
        m = re.search(pattern, out)
        return m.group(group) if m else None

    fails = [ln[5:].strip() for ln in out.splitlines() if ln.startswith("FAIL ")]
    check = ("passed" if r.returncode == 0 else "skipped" if r.returncode == 77 else
             "FAILED: " + (fails[0][:120] if fails else "exit %d" % r.returncode))
    inv = find(r"vm1: the guest's map, segment by segment, inverts (\d+) of the (\d+)")
    total = find(r"vm1: the guest's map, segment by segment, inverts (\d+) of the (\d+)", 2)
    guest_map = re.search(r"vm1: the guest's map: min RTT ([0-9.]+) us, bound width at the messages ([0-9.]+) us "
                          r"median", out)
    width = find(r"bound width at the messages ([0-9.]+) us median, [0-9.]+ us max; the program's fastest")
    fastest = find(r"the program's fastest message round trip ([0-9.]+) us")
    ratio = find(r"width / fastest message RTT ([0-9.]+) \(median\)")
    spin = re.search(r"(\d+) of (\d+) answers came while spinning; ([0-9.]+) ms of CPU", out)
    probes = re.search(r"(\d+) of (\d+) probe\(s\) answered", find(r"vm1's status: (.*)") or "")
    spin_s = "-"
    if spin and probes and int(probes.group(2)):
        spin_s = "%s of %s; %.2f ms" % (spin.group(1), spin.group(2), float(spin.group(3)) / int(probes.group(2)))
    lost = "%s / %s" % (lost_segments(os.path.join(work, "vm1", "guest-trace", "clocks.json"), "follower"),
                        lost_segments(os.path.join(work, "host-trace", "clocks.json"), "reference"))
    return [mode + (" (TCP)" if mode.endswith("tcp") else " (virtio-serial)"), "%.2f-%.2f" % (load0, load1), check,
            "%s of %s" % (inv, total) if inv is not None else "-",
            width or (guest_map.group(2) if guest_map else "-"), fastest or "-", ratio or "-",
            guest_map.group(1) if guest_map else "-", lost, spin_s], r.returncode


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build")
    ap.add_argument("mode", choices=["plain", "pause", "kernel", "two", "defaults", "defaults_tcp"])
    ap.add_argument("runs", type=int)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "clocks-vm-runs.md"))
    ap.add_argument("--note", default="")
    ap.add_argument("--consumerd")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    work = os.path.join(build, "bench-clock-vm", a.mode)
    # The guest sees the host's root, but /tmp and /run are its own: only
    # the source and build trees are shared at their host paths there.
    if a.consumerd:
        d = os.path.realpath(a.consumerd)
        if not any(d.startswith(os.path.realpath(t) + os.sep) for t in (SRC, build)) and \
                any(d.startswith(t + os.sep) for t in ("/tmp", "/run")):
            ap.error("--consumerd %s: under /tmp or /run, which the guest does not share (its own tmpfs): "
                     "put it in the source or the build tree" % a.consumerd)
    if not os.path.exists(a.out):
        with open(a.out, "w") as f:
            f.write("# Clock link rows (bench/clock_vm.py)\n\nOne row a run of a VM clock check, written by "
                    "bench/clock_vm.py from the check's output and clocks.json files (its docstring says what "
                    "each column is).\n\n" + HEADER)
    worst = 0
    for _ in range(a.runs):
        consumerd = os.path.abspath(a.consumerd or os.path.join(build, "consumerd", "strata-consumerd"))
        row, rc = one_run(build, a.mode, work, consumerd)
        line = "| " + " | ".join([commit() if not a.consumerd else "other daemon"] + row + [a.note]) + " |\n"
        with open(a.out, "a") as f:
            f.write(line)
        print(line, end="", flush=True)
        worst = max(worst, 0 if rc in (0, 77) else 1)
    return worst


if __name__ == "__main__":
    sys.exit(main())
