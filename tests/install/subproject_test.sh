#!/usr/bin/env bash
# Builds examples/embed as an application's own meson project with kiln as a meson
# subproject (subprojects/kiln links to this source tree; --force-fallback-for=kiln,
# so an installed kiln.pc cannot stand in for it) and runs it (run_embed.sh checks
# the results). The subproject builds libkiln only (its tests, benchmarks and
# examples are off), without optimisation or debug info (buildtype=plain) and in
# groups of files (unity_library: the plain build of the suites compiles every file
# on its own, so this adds no include check), the cheapest build of it (228 s one
# file at a time on two cores here, 2026-11-27; docs/RELIABILITY.md has the unity
# figure), so its meson test timeout (tests/meson.build) leaves room for a loaded
# machine.
# usage: subproject_test.sh <source dir> <c++ compiler>
set -euo pipefail
src=$(cd "$1" && pwd); cxx=$2
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

mkdir -p "$tmp/app/subprojects"
cp "$src/examples/embed/meson.build" "$src/examples/embed/main.cpp" "$tmp/app/"
ln -s "$src" "$tmp/app/subprojects/kiln"
start=$SECONDS
if ! CXX=$cxx meson setup "$tmp/build" "$tmp/app" --force-fallback-for=kiln \
       --buildtype=plain -Dkiln:unity_library=true >"$tmp/build.log" 2>&1 ||
   ! ninja -C "$tmp/build" embed >>"$tmp/build.log" 2>&1; then
  echo "FAIL: examples/embed does not build with kiln as a meson subproject"
  tail -n 60 "$tmp/build.log"; exit 1
fi
grep -q "Executing subproject kiln" "$tmp/build.log" ||
  { echo "FAIL: meson did not build kiln as a subproject"; cat "$tmp/build.log"; exit 1; }
echo "meson subproject: kiln and embed built in $((SECONDS - start)) s"
"$here/run_embed.sh" "meson subproject" "$tmp/build/embed"
