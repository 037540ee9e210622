#!/usr/bin/env bash
# Runs the loom models of the cache <-> depot hand-offs (src/tests/loom_*.rs).
# The one way loom is run: tiny pools, debug assertions on, release build.
# Usage: bin/loom.sh [test-name-filter]
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="${RUSTFLAGS:-} --cfg loom -C debug-assertions=on"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}"
# A separate target dir: --cfg loom rebuilds every dependency.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/loom"
exec cargo test -p tidepool --release --lib -- --test-threads=1 --nocapture "$@"
