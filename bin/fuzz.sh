#!/usr/bin/env bash
# Fuzzes the C ABI with libFuzzer and AddressSanitizer (fuzz/, target
# `c_abi`: two threads of C calls per input, misuse included; see the top of
# fuzz/fuzz_targets/c_abi.rs).
#
#   bin/fuzz.sh            60 seconds (what .ci/run does)
#   bin/fuzz.sh 3600       an hour; -jobs on every core: FUZZ_JOBS=2 bin/fuzz.sh 3600
#   bin/fuzz.sh --cmin     shrink the checked-in corpus to what covers the same
#                          (the named regression inputs stay)
#
# Needs nightly and cargo-fuzz (installed here if missing, from crates.io).
# Inputs that found something land in fuzz/artifacts/c_abi/; rerun one with
# `cd fuzz && cargo +nightly fuzz run c_abi artifacts/c_abi/<file>`. New
# inputs that add coverage go to fuzz/corpus/c_abi/ (checked in).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root/fuzz"

if ! command -v cargo-fuzz >/dev/null; then
    echo "cargo-fuzz not found: installing it (cargo install cargo-fuzz --locked)" >&2
    cargo install cargo-fuzz --locked >&2
fi
rustup component list --toolchain nightly --installed 2>/dev/null | grep -q '^rust-src' ||
    rustup component add rust-src --toolchain nightly >&2

if [[ "${1:-}" == "--cmin" ]]; then
    cargo +nightly fuzz cmin c_abi corpus/c_abi
    # cmin keeps what adds coverage; a finding's input, checked in under a
    # name of its own (not a hash), stays whatever it covers.
    git -C "$root" ls-files 'fuzz/corpus/c_abi/*' |
        { grep -v '/[0-9a-f]\{40\}$' || true; } |
        xargs -r git -C "$root" checkout --
    exit 0
fi
seconds="${1:-60}"
jobs="${FUZZ_JOBS:-1}"
mkdir -p corpus/c_abi
cargo +nightly fuzz build c_abi >&2
# -timeout: an input that runs 10 s is a hang; -rss_limit_mb: ASan's shadow
# memory and the pools' mappings need more than the default 2 GiB.
cargo +nightly fuzz run c_abi corpus/c_abi -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
    -jobs="$jobs" -workers="$jobs" -print_final_stats=1 2>&1 |
    grep -E '^(#[0-9]+ +DONE|stat::number_of_executed_units|==[0-9]+==|SUMMARY|thread .* panicked)' || true
if compgen -G "artifacts/c_abi/*" >/dev/null; then
    echo "FAIL: the fuzzer found something: fuzz/artifacts/c_abi/" >&2
    ls artifacts/c_abi >&2
    exit 1
fi
echo "fuzz: ok (${seconds} s, no finding)"
