#!/usr/bin/env bash
# Builds the cuda binary (`cargo build --release --features cuda`) with the CUDA 13.0
# toolchain of scripts/cuda_toolchain.sh (installed on first use), and prints its path
# on stdout (cargo's output goes to stderr). The same flags everywhere (CI,
# scripts/gpu_check.sh, by hand), so the target folder's cache is reused:
#
#   target folder  $THEMISTO_CUDA_TARGET, default $HOME/.cache/themisto/cuda-target
#                  (outside the repository: a fresh clone builds incrementally)
#   RUSTFLAGS      -C target-cpu=x86-64-v3 (AVX2/FMA, no AVX-512), the same as
#                  .cargo/config.toml's default, set here too so that a RUSTFLAGS of
#                  the caller cannot change it: the binary is carried to GPU machines
#                  whose CPU may differ from the build machine's. The native engine
#                  picks its kernels at run time either way.
#
# Usage: scripts/cuda_build.sh [extra cargo build arguments]
# A cold build takes about 25 minutes on 2 cores; a warm one, seconds to minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

target="${THEMISTO_CUDA_TARGET:-$HOME/.cache/themisto/cuda-target}"
vars="$(bash scripts/cuda_toolchain.sh)"
mapfile -t envs <<<"$vars"
env "${envs[@]}" CARGO_TARGET_DIR="$target" RUSTFLAGS="-C target-cpu=x86-64-v3" \
  cargo build --release --features cuda "$@" >&2
echo "$target/release/themisto"
