#!/usr/bin/python3
"""KVM's facts about a guest's TSC checked against the clock link's map
(docs/clocks.md, "Under KVM"), on one machine.

usage: check_clock_kvm.py STRATA PINGPONG WORKDIR

These machines have no hardware virtualisation: the host's debugfs is a
tree the test writes (STRATA_TEST_KVM_ROOT), standing for
/sys/kernel/debug/kvm/<qemu pid>-<fd>/vcpuN/.  Two daemons stand for a
host and a guest (check_clock_link.py's skew: 2.7 s ahead, 80 ppm fast,
applied to the guest's clock page over the same TSC), so the true KVM
facts are offset 0 and ratio 1.0; the host runs
`--sync-guest guest=listen:tcp:...,kvm=PID`.

Oracles: with the true facts `strata status` says KVM agrees with the map;
a bad kvm=PID is refused at start with a reason; a tree naming no VM of
that pid is said (unread, why); the offset changed in the tree (a TSC
write the exchanges never saw) starts a new segment whose note names
KVM's change, and the facts then disagree with the map, in `strata
status` and in clocks.json (checked, agrees false, the error's words),
and the daemon logs it; vCPUs with different offsets are said (no one
TSC).  Exit 77 (skipped) where the TSC cannot back a page.
"""
import json
import os
import socket
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from strata_testlib import end_daemon, e2e_setup, poll, start_daemon, clock_link_env, wait_for  # noqa: E402
from check_clock_link import SKEW_NS, SKEW_PPM, run_pair, status_of  # noqa: E402

PID = 4242
RATIO_ONE = 1 << 48


def write_tree(root, offsets):
    """A debugfs kvm folder for qemu process PID, one vcpuN per offset."""
    vm = os.path.join(root, "%d-17" % PID)
    for n, off in enumerate(offsets):
        d = os.path.join(vm, "vcpu%d" % n)
        os.makedirs(d, exist_ok=True)
        for name, value in (("tsc-offset", off), ("tsc-scaling-ratio", RATIO_ONE),
                            ("tsc-scaling-ratio-frac-bits", 48)):
            tmp = os.path.join(d, name + ".tmp")
            with open(tmp, "w") as f:
                f.write("%d\n" % value)
            os.rename(tmp, os.path.join(d, name))


def link_line(strata, env):
    st = status_of(strata, env, "S")
    line = [ln.strip() for ln in st.splitlines() if "clock link guest " in ln]
    return line[0] if line else st.strip()[-400:]


def main():
    strata, prog, work, consumerd, check = e2e_setup()
    root = os.path.join(work, "kvm")
    base = clock_link_env(STRATA_TEST_KVM_ROOT=root)

    # A kvm=PID that is no pid: refused at start, with the reason.
    r = subprocess.run([consumerd, "--socket", os.path.join(work, "bad.sock"), "--sync-guest",
                        "guest=listen:tcp:127.0.0.1:1,kvm=qemu"], env=base, capture_output=True, text=True,
                       timeout=30)
    check(r.returncode != 0 and "kvm=PID" in r.stderr, "a bad kvm=PID is refused: %s" % r.stderr.strip()[-200:])

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    envs, outs = {}, {}
    for who in ("host", "guest"):
        envs[who] = dict(base, STRATA_CONSUMERD=consumerd,
                         STRATA_CONSUMERD_SOCKET=os.path.join(work, who + ".sock"),
                         STRATA_TEST_HOSTNAME="sim-" + who)
        outs[who] = os.path.join(work, who + "-trace")
    envs["guest"]["STRATA_TEST_CLOCK_SKEW"] = "%d,%d" % (SKEW_NS, SKEW_PPM)
    host_log = open(os.path.join(work, "host-daemon.log"), "w+")
    dh = start_daemon(consumerd, envs["host"]["STRATA_CONSUMERD_SOCKET"], envs["host"],
                      ["--sync-period", "20", "--sync-guest", "guest=listen:tcp:127.0.0.1:%d,kvm=%d" % (port, PID)],
                      stderr=host_log)
    dg = start_daemon(consumerd, envs["guest"]["STRATA_CONSUMERD_SOCKET"], envs["guest"],
                      ["--sync-period", "20", "--sync", "host=tcp:127.0.0.1:%d" % port])
    for who in ("host", "guest"):
        for cmd in (["create", "S", "-o", outs[who]], ["enable-event", "S", "syncpp:*"], ["start", "S"]):
            r = subprocess.run([strata] + cmd, env=envs[who], capture_output=True, text=True, timeout=30)
            check(r.returncode == 0, "%s: strata %s" % (who, cmd[0]) + ("" if r.returncode == 0 else ": " + r.stderr))

    # No VM of that pid under the tree yet: said, with why.
    wait_for(lambda: "bound width" in link_line(strata, envs["host"]), "the link to have a bound", 30)
    poll(lambda: "no VM of process %d" % PID in link_line(strata, envs["host"]), 10)
    line = link_line(strata, envs["host"])
    check("no VM of process %d" % PID in line, "a tree without the VM is said: " + line[line.find("KVM"):])

    # The true facts: offset 0, ratio 1.0 on both vCPUs.
    write_tree(root, [0, 0])
    run_pair(check, prog, 300, envs["guest"], envs["host"], os.path.join(work, "app.sock"), 0)
    ok = poll(lambda: "agrees with the map" in link_line(strata, envs["host"]), 15)
    line = link_line(strata, envs["host"])
    check(ok, "the true facts agree with the map: " + line[line.find("KVM"):])

    # The offset written as a TSC write would (5e9 cycles), unseen by the
    # exchanges: a new segment, and a disagreement once it has a bound.
    write_tree(root, [5000000000, 5000000000])
    ok = poll(lambda: "DISAGREES" in link_line(strata, envs["host"]), 20)
    line = link_line(strata, envs["host"])
    check(ok and "1 change(s)" in line, "a changed offset the exchanges do not show is an error: " +
          line[line.find("KVM"):])

    # vCPUs with two offsets: no one guest TSC, said.
    write_tree(root, [5000000000, 7000000000])
    ok = poll(lambda: "no one TSC" in link_line(strata, envs["host"]), 10)
    line = link_line(strata, envs["host"])
    check(ok, "vCPUs that disagree are said: " + line[line.find("KVM"):])
    write_tree(root, [5000000000, 5000000000])
    check(poll(lambda: "no one TSC" not in link_line(strata, envs["host"]), 10), "one TSC again")

    for who in ("guest", "host"):
        r = subprocess.run([strata, "stop", "S"], env=envs[who], capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, who + ": strata stop")
    end_daemon(dg, check)
    end_daemon(dh, check)
    host_log.seek(0)
    log = host_log.read()
    check("KVM's TSC offset of the guest changed from 0 to 5000000000" in log and "DISAGREES" in log,
          "the daemon logged the change and the disagreement")

    j = json.load(open(os.path.join(outs["host"], "clocks.json")))
    lk = [x for x in j["links"] if x["name"] == "guest"]
    if not check(len(lk) == 1 and "kvm" in lk[0], "clocks.json has the link's KVM facts"):
        check.finish()
    kvm = lk[0]["kvm"]
    check(kvm.get("read") is True and kvm.get("tsc_offset") == 5000000000 and kvm.get("changes") == 1,
          "clocks.json: the facts read, the offset and one change (%s)" % kvm)
    check(kvm.get("checked") is True and kvm.get("agrees") is False and "beyond" in kvm.get("error", ""),
          "clocks.json: checked, disagreeing, with the error's words")
    notes = [s.get("note", "") for s in lk[0]["segments"] if s["start"] == "fault"]
    check(any("KVM's TSC offset" in n for n in notes), "the new segment's note names KVM's change (%s)" %
          [s["start"] for s in lk[0]["segments"]])
    check.finish()


if __name__ == "__main__":
    main()
