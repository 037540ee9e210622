#!/usr/bin/env bash
# Renders the lab's report.html in headless Chromium and checks what a
# person would check: every plot has axis labels with units and a legend
# off the data, no text is clipped, the summary table is on the first
# screen. Leaves a PNG of the first screen, of the whole page, and of each
# section in target/report-check/ (look at them).
#
#   bin/report-check.sh              a --quick lab run, then the check
#   bin/report-check.sh DIR          the check of DIR/report.html
#
# Installs Debian's `chromium` package if it is missing (apt-get, as root or
# through sudo). No network is needed after that: the page is self-contained
# and Chromium runs with every background fetch off.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null 2>&1; then
    echo "report-check: chromium not found; installing Debian's chromium package"
    sudo=""
    if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
    $sudo apt-get update
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y chromium
fi
chromium_bin="$(command -v chromium)"
echo "report-check: $("$chromium_bin" --version 2>/dev/null || echo chromium)"

out="target/report-check"
mkdir -p "$out"
dir="${1:-}"
if [ -z "$dir" ]; then
    dir="$out/lab"
    echo "report-check: a --quick lab run into $dir"
    cargo run -q -p tidepool-lab -- run --quick --quiet --out "$dir" >/dev/null
fi
dir="$(cd "$dir" && pwd)"
test -f "$dir/report.html" || { echo "report-check: no $dir/report.html" >&2; exit 1; }

TIDEPOOL_REPORT_DIR="$dir" TIDEPOOL_REPORT_SHOTS="$(pwd)/$out" CHROMIUM="$chromium_bin" \
    cargo test -q -p tidepool-lab --test report_check -- --ignored --nocapture
echo "report-check: screenshots in $out/"
