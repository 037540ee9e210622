#!/usr/bin/env bash
# Sanitizers over the core crate (`tidepool`), on nightly Rust. `.ci/run`
# calls it; run it by hand the same way:
#
#   bin/sanitize.sh            miri, then ThreadSanitizer
#   bin/sanitize.sh miri       miri only
#   bin/sanitize.sh tsan       ThreadSanitizer only
#
# Installs what it needs (the nightly toolchain, its miri and rust-src
# components), so a fresh clone runs it. Prints each step's wall and CPU
# time (on a shared machine the CPU time is the steadier figure).
#
# miri (undefined behaviour, Stacked Borrows aliasing, data races and
# weak-memory effects between threads, leaks) runs the lib unit tests and the
# integration suites that need no real kernel. The OS calls have cfg(miri)
# shims: the reclaimer thread sleeps on a condvar instead of poll(2) on an
# eventfd and watches no PSI/cgroup sources; the asymmetric fence is a SeqCst
# fence on both sides (as under loom), so taking a busy thread's cache is
# checked, not skipped; a stack slab's reservation is one page-aligned heap
# allocation (madvise zeroes, munmap frees: miri checks each slab is freed
# once, whole, and never touched after); pthread_atfork does nothing (miri
# cannot fork). Tests that need the kernel itself (poll, membarrier,
# mincore, /proc, fork, child processes, context switches) are
# #[cfg_attr(miri, ignore = "why")]. Loop counts shrink under cfg(miri)
# (tests/common: `scaled`; proptest cases): miri interprets every step and
# checks every access, some 1000x slower, and each smaller count still takes
# every path its test is about.
#
# ThreadSanitizer (data races the tests provoke on real threads, with the
# real kernel calls) runs the concurrency suites with std rebuilt under the
# sanitizer (-Zbuild-std), so std's locks and atomics are seen too, in its
# own target dir (target/tsan). The fork tests are skipped there: TSAN cannot
# start threads in a child forked from a multi-threaded process ("not
# supported. Dying"); they run in the normal suite.
#
# Budget: each part stays under ~10 minutes on the 2-vCPU VM. Measured on
# it while shared with other builds (load 9-17, wall 3-6x the CPU time):
# ThreadSanitizer, std rebuild included, ~6 min wall; miri, wall: lib 2.3
# min (build included), reentrant 2.3, panics 6.7, pressure_background 2.2.
# Not run under miri for time, though they could run: `stress` (10.5 min
# wall), `model` and `reclaim` (over 20 min each), `reserve` and
# `manage_batch` (not yet timed). Their concurrency is covered by
# ThreadSanitizer below and by the loom models (bin/loom.sh); under miri
# they would need smaller cfg(miri) loop counts first.
set -euo pipefail
cd "$(dirname "$0")/.."

NIGHTLY="${TIDEPOOL_NIGHTLY:-nightly}"
HOST="$(rustc -vV | sed -n 's/^host: //p')"

TIMES_FILE=$(mktemp)
trap 'rm -f "$TIMES_FILE"' EXIT
# User + system seconds of this shell's finished children, into CPU.
cpu_seconds() {
    times >"$TIMES_FILE"
    CPU=$(awk 'NR == 2 { split($1, u, "m"); split($2, s, "m"); printf "%d\n", u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$TIMES_FILE")
}

step() {
    local name="$1"
    shift
    echo "== $name"
    local start=$SECONDS
    cpu_seconds
    local cpu_before=$CPU
    "$@"
    cpu_seconds
    printf '   %5d s wall %6d s cpu  %s\n' "$((SECONDS - start))" "$((CPU - cpu_before))" "$name"
}

install() {
    if ! rustup run "$NIGHTLY" rustc -V >/dev/null 2>&1; then
        rustup toolchain install "$NIGHTLY" --profile minimal
    fi
    rustup component add --toolchain "$NIGHTLY" miri rust-src
}

# --- miri -------------------------------------------------------------------

# Isolation stays on (no host clock, files or environment; a run is
# reproducible from -Zmiri-seed). parking_lot_core keeps pointers in
# integers (its word lock), hence permissive provenance, said out loud.
MIRI_BASE="-Zmiri-permissive-provenance"

# Not run under miri: tests/robust.rs (every case runs in a child process or
# a fork, which miri cannot start), pressure_psi (real PSI files and child
# processes), the stack_* suites and background_off/metrics (StackPool: mmap'd
# stacks switched to with corosensei's inline assembly, and mincore), and the
# other workspace crates.

# Suites whose pools never start the process-wide reclaimer thread (they are
# built with `.background(false)`): miri's leak check stays on.
MIRI_LEAK_CHECKED=(--test reentrant)

# Suites whose pools use the reclaimer thread (the unit tests too: the
# destroy queue hands a dropped pool's leftovers to it). It lives until the process
# exits, by design, and miri counts a thread still running at exit as a leak;
# -Zmiri-ignore-leaks is that check's only switch, so these run without it
# (everything else, the data-race detector included, stays on, and the
# counting manager still proves every object destroyed exactly once).
MIRI_WITH_RECLAIMER=(--lib --test panics --test pressure_background)

miri_setup() {
    cargo +"$NIGHTLY" miri setup
}

miri_leak_checked() {
    MIRIFLAGS="$MIRI_BASE ${MIRIFLAGS:-}" \
        cargo +"$NIGHTLY" miri test -p tidepool "${MIRI_LEAK_CHECKED[@]}"
}

miri_with_reclaimer() {
    MIRIFLAGS="$MIRI_BASE -Zmiri-ignore-leaks ${MIRIFLAGS:-}" \
        cargo +"$NIGHTLY" miri test -p tidepool "${MIRI_WITH_RECLAIMER[@]}"
}

# --- ThreadSanitizer --------------------------------------------------------

TSAN_SUITES=(--lib --test stress --test reentrant --test reclaim --test panics
    --test pressure_background --test robust --test model --test reserve --test manage_batch)

tsan() {
    # Halt on the first report, so CI fails loudly.
    RUSTFLAGS="-Zsanitizer=thread --cfg tidepool_sanitize ${RUSTFLAGS:-}" \
        RUSTDOCFLAGS="-Zsanitizer=thread" \
        TSAN_OPTIONS="halt_on_error=1 ${TSAN_OPTIONS:-}" \
        CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/tsan" \
        cargo +"$NIGHTLY" test -Zbuild-std --target "$HOST" -p tidepool "${TSAN_SUITES[@]}" \
        -- --skip fork::
}

# ----------------------------------------------------------------------------

want=("$@")
[ ${#want[@]} -eq 0 ] && want=(miri tsan)
total=$SECONDS
step "install nightly components (miri, rust-src)" install
for w in "${want[@]}"; do
    case "$w" in
    miri)
        step "miri: sysroot" miri_setup
        step "miri: suites without the reclaimer thread (leak-checked)" miri_leak_checked
        step "miri: unit tests + suites with the reclaimer thread" miri_with_reclaimer
        ;;
    tsan)
        step "ThreadSanitizer: concurrency suites" tsan
        ;;
    *)
        echo "unknown step '$w' (expected: miri, tsan)" >&2
        exit 2
        ;;
    esac
done
echo "== sanitizers total: $((SECONDS - total)) s wall"
