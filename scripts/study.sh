#!/usr/bin/env bash
# The runtime-effect and context-curve study: SmolLM2-135M, Qwen2.5-Coder-0.5B
# and Qwen2.5-Coder-1.5B on the embedded sample (every eligible step:
# --protocol all), at budgets 512,1024,2048,4096, with and without runtime
# information; then one report over the three sweeps.
#
# Resumable: each model has its own sweep folder under $OUT, and running the
# script again continues every unfinished run (themisto sweep continues a
# sweep folder). Run it in the background, e.g.
#   nohup scripts/study.sh > study.log 2>&1 &
#
# Options (all optional):
#   --out DIR          study folder (default: study)
#   --models A,B,...   registry ids (default: the three models above)
#   --budgets N,N,...  context budgets (default: 512,1024,2048,4096)
#   --budgets-1p5b N,N budgets of the 1.5B model (default: --budgets)
#   --limit N          samples per task x runtime group (default: all)
#   --threads N        CPU threads (default: all cores)
# Environment: THEMISTO, the binary (default: target/release/themisto, built
# with `cargo build --release` when missing).
set -euo pipefail
cd "$(dirname "$0")/.."

out=study
models=smollm2-135m-instruct,qwen2.5-coder-0.5b-instruct,qwen2.5-coder-1.5b-instruct
budgets=512,1024,2048,4096
budgets_big=
limit=1000000
threads=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --budgets) budgets=$2; shift 2 ;;
    --budgets-1p5b) budgets_big=$2; shift 2 ;;
    --limit) limit=$2; shift 2 ;;
    --threads) threads=(--threads "$2"); shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "study.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
bin=${THEMISTO:-target/release/themisto}
if [ ! -x "$bin" ]; then
  cargo build --release
fi
mkdir -p "$out"
sweeps=()
IFS=, read -r -a ids <<< "$models"
for id in "${ids[@]}"; do
  b=$budgets
  if [ "$id" = qwen2.5-coder-1.5b-instruct ] && [ -n "$budgets_big" ]; then
    b=$budgets_big
  fi
  start=$(date +%s)
  echo "== $id at budgets $b ($(date -u +%FT%TZ))"
  rc=0
  "$bin" sweep --model "$id" --data sample --protocol all --runtime both --limit "$limit" \
    --context-tokens "$b" "${threads[@]}" --quiet --out "$out/$id" || rc=$?
  # 4: the sweep finished with failed samples (running the study again retries them).
  if [ "$rc" -eq 4 ]; then
    echo "== $id: some samples failed (exit 4); run the study again to retry them"
  elif [ "$rc" -ne 0 ]; then
    exit "$rc"
  fi
  echo "== $id done in $(( $(date +%s) - start )) s"
  sweeps+=("$out/$id")
done
"$bin" report "${sweeps[@]}" --out "$out/report"
echo "report: $out/report/report.md"
