#!/usr/bin/python3
"""With STRATA_DIRECT_IO=1 the daemon writes stream files around the page
cache where the file system takes O_DIRECT (docs/consumerd.md, "Writing
around the page cache"); by default, through it.

usage: check_direct_io.py STRATA LOOP WORKDIR   ($STRATA_TEST_CONSUMERD: the daemon)

The alignment is what statx(STATX_DIOALIGN) says of a file in WORKDIR (as
the daemon asks of the trace's metadata); a file system without it (tmpfs
before Linux 6.6) skips the check (77).  `strata record` of LOOP (300
bursts of 1,000 rloop:tick events a millisecond apart, each a sequence
number; 256 KiB sub-buffers: about two dozen packets a lane, a disk write
each), its own daemon, twice:

  - with STRATA_DIRECT_IO=1 in the daemon's environment: every packet of
    every stream file has a packet_size that is a multiple of the
    alignment, a content_size within it and zeros between; the file ends
    aligned and is its packets exactly; at most
    half of the file's pages are in the page cache once record has
    returned (record's loss count reads a header a packet and its first
    MiB; a drain that fell behind writes a batch through the cache);
  - by default (no STRATA_DIRECT_IO): the packets as the writers closed
    them (some not a multiple of the alignment) and nine tenths of the
    pages or more in the page cache: the first run's figure says what the
    page cache holds;

and in both, exactly: 300,000 events recorded, none discarded, their
sequence numbers 0..299,999 in order (babeltrace2), `strata check` says
no damage, babeltrace2 says nothing on stderr.  Then, where /dev/shm is a
file system without an alignment (tmpfs), with STRATA_DIRECT_IO=1 and the
trace there: the daemon says it writes through the page cache, the
packets as the writers closed them, the events exact as above.
"""
import ctypes
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from strata_testlib import TraceScan, bt_clean, e2e_setup, stream_files  # noqa: E402

BURSTS, BURST = 300, 1000
N = BURSTS * BURST
MAGIC = 0xC1FC1FC1


def dio_align(path):
    """statx's STATX_DIOALIGN of path: max(offset, memory) alignment, or 0."""
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(256)
    AT_FDCWD, AT_SYMLINK_NOFOLLOW, STATX_DIOALIGN = -100, 0x100, 0x2000
    if libc.statx(AT_FDCWD, path.encode(), AT_SYMLINK_NOFOLLOW, STATX_DIOALIGN, buf) != 0:
        return 0
    mask, = struct.unpack_from("<I", buf, 0)
    mem, off = struct.unpack_from("<II", buf, 152)  # stx_dio_mem_align, stx_dio_offset_align
    return max(mem, off) if mask & STATX_DIOALIGN and off else 0


def packets(path):
    """(content bytes, packet bytes, padding all zero) of each packet."""
    b = open(path, "rb").read()
    off, out = 0, []
    while off + 88 <= len(b):
        magic, = struct.unpack_from("<I", b, off)
        if magic != MAGIC:
            return out, "no packet magic at offset %d" % off
        content, size = struct.unpack_from("<QQ", b, off + 48)
        if size % 8 or size // 8 < 88 or off + size // 8 > len(b) or content > size:
            return out, "a packet header out of bounds at offset %d" % off
        pad = b[off + (content + 7) // 8:off + size // 8]
        out.append((content // 8, size // 8, pad.count(0) == len(pad)))
        off += size // 8
    return out, None if off == len(b) else "%d bytes past the last packet" % (len(b) - off)


def resident(path):
    """(pages in the page cache, pages) of path (util-linux fincore)."""
    r = subprocess.run(["fincore", "--raw", "--noheadings", "--output", "PAGES", path],
                       capture_output=True, text=True, timeout=60)
    size = os.path.getsize(path)
    return int(r.stdout.split()[0]) if r.returncode == 0 and r.stdout.split() else -1, (size + 4095) // 4096


def record(strata, loop, consumerd, work, name, check, direct):
    out = os.path.join(work, name)
    env = dict(os.environ, STRATA_CONSUMERD=consumerd,
               STRATA_CONSUMERD_SOCKET=os.path.join(work, "no-daemon.sock"))
    env.pop("STRATA_DIRECT_IO", None)
    if direct:
        env["STRATA_DIRECT_IO"] = "1"
    cmd = [strata, "record", "-o", out, "--subbuf-size", "262144", "--subbuf-count", "16", "--",
           loop, str(BURSTS), str(BURST)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    check(r.returncode == 0, "%s: strata record exits 0 (got %d)" % (name, r.returncode), r.stderr)
    check("nothing discarded" in r.stderr, "%s: record says nothing was discarded" % name, r.stderr)
    return out, r.stderr


def check_files(out, name, align, check, direct):
    files = list(stream_files(out))
    check(len(files) >= 1, "%s: stream files (%d)" % (name, len(files)))
    res = pages = 0
    unaligned = []
    for f in files:
        r, p = resident(f)  # before anything of ours reads it
        res, pages = res + r, pages + p
        pk, err = packets(f)
        check(err is None, "%s: %s is whole packets" % (name, os.path.basename(f)), err or "")
        check(all(z for _, _, z in pk), "%s: %s: zeros after every packet's content" %
              (name, os.path.basename(f)))
        unaligned += [s for _, s, _ in pk if s % align]
        if direct:
            check(os.path.getsize(f) % align == 0, "%s: %s ends aligned (%d bytes)" %
                  (name, os.path.basename(f), os.path.getsize(f)))
    if direct:
        check(not unaligned, "%s: every packet a multiple of %d bytes (%d not: %s)" %
              (name, align, len(unaligned), unaligned[:5]))
        check(0 <= res <= pages // 2, "%s: at most half the pages in the page cache (%d of %d)" %
              (name, res, pages))
    else:
        check(unaligned != [], "%s: packets as the writers closed them (%d of them unaligned)" %
              (name, len(unaligned)))
        check(res >= pages * 9 // 10, "%s: the file in the page cache (%d of %d pages)" % (name, res, pages))


def check_events(strata, out, name, check):
    scan = TraceScan(out)
    seqs = []
    for m, _ in scan:
        if m.event.name == "rloop:tick":
            seqs.append(int(m.event.payload_field["i"]))
    check(len(seqs) == N, "%s: exactly %d events recorded (got %d)" % (name, N, len(seqs)))
    check(seqs == list(range(N)), "%s: sequence numbers 0..%d in order" % (name, N - 1))
    check(scan.discarded == 0, "%s: babeltrace2 reports no discarded events (%d)" % (name, scan.discarded))
    check(scan.ordered, "%s: timestamps ordered" % name)
    ok, status, other = bt_clean(out)
    check(ok, "%s: babeltrace2 exits 0 and says nothing (status %d)" % (name, status), other)
    r = subprocess.run([strata, "check", out], capture_output=True, text=True, timeout=120)
    check(r.returncode == 0 and "no damage" in r.stdout, "%s: strata check says no damage" % name,
          r.stdout + r.stderr)


def main():
    strata, loop, work, consumerd, check = e2e_setup()
    probe = os.path.join(work, "probe")
    open(probe, "w").close()
    align = dio_align(probe)
    if align == 0:
        print("skip: the file system of %s takes no O_DIRECT (statx STATX_DIOALIGN)" % work)
        sys.exit(77)
    print("O_DIRECT alignment of %s: %d bytes" % (work, align))
    for name, direct in (("direct", True), ("default", False)):
        out, _ = record(strata, loop, consumerd, work, name, check, direct)
        check_files(out, name, align, check, direct)
        check_events(strata, out, name, check)
    shm = tempfile.mkdtemp(prefix="strata-direct-", dir="/dev/shm") if os.path.isdir("/dev/shm") else None
    if shm:
        try:
            open(os.path.join(shm, "probe"), "w").close()
            if dio_align(os.path.join(shm, "probe")) == 0:
                out, err = record(strata, loop, consumerd, shm, "tmpfs", check, True)
                check("takes no O_DIRECT writes" in err and "written through the page cache" in err,
                      "tmpfs: the daemon says it writes through the page cache", err)
                check_files(out, "tmpfs", align, check, False)
                check_events(strata, out, "tmpfs", check)
            else:
                print("not checked: /dev/shm gives an O_DIRECT alignment")
        finally:
            shutil.rmtree(shm, ignore_errors=True)
    check.finish()


if __name__ == "__main__":
    main()
