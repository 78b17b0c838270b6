#!/usr/bin/env bash
# Installs the benchmark peers (not needed by the tests; the test command does not
# run this): LibTorch 1.13 from Debian, and JAX + Equinox + Optax (CPU) from PyPI
# into a venv (Debian's pip is externally managed): $KILN_BENCH_VENV, default
# ~/.cache/kiln-bench/venv, pinned by bench/peers/requirements.txt. (The
# Fashion-MNIST data comes with scripts/bootstrap.sh, for the example.)
# Idempotent: a second run checks and exits.
set -euo pipefail
cd "$(dirname "$0")/.."
KILN_BOOTSTRAP_EXTRA="libtorch-dev python3-venv" ./scripts/bootstrap.sh

venv="${KILN_BENCH_VENV:-$HOME/.cache/kiln-bench/venv}"
req="bench/peers/requirements.txt"
stamp="$venv/.kiln-requirements"
if [ -f "$stamp" ] && cmp -s "$stamp" "$req"; then
  exit 0
fi
python=/usr/bin/python3  # Debian's, which python3-venv is for
[ -x "$python" ] || python=python3
echo "bench/setup.sh: installing the JAX peers into $venv" >&2
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req"
cp "$req" "$stamp"
