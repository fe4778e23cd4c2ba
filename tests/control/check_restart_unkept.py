#!/usr/bin/python3
"""What a restarted daemon does not take up, it names (docs/crash.md,
"The daemon dies", Limits).

Three sessions are active when strata-consumerd is killed with SIGKILL: a
disk session "d", a session "ser" streamed over a serial line (a plain
file here), and a flight recorder "t" with a snapshot trigger.  The next
daemon on the same socket:
  - takes "d" up (active);
  - names "ser" as STOPPED with "not taken up after a daemon restart: it
    streamed to serial line ..." in `strata status`, refuses to start it
    (exit 1, saying why), and destroys it on request;
  - takes "t" up, and `strata status t` says that its trigger was lost;
  - after a second SIGKILL and restart, still names "ser" (until destroyed).
After a clean exit no session state is left.
"""
import os
import signal
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks, control_setup, start_daemon  # noqa: E402


def main():
    a, work, env, strata = control_setup("strata-unkept-")
    check = Checks()
    sock = env["STRATA_CONSUMERD_SOCKET"]

    d = start_daemon(a.consumerd, sock, env)
    strata("create", "d", "-o", os.path.join(work, "d"))
    strata("create", "ser", "--serial", os.path.join(work, "line.bin"))
    strata("create", "t", "-o", os.path.join(work, "t"), "--mode", "overwrite", "--subbuf-size", "4096",
           "--subbuf-count", "4")
    for s in ("d", "ser", "t"):
        strata("enable-event", s, "x:*")
    strata("snapshot", "--on", "x:fatal", "t")
    for s in ("d", "ser", "t"):
        strata("start", s)
    strata("status")  # answered after the state was kept
    d.send_signal(signal.SIGKILL)
    d.wait()
    d = start_daemon(a.consumerd, sock, env)
    st = strata("status").stdout
    check("Session d [active]" in st, "the disk session is taken up (active)")
    check("Session ser [stopped]" in st and
          "not taken up after a daemon restart: it streamed to serial line" in st,
          "the serial session is named, stopped, with why: %s" %
          [ln.strip() for ln in st.splitlines() if "ser" in ln or "taken up" in ln][:3])
    r = strata("start", "ser", ok=False)
    check(r.returncode == 1 and "not taken up after a daemon restart" in r.stderr + r.stdout,
          "starting it is refused with the reason (exit %d: %s)" % (r.returncode, (r.stderr + r.stdout).strip()))
    st = strata("status", "t").stdout
    check("Session t [active]" in st and "its snapshot trigger on x:fatal (strata snapshot --on" in st,
          "the trigger session is taken up, and its lost trigger is named: %s" %
          [ln.strip() for ln in st.splitlines() if "trigger" in ln][:2])
    # Named again by a daemon that follows (until destroyed).
    d.send_signal(signal.SIGKILL)
    d.wait()
    d = start_daemon(a.consumerd, sock, env)
    st = strata("status").stdout
    check("Session ser [stopped]" in st and "Session d [active]" in st,
          "after a second restart, still named (and the disk session still taken up)")
    strata("destroy", "ser")
    check("Session ser" not in strata("status").stdout, "the named session is destroyed on request")
    for s in ("d", "t"):
        strata("stop", s)
        strata("destroy", s)
    d.send_signal(signal.SIGTERM)
    d.wait(timeout=60)
    left = os.listdir(sock + ".state") if os.path.isdir(sock + ".state") else []
    check(not left, "a clean exit leaves no session state (%s)" % left)
    check.finish()


if __name__ == "__main__":
    main()
