#!/usr/bin/env bash
# Instruction-count budget of the fast paths, checked with callgrind.
#
#   bin/budget.sh           check every budget in crates/tidepool-bench/budget.toml
#   bin/budget.sh --print   measure and print, never fail
#
# Each budgeted operation runs N times inside `roundtrip`'s `measured_loop`
# under `valgrind --tool=callgrind --toggle-collect='*measured_loop*'`, so
# the count covers those N operations and nothing else; instructions per
# operation = Ir / N. Callgrind is deterministic: the same binary gives the
# same count on any machine and under any load, which is why this check can
# run in CI where timings cannot. It fails when an operation exceeds its
# budget by more than the file's tolerance (10%), or when the scoped guard's
# drop is no longer inlined into the round trip, and says when a budget is
# far above what is measured (lower it, or a regression could hide in the
# slack). Counts depend on the compiler: the file names the rustc it was
# measured with, and a different one is reported (not failed) here.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
budget_file="crates/tidepool-bench/budget.toml"
n=20000

check=1
case "${1:-}" in
--print) check=0 ;;
"") ;;
-h | --help) sed -n '2,18p' "$0"; exit 0 ;;
*) echo "unknown option: $1 (try --help)" >&2; exit 2 ;;
esac

if ! command -v valgrind >/dev/null; then
    if command -v apt-get >/dev/null && [[ $(id -u) == 0 ]]; then
        echo "valgrind not found: installing it (apt-get install valgrind)" >&2
        apt-get update -qq >&2 && apt-get install -y -qq valgrind >&2
    fi
fi
if ! command -v valgrind >/dev/null; then
    echo "FAIL: valgrind is not installed, so the instruction budget cannot be checked." >&2
    echo "      Install it (Debian/Ubuntu: apt-get install valgrind) and rerun bin/budget.sh." >&2
    exit 1
fi

cargo build --profile bench -p tidepool-bench --bin roundtrip >&2
target_dir="${CARGO_TARGET_DIR:-$root/target}"
exe="$target_dir/release/roundtrip"

# name = instructions lines of the [instructions_per_op] table, and the
# tolerance and rustc lines.
tolerance="$(awk -F'=' '/^tolerance/ { gsub(/[ "]/, "", $2); print $2 }' "$budget_file")"
measured_with="$(awk -F'"' '/^rustc/ { print $2 }' "$budget_file")"
mapfile -t entries < <(awk '
    /^\[/ { section = $0; next }
    section == "[instructions_per_op]" && /^[a-z_]+ *= *[0-9]/ {
        split($0, kv, "="); gsub(/ /, "", kv[1]); split(kv[2], v, "#"); gsub(/ /, "", v[1]);
        print kv[1] " " v[1]
    }' "$budget_file")
[[ ${#entries[@]} -gt 0 ]] || { echo "no budgets found in $budget_file" >&2; exit 1; }

rustc_now="$(rustc --version)"
if [[ "$rustc_now" != "$measured_with" ]]; then
    echo "note: budgets were measured with '$measured_with', this is '$rustc_now';" \
        "a new compiler may move counts (update the file if it does)."
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

failed=0
printf '%-22s %8s %8s %7s  %s\n' operation budget Ir/op ratio verdict
for entry in "${entries[@]}"; do
    read -r name budget <<<"$entry"
    valgrind --tool=callgrind --toggle-collect='*measured_loop*' \
        --callgrind-out-file="$tmp/out" "$exe" "$name" "$n" >/dev/null 2>"$tmp/err" ||
        { cat "$tmp/err" >&2; echo "FAIL: $name did not run" >&2; exit 1; }
    ir="$(awk '/^summary:/ { print $2 }' "$tmp/out")"
    read -r per_op ratio verdict < <(awk -v ir="$ir" -v n="$n" -v b="$budget" -v t="$tolerance" 'BEGIN {
        per = ir / n; r = per / b;
        v = (r > 1 + t) ? "OVER" : (r < 1 - t) ? "under(lower-the-budget)" : "ok";
        printf "%.1f %.2f %s\n", per, r, v }')
    printf '%-22s %8s %8s %6sx  %s\n' "$name" "$budget" "$per_op" "$ratio" "$verdict"
    [[ $verdict == OVER ]] && failed=1
    # The scoped guard's drop must be inlined into its caller: out of line,
    # a round trip costs some 10 instructions and a third more time
    # (budget.toml). Inlined code is attributed to the caller, so any
    # instruction counted in the drop glue itself means it was not.
    if [[ $name == tidepool || $name == core_get_drop ]]; then
        callgrind_annotate --inclusive=no "$tmp/out" >"$tmp/annotated" 2>/dev/null || true
        if grep -q ':core::ptr::drop_in_place<tidepool::guard::Pooled<' "$tmp/annotated"; then
            echo "$name: the guard's drop (drop_in_place<Pooled>) was not inlined" \
                "(Shared::put's fast path outgrew the inliner's threshold: keep every" \
                "case but the common one behind its one cold call)" >&2
            failed=1
        fi
    fi
done

# The QEMU-shaped lifecycle (get or make, enter, terminate, put) over
# tidepool's seam must cost no more instructions than the same loop over the
# QEMU-style two-level batch pool in the same C file.
cargo build --profile bench -p tidepool-ffi --lib >&2
cc -std=c11 -O2 -Wall -Wextra -Werror -I crates/tidepool-ffi/include \
    crates/tidepool-ffi/examples/c/qemu_coroutine_pool.c "$target_dir/release/libtidepool_ffi.a" \
    -lpthread -ldl -lm -o "$tmp/qemu_coroutine_pool"
declare -A lifecycle
for pool in tidepool qemu; do
    valgrind --tool=callgrind --toggle-collect='*measured_loop*' \
        --callgrind-out-file="$tmp/out.$pool" "$tmp/qemu_coroutine_pool" lifecycle "$pool" "$n" \
        >/dev/null 2>"$tmp/err" || { cat "$tmp/err" >&2; echo "FAIL: lifecycle $pool did not run" >&2; exit 1; }
    lifecycle[$pool]="$(awk -v n="$n" '/^summary:/ { printf "%.1f", $2 / n }' "$tmp/out.$pool")"
done
verdict="$(awk -v t="${lifecycle[tidepool]}" -v q="${lifecycle[qemu]}" 'BEGIN { print (t <= q) ? "ok" : "OVER" }')"
printf '%-22s %8s %8s %7s  %s\n' qemu_lifecycle "${lifecycle[qemu]}" "${lifecycle[tidepool]}" \
    "$(awk -v t="${lifecycle[tidepool]}" -v q="${lifecycle[qemu]}" 'BEGIN { printf "%.2f", t / q }')x" \
    "$verdict (tidepool against the QEMU-style pool, per create + enter + terminate)"
[[ $verdict == OVER ]] && failed=1

if [[ $check == 1 && $failed == 1 ]]; then
    echo "FAIL: an operation exceeds its instruction budget by more than $(awk -v t="$tolerance" 'BEGIN { print t * 100 }')%," \
        "or the guard's drop is no longer inlined (see above)" \
        "($budget_file). Find the cause (bin/callgrind.sh, callgrind_annotate), or, if the" \
        "cost is intended, raise the budget in the same change and say why." >&2
    exit 1
fi
echo "instruction budget: ok"
