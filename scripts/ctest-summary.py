#!/usr/bin/python3
"""ctest-summary.py JUNIT_XML: one ctest run's totals, skips with their reasons.

scripts/test.sh runs ctest with --output-junit and reads this script's last
line, "PASSED FAILED SKIPPED".  A skipped test (its SKIP_RETURN_CODE) is
listed with the reason it printed (its last line of output); a skip that
printed nothing is counted as failed: a test that cannot run says why.
A failed test is listed with the lines of its output that say why (its
checks' "FAIL" lines, a sanitizer's report heads, gtest's failures, the last
lines otherwise), so that the end of a long log names the cause.
Other lines go to standard output as they are, for the log.
"""
import sys
import xml.etree.ElementTree as ET


def reason(case):
    out = case.findtext("system-out") or ""
    lines = [l.strip() for l in out.splitlines() if l.strip()]
    return lines[-1] if lines else ""


def why_failed(case, most=16):
    out = case.findtext("system-out") or ""
    lines = [l.rstrip() for l in out.splitlines() if l.strip()]
    keys = ("FAIL", "ERROR", "Error", "error:", "WARNING: ThreadSanitizer", "ERROR: AddressSanitizer",
            "SUMMARY:", "runtime error", "Traceback", "Timeout", "timed out")
    # gtest's progress lines name tests ("[ RUN      ] X.WaitTimeout..."),
    # which would match the keys without saying anything; a gtest failure
    # ("file.cpp:123: Failure") is said by the lines after it.
    said, follow = [], 0
    for l in lines:
        progress = l.lstrip().startswith(("[ RUN", "[       OK", "[  SKIPPED"))
        if l.endswith(": Failure"):
            said.append(l)
            follow = 4
        elif follow and not progress:
            said.append(l)
            follow -= 1
        elif not progress and any(k in l for k in keys):
            said.append(l)
            follow = 0
        else:
            follow = 0
    return (said or lines[-5:])[:most]


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        root = ET.parse(argv[1]).getroot()
    except (OSError, ET.ParseError) as e:
        print("ctest-summary: %s: %s" % (argv[1], e), file=sys.stderr)
        return 1
    passed = failed = skipped = 0
    for case in root.iter("testcase"):
        name, status = case.get("name"), case.get("status")
        if status == "run":
            passed += 1
        elif status == "notrun" and case.find("skipped") is not None:
            why = reason(case)
            if why:
                skipped += 1
                print("skipped: %s: %s" % (name, why))
            else:
                failed += 1
                print("FAILED: %s: skipped without saying why (a skipping test prints its reason)" % name)
        elif status == "disabled":
            continue
        else:
            failed += 1
            print("FAILED: %s (%s)" % (name, status))
            for line in why_failed(case):
                print("    " + line[:300])
    print("%d %d %d" % (passed, failed, skipped))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
