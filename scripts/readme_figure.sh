#!/usr/bin/env bash
# Remake the README's sweep figure: the default sweep on the embedded sample
# with the default model, its report, and the chrF plot copied to
# scripts/figures/sweep-chrf.png. Takes about 15 minutes on 2 cores.
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
mkdir -p scripts/figures
cp "$work/report/plots/chrf.png" scripts/figures/sweep-chrf.png
echo "report: $work/report/report.html; figure: scripts/figures/sweep-chrf.png"
