#!/usr/bin/env python3
"""Compile-fail tests: every *.cpp in the snippet folder (no hand-kept list) must
NOT compile, and
  - the first line of the compiler's output that reports an error must contain
    the snippet's `// first-error: <text>` (what a user reads first is kiln's
    message, with the fix), with GCC and, where installed, with Clang;
  - GCC's output must contain every `// expect: <text>` line (the diagnostic
    template, which names the offending type);
  - `// compilers: g++` limits a snippet to the compilers named.
A snippet whose only expectation is `// expect: compiles` is a control that
must compile with both. Flags come from the build's compile_commands.json (the
entry of a test source), so the snippets see exactly the include paths and
defines the test suite does.

kiln.hpp is precompiled once per compiler (in a temporary folder, with the
snippets' own flags) and each snippet compiles with it: parsing kiln.hpp was
most of each of the ~66 compiles (80 -> 26 s on two cores). A snippet sees the
same declarations either way: kiln.hpp is self-contained, and no snippet
defines a macro before including it.

usage: run.py BUILD_DIR SNIPPET_DIR
"""
import glob
import re
import shutil
import concurrent.futures
import json
import os
import shlex
import subprocess
import sys
import tempfile

# Output flags of the recorded command that make no sense with -fsyntax-only.
DROP_WITH_ARG = {"-o", "-MQ", "-MF", "-MT"}  # and -include (meson's PCH)
DROP = {"-c", "-MD", "-MMD", "-fdiagnostics-color=always", "-Werror",
        "-fpch-preprocess"}  # meson's precompiled header of the test executable


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
                elif a in DROP_WITH_ARG or a == "-include":
                    skip = True
                elif a in DROP or a == e["file"]:
                    continue
                else:
                    out.append(a)
            return out, e["directory"]
    sys.exit("run.py: no entry for tests/test_static.cpp in compile_commands.json")


def expectations(path, tag):
    with open(path) as f:
        return [line.split(tag, 1)[1].strip()
                for line in f if line.lstrip().startswith(tag)]


def first_error(output):
    for line in output.splitlines():
        if re.search(r"\berror\b", line) and not line.lstrip().startswith("In file"):
            return line
    return ""


def compile_snippet(cmd, cwd, path):
    proc = subprocess.run(
        cmd + ["-fsyntax-only", os.path.abspath(path)],
        cwd=cwd, capture_output=True, text=True, timeout=180)
    return proc.returncode, proc.stdout + proc.stderr


def with_precompiled_kiln(label, cmd, cwd, tmp):
    """cmd with kiln.hpp precompiled by it: GCC finds <header>.gch beside the
    -include'd header, Clang takes -include-pch. None if precompiling fails
    (the snippets then parse kiln.hpp themselves, as before)."""
    header = os.path.join(tmp, f"kiln_{label.replace('+', 'p')}.hpp")
    with open(header, "w") as f:
        f.write("#include <kiln/kiln.hpp>\n")
    out = header + (".gch" if label == "g++" else ".pch")
    proc = subprocess.run(cmd + ["-x", "c++-header", header, "-o", out],
                          cwd=cwd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        print(f"run.py: precompiling kiln.hpp with {label} failed; compiling without:\n"
              + (proc.stdout + proc.stderr)[:2000])
        return None
    if label == "g++":
        return cmd + ["-Winvalid-pch", "-include", header]
    return cmd + ["-include-pch", out]


def check(compilers, cwd, path):
    name = os.path.basename(path)
    expects = expectations(path, "// expect:")
    firsts = expectations(path, "// first-error:")
    # `// compilers: g++`: a check that needs a language feature another
    # compiler here lacks (Clang 14 has no parenthesized aggregate init).
    only = expectations(path, "// compilers:")
    if only:
        allowed = only[0].split()
        compilers = [c for c in compilers if c[0] in allowed]
    if not expects and not firsts:
        return False, f"{name}: has no `// expect:` or `// first-error:` line"
    for label, cmd in compilers:
        rc, output = compile_snippet(cmd, cwd, path)
        if expects == ["compiles"]:
            if rc != 0:
                return False, f"{name}: control failed to compile ({label}):\n{output[:4000]}"
            continue
        if rc == 0:
            return False, f"{name}: compiled ({label}), but it must be rejected"
        line = first_error(output)
        missing_first = [e for e in firsts if e not in line]
        if missing_first:
            return False, (f"{name}: rejected ({label}), but the first error line\n  {line}\n"
                           f"lacks {missing_first}:\n{output[:4000]}")
        missing = [e for e in expects if e not in output] if label == "g++" else []
        if missing:
            return False, (f"{name}: rejected ({label}), but the diagnostic lacks "
                           f"{missing}:\n{output[:4000]}")
    if expects == ["compiles"]:
        return True, f"{name}: compiles, as it should ({', '.join(l for l, _ in compilers)})"
    return True, (f"{name}: rejected with the expected first error "
                  f"({', '.join(l for l, _ in compilers)})")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    cmd, cwd = base_command(sys.argv[1])
    # The recorded command is "[ccache] c++ flags...": keep the flags.
    first_flag = next(i for i, a in enumerate(cmd) if a.startswith("-"))
    flags = cmd[first_flag:] + ["-fdiagnostics-color=never"]
    compilers = [("g++", cmd[:first_flag] + flags)]
    clang = shutil.which("clang++")
    if clang:
        compilers.append(("clang++", [clang] + flags))
    snippets = sorted(glob.glob(os.path.join(sys.argv[2], "*.cpp")))
    if not snippets:
        sys.exit(f"run.py: no snippets in {sys.argv[2]}")
    with tempfile.TemporaryDirectory(prefix="kiln-compile-fail-") as tmp, \
            concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        precompiled = list(pool.map(
            lambda c: (c[0], with_precompiled_kiln(c[0], c[1], cwd, tmp) or c[1]), compilers))
        results = list(pool.map(lambda p: check(precompiled, cwd, p), snippets))
    for ok, message in results:
        print(("PASS " if ok else "FAIL ") + message)
    sys.exit(0 if all(ok for ok, _ in results) else 1)


if __name__ == "__main__":
    main()
