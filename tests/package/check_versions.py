#!/usr/bin/python3
"""One version everywhere: CHANGELOG.md's newest release, debian/changelog's
top entry (what dpkg-buildpackage names the .debs by), project(VERSION) in
CMakeLists.txt (--version, the man pages, the CMake package) and the DKMS
PACKAGE_VERSION in kmod/dkms.conf.  debian/changelog is kept by hand: a
release adds its entry there with the one in CHANGELOG.md, and this test
fails until they agree.

usage: check_versions.py SOURCE_DIR
"""
import os
import re
import sys


def first(path, pattern):
    with open(path) as f:
        m = re.search(pattern, f.read(), re.M)
    return m.group(1) if m else None


def main():
    src = sys.argv[1]
    found = {
        "CHANGELOG.md": first(os.path.join(src, "CHANGELOG.md"), r"^## (\d+\.\d+\.\d+) \("),
        "debian/changelog": first(os.path.join(src, "debian", "changelog"), r"^strata \(([^)]+)\) "),
        "CMakeLists.txt": first(os.path.join(src, "CMakeLists.txt"), r"^project\(Strata VERSION (\S+)"),
        "kmod/dkms.conf": first(os.path.join(src, "kmod", "dkms.conf"), r'^PACKAGE_VERSION="([^"]+)"'),
    }
    for where, v in found.items():
        print("%-18s %s" % (where, v))
    if None in found.values() or len(set(found.values())) != 1:
        print("FAIL the versions differ (or one is missing): a release updates all four")
        return 1
    print("ok   one version: %s" % found["CHANGELOG.md"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
