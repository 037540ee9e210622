#!/usr/bin/env bash
# Runs tidepool's criterion benchmarks (crates/tidepool-bench, benches/pools.rs
# and benches/limits.rs) and the stack refill comparison
# (src/bin/stack_refill.rs: a create_batch refill against one-by-one
# mappings, rounds interleaved), and prints one table: every performance
# target the bench crate can measure, as a ratio of two medians from this
# run, the target beside it, and whether it holds. A machine line comes
# first: timings on a shared machine are only as good as its load.
#
#   bin/bench.sh            full run (~3 minutes on 2 cores)
#   bin/bench.sh --quick    shorter measurements (~1 minute), noisier
#   bin/bench.sh --summary  only print the table of the last run
#   bin/bench.sh -- ARGS    pass ARGS to the bench binary (e.g. a filter:
#                           `bin/bench.sh -- round_trip`)
#
# Results come from $CARGO_TARGET_DIR/criterion (default: target/criterion);
# only estimates written by this run are used (all of them with --summary).
# Instruction counts, which do not depend on the load: bin/callgrind.sh.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

quick=0
run=1
bench_args=()
while [[ $# -gt 0 ]]; do
    case "$1" in
    --quick) quick=1 ;;
    --summary) run=0 ;;
    --) shift; bench_args=("$@"); break ;;
    -h | --help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "unknown option: $1 (try --help)" >&2; exit 2 ;;
    esac
    shift
done

target_dir="${CARGO_TARGET_DIR:-$root/target}"
criterion_dir="$target_dir/criterion"
since=0
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"

refill_out="$target_dir/stack_refill.txt"
if [[ $run == 1 ]]; then
    cargo build --release -p tidepool-bench --bin stack_refill
    cargo bench -p tidepool-bench --bench pools --bench limits --no-run
    since="$(date +%s)"
    load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
    if [[ $quick == 1 ]]; then
        export TIDEPOOL_BENCH_QUICK=1
    fi
    cargo bench -p tidepool-bench --bench pools -- "${bench_args[@]}" >&2
    cargo bench -p tidepool-bench --bench limits -- "${bench_args[@]}" >&2
    refill_args=()
    if [[ $quick == 1 ]]; then
        refill_args=(--quick)
    fi
    "$target_dir/release/stack_refill" "${refill_args[@]}" | tee "$refill_out" >&2
fi

cpu="$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
family="$(awk -F': ' '/^cpu family/ { print $2; exit }' /proc/cpuinfo)"
model="$(awk -F': ' '/^model\t/ { print $2; exit }' /proc/cpuinfo)"
machine="$cpu (family $family, model $model), $(nproc) cores, $(free -g | awk '/^Mem:/ { print $2 }') GiB"
machine="$machine | load avg $load_before before, $(cut -d' ' -f1-3 /proc/loadavg) after"
machine="$machine | $(rustc --version)"

python3 - "$criterion_dir" "$since" "$machine" "$run" "$refill_out" <<'PY'
import json, os, sys

root, since, machine, ran = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
refill_out = sys.argv[5]
GROUPS = ["round_trip", "get_drop", "two_threads", "forward", "at_limit"]

# median[(group, subject, threads or None)] = ns
median = {}
for group in GROUPS:
    gdir = os.path.join(root, group)
    if not os.path.isdir(gdir):
        continue
    for dirpath, _dirs, files in os.walk(gdir):
        if "estimates.json" not in files or os.path.basename(dirpath) != "new":
            continue
        path = os.path.join(dirpath, "estimates.json")
        if os.path.getmtime(path) < since:
            continue
        parts = os.path.relpath(os.path.dirname(dirpath), gdir).split(os.sep)
        subject = parts[0]
        threads = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
        with open(path) as f:
            median[(group, subject, threads)] = json.load(f)["median"]["point_estimate"]

if not median and not os.path.exists(refill_out):
    sys.exit(f"no criterion results under {root}" + (" from this run" if ran else ""))

def get(group, subject, threads=None):
    return median.get((group, subject, threads))

rows = []
syscalls = []

def row(name, a, b, target, at_most, note=""):
    """One target: ratio a/b of two (group, subject, threads) medians."""
    x, y = get(*a), get(*b)
    if x is None or y is None:
        rows.append((name, "-", target, "?", "-", "-", "not measured in this run"))
        return
    r = x / y
    ok = r <= float(target.split()[-1].rstrip("x")) if at_most else r >= float(target.split()[-1].rstrip("x"))
    rows.append((name, f"{r:.2f}x", target, "✓" if ok else "✗", f"{x:.1f}", f"{y:.1f}", note))

RT, GD, TT, FW = "round_trip", "get_drop", "two_threads", "forward"
row("core get+put / bare TLS Vec pop+push", (RT, "tidepool"), (RT, "tls_vec"), "<= 1.25x", True,
    "round_trip: tidepool / tls_vec")
row("object-pool / core, 1 thread", (RT, "object_pool"), (RT, "tidepool"), ">= 3x", False,
    "round_trip: object_pool / tidepool")
row("LinearObjectPool / core, 1 thread", (RT, "lockfree_linear"), (RT, "tidepool"), ">= 3x", False,
    "round_trip: lockfree_linear / tidepool")
row("object-pool / core, 2 threads", (TT, "object_pool", 2), (TT, "tidepool", 2), ">= 3x", False,
    "two_threads/2: per op per thread")
row("LinearObjectPool / core, 2 threads", (TT, "lockfree_linear", 2), (TT, "tidepool", 2), ">= 3x", False,
    "two_threads/2: per op per thread")
row("core 2 threads / 1 thread, per op", (TT, "tidepool", 2), (TT, "tidepool", 1), "<= 1.3x", True,
    "two_threads: tidepool/2 / tidepool/1")
row("core forward / LinearObjectPool forward", (FW, "tidepool"), (FW, "lockfree_linear"), "<= 1.0x", True,
    "forward: get on A, drop on B")
row("StackPool get+drop / core get+drop", (GD, "stack"), (GD, "core"), "<= 1.5x", True,
    "get_drop: stack / core (same shape)")
row("get_owned+drop / get+drop", (GD, "core_owned"), (GD, "core"), "<= 1.3x", True,
    "get_drop: core_owned / core")
AL = "at_limit"
row("get+put at max_live / without a limit", (AL, "round_trip_at_limit"), (AL, "round_trip_unlimited"),
    "<= 1.5x", True, "at_limit/round_trip: max_live 1, every get recycles the one object")

# The stack refill rows: ratios of medians from stack_refill's own
# interleaved rounds (µs per stack), written by this run (or the last).
refill = {}
if os.path.exists(refill_out) and (not ran or os.path.getmtime(refill_out) >= since):
    for l in open(refill_out):
        f = dict(kv.split("=", 1) for kv in l.split() if "=" in kv)
        if l.startswith("size=") and "subject" in f:
            refill[(f["size"], f["subject"])] = f
def refill_row(name, size, what, base, subject, target, note):
    a, b = refill.get((size, base)), refill.get((size, subject))
    if a is None or b is None:
        rows.append((name, "-", target, "?", "-", "-", "not measured in this run"))
        return
    x, y = float(a[what + "_us"]) * 1e3, float(b[what + "_us"]) * 1e3
    r = x / y
    ok = "-"
    if target.startswith(">="):
        ok = "✓" if r >= float(target.split()[-1].rstrip("x")) else "✗"
    rows.append((name, f"{r:.2f}x", target, ok, f"{x:.1f}", f"{y:.1f}", note))
refill_row("stack refill: one-by-one / create_batch (64 KiB, k=32)", "64KiB", "create", "one_by_one",
           "refill", ">= 2x", "stack_refill: ns per stack, making only")
refill_row("  same, making + tearing down", "64KiB", "total", "one_by_one", "refill", ">= 2x",
           "create_batch + destroy_batch vs mmap+mprotect, munmap")
refill_row("  same, mprotect guards (GuardMode::Protect)", "64KiB", "create", "one_by_one",
           "refill_protect", "reported", "the path before guard markers")
refill_row("stack refill: one-by-one / create_batch (1 MiB, k=7)", "1024KiB", "create", "one_by_one",
           "refill", "reported", "8 MiB slabs: 7 stacks each")
refill_row("  same, making + tearing down", "1024KiB", "total", "one_by_one", "refill", "reported", "")
for size in ("64KiB", "1024KiB"):
    for subject in ("refill", "refill_protect", "one_by_one"):
        f = refill.get((size, subject))
        if f:
            calls = " ".join(f"{k}={f[k]}" for k in ("mmap", "mprotect", "guard_madvise", "madvise", "munmap"))
            syscalls.append(f"  {size} {subject}: {calls}")

head = ("target", "ratio", "want", "", "a ns", "b ns", "a / b")
widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
def line(r):
    cells = [str(c).ljust(w) if i in (0, 2, 6) else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths))]
    return "| " + " | ".join(cells) + " |"

print()
print(f"machine: {machine}")
print(line(head))
print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
for r in rows:
    print(line(r))
held = sum(r[3] == "✓" for r in rows)
targets = sum(r[3] != "-" for r in rows)
print(f"{held} of {targets} targets hold (medians of this run, ns per op; two_threads: per op per thread; stack refill: ns per stack).")
if syscalls:
    print("stack refill system calls per 1,000 stacks (StackStats; one_by_one by construction):")
    print("\n".join(syscalls))

# Context for the two-thread rows: the bare thread-local Vec shares nothing
# between threads, so its own 2t/1t is what the machine adds (another
# process on one of the two cores).
tls1, tls2 = get(TT, "tls_vec", 1), get(TT, "tls_vec", 2)
if tls1 and tls2:
    m = tls2 / tls1
    verdict = ("ok: nothing shared scales flat" if m <= 1.15 else
               "the two cores were not both free: two-thread and forward rows are unreliable")
    print(f"machine check: tls_vec 2 threads / 1 thread = {m:.2f}x ({verdict})")

# Context for the LinearObjectPool row: the raw thread-local array (no
# guard, no counts, no revocation, objects moved a word at a time) is the
# floor of any thread-local LIFO cache on this machine.
raw, core, linear = get(RT, "raw_tls"), get(RT, "tidepool"), get(RT, "lockfree_linear")
if raw and core and linear:
    print(f"floor: raw TLS array {raw:.1f} ns per round trip; core is {core / raw:.2f}x it, "
          f"LinearObjectPool {linear / raw:.2f}x (3x LinearObjectPool needs core <= {linear / 3:.2f} ns)")
PY
