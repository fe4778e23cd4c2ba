#!/usr/bin/python3
"""libstrata-sqlite loads by its bare name after an install, as docs/query.md says.

usage: check_load_bare.py BUILD WORKDIR

The extension's install rule (processor/query's cmake_install.cmake) and the
top-level one that follows every install (the loader's cache, or what to do
instead: CMAKE_INSTALL_LOCAL_ONLY runs it without installing the rest of the
tree) are run as `cmake --install` runs them, then Python's sqlite3 loads
`libstrata-sqlite` by that name and answers as the build tree's library does
on a known trace (the fixture of tests/e2e):

  - another prefix (WORKDIR/prefix): the install names the directory to put
    in LD_LIBRARY_PATH; with it, the bare name loads the installed file;
  - the default prefix, /usr/local, as root: in a private mount namespace
    whose /usr/local and /etc are overlays and the rest of the host read-only
    but the build tree (nothing reaches the host), the
    install refreshes the loader's cache and the bare name loads, with no
    LD_LIBRARY_PATH, in Python and in the sqlite3 shell.  Without root or
    mount namespaces that part is said and left out.
"""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))

PY = "/usr/bin/python3"  # Debian's: built with extension loading
LOAD = """
import sqlite3, sys
db = sqlite3.connect(":memory:")
db.enable_load_extension(True)
db.load_extension(sys.argv[1])
db.execute("SELECT strata_open(?)", (sys.argv[2],))
n = db.execute("SELECT count(*), sum(pid) FROM events").fetchone()
path = [l.split()[-1] for l in open("/proc/self/maps") if "libstrata-sqlite" in l][0]
print(n[0], n[1], path)
"""
failed = []


def check(ok, what):
    print("%s %s" % ("ok  " if ok else "FAIL", what), flush=True)
    if not ok:
        failed.append(what)


def load(name, trace, env):
    r = subprocess.run([PY, "-c", LOAD, name, trace], capture_output=True, text=True, env=env, timeout=60)
    return r.stdout.split() if r.returncode == 0 else r.stderr.strip().splitlines()[-1:]


def install(build, prefix, env=None):
    """The extension's install, then the top level's: the messages."""
    out = ""
    for script in (os.path.join(build, "processor", "query", "cmake_install.cmake"),
                   os.path.join(build, "cmake_install.cmake")):
        r = subprocess.run(["cmake", "-DCMAKE_INSTALL_PREFIX=" + prefix, "-DCMAKE_INSTALL_LOCAL_ONLY=1",
                            "-P", script], capture_output=True, text=True, env=env, timeout=120)
        check(r.returncode == 0, "the install of %s into %s (%s)" % (os.path.relpath(script, build), prefix,
                                                                      r.stderr[-300:]))
        out += r.stdout + r.stderr
    return out


def default_prefix(build, work, trace, want):
    """As root, in a mount namespace with overlays on /usr/local and /etc."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        print("not checked: the default prefix needs root and mount namespaces (unshare)")
        return
    ns = os.path.join(work, "ns")
    os.makedirs(ns)
    # The build tree stays writable (the install's manifest, this check's
    # directory); /usr/local and /etc are overlays; everything else of the
    # host read-only (ldconfig would make a missing soname link anywhere).
    script = """set -e
mount --make-rprivate /
mount --bind "$BUILD" "$BUILD"
for d in usr/local etc; do
  mkdir -p "$NS/$d-up" "$NS/$d-work"
  mount -t overlay overlay -o "lowerdir=/$d,upperdir=$NS/$d-up,workdir=$NS/$d-work" "/$d"
done
mount -o remount,bind,ro /
exec "$@"
"""
    env = dict(os.environ, NS=ns, BUILD=os.path.realpath(build))
    env.pop("LD_LIBRARY_PATH", None)
    probe = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", "true"], capture_output=True, text=True,
                           env=env, timeout=60)
    if probe.returncode != 0:
        print("not checked: no overlay mount in a private namespace here (%s)" % probe.stderr.strip()[-200:])
        return
    # One namespace for the install and the loads: a child of this script.
    child = """
import os, subprocess, sys
sys.path.insert(0, %r)
import check_load_bare as c
out = c.install(%r, "/usr/local")
c.check("ldconfig: the loader's cache refreshed" in out, "the install into /usr/local refreshes the loader's cache")
got = c.load("libstrata-sqlite", %r, dict(os.environ))
c.check(got[:2] == %r and got[2:] == ["/usr/local/lib/libstrata-sqlite.so"],
        "Python loads libstrata-sqlite by its bare name from /usr/local, no LD_LIBRARY_PATH (%%r)" %% got)
if os.path.exists("/usr/bin/sqlite3"):
    r = subprocess.run(["/usr/bin/sqlite3"], input=".load libstrata-sqlite\\nSELECT strata_open('%s');\\n"
                       "SELECT count(*) FROM events;\\n", capture_output=True, text=True, timeout=60)
    c.check(r.returncode == 0 and r.stdout.split()[-1:] == [%r],
            "the sqlite3 shell's .load libstrata-sqlite (%%r)" %% (r.stdout + r.stderr)[-200:])
sys.exit(1 if c.failed else 0)
""" % (HERE, build, trace, want, trace, want[0])
    r = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", PY, "-c", child], capture_output=True, text=True,
                       env=env, timeout=300)
    sys.stdout.write(r.stdout + r.stderr)
    check(r.returncode == 0, "the default prefix's checks (in their namespace)")


def main():
    build, work = sys.argv[1:3]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    trace = os.path.join(work, "trace")
    subprocess.run([PY, os.path.join(HERE, "..", "e2e", "make_fixture_trace.py"),
                    os.path.join(trace, "ust", "pid", "fixture-4242")], check=True, timeout=60)
    built = os.path.join(build, "processor", "query", "libstrata-sqlite.so")
    want = load(built, trace, dict(os.environ))  # the oracle: the build tree's library by its path
    check(len(want) == 3 and want[0] != "0", "the build tree's extension reads the fixture (%r)" % want)
    want = want[:2]

    # Another prefix: the install says what to do, and that works.
    prefix = os.path.join(work, "prefix")
    out = install(build, prefix)
    libdir = os.path.join(prefix, "lib")
    check(os.path.exists(os.path.join(libdir, "libstrata-sqlite.so")), "installed in %s" % libdir)
    check("add %s to LD_LIBRARY_PATH" % libdir in out, "the install names the directory for LD_LIBRARY_PATH")
    got = load("libstrata-sqlite", trace, dict(os.environ, LD_LIBRARY_PATH=libdir))
    check(got[:2] == want and got[2:] == [os.path.join(libdir, "libstrata-sqlite.so")],
          "with LD_LIBRARY_PATH, the bare name loads the installed file and answers as the build's (%r)" % got)
    default_prefix(build, work, trace, want)
    print("%d failure(s)" % len(failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
