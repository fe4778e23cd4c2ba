#!/usr/bin/env python3
"""test_recover_hostile.py CONSUMERD WORKDIR - kernel.recover_hostile: `strata
recover` (strata-consumerd --recover) on hostile memory images, no VM.

Each case is a crafted file: not ELF, the wrong ELF class, program headers
or segments beyond the end of the file, overlapping segments (read: kdump
has them), no
descriptor, a descriptor with a bad version or checksum, and a good
descriptor whose entries lie (no pages, 2^40 pages, a page list outside the
image or with the wrong checksum, pages outside the image, pages of
garbage).  Every case must end with exit status 1 and the expected message,
never a crash or a hang (the sanitizer builds run this too), and a good
descriptor with only bad entries must report each one."""
import os
import struct
import subprocess
import sys

MAGIC0, MAGIC1 = 0x3143534441525453, 0x9a7c1b05e3d2f468
PAGE = 4096
DESC_SIZE = 120 + 254 * 64
FNV0, FNVP = 0xcbf29ce484222325, 0x100000001b3
failures = []


def fnv(b):
    h = FNV0
    for x in b:
        h = ((h ^ x) * FNVP) & 0xFFFFFFFFFFFFFFFF
    return h


def elf(mem, segs=None, cls=2, phoff=64, phnum=None):
    """An ELF64 core whose PT_LOAD segments are (paddr, offset_in_mem, filesz, memsz)."""
    segs = segs if segs is not None else [(0, 0, len(mem), len(mem))]
    data_off = PAGE
    ph = b"".join(struct.pack("<IIQQQQQQ", 1, 6, data_off + off, pa, pa, fs, ms, 0)
                  for pa, off, fs, ms in segs)
    eh = b"\x7fELF" + bytes([cls, 1, 1]) + bytes(9)
    eh += struct.pack("<HHIQQQIHHHHHH", 4, 62, 1, 0, phoff, 0, 0, 64, 56,
                      len(segs) if phnum is None else phnum, 0, 0, 0)
    head = (eh + ph).ljust(data_off, b"\0")
    return head + mem


def desc(entries, version=1, good_sum=True):
    d = bytearray(DESC_SIZE)
    struct.pack_into("<QQIIIIQQQq16sQ", d, 0, MAGIC0, MAGIC1, version, DESC_SIZE, PAGE, 254, 2, 0,
                     0, 0, bytes(range(16)), 1)
    for i, (kind, n_pages, pfns_phys, pfns_sum) in enumerate(entries):
        struct.pack_into("<IIiIQQQQQQ", d, 120 + 64 * i, kind, 0, 7, 0, n_pages * PAGE & (2**64 - 1),
                         n_pages, pfns_phys, pfns_sum, i + 1, 0)
    s = fnv(bytes(d)) if good_sum else 12345
    struct.pack_into("<Q", d, 40, s)  # checksum, after seq
    return bytes(d)


def run(consumerd, work, name, blob, rc_want, msgs, absent=()):
    path = os.path.join(work, name + ".elf")
    with open(path, "wb") as f:
        f.write(blob)
    out = os.path.join(work, name + ".out")
    try:
        r = subprocess.run([consumerd, "--recover", path, "-o", out], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        failures.append(name)
        print("FAIL %s: hangs" % name)
        return
    ok = (r.returncode == rc_want and all(m in r.stdout for m in msgs)
          and not any(m in r.stdout for m in absent))
    print(("ok   " if ok else "FAIL ") + "%s: exit %d" % (name, r.returncode))
    if not ok:
        print(r.stdout)
        failures.append(name)


def main():
    consumerd, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    mem = bytearray(64 * PAGE)
    run(consumerd, work, "not_elf", b"hello" * 100, 1, ["not an ELF file"])
    run(consumerd, work, "elf32", elf(bytes(mem), cls=1), 1, ["not a 64-bit little-endian ELF core"])
    run(consumerd, work, "phdrs_beyond_end", elf(bytes(mem), phnum=60000), 1, ["program headers beyond"])
    run(consumerd, work, "segment_beyond_end", elf(bytes(mem), segs=[(0, 0, 1 << 40, 1 << 40)]), 1,
        ["out of bounds", "no memory segment"])
    # Overlapping segments (as /proc/vmcore's kernel text): read, not refused.
    run(consumerd, work, "overlap", elf(bytes(mem), segs=[(0, 0, 8 * PAGE, 8 * PAGE), (PAGE, 0, PAGE, PAGE),
                                                          (6 * PAGE, 0, 4 * PAGE, 16 * PAGE)]),
        1, ["no Strata crash descriptor"])
    run(consumerd, work, "no_descriptor", elf(bytes(mem)), 1, ["no Strata crash descriptor"])
    m = bytearray(mem)
    m[PAGE:PAGE + DESC_SIZE] = desc([], version=9)
    run(consumerd, work, "bad_version", elf(bytes(m)), 1, ["not understood", "no Strata crash descriptor"])
    # A good descriptor (at page 1, 4 pages) whose entries all lie.
    pfns_at = 8 * PAGE
    good_list = struct.pack("<4Q", 20, 21, 22, 1 << 60)  # the last page is nowhere
    m[pfns_at:pfns_at + len(good_list)] = good_list
    m[20 * PAGE:23 * PAGE] = bytes((i * 7 + 3) & 0xFF for i in range(3 * PAGE))  # garbage pages
    entries = [
        (2, 0, pfns_at, 0),                      # no pages
        (2, 1 << 40, pfns_at, 0),                # absurd size
        (2, 4, 1 << 50, 0),                      # page list outside the image
        (2, 4, pfns_at, 999),                    # page list checksum wrong
        (1, 4, pfns_at, fnv(good_list)),         # garbage pages, one missing
        (1, 4, (1 << 64) - 16, 0),               # page list address wraps
    ]
    m[PAGE:PAGE + DESC_SIZE] = desc(entries)
    run(consumerd, work, "lying_entries", elf(bytes(m)), 1,
        ["impossible size (0 pages)", "impossible size (1099511627776 pages)", "not in the image",
         "does not match its checksum", "bad magic", "recovered 0 buffers (6 failed)"],
        absent=["being changed"])
    m[PAGE:PAGE + DESC_SIZE] = desc(entries, good_sum=False)
    run(consumerd, work, "bad_checksum", elf(bytes(m)), 1,
        ["was being changed at the crash", "recovered 0 buffers (6 failed)"])
    # Zero-filled tail (p_memsz > p_filesz) and a truncated file.
    run(consumerd, work, "truncated", elf(bytes(m))[:PAGE + 10 * PAGE], 1, ["out of bounds"])
    print("%d failure(s)" % len(failures))
    return 1 if failures else 0


sys.exit(main())
