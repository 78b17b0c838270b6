#!/usr/bin/env bash
# Runs on the device machine (repo root = cwd of `run`): unpacks .gpu/bundle.tar.gz,
# prints the GPU/Vulkan setup, then in this order (issue 40), each step inside
# what is left of DEADLINE seconds (default 460, for a `run` with timeout_s=520):
#  1. kiln's Vulkan suites with the Khronos validation layer on (CI's
#     vulkan_env), one pass, at most SUITE_BUDGET seconds (default 150) in all;
#  2. the GPU table: build/bench/gpu_steps and ops_bench (kiln, Vulkan) beside
#     bench/peers/gpu_peers.py --impl torch and --impl jax (CUDA), one process
#     each, joined by bench/run_gpu.py into table.md (rewritten after each step);
#  3. the kernel profile of kiln's transformer and CNN steps (KILN_VK_PROFILE);
#  4. with FULL=1, CI's other Vulkan variants and bench_vulkan while time is left.
# SKIP_SUITES="fusion ops" leaves suites out; SKIP_JAX=1 runs the PyTorch peer only; JAX_ARGS adds to JAX's arguments
# (e.g. --cases mlp,cnn,transformer,embedding_grad,sort).
# A quick re-measure of kiln alone: SUITE_BUDGET=0 SKIP_PEERS=1
# STEPS_CASES="transformer cnn mlp" PROFILE_CASES=transformer.
# Files back in $OUT: summary.txt (streamed), table.md, profile.txt, logs.tgz
# (every log and raw JSON line). Local dry run on lavapipe (no GPU):
#   SKIP_GL=1 STEPS_ARGS=--small PEERS_ARGS="--platform cpu --small" OUT=/tmp/o \
#     bash scripts/gpu/device_run.sh
set -u
cd "$(dirname "$0")/../.."
root=$PWD
G=$root/.gpu
OUT=${OUT:-/tmp/kiln-out}
mkdir -p "$OUT"
L=/tmp/kiln-logs
rm -rf "$L" /tmp/kc && mkdir -p "$L" /tmp/kc
DEADLINE=${DEADLINE:-460}
SUITE_BUDGET=${SUITE_BUDGET:-150}
S=$OUT/summary.txt
say() { echo "$*" | tee -a "$S"; }
left() { echo $((DEADLINE - SECONDS)); }
pack_logs() { tar -C "$L" -czf "$OUT/logs.tgz.tmp" . && mv "$OUT/logs.tgz.tmp" "$OUT/logs.tgz"; }

tar -xzf "$G/bundle.tar.gz" -C "$G" || { say "unpack failed"; exit 1; }
# The image's libGLX_nvidia (the Vulkan ICD) needs glvnd: Debian's glvnd/loader
# packages (.gpu/gl, from pack.sh), unpacked into / as the device README says.
[ -n "${SKIP_GL:-}" ] || { for f in "$G"/gl/*.deb; do dpkg -x "$f" /; done; ldconfig; }
export LD_LIBRARY_PATH=$G/lib VK_LAYER_PATH=$G/layers
ICD=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
{
  echo "== uname: $(uname -a)"
  echo "== nvidia-smi -L"; nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  if [ -f "$ICD" ]; then echo "== ICD $ICD"; cat "$ICD"; else
    echo "== MISSING $ICD; candidates:"; find / -xdev -name 'nvidia_icd*.json' 2>/dev/null; fi
  echo "== ldconfig libvulkan/libGLX_nvidia"; ldconfig -p | grep -E 'libvulkan|libGLX_nvidia|libnvidia-gpucomp' | head
  echo "== ldd libGLX_nvidia (missing only)"; ldd /usr/local/nvidia/lib64/libGLX_nvidia.so.0 2>&1 | grep -E 'not found|GLdispatch'
  echo "== nvidia lib64 vulkan-ish"; ls /usr/local/nvidia/lib64 2>&1 | grep -Ei 'glcore|gpucomp|spirv|glvk|GLX|vulkan|EGL' | tr '\n' ' '; echo
  echo "== bundle ldd check"; for b in "$G"/bin/*; do ldd "$b" | grep 'not found' | sed "s#^#$b: #"; done
} > "$L/00_env.log" 2>&1
[ -f "$ICD" ] && export VK_DRIVER_FILES=$ICD
{
  if command -v vulkaninfo >/dev/null; then echo "== vulkaninfo --summary"; timeout 30 vulkaninfo --summary; else echo "== vulkaninfo: not installed"; fi
  echo "== devinfo (bundled loader + VK_DRIVER_FILES=${VK_DRIVER_FILES:-unset})"
  timeout 30 "$G/bin/devinfo"
} >> "$L/00_env.log" 2>&1
if ! grep -q 'deviceName=' "$L/00_env.log"; then
  echo "== devinfo with VK_LOADER_DEBUG" >> "$L/00_env.log"
  VK_LOADER_DEBUG=error,warn,driver timeout 30 "$G/bin/devinfo" >> "$L/00_env.log" 2>&1
fi
if ! grep -q 'deviceName=' "$L/00_env.log"; then
  echo "== devinfo, system loader only (no bundle LD_LIBRARY_PATH)" >> "$L/00_env.log"
  LD_LIBRARY_PATH= VK_LOADER_DEBUG=error,warn,driver timeout 30 "$G/bin/devinfo" >> "$L/00_env.log" 2>&1
fi
cat "$L/00_env.log" | tee -a "$S"
pack_logs
if ! grep -q 'deviceName=' "$L/00_env.log"; then say "== no Vulkan device: tests not run"; exit 2; fi

export KILN_DEVICE=vulkan KILN_VALIDATION=1 KILN_VK_CHECK_KEYS=1 KILN_CACHE_DIR=/tmp/kc
export KILN_GOLDEN_DIR=$root/tests/golden KILN_COMPILE_FAIL_DIR=$root/tests/compile_fail

# run NAME CAP BINARY [args...] -- env for this run comes from the caller (env VAR=.. run ...)
run_test() {
  local name=$1 cap=$2 bin=$3; shift 3
  case " ${SKIP_SUITES:-} " in *" $name "*) say "== $name: SKIPPED (SKIP_SUITES)"; return;; esac
  local t=$(left); [ "$t" -gt "$cap" ] && t=$cap
  if [ -n "${SUITES_END:-}" ]; then local s=$((SUITES_END - SECONDS)); [ "$t" -gt "$s" ] && t=$s; fi
  if [ "$t" -lt 15 ]; then say "== $name: SKIPPED (no time left)"; return; fi
  local log=$L/$name.log t0=$SECONDS
  echo "== $name: $bin $* (timeout ${t}s) env: $(env | grep -E '^KILN_|^VK_' | sort | tr '\n' ' ')" > "$log"
  timeout -k 5 "$t" "$G/bin/$bin" --reporters=console --no-intro "$@" >> "$log" 2>&1
  local rc=$?
  say "== $name: rc=$rc in $((SECONDS - t0))s$([ $rc = 124 ] && echo ' TIMEOUT')$([ $rc -gt 128 ] && echo " SIGNAL $((rc-128))")"
  grep -E '^\[doctest\] (test cases|assertions)' "$log" | tee -a "$S"
  # (test_vulkan's "a validation message fails the next synchronisation" provokes
  # one: a zero-size vkCreateBuffer, VUID-VkBufferCreateInfo-size-00912.)
  local nval; nval=$(grep 'kiln: vulkan validation:' "$log" | grep -vc 'size-00912'); say "   validation messages: $nval"
  grep -E 'ERROR:|FATAL|CRASH|SIGSEGV|SIGABRT|Assertion|terminate called|TEST CASE:|skipped:' "$log" | head -16 | cut -c1-400 | sed 's/^/   /' | tee -a "$S"
  pack_logs
}

# The doctest filter of suite $1 in test_kiln (tests/test_suites.txt).
only() { awk -v g="$1" '$1 == g {print $2}' "$G/bin/test_suites.txt"; }

say "== 1. tests (deadline ${DEADLINE}s, $(left)s left, suites ${SUITE_BUDGET}s)"
SUITES_END=$((SECONDS + SUITE_BUDGET))
run_test fusion 45 test_fusion
KILN_VK_MAX_GROUP_COUNT=8192 run_test vulkan 60 test_kiln "$(only vulkan)"  # CI's grid_env
run_test backend_ops 60 test_kiln "$(only backend_ops)"
run_test vulkan_stream 40 test_kiln "$(only vulkan_stream)"
run_test ops 80 test_kiln "$(only ops)"  # 46 s was not enough on the H200
run_test autodiff 45 test_kiln "$(only autodiff)"
run_test jit 45 test_kiln "$(only jit)"
run_test modules 45 test_kiln "$(only modules)"
unset SUITES_END

# 2. The GPU table. No validation, no key checks (they would measure the layer).
run_step() {  # run_step NAME CAP FILE cmd... (FILE under $L; stdout, stderr to FILE.err)
  local name=$1 cap=$2 f=$L/$3; shift 3
  local t=$(left); [ "$t" -gt "$cap" ] && t=$cap
  if [ "$t" -lt 20 ]; then say "== $name: SKIPPED ($(left)s left)"; return; fi
  local t0=$SECONDS
  KILN_VALIDATION=0 KILN_VK_CHECK_KEYS=0 PYTHONUNBUFFERED=1 timeout -k 5 "$t" "$@" > "$f" 2> "$f.err"
  local rc=$?
  say "== $name: rc=$rc in $((SECONDS - t0))s$([ $rc = 124 ] && echo ' TIMEOUT') (timeout ${t}s)"
  tail -4 "$f.err" | cut -c1-300 | sed 's/^/   /' | tee -a "$S"
  python3 bench/run_gpu.py "$L"/*.jsonl > "$OUT/table.md" 2>> "$L/table.err"
  pack_logs
}
say "== 2. GPU table ($(left)s left)"
# One process per case: in one process the CNN step measured 13.4 ms after the
# 8192^3 matmuls and the MLP, 4.3 ms alone (same device time a step).
for c in ${STEPS_CASES:-matmul mlp cnn transformer}; do
  run_step "kiln_steps_$c" 60 "kiln_steps_$c.jsonl" env KILN_DEVICE=vulkan "$G/bin/gpu_steps" --cases "$c" --reps 5 ${STEPS_ARGS:-}
done
run_step kiln_ops 60 kiln_ops.jsonl env KILN_DEVICE=vulkan "$G/bin/ops_bench" --reps 5 ${OPS_ARGS:-}
if [ -z "${SKIP_PEERS:-}" ]; then
  run_step torch 100 torch.jsonl python3 bench/peers/gpu_peers.py --impl torch ${PEERS_ARGS:-}
  [ -n "${SKIP_JAX:-}" ] ||
    run_step jax 190 jax.jsonl python3 bench/peers/gpu_peers.py --impl jax ${PEERS_ARGS:-} ${JAX_ARGS:-}  # 105 and >140 s on the H200
fi
cat "$OUT/table.md" | tee -a "$S"

# 3. Where kiln's step time goes: device time per kernel kind.
say "== 3. kernel profile ($(left)s left)"
: > "$OUT/profile.txt"
for c in ${PROFILE_CASES:-transformer cnn}; do
  run_step "profile_$c" 60 "profile_$c.jsonl.txt" \
    env KILN_DEVICE=vulkan "$G/bin/gpu_steps" --cases "$c" --reps 5 --profile ${STEPS_ARGS:-}
  { echo "== $c step"; grep -v '^{' "$L/profile_$c.jsonl.txt.err"; } >> "$OUT/profile.txt"
done
# ops_bench's cases (embedding gradient, sort): KILN_VK_PROFILE=1 reports at exit.
run_step profile_ops 40 profile_ops.jsonl.txt env KILN_DEVICE=vulkan KILN_VK_PROFILE=1 "$G/bin/ops_bench" --reps 5
{ echo "== ops_bench (embedding_grad, sort)"; grep -v '^{' "$L/profile_ops.jsonl.txt.err"; } >> "$OUT/profile.txt"
head -80 "$OUT/profile.txt" | tee -a "$S"

if [ -n "${FULL:-}" ]; then
# bench: no validation, no key checks (they would measure the layer).
if [ "$(left)" -gt 70 ] && [ -x "$G/bin/bench_vulkan" ]; then
  mkdir -p /tmp/bb/bench && ln -sf "$G/bin/bench_vulkan" /tmp/bb/bench/bench_vulkan
  t=$(left); [ "$t" -gt 150 ] && t=150
  say "== bench (run_vulkan.py --repetitions 3, timeout ${t}s)"
  KILN_VALIDATION=0 KILN_VK_CHECK_KEYS=0 PYTHONUNBUFFERED=1 timeout -k 5 $((t - 5)) \
    python3 bench/run_vulkan.py /tmp/bb --repetitions 3 > "$OUT/bench.txt" 2>&1
  say "   rc=$?"; cat "$OUT/bench.txt" | tail -20 | tee -a "$S"
else
  say "== bench: SKIPPED ($(left)s left)"
fi

# CI's other Vulkan variants (tests/meson.build), while time is left.
say "== CI variants"
KILN_VK_FORCE_STAGING=1 KILN_VK_DISABLE_PUSH_DESCRIPTOR=1 run_test ops_staging 60 test_kiln "$(only ops)"
KILN_VK_MAX_STORAGE_BUFFER_RANGE=256 run_test ops_addresses 60 test_kiln "$(only ops)"
KILN_VK_FORCE_STAGING=1 KILN_VK_DISABLE_PUSH_DESCRIPTOR=1 run_test vulkan_stream_staging 45 test_kiln "$(only vulkan_stream)"
KILN_VK_MAX_STORAGE_BUFFER_RANGE=256 run_test vulkan_addresses 90 test_kiln "$(only vulkan)" '-tc=*on Vulkan*,*maxStorageBufferRange*,*65535*,*around the 4-*,*4-wide*'
KILN_VK_DISABLE_BUFFER_ADDRESS=1 run_test vulkan_no_addresses 45 test_kiln "$(only vulkan)" '-tc=*refused*'
KILN_VK_DISABLE_TEXEL_LOADS=1 KILN_VK_DISABLE_PUSH_DESCRIPTOR=1 run_test vulkan_matmul_buffers 45 test_kiln "$(only vulkan)" '-tc=*matmul*'
KILN_VK_MAX_STORAGE_BUFFER_RANGE=256 run_test fusion_addresses 60 test_fusion
# ops_bench once under the validation layer and key checks (bitonic sort, scatter_add at size).
run_test ops_bench_validated 60 ops_bench --reps 1
fi
say "== done at ${SECONDS}s"
pack_logs
