#!/usr/bin/env bash
# Sanitizers over the core crate, on nightly Rust:
#
#  * miri: the lib unit tests and the integration suites that need no real
#    kernel (undefined behaviour, aliasing, data races, weak-memory effects,
#    leaks). The OS calls have cfg(miri) shims: the reclaimer thread sleeps on
#    a condvar instead of eventfd + poll(2), and the asymmetric fence is a
#    SeqCst fence on both sides (as under loom), so cache revocation is
#    checked, not skipped. Tests that need the kernel (mmap'd stacks, poll,
#    membarrier, /proc) are #[cfg_attr(miri, ignore = "why")]; loop counts
#    shrink under cfg(miri) (tests/common: `scaled`).
#  * ThreadSanitizer: the concurrency suites, std rebuilt with TSAN
#    (-Zbuild-std), in its own target dir (target/tsan).
#
# Installs what it needs (the nightly toolchain, miri, rust-src), so a fresh
# clone runs it. Prints each step's wall time.
#
# Usage: bin/sanitize.sh [miri] [tsan]     (default: both)
set -euo pipefail
cd "$(dirname "$0")/.."

NIGHTLY="${TIDEPOOL_NIGHTLY:-nightly}"
HOST="$(rustc -vV | sed -n 's/^host: //p')"

step() {
    local name="$1"
    shift
    echo "== $name"
    local start=$SECONDS
    "$@"
    echo "== $name: $((SECONDS - start)) s"
}

install() {
    if ! rustup run "$NIGHTLY" rustc -V >/dev/null 2>&1; then
        rustup toolchain install "$NIGHTLY" --profile minimal
    fi
    rustup component add --toolchain "$NIGHTLY" miri rust-src
}

# --- miri -------------------------------------------------------------------

# Isolation stays on (no host clock, files or environment: runs are
# reproducible from -Zmiri-seed). parking_lot_core keeps pointers in
# integers (word_lock), hence permissive provenance, said out loud.
MIRI_BASE="-Zmiri-permissive-provenance"

# Suites that never start the process-wide reclaimer thread (their pools are
# built with `.background(false)`): miri's leak check is on.
MIRI_LEAK_CHECKED=(--lib --test model --test reclaim --test reentrant --test stress)

# Suites whose pools use the reclaimer thread. It lives until the process
# exits, by design, and miri counts a thread still running at exit as a
# leak; -Zmiri-ignore-leaks is that check's only switch, so these run without
# the leak check (everything else, including the data-race detector, stays
# on; the counting manager still proves every object destroyed once).
MIRI_WITH_RECLAIMER=(--test panics --test pressure_background)

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

TSAN_SUITES=(--lib --test stress --test reentrant --test pressure_background --test panics --test reclaim --test model)

tsan() {
    # std is rebuilt with the sanitizer, so every lock and atomic in it is
    # seen; halt on the first report so CI fails loudly.
    RUSTFLAGS="-Zsanitizer=thread ${RUSTFLAGS:-}" \
        RUSTDOCFLAGS="-Zsanitizer=thread" \
        TSAN_OPTIONS="halt_on_error=1 ${TSAN_OPTIONS:-}" \
        CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/tsan" \
        cargo +"$NIGHTLY" test -Zbuild-std --target "$HOST" -p tidepool "${TSAN_SUITES[@]}"
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
        step "miri: lib + suites without the reclaimer thread (leak-checked)" miri_leak_checked
        step "miri: suites with the reclaimer thread" miri_with_reclaimer
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
echo "== sanitizers total: $((SECONDS - total)) s"
