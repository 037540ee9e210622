#!/usr/bin/env bash
# Instructions per single-thread round trip, counted by callgrind: a
# repeatable figure where hardware counters are not available.
#
#   bin/callgrind.sh [N] [SUBJECT...]   (N default 1000000; default subjects:
#                                        all of them, see `roundtrip --list`)
#
# Each subject runs twice, with N round trips and with 0; the difference in
# instructions divided by N is the cost of one round trip, free of start-up.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
command -v valgrind >/dev/null || { echo "valgrind not found (apt-get install valgrind)" >&2; exit 1; }

n="${1:-1000000}"
shift || true

cargo build --profile bench -p tidepool-bench --bin roundtrip
target_dir="${CARGO_TARGET_DIR:-$root/target}"
exe="$target_dir/release/roundtrip"
[[ -x "$exe" ]] || { echo "no binary at $exe" >&2; exit 1; }

if [[ $# -gt 0 ]]; then subjects=("$@"); else mapfile -t subjects < <("$exe" --list 0); fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

instructions() { # subject count -> total Ir
    valgrind --tool=callgrind --callgrind-out-file="$tmp/out" "$exe" "$1" "$2" 2>/dev/null
    awk '/^summary:/ { print $2 }' "$tmp/out"
}

printf '%-16s %14s\n' subject 'Ir/round trip'
declare -A per_op
for s in "${subjects[@]}"; do
    full="$(instructions "$s" "$n")"
    base="$(instructions "$s" 0)"
    per_op[$s]="$(python3 -c "print(f'{($full - $base) / $n:.1f}')")"
    printf '%-16s %14s\n' "$s" "${per_op[$s]}"
done
if [[ -n "${per_op[tidepool]:-}" && -n "${per_op[tls_vec]:-}" ]]; then
    python3 -c "print(f'tidepool / tls_vec = {${per_op[tidepool]} / ${per_op[tls_vec]}:.2f}x instructions')"
fi
