#!/usr/bin/python3
"""Every program's --help and its parser are one table (libtrace/options/options.h).

usage: check_cli_help.py STRATA [STRATA_CONSUMERD]

For every command `strata --help` lists, and for strata-consumerd and its
--recover: `PROGRAM CMD --help` exits 0 and starts with "Usage: PROGRAM
CMD"; every option its help shows is accepted by the parser: given an empty
or unwanted value ("--name=" or "-x ''") it is a usage error (exit 2,
"PROGRAM CMD: why"), never "unknown option"; an option that is not in the
help is an "unknown option" (exit 2).  No daemon is needed: a usage error
is told before anything is done (and the socket is one no daemon can bind).
"""
import subprocess
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks, strata_cli  # noqa: E402

ROW = re.compile(r"^  (?:-(\w)(?:, )?)?(?:--([\w-]+))?(\[=)?")


def table(check, run, program, cmd):
    """PROGRAM CMD's help, each option it shows parsed, an unknown one refused."""
    who = " ".join([program] + cmd)
    h = run(*cmd, "--help")
    check(h.returncode == 0 and h.stdout.startswith("Usage: " + who),
          "%s --help exits 0 with its usage" % who)
    options = 0
    for line in h.stdout.splitlines():
        m = ROW.match(line)
        if not m or not (m.group(1) or m.group(2)):
            continue
        options += 1
        arg = ("--%s=" % m.group(2)) if m.group(2) else ("-" + m.group(1))
        args = cmd + ([arg] if m.group(2) else [arg, ""])
        r = run(*args)
        check(r.returncode == 2 and "unknown option" not in r.stderr and r.stderr.startswith(who + ": "),
              "%s: %s shown by --help is parsed (exit %d: %s)"
              % (who, arg, r.returncode, r.stderr.strip().splitlines()[:1]))
    r = run(*cmd, "--no-such-option")
    check(r.returncode == 2 and "unknown option '--no-such-option'" in r.stderr,
          "%s --no-such-option is refused as unknown (%d options in its help)" % (who, options))


def main():
    strata = sys.argv[1]
    env = {"PATH": "/usr/bin:/bin", "STRATA_CONSUMERD_SOCKET": "/nonexistent/strata.sock"}
    run = strata_cli(strata, env, ok=False, timeout=60)
    check = Checks()

    top = run("--help").stdout
    commands = re.findall(r"^  ([a-z-]+) ", top, re.M)
    check(len(commands) >= 16, "strata --help lists the commands (%s)" % commands)
    for cmd in commands:
        table(check, run, "strata", [cmd])
    if len(sys.argv) > 2:
        consumerd = sys.argv[2]

        def run_d(*args):
            return subprocess.run([consumerd] + list(args), env=env, capture_output=True, text=True,
                                  timeout=60)
        table(check, run_d, "strata-consumerd", [])
        table(check, run_d, "strata-consumerd", ["--recover"])
    # The parser's rules (options.h): "--" ends the options, a long name
    # may be shortened, options may follow operands, a value may be joined.
    r = run("view", "--", "--bogus")
    check(r.returncode == 1 and "unknown option" not in r.stderr, "after --, --bogus is an operand (exit %d)" % r.returncode)
    check(run("view", "--hel").returncode == 0, "--hel is --help (an unambiguous prefix)")
    r = run("top", "--s", "x")
    check(r.returncode == 2 and "unknown option '--s'" in r.stderr, "--s is ambiguous (--session, --sort)")
    r = run("view", "/nonexistent", "-n", "x")
    check(r.returncode == 2 and "-n needs a number of events" in r.stderr, "an option after an operand is parsed")
    r = run("view", "-nx")
    check(r.returncode == 2 and "-n needs a number of events" in r.stderr, "-nVALUE is -n VALUE")
    r = run("record", "--json", "true", "--bogus")  # refused after the parse: nothing runs
    check(r.returncode == 2 and "--json goes with --aggregate" in r.stderr,
          "record: what follows CMD is CMD's (%r)" % r.stderr[:200])
    check.finish()


if __name__ == "__main__":
    sys.exit(main())
