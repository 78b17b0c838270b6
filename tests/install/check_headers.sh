#!/usr/bin/env bash
# Every installed kiln header against the installed tree alone: each kiln
# header it includes is installed too, and it compiles on its own (its first
# include), with no other kiln header before it. Installs into a scratch
# DESTDIR first (a test of its own, beside the other suites: ~60 CPU-s).
# usage: check_headers.sh <build dir> <c++ compiler> [flags...]
set -euo pipefail
build=$(cd "$1" && pwd); cxx=$2; shift 2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
meson install -C "$build" --no-rebuild --quiet --destdir "$tmp/root" >/dev/null
header=$(find "$tmp/root" -path '*include/kiln/kiln.hpp' | head -n1)
[ -n "$header" ] || { echo "FAIL: kiln/kiln.hpp was not installed"; exit 1; }
cd "$(dirname "$(dirname "$header")")"
status=0
while IFS= read -r h; do
  while IFS= read -r dep; do
    [ -f "$dep" ] || { echo "FAIL: $h includes $dep, which is not installed"; status=1; }
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]\(kiln\/[^>"]*\)[>"].*/\1/p' "$h")
done < <(find kiln -name '*.hpp' | sort)
[ "$status" -eq 0 ] || exit 1
# One compile per header, as many at once as there are cores.
find kiln -name '*.hpp' | sort |
  xargs -P "$(nproc)" -I{} sh -c \
    'h=$1; shift; printf "#include <%s>\n" "$h" | "$0" -std=c++20 -fsyntax-only -I. "$@" -x c++ - 2>&1 |
       head -n 20 | sed "s|^|$h: |"' "$cxx" {} "$@" >"$tmp/errors" || true
if [ -s "$tmp/errors" ]; then
  echo "FAIL: installed headers that do not compile on their own:"
  cat "$tmp/errors"; exit 1
fi
echo "every installed header includes only installed headers and compiles on its own" \
     "($(find kiln -name '*.hpp' | wc -l) headers)"
