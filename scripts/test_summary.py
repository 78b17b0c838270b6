"""Prints one closing line for a meson test run: 'tests: N passed, N failed, N skipped'.

Counts meson tests and, for doctest binaries, the test cases they report, so the
line says how much was really exercised.
"""
import json
import re
import sys

passed = failed = skipped = cases = 0
with open(sys.argv[1]) as f:
    for line in f:
        rec = json.loads(line)
        result = rec.get("result")
        if result in ("OK", "EXPECTEDFAIL"):
            passed += 1
        elif result == "SKIP":
            skipped += 1
        else:
            failed += 1
        m = re.search(r"test cases:\s*(\d+)", rec.get("stdout", "") or "")
        if m:
            cases += int(m.group(1))
print(f"({cases} doctest cases inside)")
print(f"tests: {passed} passed, {failed} failed, {skipped} skipped")
