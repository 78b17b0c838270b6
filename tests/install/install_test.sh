#!/usr/bin/env bash
# Installs kiln into a scratch DESTDIR and builds tests/install/consumer.cpp against
# it with pkg-config, as an embedding application would. Also checks that the
# umbrella header stays light: <kiln/kiln.hpp> must not pull in xtensor. Then builds
# examples/embed out of tree against the same install with pkg-config (by hand and
# as a meson project) and with CMake's find_package(kiln), and runs each
# (run_embed.sh checks the results).
# usage: install_test.sh <build dir> <source dir> <c++ compiler> [extra flags]
set -euo pipefail
build=$(cd "$1" && pwd); src=$(cd "$2" && pwd); cxx=$3
read -r -a extra <<<"${4:-}"
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

meson install -C "$build" --no-rebuild --quiet --destdir "$tmp/root" >/dev/null
pc=$(find "$tmp/root" -name kiln.pc | head -n1)
[ -n "$pc" ] || { echo "FAIL: kiln.pc was not installed"; exit 1; }
# kiln.pc is relocatable (prefix from ${pcfiledir}): used where it was
# installed, under the DESTDIR, with no edits.
grep -q '^prefix=${pcfiledir}' "$pc" || { echo "FAIL: kiln.pc is not relocatable:"; cat "$pc"; exit 1; }
prefix=$(pkg-config --variable=prefix "$pc")
prefix=${prefix#"$tmp/root"}
export PKG_CONFIG_PATH="$(dirname "$pc")"

header=$(find "$tmp/root" -path '*include/kiln/kiln.hpp' | head -n1)
[ -n "$header" ] || { echo "FAIL: kiln/kiln.hpp was not installed"; exit 1; }

# shellcheck disable=SC2046
"$cxx" -std=c++20 ${extra[@]+"${extra[@]}"} "$src/tests/install/consumer.cpp" -o "$tmp/consumer" \
  $(pkg-config --cflags --libs kiln)
libdir=$(pkg-config --variable=libdir kiln)
LD_LIBRARY_PATH="$libdir" "$tmp/consumer" | grep -qx 12 ||
  { echo "FAIL: consumer printed the wrong value"; exit 1; }

# shellcheck disable=SC2046
deps=$("$cxx" -std=c++20 -M $(pkg-config --cflags kiln) "$src/tests/install/consumer.cpp")
if grep -q xtensor <<<"$deps"; then
  echo "FAIL: <kiln/kiln.hpp> pulls in xtensor:"; grep -o '[^ ]*xtensor[^ ]*' <<<"$deps" | head
  exit 1
fi
echo "installed kiln builds and runs through pkg-config; kiln.hpp is xtensor-free"

# examples/embed needs kiln's Vulkan backend: a -Dvulkan=disabled build
# (KILN_TEST_NO_VULKAN=1, set by tests/meson.build) checks the consumer only.
if [ "${KILN_TEST_NO_VULKAN:-}" != 1 ]; then
  # examples/embed through pkg-config (it talks to Vulkan itself: vulkan.pc too).
  # shellcheck disable=SC2046
  "$cxx" -std=c++20 ${extra[@]+"${extra[@]}"} "$src/examples/embed/main.cpp" \
    -o "$tmp/embed-pkg-config" $(pkg-config --cflags --libs kiln vulkan)
  "$here/run_embed.sh" pkg-config "$tmp/embed-pkg-config" "$libdir"

  # examples/embed as its own meson project, finding kiln.pc (PKG_CONFIG_PATH above).
  if ! CXX=$cxx meson setup "$tmp/meson" "$src/examples/embed" \
         -Dcpp_args="${extra[*]+${extra[*]}}" -Dcpp_link_args="${extra[*]+${extra[*]}}" \
         >"$tmp/meson.log" 2>&1 ||
     ! ninja -C "$tmp/meson" >>"$tmp/meson.log" 2>&1; then
    echo "FAIL: examples/embed does not build with meson and kiln.pc"; cat "$tmp/meson.log"; exit 1
  fi
  grep -q "Run-time dependency kiln found: YES" "$tmp/meson.log" ||
    { echo "FAIL: meson did not find the installed kiln.pc"; cat "$tmp/meson.log"; exit 1; }
  "$here/run_embed.sh" "meson (kiln.pc)" "$tmp/meson/embed" "$libdir"

  # examples/embed through CMake: find_package(kiln) must find the package in the
  # staging tree, whose prefix is not the one kiln was configured with (relocatable).
  config=$(find "$tmp/root" -name kilnConfig.cmake | head -n1)
  [ -n "$config" ] || { echo "FAIL: kilnConfig.cmake was not installed"; exit 1; }
  if ! cmake -S "$src/examples/embed" -B "$tmp/cmake" -G Ninja \
         -DCMAKE_PREFIX_PATH="$tmp/root$prefix" -DCMAKE_CXX_COMPILER="$cxx" \
         -DCMAKE_CXX_FLAGS="${extra[*]+${extra[*]}}" >"$tmp/cmake.log" 2>&1 ||
     ! cmake --build "$tmp/cmake" >>"$tmp/cmake.log" 2>&1; then
    echo "FAIL: examples/embed does not build with CMake"; cat "$tmp/cmake.log"; exit 1
  fi
  found=$(sed -n 's/^kiln_DIR:PATH=//p' "$tmp/cmake/CMakeCache.txt")
  [ "$found" = "$(dirname "$config")" ] ||
    { echo "FAIL: CMake used the kiln package in '$found', not $(dirname "$config")"; exit 1; }
  "$here/run_embed.sh" cmake "$tmp/cmake/embed" "$libdir"
fi

# kiln-dist (built when Gloo is there): its own library and kiln-dist.pc;
# its installed headers do not include Gloo's.
dist_pc=$(find "$tmp/root" -name kiln-dist.pc | head -n1)
if [ -n "$dist_pc" ]; then
  # shellcheck disable=SC2046
  "$cxx" -std=c++20 ${extra[@]+"${extra[@]}"} "$src/tests/install/dist_consumer.cpp" \
    -o "$tmp/dist_consumer" $(pkg-config --cflags --libs kiln-dist)
  LD_LIBRARY_PATH="$libdir" "$tmp/dist_consumer" | grep -qx ok ||
    { echo "FAIL: the kiln-dist consumer failed"; exit 1; }
  # shellcheck disable=SC2046
  deps=$("$cxx" -std=c++20 -M $(pkg-config --cflags kiln-dist) "$src/tests/install/dist_consumer.cpp")
  if grep -q 'gloo/' <<<"$deps"; then
    echo "FAIL: <kiln/dist/dist.hpp> pulls in Gloo's headers"; exit 1
  fi
  echo "installed kiln-dist builds, runs two ranks and keeps Gloo out of its headers"
fi
