#!/usr/bin/env bash
# Tests crates/tidepool-wasmtime against every wasmtime major version it
# supports, from this work tree's sources:
#
#   wasmtime 48 (the committed Cargo.lock's) on the default toolchain:
#       cargo test -p tidepool-wasmtime --all-features --locked, in place
#       (its clippy is CI's workspace clippy step);
#   wasmtime 49 and 50 on Rust 1.97.0 (50's minimum; 49 needs 1.96):
#       cargo test of the crate against each, and cargo clippy -D warnings
#       against 50, in a copy of the work tree (target/wasmtime-versions/src,
#       built in target/wasmtime-versions/build) whose own Cargo.lock is
#       moved to each in turn.
#
# The committed Cargo.lock and the work tree are left as they were (checked
# at the end). Each run prints the wasmtime version it built and fails if it
# is not the expected one. Installs the 1.97.0 toolchain (minimal, with
# clippy) where it is missing.
#
# Usage: bin/wasmtime-versions.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# The lock's major version; the later releases tested (exact: the copy's
# lock is moved to each), the newest last, and the toolchain they build on.
LOCKED_MAJOR=48
LATER=(49.0.5 50.0.1)
NEWEST=${LATER[-1]}
NEWEST_TOOLCHAIN=1.97.0

root=$(pwd)
target=${CARGO_TARGET_DIR:-target}
case "$target" in /*) ;; *) target="$root/$target" ;; esac
scratch="$target/wasmtime-versions"

status_before=$(git status --porcelain)
lock_before=$(git hash-object Cargo.lock)

# check_version PATTERN CARGO_ARGS...: prints the wasmtime version the
# crate is built with (from the lock cargo builds from) and fails unless it
# matches the glob PATTERN.
check_version() {
    local pattern="$1"
    shift
    local built
    built=$(cargo "$@" tree -p tidepool-wasmtime -i wasmtime --depth 0 --locked | sed -n 1p)
    echo "wasmtime-versions: built with $built (expected $pattern)"
    # shellcheck disable=SC2254 # the pattern is a glob on purpose
    case "$built" in
        "wasmtime v"$pattern) ;;
        *)
            echo "wasmtime-versions: expected wasmtime $pattern, got '$built'" >&2
            exit 1
            ;;
    esac
}

echo "== wasmtime $LOCKED_MAJOR (Cargo.lock), $(rustc --version)"
check_version "$LOCKED_MAJOR.*"
cargo test -p tidepool-wasmtime --all-features --locked
echo "wasmtime-versions: wasmtime $LOCKED_MAJOR done in $SECONDS s"

start=$SECONDS
echo "== wasmtime ${LATER[*]}, Rust $NEWEST_TOOLCHAIN"
if ! rustup run "$NEWEST_TOOLCHAIN" rustc --version >/dev/null 2>&1; then
    rustup toolchain install "$NEWEST_TOOLCHAIN" --profile minimal --component clippy
elif ! rustup run "$NEWEST_TOOLCHAIN" cargo clippy --version >/dev/null 2>&1; then
    rustup component add clippy --toolchain "$NEWEST_TOOLCHAIN"
fi
# A fresh copy of the work tree's files (tracked and untracked, not the
# ignored ones), so the copy's Cargo.lock can move; its build directory
# stays between runs. Kept mtimes let cargo reuse what did not change.
src="$scratch/src"
rm -rf "$src"
mkdir -p "$src"
git ls-files -z --cached --others --exclude-standard |
    tar --null --files-from=- --ignore-failed-read -cf - 2>/dev/null |
    tar -xf - -C "$src"
(
    cd "$src"
    export CARGO_TARGET_DIR="$scratch/build"
    for version in "${LATER[@]}"; do
        cargo "+$NEWEST_TOOLCHAIN" update -p wasmtime --precise "$version"
        check_version "$version" "+$NEWEST_TOOLCHAIN"
        cargo "+$NEWEST_TOOLCHAIN" test -p tidepool-wasmtime --all-features --locked
    done
    cargo "+$NEWEST_TOOLCHAIN" clippy -p tidepool-wasmtime --all-targets --all-features --locked \
        -- -D warnings
)
echo "wasmtime-versions: wasmtime ${LATER[*]} done in $((SECONDS - start)) s"

if [ "$(git hash-object Cargo.lock)" != "$lock_before" ] ||
    [ "$(git status --porcelain)" != "$status_before" ]; then
    echo "wasmtime-versions: the work tree changed:" >&2
    git status --short >&2
    exit 1
fi
echo "wasmtime-versions: wasmtime $LOCKED_MAJOR ${LATER[*]} pass"
