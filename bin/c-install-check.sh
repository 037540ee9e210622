#!/usr/bin/env bash
# The C library as a C project takes it: installed by bin/c-install.sh into a
# fresh prefix, then used only from there (PKG_CONFIG_PATH points at the
# prefix; nothing reads the workspace but the consumers' sources).
#
#   bin/c-install-check.sh
#
# Checks, each failing the run:
#   * the layout: libtidepool.so.X.Y.Z with SONAME libtidepool.so.X.Y and its
#     links, libtidepool.a, tidepool.pc, tidepool.h; no debug info;
#   * the shared object exports only tidepool_* symbols;
#   * the header's TIDEPOOL_VERSION_*, tidepool_version() and
#     `pkg-config --modversion tidepool` agree;
#   * the C examples (ucontext coroutines, the QEMU-shaped pool) built with
#     `cc $(pkg-config --cflags --libs tidepool)` run on the prefix's shared
#     library (ldd says so), and linked statically (`pkg-config --static`)
#     with no libtidepool at run time;
#   * a meson project (`dependency('tidepool')`) and a CMake project
#     (`pkg_check_modules(... IMPORTED_TARGET tidepool)`) build and run;
#   * a program built against a newer header is refused at pool_new;
#   * an install into a prefix that cannot be written fails with a clear
#     error and leaves nothing behind.
# Prints the stripped shared object's size and what static linking adds to
# the stripped QEMU-shaped example (the README's figures).
#
# Installs what it needs if missing: cargo-c (bin/c-install.sh), and Debian's
# pkg-config, meson, ninja-build and cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

need=()
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v meson >/dev/null || need+=(meson)
command -v ninja >/dev/null || need+=(ninja-build)
command -v cmake >/dev/null || need+=(cmake)
if [ "${#need[@]}" -gt 0 ]; then
    echo "installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"
bin/c-install.sh --prefix="$prefix"

fail() {
    echo "c-install-check: FAILED: $*" >&2
    exit 1
}
ok() { echo "ok: $*"; }

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
unset PKG_CONFIG_LIBDIR
lib="$prefix/lib"
version="$(pkg-config --modversion tidepool)"
major_minor="${version%.*}"

# --- layout ---------------------------------------------------------------
[ -f "$lib/libtidepool.so.$version" ] && [ ! -L "$lib/libtidepool.so.$version" ] ||
    fail "no $lib/libtidepool.so.$version"
[ "$(readlink "$lib/libtidepool.so.$major_minor")" = "libtidepool.so.$version" ] ||
    fail "libtidepool.so.$major_minor does not link to libtidepool.so.$version"
[ -L "$lib/libtidepool.so" ] || fail "no libtidepool.so development link"
soname="$(readelf -d "$lib/libtidepool.so.$version" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')"
[ "$soname" = "libtidepool.so.$major_minor" ] || fail "SONAME is '$soname'"
[ -f "$lib/libtidepool.a" ] || fail "no libtidepool.a"
[ -f "$prefix/include/tidepool.h" ] || fail "no include/tidepool.h"
grep -q '^Libs.private:.*-lpthread' "$lib/pkgconfig/tidepool.pc" ||
    fail "tidepool.pc has no Libs.private with the system libraries"
for f in "$lib/libtidepool.so.$version" "$lib/libtidepool.a"; do
    if readelf -S -W "$f" | grep -q '\.debug_info'; then
        fail "$f carries debug info"
    fi
done
ok "layout: libtidepool.so.$version (SONAME $soname), links, .a, .pc, header; no debug info"

# --- exports ----------------------------------------------------------------
foreign="$(nm -D --defined-only --format=posix "$lib/libtidepool.so.$version" |
    awk '{print $1}' | grep -v '^tidepool_' || true)"
[ -z "$foreign" ] || fail "exports outside the C API: $foreign"
ok "exports: $(nm -D --defined-only "$lib/libtidepool.so.$version" | wc -l) symbols, all tidepool_*"

# --- versions ---------------------------------------------------------------
cc -std=c11 -Wall -Wextra -Werror crates/tidepool-ffi/consumers/version.c \
    $(pkg-config --cflags --libs tidepool) -Wl,-rpath,"$lib" -o "$work/version"
read -r header_version library_version < <("$work/version")
[ "$header_version" = "$version" ] && [ "$library_version" = "$version" ] ||
    fail "versions differ: header $header_version, library $library_version, pkg-config $version"
ok "version $version: header, tidepool_version() and pkg-config agree"

# --- the C examples, shared and static ----------------------------------------
examples=crates/tidepool-ffi/examples/c
cflags=(-std=c11 -O2 -Wall -Wextra -Werror)
static_libs="$(pkg-config --static --libs tidepool |
    sed 's/-ltidepool/-Wl,-Bstatic -ltidepool -Wl,-Bdynamic/')"
for ex in coroutines qemu_coroutine_pool; do
    # shellcheck disable=SC2046 # pkg-config's words are meant to split
    cc "${cflags[@]}" "$examples/$ex.c" $(pkg-config --cflags --libs tidepool) \
        -Wl,-rpath,"$lib" -o "$work/$ex-shared"
    # shellcheck disable=SC2086
    cc "${cflags[@]}" "$examples/$ex.c" $(pkg-config --cflags tidepool) $static_libs \
        -o "$work/$ex-static"
    ldd "$work/$ex-shared" | grep -q "libtidepool.so.$major_minor => $lib/libtidepool.so.$major_minor" ||
        fail "$ex-shared does not run on the prefix's library: $(ldd "$work/$ex-shared")"
    if ldd "$work/$ex-static" | grep -q libtidepool; then
        fail "$ex-static still loads libtidepool"
    fi
done
ldd "$work/qemu_coroutine_pool-shared" | grep libtidepool
for kind in shared static; do
    [ "$("$work/coroutines-$kind" run 2000 | tail -1)" = "ok run" ] ||
        fail "coroutines-$kind run"
    for case in "lifecycle tidepool 20000" cross_thread signalfd resize thread_exit; do
        # shellcheck disable=SC2086
        out="$("$work/qemu_coroutine_pool-$kind" $case | tail -1)"
        [ "$out" = "ok ${case%% *}" ] || fail "qemu_coroutine_pool-$kind $case: $out"
    done
    ok "examples linked $kind: coroutines run, qemu_coroutine_pool (5 cases)"
done

# --- meson and CMake consumers -------------------------------------------------
for tool in meson cmake; do
    mkdir -p "$work/$tool"
    cp crates/tidepool-ffi/consumers/"$tool"/* "$examples/qemu_coroutine_pool.c" "$work/$tool/"
done
(cd "$work/meson" && meson setup build >/dev/null && meson compile -C build >/dev/null) ||
    fail "the meson project does not build"
[ "$("$work/meson/build/qemu_coroutine_pool" lifecycle tidepool 20000 | tail -1)" = "ok lifecycle" ] ||
    fail "the meson-built example"
ok "meson: dependency('tidepool') builds and runs"
(cd "$work/cmake" && cmake -S . -B build >/dev/null &&
    cmake --build build >/dev/null) || fail "the CMake project does not build"
[ "$("$work/cmake/build/qemu_coroutine_pool" lifecycle tidepool 20000 | tail -1)" = "ok lifecycle" ] ||
    fail "the CMake-built example"
ok "cmake: pkg_check_modules(IMPORTED_TARGET tidepool) builds and runs"

# --- a newer header than the library -----------------------------------------
cc -std=c11 -Wall -Wextra -Werror crates/tidepool-ffi/consumers/newer_header.c \
    $(pkg-config --cflags --libs tidepool) -Wl,-rpath,"$lib" -o "$work/newer_header"
"$work/newer_header" | tee "$work/newer.out"
[ "$(tail -1 "$work/newer.out")" = "ok newer_header" ] || fail "newer header"
ok "a config from a newer header is refused with TIDEPOOL_ERR_STRUCT_SIZE"

# --- DESTDIR, as packagers stage ---------------------------------------------------
bin/c-install.sh --prefix=/usr --libdir=lib/x86_64-linux-gnu --destdir="$work/stage" >/dev/null
[ -L "$work/stage/usr/lib/x86_64-linux-gnu/libtidepool.so" ] &&
    [ -f "$work/stage/usr/include/tidepool.h" ] || fail "DESTDIR staging: $(find "$work/stage")"
grep -q '^prefix=/usr$' "$work/stage/usr/lib/x86_64-linux-gnu/pkgconfig/tidepool.pc" ||
    fail "the staged tidepool.pc does not say prefix=/usr"
ok "DESTDIR and --libdir honoured: staged under $work/stage, .pc says /usr"

# --- an install that cannot be done ---------------------------------------------
touch "$work/in-the-way"
if bin/c-install.sh --prefix="$work/in-the-way/prefix" 2>"$work/refused.err"; then
    fail "an install under a regular file succeeded"
fi
grep -q "cannot install into" "$work/refused.err" || fail "no clear error: $(cat "$work/refused.err")"
[ -f "$work/in-the-way" ] && [ ! -s "$work/in-the-way" ] || fail "the file in the way changed"
mkdir "$work/readonly"
chmod 555 "$work/readonly"
if [ "$(id -u)" != 0 ]; then
    if bin/c-install.sh --prefix="$work/readonly/prefix" 2>"$work/refused.err"; then
        fail "an install into a read-only directory succeeded"
    fi
    [ -z "$(ls -A "$work/readonly")" ] || fail "a refused install left files behind"
fi
ok "an unwritable prefix: '$(head -1 "$work/refused.err")', nothing installed"

# --- sizes (the README's figures) --------------------------------------------------
so_size=$(stat -c %s "$lib/libtidepool.so.$version")
strip -o "$work/q-shared" "$work/qemu_coroutine_pool-shared"
strip -o "$work/q-static" "$work/qemu_coroutine_pool-static"
echo "size: libtidepool.so.$version $so_size bytes;" \
    "qemu_coroutine_pool stripped: shared $(stat -c %s "$work/q-shared")," \
    "static $(stat -c %s "$work/q-static") bytes"
echo "c-install-check: all passed"
