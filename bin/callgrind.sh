#!/usr/bin/env bash
# Instructions per single-thread operation, counted by callgrind: a
# repeatable figure where hardware counters are not available and the load
# of a shared machine makes timings noisy.
#
#   bin/callgrind.sh [N] [SUBJECT...]   (N default 200000; default subjects:
#                                        all of them, see `roundtrip --list`)
#
# Each subject runs once under callgrind with collection switched on only
# inside `roundtrip`'s `measured_loop` (N operations, nothing else), so the
# count divided by N is the cost of one operation, free of start-up and of
# priming.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
command -v valgrind >/dev/null || { echo "valgrind not found (apt-get install valgrind)" >&2; exit 1; }

n="${1:-200000}"
shift || true

cargo build --profile bench -p tidepool-bench --bin roundtrip >&2
target_dir="${CARGO_TARGET_DIR:-$root/target}"
exe="$target_dir/release/roundtrip"
[[ -x "$exe" ]] || { echo "no binary at $exe" >&2; exit 1; }

if [[ $# -gt 0 ]]; then subjects=("$@"); else mapfile -t subjects < <("$exe" --list); fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# instructions SUBJECT N -> Ir inside measured_loop
instructions() {
    valgrind --tool=callgrind --toggle-collect='*measured_loop*' \
        --callgrind-out-file="$tmp/out" "$exe" "$1" "$2" >/dev/null 2>"$tmp/err" ||
        { cat "$tmp/err" >&2; return 1; }
    awk '/^summary:/ { print $2 }' "$tmp/out"
}

printf '%-20s %10s\n' subject 'Ir/op'
declare -A per_op
for s in "${subjects[@]}"; do
    ir="$(instructions "$s" "$n")"
    per_op[$s]="$(python3 -c "print(f'{$ir / $n:.1f}')")"
    printf '%-20s %10s\n' "$s" "${per_op[$s]}"
done
ratio() { # NAME A B
    if [[ -n "${per_op[$2]:-}" && -n "${per_op[$3]:-}" ]]; then
        python3 -c "print(f'$1: {${per_op[$2]} / ${per_op[$3]}:.2f}x instructions')"
    fi
}
ratio "tidepool / tls_vec" tidepool tls_vec
ratio "stack_get_drop / core_get_drop" stack_get_drop core_get_drop
ratio "core_owned_get_drop / core_get_drop" core_owned_get_drop core_get_drop
