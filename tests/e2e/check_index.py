#!/usr/bin/env python3
"""check_index.py STRATA CONSUMERD DEMO WORK: the packet index the consumer
writes (index/<stream>.idx, LTTng's CTF index 1.1; docs/reading.md, "The
packet index") and what the readers make of it.

Oracles:
  - every stream file has an index whose header is LTTng's 1.1 (magic
    0xC1F1DCC1) with Strata's 80-byte entries and whose entries are, in
    order, the packets of the file as this script reads their headers
    (offset, sizes, timestamps, discarded, stream id, instance, sequence
    number, then lane and thread), adding up to the file's size;
  - babeltrace2 builds its packet index from these files (its log says so,
    and warns of none) and prints exactly what it prints with index/ removed;
  - a copy whose stream file is emptied, cut inside its first packet, cut
    at a packet boundary or removed: strata check exits 1 with the exact line naming the packets
    and bytes missing (computed here from the index), and view, analyze,
    export and query each print that damage line; the clean copy of the
    one cut at a boundary makes babeltrace2 report exactly the packets
    missing;
  - a copy whose index is removed, corrupted, torn or short of the file's
    last packet: check exits 1 naming
    the index, and view prints every event of the trace (the index is not
    used); a copy without index/ at all: check exits 0, "no damage";
  - readers that take the packets from a valid index (no header read at
    open) check each header when they read its packet: a header scribbled
    under an intact index is not read by a window that excludes its packet
    (view --since exits 0, nothing named), and is named with its packet
    skipped by a whole view (which prints every other event, as check's
    clean copy holds them); an entry whose
    thread disagrees with its header names the index, the header's thread
    used (view prints every event as before);
  - a stream file torn by a half packet appended, then repaired by
    strata-consumerd --repair: its index again adds up to the file, and
    check exits 0.
"""
import os
import re
import shutil
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from strata_testlib import Checks  # noqa: E402

check = Checks()


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, timeout=120, env=dict(os.environ, TZ="UTC"))
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def read_index(path):
    """The header, the entries (LTTng's nine fields, then Strata's lane and
    thread) and the bytes past the last whole entry."""
    b = open(path, "rb").read()
    hdr = struct.unpack(">4I", b[:16])
    n = hdr[3]
    entries = [struct.unpack(">9QIi", b[i:i + 80]) for i in range(16, len(b) - n + 1, n)]
    return hdr, entries, (len(b) - 16) % n


def packets(path):
    """(offset, packet_size, content_size, ts_begin, ts_end, discarded,
    stream_id, instance, seq, lane, vtid) of each packet, from its header."""
    b = open(path, "rb").read()
    out, off = [], 0
    while off + 88 <= len(b):
        magic, = struct.unpack_from("<I", b, off)
        sid, inst, tb, te, content, size, seq, disc, lane, vtid = struct.unpack_from("<IQQQQQQQIi", b, off + 20)
        if magic != 0xC1FC1FC1 or size == 0:
            break
        out.append((off, size, content, tb, te, disc, sid, inst, seq, lane, vtid))
        off += size // 8
    return out


def missing_line(stream, entries, size, how):
    n = len(entries)
    first = next(i for i, e in enumerate(entries) if e[0] + e[1] // 8 > size)
    gone = entries[first:]
    end = entries[-1][0] + entries[-1][1] // 8
    seqs = ("sequence number %d" % gone[0][8] if len(gone) == 1 else
            "sequence numbers %d to %d" % (gone[0][8], gone[-1][8]))
    return "%s: %d packet%s its index (index/%s.idx) names %s missing (%s, from byte %d; %d bytes%s)" % (
        how, n - first, "" if n - first == 1 else "s", os.path.basename(stream), "is" if n - first == 1 else "are",
        seqs, gone[0][0], end - size, " past the file's end" if size else "")


def readers_name(strata, d, text, name):
    for cmd in (["view"], ["analyze", "mutex"], ["export", "-o", d + ".perfetto-trace"],
                ["query", d, "SELECT count(*) FROM events"]):
        argv = [strata] + cmd + ([] if cmd[0] == "query" else [d])
        rc, _, err = run(argv)
        check(rc in (0, 1) and text in err, "%s: strata %s prints the damage line (exit %r)" % (name, cmd[0], rc),
              err[-600:])


def main():
    strata, consumerd, demo, work = sys.argv[1:5]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    orig = os.path.join(work, "orig")
    r = subprocess.run([strata, "record", "-o", orig, "--subbuf-size", "16384", "--subbuf-count", "64", "--",
                        demo, "--threads", "2", "--events", "3000"], capture_output=True, timeout=300)
    if not check(r.returncode == 0, "the trace is recorded", r.stderr.decode(errors="replace")):
        check.finish()
    sub = [dp for dp, _, fs in os.walk(orig) if "metadata" in fs][0]
    streams = sorted(os.path.join(sub, f) for f in os.listdir(sub) if f.startswith("channel"))
    check(len(streams) >= 2, "the sub-trace has streams (%d)" % len(streams))

    # The index, entry by entry, against the file's headers.
    idx = {}
    for s in streams:
        ip = os.path.join(sub, "index", os.path.basename(s) + ".idx")
        if not check(os.path.isfile(ip), "%s has an index" % os.path.basename(s)):
            continue
        hdr, entries, rest = read_index(ip)
        idx[s] = entries
        check(hdr == (0xC1F1DCC1, 1, 1, 80) and rest == 0, "%s: LTTng's index header, whole entries (%r)" %
              (os.path.basename(ip), hdr))
        check(entries == packets(s), "%s: one entry per packet, each its header's values" % os.path.basename(ip))
        end = entries[-1][0] + entries[-1][1] // 8 if entries else 0
        check(end == os.path.getsize(s), "%s: the entries add up to the file (%d of %d bytes)" %
              (os.path.basename(ip), end, os.path.getsize(s)))

    # babeltrace2 uses it, and reads what it reads without it.
    b = subprocess.run(["babeltrace2", "--log-level=I", orig], capture_output=True, timeout=120)
    log = b.stderr.decode(errors="replace")
    check(b.returncode == 0 and log.count("Building index from .idx file") == len(streams) and
          "Invalid" not in log, "babeltrace2 builds its packet index from every .idx, with no warning", log[-800:])
    bare = os.path.join(work, "bare")
    shutil.copytree(orig, bare)
    shutil.rmtree(os.path.join(bare, os.path.relpath(sub, orig), "index"))
    b2 = subprocess.run(["babeltrace2", bare], capture_output=True, timeout=120)
    b1 = subprocess.run(["babeltrace2", orig], capture_output=True, timeout=120)
    check(b1.returncode == 0 and b1.stdout == b2.stdout and b1.stdout.count(b"\n") == 6001,
          "babeltrace2 prints the same 6001 events with and without the index")
    rc, out, _ = run([strata, "check", bare])
    check(rc == 0 and out.endswith("no damage\n"), "no index/ (an older trace): nothing to compare, no damage")
    rc, want, _ = run([strata, "view", orig])
    check(rc == 0 and want.count("\n") == 6001, "strata view prints the 6001 events")

    big = max(streams, key=os.path.getsize)
    entries = idx.get(big, [])
    check(len(entries) >= 3, "the largest stream has 3 packets or more (%d)" % len(entries))

    def copy(name):
        d = os.path.join(work, name)
        shutil.copytree(orig, d)
        return d, os.path.join(d, os.path.relpath(big, orig))

    # --since as the reader's window: from just past the big stream's second
    # packet, view prints exactly the whole view's lines from there on; that
    # packet's records, damaged in a copy, lie outside the window and are not
    # read (nothing named, exit 0), where the whole view names them.
    meta = open(os.path.join(sub, "metadata")).read()
    clock = meta[meta.index("clock {"):]
    base = (int(re.search(r"offset_s = (-?\d+);", clock).group(1)) * 10**9 +
            int(re.search(r"\boffset = (\d+);", clock).group(1)))
    since = (base + entries[2][3] + 1) % (86400 * 10**9)  # past packet 1's end: ns of the (UTC) day

    def tod(line):
        h, m, sec = line[1:19].split(":")
        return (int(h) * 3600 + int(m) * 60) * 10**9 + int(sec.replace(".", ""))

    arg = "%02d:%02d:%02d.%09d" % (since // 3600 // 10**9, since // 60 // 10**9 % 60, since // 10**9 % 60,
                                   since % 10**9)
    tail = "".join(line + "\n" for line in want.splitlines() if tod(line) >= since)
    d, s = copy("window")
    with open(s, "r+b") as f:  # packet 1's first record: an event id no class has
        f.seek(entries[1][0] + 88)
        f.write(b"\xff" * 8)
    rc, got, err = run([strata, "view", d])
    check(rc == 1 and "damaged: %s at byte" % s in err, "window: the whole view names the damaged packet", err[-500:])
    rc, got, err = run([strata, "view", "--since", arg, d])
    check(rc == 0 and got == tail and tail and err == "",
          "window: view --since %s prints the %d events from there, the damage outside not read (exit %d)" %
          (arg, tail.count("\n"), rc), err[-500:])

    # Stream files emptied, cut inside the first packet, removed.
    for name, how in (("emptied", "emptied after recording"), ("cut", "cut at byte %d after recording"),
                      ("gone", "the stream file is gone")):
        d, s = copy(name)
        size = 0
        if name == "cut":
            size = entries[0][1] // 8 // 2
            how = how % size
            os.truncate(s, size)
        elif name == "emptied":
            os.truncate(s, 0)
        else:
            os.unlink(s)
        line = "missing: %s: %s" % (s, missing_line(s, entries, size, how))
        rc, out, _ = run([strata, "check", d])
        check(rc == 1 and line + "\n" in out, "%s: strata check exits 1 and names the missing packets" % name,
              "want %r\ngot %r" % (line, out))
        readers_name(strata, d, missing_line(s, entries, size, how), name)

    # Cut at a packet boundary: the clean copy marks exactly the packets
    # missing, as babeltrace2 reports them.
    d, s = copy("boundary")
    size = entries[2][0]
    os.truncate(s, size)
    line = "missing: %s: %s" % (s, missing_line(s, entries, size, "cut at byte %d after recording" % size))
    rc, out, _ = run([strata, "check", "--clean-copy", d + ".clean", d])
    check(rc == 1 and line + "\n" in out, "boundary: strata check names the packets after the cut", out)
    b = subprocess.run(["babeltrace2", d + ".clean"], capture_output=True, timeout=120)
    check(b.returncode == 0 and (b"discarded %d packets" % (len(entries) - 2)) in b.stderr,
          "boundary: babeltrace2 reports the %d packets missing in the clean copy" % (len(entries) - 2),
          b.stderr.decode(errors="replace")[-500:])

    # The index itself removed, corrupted, torn: named, not used.
    for name, harm, why in (("noidx", "rm", "missing or unreadable"), ("badidx", "magic", "bad magic; not used"),
                            ("tornidx", "tear", "not a whole number of 80-byte entries (torn)"),
                            ("lagidx", "lag", "left behind its file")):
        d, s = copy(name)
        ip = os.path.join(os.path.dirname(s), "index", os.path.basename(s) + ".idx")
        if harm == "rm":
            os.unlink(ip)
        elif harm == "magic":
            with open(ip, "r+b") as f:
                f.write(b"XXXX")
        elif harm == "tear":
            os.truncate(ip, os.path.getsize(ip) - 30)
        else:  # its last entry gone: the index names fewer bytes than the file holds
            os.truncate(ip, os.path.getsize(ip) - 80)
        rc, out, _ = run([strata, "check", d])
        check(rc == 1 and ("index: %s: packet index: " % ip) in out and why in out,
              "%s: strata check exits 1 and names the index (%s)" % (name, why), out)
        rc, got, err = run([strata, "view", d])
        check(got == want and "packet index: " in err, "%s: strata view prints every event and names the index" %
              name, err[-500:])

    # The packets taken from the index, each header checked as its packet
    # is read: a header scribbled under an intact index (packet 1's magic)
    # is named and the packet skipped; view prints every other event, as
    # check (which walks every header) puts them in its clean copy.
    d, s = copy("hdrbad")
    with open(s, "r+b") as f:
        f.seek(entries[1][0])
        f.write(b"XXXX")
    rc, got, err = run([strata, "view", d])
    line = ("damaged: %s at byte %d (%d bytes skipped): bad magic "
            "(a header its packet index placed; the packet skipped)" % (s, entries[1][0], entries[1][1] // 8))
    check(rc == 1 and line in err, "hdrbad: view names the scribbled header in place", err[-500:])
    # No header is read at open: with the window past packet 1, its
    # scribbled header is never read (exit 0, nothing named).
    rc, got_w, err_w = run([strata, "view", "--since", arg, d])
    check(rc == 0 and got_w == tail and err_w == "",
          "hdrbad: view --since %s reads no header outside the window (exit %d)" % (arg, rc), err_w[-500:])
    rc, _, _ = run([strata, "check", "--clean-copy", d + ".clean", d])
    b = subprocess.run(["babeltrace2", d + ".clean"], capture_output=True, timeout=120)
    kept = sum(1 for x in got.splitlines() if "discarded" not in x)
    check(rc == 1 and b.returncode == 0 and b.stdout.count(b"\n") == kept and 0 < kept < 6001,
          "hdrbad: view prints the %d events check's clean copy holds" % kept, got[-300:])

    # An entry whose thread is not its header's: the index named, the
    # header's thread used, every event printed as before.
    d, s = copy("tididx")
    ip = os.path.join(os.path.dirname(s), "index", os.path.basename(s) + ".idx")
    with open(ip, "r+b") as f:
        f.seek(16 + 80 + 76)  # entry 1's vtid
        f.write(struct.pack(">i", 999999))
    rc, got, err = run([strata, "view", d])
    named = "%s at byte 0: packet index: the entry of the packet at byte %d" % (ip, entries[1][0])
    check(rc == 1 and got == want and named in err, "tididx: view names the index and prints every event as before",
          err[-500:])

    # A torn stream file repaired: its index follows the packets kept.
    d, s = copy("repaired")
    with open(s, "ab") as f:
        f.write(open(s, "rb").read(entries[0][1] // 8 // 2))
    rc, out, _ = run([strata, "check", d])
    check(rc == 1 and "packet index" not in out, "torn: strata check exits 1, naming the torn packet only", out)
    r = subprocess.run([consumerd, "--repair", d], capture_output=True, timeout=60)
    _, after, rest = read_index(os.path.join(os.path.dirname(s), "index", os.path.basename(s) + ".idx"))
    check(r.returncode == 0 and after == packets(s) and rest == 0 and
          after[-1][0] + after[-1][1] // 8 == os.path.getsize(s),
          "repaired: the index is the kept packets' (%d entries)" % len(after), r.stderr.decode(errors="replace"))
    rc, out, _ = run([strata, "check", d])
    check(rc == 0 and out.endswith("no damage\n"), "repaired: strata check finds no damage", out)
    check.finish()


if __name__ == "__main__":
    sys.exit(main())
