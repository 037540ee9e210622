#!/usr/bin/env bash
# The C library's ABI against the checked-in baseline, with libabigail.
#
#   bin/abi-check.sh           build the library now (with DWARF), compare
#   bin/abi-check.sh --bless   write the baseline from the library now
#   bin/abi-check.sh --demo    in a scratch worktree: a moved field of a public
#                              struct fails the check, an added function passes
#
# The baseline is `abidw` of libtidepool.so as bin/c-install.sh builds it
# with --debug (the installed library has no debug info; abidw reads the
# struct layouts from DWARF): crates/tidepool-ffi/abi/libtidepool.abi.
#
# `abidiff` then compares. The check fails on a removed or changed function
# or variable (a changed signature, or a changed layout of a struct a
# function reaches: a moved, removed or resized field) and passes when
# functions were only added. While the version is 0.x the promise is that of
# the SONAME: a patch release keeps the ABI; a new minor may break it, and
# its baseline is blessed with the version bump.
#
# The baseline is rustc's DWARF: a new Rust toolchain may name the same
# types differently. After a toolchain update, read the report, and bless
# when it shows only renames.
#
# `tidepool_pool` is opaque to C (the header declares no fields): its Rust
# layout is the library's own and is not compared
# (crates/tidepool-ffi/abi/suppressions.abignore).
#
# Installs Debian's abigail-tools if abidw is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

baseline=crates/tidepool-ffi/abi/libtidepool.abi
suppressions=crates/tidepool-ffi/abi/suppressions.abignore
mode="${1:-check}"

if ! command -v abidw >/dev/null; then
    echo "installing abigail-tools"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq abigail-tools >/dev/null
fi

# abidw of the library built from the tree at $1, into $2.
dump() {
    local tree="$1" out="$2" prefix
    prefix="$(mktemp -d)"
    "$tree/bin/c-install.sh" --debug --prefix="$prefix" >/dev/null
    abidw --no-corpus-path --no-comp-dir-path --short-locs --no-architecture \
        --out-file "$out" "$prefix"/lib/libtidepool.so.*.*.*
    rm -rf "$prefix"
}

# Compares $1 with the baseline; says why, returns 0 (compatible) or 1.
compare() {
    local current="$1" report rc=0
    report="$(abidiff --suppressions "$suppressions" --no-show-locs "$baseline" "$current")" || rc=$?
    printf '%s\n' "$report" | sed 's/^/    /'
    if [ $((rc & 3)) != 0 ]; then
        echo "abi-check: abidiff failed (status $rc)" >&2
        return 1
    fi
    if [ $((rc & 8)) != 0 ]; then
        echo "abi-check: INCOMPATIBLE: a function or variable was removed"
        return 1
    fi
    # Changes abidiff deems compatible may still be changed functions (a
    # struct they reach has a new layout): only additions pass.
    local changed
    changed="$(printf '%s\n' "$report" |
        sed -n 's/^\(Functions\|Variables\) changes summary: \([0-9]*\) Removed[^,]*, \([0-9]*\) Changed.*/\2 \3/p' |
        awk '{ n += $1 + $2 } END { print n + 0 }')"
    if [ "$changed" != 0 ]; then
        echo "abi-check: INCOMPATIBLE: $changed functions or variables removed or changed"
        return 1
    fi
    echo "abi-check: compatible with the baseline$([ $((rc & 4)) != 0 ] && echo ' (additions only)')"
}

case "$mode" in
--bless)
    mkdir -p "$(dirname "$baseline")"
    dump "$PWD" "$baseline"
    echo "abi-check: wrote $baseline"
    ;;
check)
    current="$(mktemp)"
    trap 'rm -f "$current"' EXIT
    dump "$PWD" "$current"
    compare "$current"
    ;;
--demo)
    scratch="$(mktemp -d)"
    trap 'git worktree remove --force "$scratch/tree" >/dev/null 2>&1 || true; rm -rf "$scratch"' EXIT
    git worktree add --detach --quiet "$scratch/tree" HEAD
    cp "$baseline" "$suppressions" "$scratch/tree/crates/tidepool-ffi/abi/"
    stack="$scratch/tree/crates/tidepool-ffi/src/stack.rs"
    # 1. Move a field of a public struct: `size` before `top` in
    #    tidepool_stack.
    python3 - "$stack" <<'EOF'
import sys
p = sys.argv[1]
s = open(p).read()
top = "    pub top: *mut c_void,\n"
size = "    pub size: usize,\n"
assert top in s and size in s
s = s.replace(top, "@TOP@", 1).replace(size, top, 1).replace("@TOP@", size, 1)
open(p, "w").write(s)
EOF
    echo "== demo 1: tidepool_stack's size moved before top"
    dump "$scratch/tree" "$scratch/moved.abi"
    if compare "$scratch/moved.abi"; then
        echo "abi-check --demo: FAILED: a moved field passed the check" >&2
        exit 1
    fi
    (cd "$scratch/tree" && git checkout --quiet -- crates/tidepool-ffi/src/stack.rs)
    # 2. Add a function.
    cat >>"$scratch/tree/crates/tidepool-ffi/src/abi/pool.rs" <<'EOF'

/// Added by bin/abi-check.sh --demo: a new function is a compatible change.
#[no_mangle]
pub extern "C" fn tidepool_abi_demo_added() -> u32 {
    TIDEPOOL_VERSION_MINOR
}
EOF
    echo "== demo 2: a function added"
    dump "$scratch/tree" "$scratch/added.abi"
    if ! compare "$scratch/added.abi"; then
        echo "abi-check --demo: FAILED: an added function failed the check" >&2
        exit 1
    fi
    echo "abi-check --demo: a moved field fails, an added function passes"
    ;;
*)
    echo "usage: bin/abi-check.sh [--bless | --demo]" >&2
    exit 2
    ;;
esac
