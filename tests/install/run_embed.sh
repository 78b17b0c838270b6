#!/usr/bin/env bash
# Runs one build of examples/embed and checks what it computed, on every path it
# has: the application's own Vulkan device (where the machine has one, then again
# under KILN_VALIDATION=1, where any validation message fails), and the CPU
# fallback of a machine without a Vulkan driver (no ICD files for the loader).
# usage: run_embed.sh <how it was built> <embed binary> [library dir]
set -euo pipefail
how=$1; bin=$2
[ -n "${3:-}" ] && export LD_LIBRARY_PATH="$3${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
unset KILN_DEVICE KILN_VALIDATION
expected="loss 29 grad -44 -62"
out=$(mktemp); err=$(mktemp); trap 'rm -f "$out" "$err"' EXIT

# run <label> <env...>: the binary must exit 0 and print the expected result.
run() {
  local label=$1; shift
  if ! env "$@" "$bin" >"$out" 2>"$err"; then
    echo "FAIL ($how, $label): embed exited non-zero"; cat "$out" "$err"; exit 1
  fi
  grep -qx "$expected" "$out" ||
    { echo "FAIL ($how, $label): expected '$expected'"; cat "$out" "$err"; exit 1; }
}

run "default"
if grep -q "application's Vulkan device" "$out"; then
  run "KILN_VALIDATION=1" KILN_VALIDATION=1
  # The application reports each message as "embed: validation: ..." (and exits 1);
  # kiln's own as "[vulkan] ... validation". Not a bare "validation": under ASan
  # the leak report lists the suppressed libVkLayer_khronos_validation.so.
  if grep -qE "embed: validation|Validation Error|VUID-" "$err"; then
    echo "FAIL ($how, KILN_VALIDATION=1): validation messages"; cat "$err"; exit 1
  fi
  echo "$how: $(head -n1 "$out"): ok, also under KILN_VALIDATION=1"
else
  echo "$how: no Vulkan device on this machine: $(head -n1 "$out")"
fi

run "no Vulkan driver" VK_ICD_FILENAMES=/nonexistent.json VK_DRIVER_FILES=/nonexistent.json
grep -q "no Vulkan compute device: kiln runs on the cpu" "$out" ||
  { echo "FAIL ($how): without a Vulkan driver embed did not fall back to the cpu"; cat "$out"; exit 1; }
echo "$how: cpu fallback without a Vulkan driver: ok"
