#!/usr/bin/python3
"""No program or shared library under DIR... has an empty entry in its
RUNPATH or RPATH.  The dynamic loader reads an empty entry (a leading,
trailing or doubled ':') as the current directory, and searches it before
the system's: a program run where someone else can write files (/tmp)
loads their libc.so.6.  CMake pads a build tree's RUNPATH with ':' when it
is to edit it at install time (strata_install_elf, top-level CMakeLists.txt).

usage: check_runpath.py DIR...   (exit 1 and one line a file when any has one)
Files in CMakeFiles/ (objects), files that are not ELF programs or shared
libraries, and files that cannot be read whole are skipped.
"""
import os
import struct
import sys

ET_EXEC, ET_DYN = 2, 3
SHT_DYNAMIC = 6
DT_NULL, DT_RPATH, DT_RUNPATH = 0, 15, 29


def search_paths(path):
    """{'RPATH'|'RUNPATH': value} of an ELF64 little-endian program or
    shared library; None when `path` is not one."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)  # the rest only of an ELF file (the tests' traces are large)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return None
            data = head + f.read()
    except OSError:
        return None
    if struct.unpack_from("<H", data, 16)[0] not in (ET_EXEC, ET_DYN):
        return None
    shoff, = struct.unpack_from("<Q", data, 40)
    shentsize, shnum = struct.unpack_from("<HH", data, 58)
    if shentsize != 64 or shoff + shnum * 64 > len(data):
        return None
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * 64) for i in range(shnum)]
    found = {}
    for _, stype, _, _, off, size, link, _, _, entsize in sections:
        if stype != SHT_DYNAMIC or link >= shnum or entsize != 16 or off + size > len(data):
            continue
        stroff, strsize = sections[link][4], sections[link][5]
        for i in range(size // 16):
            tag, val = struct.unpack_from("<qQ", data, off + i * 16)
            if tag == DT_NULL:
                break
            if tag in (DT_RPATH, DT_RUNPATH) and val < strsize:
                end = data.find(b"\0", stroff + val, stroff + strsize)
                value = data[stroff + val:end if end >= 0 else stroff + strsize]
                found["RPATH" if tag == DT_RPATH else "RUNPATH"] = value.decode("utf-8", "replace")
    return found


def main(dirs):
    checked, bad = 0, []
    for top in dirs:
        for root, subdirs, files in os.walk(top):
            subdirs[:] = [d for d in subdirs if d != "CMakeFiles"]
            for name in files:
                path = os.path.join(root, name)
                if os.path.islink(path) or not os.path.isfile(path):
                    continue
                paths = search_paths(path)
                if paths is None:
                    continue
                checked += 1
                for kind, value in sorted(paths.items()):
                    if "" in value.split(":"):
                        bad.append("%s: %s '%s' has an empty entry (the current directory)" % (path, kind, value))
    for line in bad:
        print("FAIL " + line)
    if bad:
        print("(an installed target is installed with strata_install_elf, top-level CMakeLists.txt)")
    print("%d ELF programs and shared libraries checked, %d with an empty search path entry" % (checked, len(bad)))
    if not checked:
        print("FAIL nothing to check under %s" % " ".join(dirs))
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1:]))
