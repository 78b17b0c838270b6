#!/usr/bin/env bash
# Installs the benchmark peers (not needed by the tests): LibTorch 1.13 from Debian.
set -euo pipefail
cd "$(dirname "$0")/.."
KILN_BOOTSTRAP_EXTRA="libtorch-dev" ./scripts/bootstrap.sh
