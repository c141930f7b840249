#!/usr/bin/env bash
# Smoke test of the Slurm path on a real local Slurm: start the single-node
# cluster (local_cluster.sh), submit a 3-shard array and its merge with
# submit.sh, wait for them, and check that the merged run equals one
# unsharded run of the same options (predictions, scores and group results;
# timings aside). Uses the default model (fetched on first use) on the
# embedded sample.
#
# usage: scripts/slurm/smoke.sh [THEMISTO_BINARY]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="${1:-$root/target/release/themisto}"
[ -x "$bin" ] || { echo "error: no themisto binary at $bin (cargo build --release, or pass its path)" >&2; exit 2; }
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
bash "$here/local_cluster.sh" start >/dev/null
work="$(mktemp -d /tmp/themisto-slurm.XXXXXX)"
args="--limit 2 --max-new-tokens 16 --context-tokens 1024"
"$bin" models fetch smollm2-135m-instruct >/dev/null
echo "== unsharded run"
# shellcheck disable=SC2086
"$bin" run $args --quiet --out "$work/whole" >/dev/null
echo "== 3 shards + merge through Slurm"
start=$(date +%s)
THEMISTO="$bin" bash "$here/submit.sh" 3 "$work/sharded" $args
for _ in $(seq 1 600); do
    [ -z "$(squeue -h -u "$(id -un)" -n themisto-shard,themisto-merge)" ] && break
    sleep 1
done
echo "slurm jobs done in $(( $(date +%s) - start )) s"
[ -f "$work/sharded/merged/results.json" ] || { echo "FAIL: no merged results"; cat "$work"/sharded/*.log; exit 1; }
python3 - "$work/whole" "$work/sharded/merged" <<'PY'
import json, sys
a, b = sys.argv[1], sys.argv[2]
keys = ["id", "raw_prediction", "prediction", "scores", "prompt_tokens", "steps_kept", "finish_reason", "answer_kind"]
ra = [json.loads(l) for l in open(f"{a}/samples.jsonl")]
rb = [json.loads(l) for l in open(f"{b}/samples.jsonl")]
same = [[r.get(k) for k in keys] for r in ra] == [[r.get(k) for k in keys] for r in rb]
ga, gb = json.load(open(f"{a}/results.json"))["groups"], json.load(open(f"{b}/results.json"))["groups"]
print(f"samples: {len(ra)} unsharded, {len(rb)} merged; records equal: {same}; groups equal: {ga == gb}")
sys.exit(0 if same and ga == gb else 1)
PY
echo "PASS (work folder $work)"
