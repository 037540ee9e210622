#!/usr/bin/env bash
# Instructions per single-thread get + put round trip through the C ABI and
# through the Rust API, counted by callgrind (repeatable on a shared machine).
#
#   bin/callgrind-ffi.sh [N]      (N default 200000)
#
# Each subject runs with N round trips and with 0; the difference / N is the
# cost of one round trip, free of start-up. Subjects: see
# crates/tidepool-ffi/examples/roundtrip.rs.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
command -v valgrind >/dev/null || { echo "valgrind not found (apt-get install valgrind)" >&2; exit 1; }
n="${1:-200000}"

cargo build --release -p tidepool-ffi --example roundtrip
exe="${CARGO_TARGET_DIR:-$root/target}/release/examples/roundtrip"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

instructions() { # subject count -> total Ir
    valgrind --tool=callgrind --callgrind-out-file="$tmp/out" "$exe" "$1" "$2" 2>/dev/null
    awk '/^summary:/ { print $2 }' "$tmp/out"
}

printf '%-12s %14s\n' subject 'Ir/round trip'
for s in rust_buf ffi_buf ffi_obj rust_stack ffi_stack; do
    full="$(instructions "$s" "$n")"
    base="$(instructions "$s" 0)"
    printf '%-12s %14s\n' "$s" "$(python3 -c "print(f'{($full - $base) / $n:.1f}')")"
done
