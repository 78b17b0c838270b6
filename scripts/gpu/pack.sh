#!/usr/bin/env bash
# (Copies are stripped of debug info only: kiln names callables from the symbol
# table, so a full strip changes the jit suite's expected messages.)
# Bundles kiln's already-built Vulkan test binaries (from build/, never rebuilt
# here), the shared libraries they need beyond glibc/libstdc++/libgcc_s, the
# Vulkan loader and the Khronos validation layer into .gpu/bundle.tar.gz, for
# the device machine (another OS image, no Debian packages). .gpu/ is in .gitignore, so it travels only when `run` names it in `carry`.
# Rerun after a rebuild:  bash scripts/gpu/pack.sh
# On the device (the device tool, docs/BACKENDS.md "Testing on a real GPU"):
#   run(command="bash scripts/gpu/device_run.sh", carry=[".gpu"], timeout_s=520)
set -euo pipefail
src="$(cd "$(dirname "$0")" && pwd)"   # scripts/gpu: devinfo.c
root="$(cd "$src/../.." && pwd)"
here="$root/.gpu"                      # git-ignored; travels when `run` carries it
mkdir -p "$here"
build="${BUILD:-$root/build}"
rm -rf "$here/bin" "$here/lib" "$here/layers"  # unpacked copies (device_run.sh) must not travel
stage="$(mktemp -d /tmp/kiln-gpu-stage.XXXXXX)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/layers"

# test_kiln holds most suites; tests/test_suites.txt (written by tests/meson.build)
# gives each suite's doctest filter, which device_run.sh reads.
tests=(test_kiln test_fusion)
bins=()
for t in "${tests[@]}"; do
  if [ -x "$build/tests/$t" ]; then bins+=("$build/tests/$t"); else echo "pack: MISSING $build/tests/$t" >&2; fi
done
for b in bench_vulkan ops_bench gpu_steps; do
  if [ -x "$build/bench/$b" ]; then bins+=("$build/bench/$b"); else echo "pack: no $b" >&2; fi
done
for b in "${bins[@]}"; do strip --strip-debug -o "$stage/bin/$(basename "$b")" "$b"; done
cp "$build/tests/test_suites.txt" "$stage/bin/"

# libkiln: the real file stripped, with its soname links.
real="$(readlink -f "$build/libkiln.so.0")"
strip --strip-debug -o "$stage/lib/$(basename "$real")" "$real"
ln -s "$(basename "$real")" "$stage/lib/libkiln.so.0"
ln -s libkiln.so.0 "$stage/lib/libkiln.so"

# Everything else ldd resolves, except glibc, libstdc++ and libgcc_s (the
# device's own are newer) and libkiln (done above). Copied under the soname.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libresolv\.so|libstdc\+\+\.so|libgcc_s\.so|libkiln\.so)'
for b in "${bins[@]}" "$build/libkiln.so.0"; do
  ldd "$b" | awk '/=> \//{print $1, $3}'
done | sort -u | while read -r soname path; do
  if [[ "$soname" =~ $skip ]]; then continue; fi
  [ -e "$stage/lib/$soname" ] || cp -L "$path" "$stage/lib/$soname"
done

# Khronos validation layer (Debian vulkan-validationlayers), json pointing next to itself.
layer_so=/usr/lib/x86_64-linux-gnu/libVkLayer_khronos_validation.so
layer_json=/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json
cp -L "$layer_so" "$stage/layers/"
sed 's#"library_path": *"[^"]*"#"library_path": "./libVkLayer_khronos_validation.so"#' \
  "$layer_json" > "$stage/layers/VkLayer_khronos_validation.json"
grep -q '"library_path": "./libVkLayer_khronos_validation.so"' "$stage/layers/VkLayer_khronos_validation.json"

# A small Vulkan device report (no vulkaninfo on the device image).
gcc -O2 -o "$stage/bin/devinfo" "$src/devinfo.c" -lvulkan
strip "$stage/bin/devinfo"

# Check: nothing left unresolved with only the bundle's lib on the path.
for b in "$stage"/bin/*; do
  if LD_LIBRARY_PATH="$stage/lib" ldd "$b" | grep -q 'not found'; then
    echo "pack: unresolved libraries for $b" >&2; LD_LIBRARY_PATH="$stage/lib" ldd "$b" | grep 'not found' >&2; exit 1
  fi
done

( cd "$stage" && find . -type f -o -type l | sort | xargs ls -la ) > "$here/MANIFEST.txt"
# Debian's glvnd + loader packages the device's libGLX_nvidia needs (device README).
if ! ls "$here"/gl/*.deb >/dev/null 2>&1; then
  mkdir -p "$here/gl" /tmp/amd64/partial
  o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
  apt-get $o update >/dev/null
  (cd "$here/gl" && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
fi
rm -f "$here/bundle.tar.gz"
tar -C "$stage" -cf - . | gzip -9 > "$here/bundle.tar.gz"
echo "pack: unpacked $(du -sh "$stage" | cut -f1), $here/bundle.tar.gz $(du -h "$here/bundle.tar.gz" | cut -f1)"
echo "pack: .gpu total $(du -sh --exclude=bin --exclude=lib --exclude=layers "$here" | cut -f1)"
