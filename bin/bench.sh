#!/usr/bin/env bash
# Runs tidepool's criterion benchmarks (crates/tidepool-bench) and prints a
# table of medians plus the ratios the performance targets are stated in.
#
#   bin/bench.sh            full run (~3 minutes on 2 cores)
#   bin/bench.sh --quick    shorter measurements (~1 minute), noisier
#   bin/bench.sh --summary  only print the summary of the last run
#   bin/bench.sh -- ARGS    pass ARGS to the bench binary (e.g. a filter:
#                           `bin/bench.sh -- round_trip`)
#
# Results come from $CARGO_TARGET_DIR/criterion (default: target/criterion);
# only estimates written by this run are reported (all of them with
# --summary).
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
    -h | --help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "unknown option: $1 (try --help)" >&2; exit 2 ;;
    esac
    shift
done

target_dir="${CARGO_TARGET_DIR:-$root/target}"
criterion_dir="$target_dir/criterion"
since=0

if [[ $run == 1 ]]; then
    since="$(date +%s)"
    echo "load average before the run: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores" \
        "(other processes skew the two_threads and forward groups)"
    if [[ $quick == 1 ]]; then
        export TIDEPOOL_BENCH_QUICK=1
    fi
    cargo bench -p tidepool-bench --bench pools -- "${bench_args[@]}"
fi

python3 - "$criterion_dir" "$since" <<'PY'
import json, os, sys

root, since = sys.argv[1], float(sys.argv[2])
GROUPS = ["round_trip", "two_threads", "forward"]

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
        threads = int(parts[1]) if len(parts) > 1 else None
        with open(path) as f:
            median[(group, subject, threads)] = json.load(f)["median"]["point_estimate"]

if not median:
    sys.exit(f"no criterion results under {root} from this run")

def get(group, subject, threads=None):
    return median.get((group, subject, threads))

subjects = []
for (_g, s, _t) in sorted(median):
    if s not in subjects:
        subjects.append(s)
order = ["tidepool", "tidepool_owned", "tls_vec", "mutex_vec", "no_pool",
         "object_pool", "lockfree_linear", "sharded_slab", "opool"]
subjects.sort(key=lambda s: (order.index(s) if s in order else len(order), s))

def fmt(x):
    return "-" if x is None else f"{x:.1f}"

print()
print("Medians, ns per operation (two_threads: per op per thread)")
header = f"{'subject':<16} {'round_trip':>11} {'1 thread':>10} {'2 threads':>10} {'2t/1t':>7} {'forward':>9}"
print(header)
print("-" * len(header))
for s in subjects:
    one, two = get("two_threads", s, 1), get("two_threads", s, 2)
    scale = f"{two / one:.2f}" if one and two else "-"
    print(f"{s:<16} {fmt(get('round_trip', s)):>11} {fmt(one):>10} {fmt(two):>10} {scale:>7} {fmt(get('forward', s)):>9}")

print()
print("Targets")
results = []

def target(name, value, ok, detail):
    if value is None:
        results.append(("N/A ", name, "not measured in this run"))
    else:
        results.append(("PASS" if ok(value) else "MISS", name, detail(value)))

def ratio(a, b):
    return a / b if a is not None and b else None

tp = get("round_trip", "tidepool")
target("round trip within 1.5x of thread-local Vec",
       ratio(tp, get("round_trip", "tls_vec")), lambda r: r <= 1.5,
       lambda r: f"tidepool / tls_vec = {r:.2f}x (need <= 1.50)")
target("round trip >= 3x faster than object-pool",
       ratio(get("round_trip", "object_pool"), tp), lambda r: r >= 3.0,
       lambda r: f"object_pool / tidepool = {r:.2f}x (need >= 3.00)")
target("round trip >= 3x faster than LinearObjectPool",
       ratio(get("round_trip", "lockfree_linear"), tp), lambda r: r >= 3.0,
       lambda r: f"lockfree_linear / tidepool = {r:.2f}x (need >= 3.00)")
target("2 threads per-op within 1.3x of 1 thread",
       ratio(get("two_threads", "tidepool", 2), get("two_threads", "tidepool", 1)),
       lambda r: r <= 1.3,
       lambda r: f"tidepool 2t / 1t = {r:.2f}x (need <= 1.30)")
target("forward no slower than LinearObjectPool",
       ratio(get("forward", "tidepool"), get("forward", "lockfree_linear")),
       lambda r: r <= 1.0,
       lambda r: f"tidepool / lockfree_linear = {r:.2f}x (need <= 1.00)")
for verdict, name, detail in results:
    print(f"  {verdict}  {name:<48} {detail}")

# Context for the scaling target: the bare thread-local Vec shares nothing
# between threads, so its own 2t/1t is what the machine adds (another process
# on one of the two cores, or vCPUs that are SMT siblings on the host).
tls1, tls2 = get("two_threads", "tls_vec", 1), get("two_threads", "tls_vec", 2)
tp1, tp2 = get("two_threads", "tidepool", 1), get("two_threads", "tidepool", 2)
if tls1 and tls2:
    machine = tls2 / tls1
    print(f"  machine check: tls_vec 2t / 1t = {machine:.2f}x", end="")
    if machine > 1.15:
        print(" -> the two cores were not both free: the 2-thread figures "
              "(and likely forward) are unreliable; rerun on an idle machine.")
        if tp1 and tp2:
            print(f"  tidepool 2t/1t relative to tls_vec's: {(tp2 / tp1) / machine:.2f}x "
                  "(a rough correction, not the target)")
    else:
        print(" (ok: nothing shared scales flat)")
PY
echo "load average after the run: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
