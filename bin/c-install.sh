#!/usr/bin/env bash
# Installs tidepool's C library, as a distribution would package it:
#
#   bin/c-install.sh [--prefix=DIR] [--libdir=DIR] [--destdir=DIR] [--debug]
#
#   PREFIX/LIBDIR/libtidepool.so.0.1.0      the shared library (SONAME
#   PREFIX/LIBDIR/libtidepool.so.0.1 -> …   libtidepool.so.0.1: a 0.x minor
#   PREFIX/LIBDIR/libtidepool.so -> …       may break the ABI), the links
#   PREFIX/LIBDIR/libtidepool.a             the static library
#   PREFIX/LIBDIR/pkgconfig/tidepool.pc     pkg-config, `Libs.private` set
#   PREFIX/include/tidepool.h               the header
#
# --prefix defaults to /usr/local, --libdir to PREFIX/lib (a relative
# --libdir is taken under PREFIX: `--libdir=lib/x86_64-linux-gnu` for Debian's
# multiarch layout). --destdir (or the DESTDIR environment variable) stages
# the tree under another root, for packagers: the files land in
# DESTDIR/PREFIX/..., and say PREFIX in the .pc file. The libraries carry no
# debug info; --debug keeps it (`abidw` needs it: bin/abi-check.sh).
#
# Built with cargo-c (`cargo cinstall`): it is installed first if missing
# (`cargo install cargo-c --locked`, the release that fits this rustc).
#
# Nothing is left half-installed: everything is staged in a temporary
# directory first; the destination is checked for write access before a file
# is copied; and if a copy still fails, the files this run copied are
# removed again.
set -euo pipefail
cd "$(dirname "$0")/.."

# The newest cargo-c release whose cargo builds with this repository's rustc.
CARGO_C_VERSION=0.10.24

prefix=/usr/local
libdir=
destdir="${DESTDIR:-}"
cargo_profile=c-release
for arg in "$@"; do
    case "$arg" in
    --prefix=*) prefix="${arg#*=}" ;;
    --libdir=*) libdir="${arg#*=}" ;;
    --destdir=*) destdir="${arg#*=}" ;;
    --debug) cargo_profile=c-debug-info ;;
    -h | --help)
        sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "c-install.sh: unknown argument '$arg' (see --help)" >&2
        exit 2
        ;;
    esac
done
case "$prefix" in
/*) ;;
*)
    echo "c-install.sh: --prefix must be an absolute path, not '$prefix'" >&2
    exit 2
    ;;
esac
prefix="${prefix%/}"
[ -n "$prefix" ] || prefix=/
case "$libdir" in
"") libdir="$prefix/lib" ;;
/*) ;;
*) libdir="$prefix/$libdir" ;;
esac

if ! command -v cargo-cinstall >/dev/null; then
    echo "c-install.sh: installing cargo-c $CARGO_C_VERSION (once)" >&2
    cargo install cargo-c --version "$CARGO_C_VERSION" --locked
fi

# The nearest directory that exists on the way to `dir` must be writable.
writable_or_die() {
    local dir="$1" probe="$1"
    while [ ! -e "$probe" ]; do
        probe="$(dirname "$probe")"
    done
    if [ ! -d "$probe" ] || [ ! -w "$probe" ]; then
        echo "c-install.sh: cannot install into $dir: $probe is not a writable directory" \
            "(choose another --prefix, or --destdir to stage the files)" >&2
        exit 1
    fi
}
for dir in "$libdir" "$libdir/pkgconfig" "$prefix/include"; do
    writable_or_die "${destdir%/}$dir"
done

stage="$(mktemp -d)"
copied=()
made=()
cleanup() {
    local rc=$?
    if [ "$rc" != 0 ] && [ "$((${#copied[@]} + ${#made[@]}))" -gt 0 ]; then
        echo "c-install.sh: install failed; removing what it put in place" >&2
        rm -f "${copied[@]}"
        for ((i = ${#made[@]} - 1; i >= 0; i--)); do
            rmdir "${made[$i]}" 2>/dev/null || true
        done
    fi
    rm -rf "$stage"
}
trap cleanup EXIT

# The workspace's `c-release` profile (release, no debug info) or, with
# --debug, `c-debug-info` (release with DWARF, for abidw).
cargo cinstall -p tidepool-ffi --profile "$cargo_profile" \
    --prefix "$prefix" --libdir "$libdir" --includedir "$prefix/include" \
    --destdir "$stage" >&2
# A static library carries the debug info of the standard library's
# objects: gone too, unless asked for.
if [ "$cargo_profile" = c-release ]; then
    find "$stage" -name '*.a' -exec strip --strip-debug {} +
fi

# Copy the staged tree into place: directories first (those made here are
# remembered), then each file.
if [ -n "$destdir" ] && [ ! -d "$destdir" ]; then
    d="$destdir"
    while [ ! -e "$d" ]; do
        made=("$d" "${made[@]}")
        d="$(dirname "$d")"
    done
    mkdir -p "$destdir"
fi
while read -r d; do
    dest="${destdir%/}/${d#./}"
    if [ ! -d "$dest" ]; then
        mkdir "$dest"
        made+=("$dest")
    fi
done < <(cd "$stage" && find . -mindepth 1 -type d | sort)
while read -r f; do
    dest="${destdir%/}/${f#./}"
    cp -P "$stage/$f" "$dest"
    copied+=("$dest")
done < <(cd "$stage" && find . ! -type d | sort)
echo "installed into ${destdir:+$destdir }$prefix:"
(cd "$stage" && find . ! -type d | sort | sed 's|^\.|  |')
