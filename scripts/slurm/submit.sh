#!/usr/bin/env bash
# Submit a sharded themisto run to Slurm: an array of N shard tasks and the
# merge as a job that starts when all of them succeeded. Prints both job ids.
#
# usage: scripts/slurm/submit.sh N OUT_DIR [themisto run options...]
#   e.g. scripts/slurm/submit.sh 8 /scratch/q7b --model qwen2.5-coder-0.5b-instruct --context-tokens 4096
# Extra sbatch options (partition, time, CPUs, GPUs) go in SBATCH_ARGS, e.g.
#   SBATCH_ARGS="--partition=gpu --gres=gpu:1 --cpus-per-task=8"
# THEMISTO names the binary (default: themisto on PATH).
set -euo pipefail
if [ $# -lt 2 ]; then
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"
n="$1"
out="$(mkdir -p "$2" && cd "$2" && pwd)"
shift 2
export THEMISTO="${THEMISTO:-$(command -v themisto || echo themisto)}"
export THEMISTO_OUT="$out" THEMISTO_SHARDS="$n" THEMISTO_ARGS="$*"
# shellcheck disable=SC2086 # SBATCH_ARGS is a list of options
array=$(sbatch --parsable ${SBATCH_ARGS:-} --chdir="$out" --array="0-$((n - 1))" --export=ALL "$here/themisto-array.sbatch")
merge=$(sbatch --parsable ${SBATCH_ARGS:-} --chdir="$out" --dependency="afterok:$array" --export=ALL "$here/themisto-merge.sbatch")
echo "array job $array ($n shards), merge job $merge -> $out/merged"
