#!/usr/bin/env python3
"""Compile-fail tests: each snippet must NOT compile, and the compiler's output must
contain every `// expect: <text>` line of the snippet (a snippet whose only
expectation is `compiles` is a control that must compile). Flags come from the
build's compile_commands.json (the entry of a test source), so the snippets see
exactly the include paths and defines the test suite does.

usage: run.py BUILD_DIR SNIPPET.cpp...
"""
import concurrent.futures
import json
import os
import shlex
import subprocess
import sys

# Output flags of the recorded command that make no sense with -fsyntax-only.
DROP_WITH_ARG = {"-o", "-MQ", "-MF", "-MT"}
DROP = {"-c", "-MD", "-MMD", "-fdiagnostics-color=always", "-Werror"}


def base_command(build_dir):
    with open(os.path.join(build_dir, "compile_commands.json")) as f:
        entries = json.load(f)
    for e in entries:
        if e["file"].replace("\\", "/").endswith("tests/test_static.cpp"):
            args = e.get("arguments") or shlex.split(e["command"])
            out, skip = [], False
            for a in args:
                if skip:
                    skip = False
                elif a in DROP_WITH_ARG:
                    skip = True
                elif a in DROP or a == e["file"]:
                    continue
                else:
                    out.append(a)
            return out, e["directory"]
    sys.exit("run.py: no entry for tests/test_static.cpp in compile_commands.json")


def expectations(path):
    with open(path) as f:
        return [line.split("// expect:", 1)[1].strip()
                for line in f if line.lstrip().startswith("// expect:")]


def check(cmd, cwd, path):
    name = os.path.basename(path)
    expects = expectations(path)
    if not expects:
        return False, f"{name}: has no `// expect:` line"
    proc = subprocess.run(
        cmd + ["-fsyntax-only", "-fdiagnostics-color=never", os.path.abspath(path)],
        cwd=cwd, capture_output=True, text=True, timeout=120)
    output = proc.stdout + proc.stderr
    if expects == ["compiles"]:
        if proc.returncode == 0:
            return True, f"{name}: compiles, as it should"
        return False, f"{name}: control failed to compile:\n{output[:4000]}"
    if proc.returncode == 0:
        return False, f"{name}: compiled, but it must be rejected"
    missing = [e for e in expects if e not in output]
    if missing:
        return False, (f"{name}: rejected, but the diagnostic lacks "
                       f"{missing}:\n{output[:4000]}")
    return True, f"{name}: rejected with the expected diagnostic"


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    cmd, cwd = base_command(sys.argv[1])
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda p: check(cmd, cwd, p), sys.argv[2:]))
    for ok, message in results:
        print(("PASS " if ok else "FAIL ") + message)
    sys.exit(0 if all(ok for ok, _ in results) else 1)


if __name__ == "__main__":
    main()
