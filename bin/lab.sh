#!/usr/bin/env bash
# tidepool-lab: reproduce the seeds' findings on this machine (issue #5).
#
#   bin/lab.sh              full run (about 2.5 minutes on 2 cores), report in target/lab/
#   bin/lab.sh --quick      small sizes, a few seconds per scenario
#   bin/lab.sh --scenario map-count --policy qemu-2021,tidepool
#
# Any argument is passed to `tidepool-lab run` (see `--help`). The report is
# target/lab/report.json and target/lab/report.html (open it in a browser).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${LAB_OUT:-target/lab}"
cargo run --release -p tidepool-lab -- run --out "$out" "$@"
