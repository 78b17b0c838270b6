#!/usr/bin/env python3
"""Prints the names of the failed tests in a meson testlog.json whose failure is
LeakSanitizer's own crash at exit ("Tracer caught signal", "LeakSanitizer has
encountered a fatal error") after the test itself passed (doctest's "Status:
SUCCESS!"), one per line, and exits 0; exits 1 if any failed test failed
otherwise (a test failure, a leak report, a timeout), or none failed.

Under load the tracer that LeakSanitizer starts to stop every thread at exit has
crashed in the sanitized Vulkan suites (processes with lavapipe threads), once per
sanitized run in two runs of 2026-11-28 and never in 20 quiet reruns;
scripts/test --sanitize reruns such suites once (docs/RELIABILITY.md).

usage: lsan_flakes.py TESTLOG_JSON
"""
import json
import sys


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    flaky, other = [], []
    with open(sys.argv[1]) as f:
        for line in f:
            t = json.loads(line)
            if t["result"] in ("OK", "SKIP", "EXPECTEDFAIL"):
                continue
            out, err = t.get("stdout") or "", t.get("stderr") or ""
            text = out + err
            tracer = ("LeakSanitizer has encountered a fatal error" in text and
                      "Tracer caught signal" in text)
            passed = "[doctest] Status: SUCCESS!" in text
            leaks = "detected memory leaks" in text
            (flaky if tracer and passed and not leaks else other).append(
                t["name"].split(" / ")[-1])
    if other or not flaky:
        return 1
    print("\n".join(flaky))
    return 0


if __name__ == "__main__":
    sys.exit(main())
