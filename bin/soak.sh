#!/usr/bin/env bash
# A soak of the core library: a mixed load (threads starting and exiting,
# objects flowing between threads, a live limit with timed waits, large
# teardowns, forked children, memory pressure) for a chosen time, counts
# checked at every cycle and idle memory checked to return to its floor
# once the load stops. See crates/tidepool/examples/soak.rs.
#
#   bin/soak.sh           30 minutes
#   bin/soak.sh 2         2 minutes (what .ci/run does)
#
# Real memory pressure comes from the cgroup v2 group the soak runs in when
# it has memory.high set, e.g.
#   systemd-run --user --scope -p MemoryHigh=200M bin/soak.sh
# and from a critical signal each cycle otherwise.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
minutes="${1:-30}"
cargo build --release -p tidepool --example soak >&2
exec "${CARGO_TARGET_DIR:-$root/target}/release/examples/soak" "$minutes"
