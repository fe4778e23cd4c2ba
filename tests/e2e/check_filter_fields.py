#!/usr/bin/python3
"""A filter naming a field the matching events lack (issue 31): refused at
enable time when the daemon knows the events, else named by `strata status`.

usage: check_filter_fields.py STRATA SVC WORKDIR   ($STRATA_TEST_CONSUMERD: the daemon)

SVC is strata-svc (tp-async; svc:request has integer fields id and
latency_us).  With a fresh daemon, nothing known:
  - session c: `+ svc:* --filter 'wiat_ns > 1'` is accepted (no event known),
    then `+ svc:request` unfiltered; once svc runs and its buffer reached c,
    `status c` names the filtered rule, the process and svc:request's fields;
  - session d: only `+ svc:* --filter 'wiat_ns > 1'`; svc records nothing in
    d (no buffer, so no fields known), and `status d` says svc:request was
    declared and recorded by none;
then, svc:request known from c's buffer, in a new session e:
  - `--filter 'wiat_ns > 100'` on svc:* and `'id == "x"'` on svc:request are
    refused (exit 1, the fields named, the session's rules unchanged);
  - `'latency_us > 100'` is accepted, and `'nosuch > 1'` on `other:*`
    (no event known matches: nothing to check against).
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import e2e_setup, private_daemon, strata_cli, wait_for  # noqa: E402

FIELDS = "svc:request has id (integer), latency_us (integer)"


def main():
    strata, svc, work, consumerd, check = e2e_setup()
    env, daemon = private_daemon(work, consumerd)

    run = strata_cli(strata, env, ok=False, timeout=60, log=True)

    def ok(*args):
        r = run(*args)
        check(r.returncode == 0, "strata %r exits 0" % (args,))
        return r

    for s in ("c", "d"):
        ok("create", s, "-o", os.path.join(work, s))
        ok("enable-event", s, "svc:*", "--filter", "wiat_ns > 1")
    ok("enable-event", "c", "svc:request")
    ok("start", "c")
    ok("start", "d")
    p = subprocess.Popen([svc, "--interval-us", "200"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    try:
        # The drain shares the events it read from svc's descriptors at its
        # next round: status says it from then on.
        line = ("filter 'wiat_ns > 1' of rule 'svc:*' names a field none of the matching events has in 1 process(es), "
                "first strata-svc (pid %d; %s): the rule records nothing there" % (p.pid, FIELDS))
        wait_for(lambda: line in run("status", "c").stdout, "status c to name the filtered rule", 60)
        check("recorded: 1 buffer" in run("status", "c").stdout,
              "status c names the filtered rule, the process and the event's fields (svc's one buffer)")
        line = ("filter 'wiat_ns > 1' of rule 'svc:*': 1 matching event(s) declared by the session's processes "
                "(svc:request) were recorded by none")
        wait_for(lambda: line in run("status", "d").stdout, "status d to name the declared event", 60)
        check("recorded: 0 buffer(s)" in run("status", "d").stdout,
              "status d says svc:request was declared and recorded by none (no buffer)")

        ok("create", "e", "-o", os.path.join(work, "e"))
        for pat, flt in (("svc:*", "wiat_ns > 100"), ("svc:request", 'id == "x"')):
            r = run("enable-event", "e", pat, "--filter", flt)
            check(r.returncode == 1 and ("filter '%s' names a field that none of the 1 event(s) matching '%s'" % (flt, pat))
                  in r.stderr and FIELDS in r.stderr and "nothing changed" in r.stderr,
                  "enable-event e %s --filter %r refused, svc:request's fields named" % (pat, flt))
        check("rules:    (none: nothing is recorded)" in run("status", "e").stdout,
              "the refused rules are not in session e")
        ok("enable-event", "e", "svc:request", "--filter", "latency_us > 100")
        ok("enable-event", "e", "other:*", "--filter", "nosuch > 1")
    finally:
        p.terminate()
        p.wait(timeout=30)
    check("names a field no matching event has" in p.stderr.read(), "svc warned on its stderr too")
    for s in ("c", "d", "e"):
        ok("destroy", s)
    daemon.terminate()
    daemon.wait(timeout=30)
    check.finish()


if __name__ == "__main__":
    main()
