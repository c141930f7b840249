#!/usr/bin/env bash
# Remake the sweep figure of docs/reports.md: the default sweep on the embedded sample
# with the default model, its report, and the chrF plot copied to
# docs/img/sweep-chrf.png. Takes about 15 minutes on 2 cores.
#
#     bash scripts/readme_figure.sh [WORK_DIR]     (default WORK_DIR: runs/readme-sweep)
#
# Running it again continues an interrupted sweep (same arguments).
set -euo pipefail
cd "$(dirname "$0")/.."
work="${1:-runs/readme-sweep}"
cargo build --release
time ./target/release/themisto sweep --out "$work/sweep"
./target/release/themisto report "$work/sweep" --out "$work/report"
mkdir -p docs/img
cp "$work/report/plots/chrf.png" docs/img/sweep-chrf.png
echo "report: $work/report/report.html; figure: docs/img/sweep-chrf.png"
