#!/usr/bin/env python3
"""Fails the build when a layer of libkiln uses a symbol that only a layer it may
not use defines (a call, a vtable, a variable against the layers' direction).

    check_layers.py --out STAMP --layer NAME:USES ARCHIVE... [--layer ...]

USES is the comma-separated list of layers NAME may use (meson.build's
`layer_uses`); each layer's archives follow it. kiln's own symbols only (those
whose mangled name names namespace kiln): the final link finds the rest. Writes
STAMP when every layer keeps to its direction.
"""
import subprocess
import sys


def symbols(archives, undefined):
    args = ["nm", "--format=posix", "-u" if undefined else "--defined-only", *archives]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    found = set()
    for line in out.splitlines():
        parts = line.split()
        # "name type [value size]"; member headers ("lib.a[obj.o]:") end in ':'
        if len(parts) < 2 or parts[0].endswith(":"):
            continue
        name, kind = parts[0], parts[1]
        if "4kiln" not in name:
            continue
        if undefined or kind not in ("U", "w", "v"):
            found.add(name)
    return found


def main(argv):
    out = None
    layers = {}  # name -> (uses, archives)
    current = None
    i = 0
    while i < len(argv):
        if argv[i] == "--out":
            out = argv[i + 1]
            i += 2
        elif argv[i] == "--layer":
            name, _, uses = argv[i + 1].partition(":")
            current = name
            layers[name] = ([u for u in uses.split(",") if u], [])
            i += 2
        else:
            layers[current][1].append(argv[i])
            i += 1
    defined = {name: symbols(a, False) for name, (_, a) in layers.items()}
    problems = []
    for name, (uses, archives) in layers.items():
        allowed = set(defined[name])
        for u in uses:
            allowed |= defined.get(u, set())
        for sym in sorted(symbols(archives, True) - allowed):
            owners = [other for other in layers if other != name and sym in defined[other]]
            if owners:
                problems.append((name, sym, owners))
    if problems:
        names = subprocess.run(["c++filt"], input="\n".join(p[1] for p in problems),
                               check=True, capture_output=True, text=True).stdout.splitlines()
        print("check_layers: these layers use symbols of layers they may not use "
              "(meson.build, layer_uses):", file=sys.stderr)
        for (name, _, owners), readable in zip(problems, names):
            print(f"  {name} uses {readable} (defined in {', '.join(owners)})", file=sys.stderr)
        return 1
    with open(out, "w") as f:
        f.write("every layer uses only the layers below it\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
