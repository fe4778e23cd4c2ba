#!/usr/bin/python3
"""Every value the CLI takes is checked (issue 31).

usage: check_cli_values.py STRATA LOOP WORKDIR   ($STRATA_TEST_CONSUMERD: the daemon)

Each bad value is refused with exit status 2 (usage) or 1 and a message
naming it, before anything runs: sizes and counts of 0, empty -o and
--filter, patterns with control characters or spaces, an over-long socket
path; an existing non-empty -o directory is refused by `record` unless
--add is given (and then the second recording is added); `strata
--version` and `strata-consumerd --version` print the same version.
A filter naming a field that no event of its pattern has is warned about
by the traced process when the rules arrive.
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import e2e_setup, start_daemon, strata_cli  # noqa: E402


def main():
    strata, loop, work, consumerd, check = e2e_setup()
    sock = os.path.join(work, "d.sock")
    env = dict(os.environ, STRATA_CONSUMERD=consumerd, STRATA_CONSUMERD_SOCKET=sock)
    env.pop("STRATA_EARLY", None)
    daemon = start_daemon(consumerd, sock, env)

    run = strata_cli(strata, env, ok=False, log=True)

    def refused(rc, msg, *args):
        r = run(*args)
        check(r.returncode == rc and msg in r.stderr, "refused (%d, %r): strata %r" % (rc, msg, args))

    out = os.path.join(work, "o")
    refused(2, "bad size '0'", "record", "-o", out, "--subbuf-size", "0", "--", "true")
    refused(2, "bad count '0'", "record", "-o", out, "--subbuf-count", "0", "--", "true")
    refused(2, "bad size '0'", "create", "z", "--subbuf-size", "0")
    refused(2, "bad count '0'", "create", "z", "--subbuf-count", "0")
    refused(2, "-o needs a directory", "record", "-o", "", "--", "true")
    refused(2, "-o needs a directory", "create", "z", "-o", "")
    refused(2, "needs a directory", "snapshot", "z", "-o", "")
    run("create", "v", "-o", os.path.join(work, "v"))
    refused(2, "--filter needs an expression", "enable-event", "v", "*", "--filter", "")
    for pat in ("a\x1b[2J:*", "a b:*", "x\n:*"):
        refused(2, "a pattern is printable ASCII with no space", "record", "-o", out, "-e", pat, "--", "true")
        refused(2, "a pattern is printable ASCII with no space", "enable-event", "v", pat)
    long_sock = "/tmp/" + "s" * 200
    r = run("status", env=dict(env, STRATA_CONSUMERD_SOCKET=long_sock))
    check(r.returncode == 1 and "STRATA_CONSUMERD_SOCKET is 205 bytes long: a socket path is at most 107 bytes"
          in r.stderr, "an over-long socket path is named")

    # An existing non-empty -o.
    r = run("record", "-o", out, "--", loop, "5")
    check(r.returncode == 0, "a first recording into a fresh directory")
    r = run("record", "-o", out, "--", loop, "5")
    check(r.returncode == 1 and ("%s exists and is not empty: a recording there would mix with what it holds; "
                                 "choose another -o, or give --add" % out) in r.stderr,
          "a second recording into it is refused")
    r = run("record", "--add", "-o", out, "--", loop, "5")
    subs = os.listdir(os.path.join(out, "ust", "pid"))
    check(r.returncode == 0 and len(subs) == 2, "with --add it is added (sub-traces %s)" % subs)

    # A filter naming a field no matching event has: the process says so
    # on its stderr when the rules arrive; a filter that binds says nothing.
    def loop_with_filter(session, flt):
        run("create", session, "-o", os.path.join(work, session))
        run("enable-event", session, "rloop:*", "--filter", flt)
        run("start", session)
        r = subprocess.run([loop, "5"], env=env, capture_output=True, text=True, timeout=60)
        run("destroy", session)
        return r
    r = loop_with_filter("fbad", "iii > 3")
    check(r.returncode == 0 and "strata: filter 'iii > 3' of rule 'rloop:*' names a field no matching event "
          "has (or compares it with another type): the rule records nothing\n" in r.stderr,
          "a filter naming a field the event lacks is warned about (%r)" % r.stderr)
    r = loop_with_filter("fstr", 'i == "x"')
    check("strata: filter 'i == \"x\"' of rule 'rloop:*' names a field" in r.stderr,
          "a filter comparing a field with another type is warned about (%r)" % r.stderr)
    r = loop_with_filter("fgood", "i > 3")
    check(r.returncode == 0 and "filter" not in r.stderr, "a filter that binds is not warned about (%r)" % r.stderr)

    v1 = run("--version").stdout.split()
    v2 = subprocess.run([consumerd, "--version"], capture_output=True, text=True).stdout.split()
    check(len(v1) == 2 and len(v2) == 2 and v1[1] == v2[1] and re.fullmatch(r"\d+\.\d+\.\d+", v1[1]),
          "strata --version and strata-consumerd --version print the same version (%s, %s)" % (v1, v2))

    daemon.terminate()
    check(daemon.wait(timeout=60) == 0, "the daemon exits cleanly")
    check.finish()


if __name__ == "__main__":
    main()
