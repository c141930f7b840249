#!/usr/bin/env bash
# The GPU check with the real default model through a transfer limit that a whole
# bundle does not fit (at most 64 MiB travels to the GPU machine a call by default,
# --budget-mib; the default model's GGUF is 98 MB): the bundle goes over in two calls to the same warm machine.
#
#   bash scripts/gpu_check.sh pack BUNDLE --no-libs          # here (Rust, network)
#   bash scripts/gpu_check_parts.sh prepare BUNDLE DIR [--budget-mib 64]   # here
#   bash scripts/gpu_check_parts.sh first DIR/1              # there, call 1
#   bash scripts/gpu_check_parts.sh second DIR/2 [gpu_check run options]   # there, call 2
#
# prepare splits BUNDLE into DIR/1 (the cuda binary, xz-compressed, and the first
# part of the GGUF) and DIR/2 (the rest of the GGUF, the safetensors folder's small
# files, a digest of its tensors, the gguf Python package as a wheel, the bundle's
# MANIFEST.txt), each sized so that it and the repository's working tree stay under
# --budget-mib. The safetensors weights (540 MB in f32) are not carried: `second`
# converts them there from the GGUF with scripts/gguf_to_safetensors.py and checks
# the tensors against the digest made here (safetensors writes its metadata keys in
# no fixed order, so the file's own sha256 can differ).
# first keeps the binary and part 1 in $THEMISTO_GPU_KEEP (default
# /tmp/themisto-gpu-keep); second, in the next call on the same machine, puts the
# bundle together there, checks every file against MANIFEST.txt, and runs
# `gpu_check.sh run` on it (results in KEEP/results, also packed as
# $OUT/gpu-check.tar.gz when $OUT is set, with table.md and the log beside it).
set -euo pipefail

die() { echo "gpu_check_parts.sh: $*" >&2; exit 1; }
say() { echo "gpu_check_parts.sh: $*" >&2; }
KEEP="${THEMISTO_GPU_KEEP:-/tmp/themisto-gpu-keep}"
repo="$(cd "$(dirname "$0")/.." && pwd)"

# sha256 of the tensors of a safetensors file, by name, dtype, shape and bytes.
DIGEST_PY='
import hashlib, sys
from safetensors.numpy import load_file
t = load_file(sys.argv[1])
h = hashlib.sha256()
for k in sorted(t):
    for part in (k, str(t[k].dtype), str(t[k].shape)):
        h.update(part.encode())
    h.update(t[k].tobytes())
print(h.hexdigest())
'

prepare() {
  local bundle="" dir="" budget=64
  while [ $# -gt 0 ]; do
    case "$1" in
      --budget-mib) budget="$2"; shift ;;
      -*) die "prepare: unknown option $1" ;;
      *) if [ -z "$bundle" ]; then bundle="$1"; else dir="$1"; fi ;;
    esac
    shift
  done
  [ -n "$dir" ] || die "usage: gpu_check_parts.sh prepare BUNDLE DIR [--budget-mib N]"
  [ -x "$bundle/bin/themisto" ] || die "$bundle: no bin/themisto (make it with: scripts/gpu_check.sh pack $bundle --no-libs)"
  local gguf st="$bundle/models/safetensors"
  gguf="$(ls "$bundle"/models/gguf/*.gguf)"
  # Inside the repository, DIR must be ignored, or both parts would travel in
  # every call as untracked files.
  mkdir -p "$dir"
  case "$(cd "$dir" && pwd)/" in
    "$repo"/*) git -C "$repo" check-ignore -q "$(cd "$dir" && pwd)" ||
      die "$dir is inside the repository but not ignored: echo '/$(basename "$dir")/' >> $repo/.git/info/exclude" ;;
  esac
  rm -rf "$dir"
  mkdir -p "$dir/1" "$dir/2/safetensors"
  xz -T0 -6 -c "$bundle/bin/themisto" >"$dir/1/themisto.xz"
  cp "$st"/*.json "$dir/2/safetensors/"
  cp "$bundle/MANIFEST.txt" "$dir/2/"
  basename "$gguf" >"$dir/2/gguf-name"
  local py
  py="$(python3 "$repo/scripts/pyvenv.py" --gguf-tools)" || die "scripts/pyvenv.py could not make the venv with safetensors"
  "$py" -c "$DIGEST_PY" "$st/model.safetensors" >"$dir/2/tensors.sha256"
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$dir/2" gguf==0.17.1 >&2 ||
    die "pip could not download the gguf wheel"
  # What travels besides: the working tree (tracked and untracked, not ignored).
  local tree limit first rest small
  tree="$(cd "$repo" && git ls-files -z -co --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')"
  limit=$((budget * 1024 * 1024 - tree - 512 * 1024))
  first=$((limit - $(stat -c %s "$dir/1/themisto.xz")))
  small="$(du -cb "$dir"/2/* "$dir"/2/safetensors/* | tail -1 | cut -f1)"
  rest=$(($(stat -c %s "$gguf") - first))
  [ "$first" -gt 0 ] && [ $((rest + small)) -le "$limit" ] ||
    die "the GGUF does not fit in two calls of $budget MiB (working tree $tree bytes)"
  head -c "$first" "$gguf" >"$dir/1/gguf.part1"
  tail -c +"$((first + 1))" "$gguf" >"$dir/2/gguf.part2"
  say "call 1: $dir/1 ($(du -sb "$dir/1" | cut -f1) bytes), call 2: $dir/2 ($(du -sb "$dir/2" | cut -f1) bytes), working tree $tree bytes"
}

first() {
  local src="${1:?usage: gpu_check_parts.sh first DIR/1}"
  rm -rf "$KEEP"
  mkdir -p "$KEEP"
  cp "$src/gguf.part1" "$KEEP/"
  if command -v xz >/dev/null; then
    xz -dc "$src/themisto.xz" >"$KEEP/themisto"
  else
    "${PYTHON:-python3}" -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$src/themisto.xz" "$KEEP/themisto"
  fi
  chmod +x "$KEEP/themisto"
  say "kept in $KEEP: $(ls "$KEEP" | tr '\n' ' ')"
  if command -v nvidia-smi >/dev/null; then nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >&2 || true; fi
}

second() {
  local src="${1:?usage: gpu_check_parts.sh second DIR/2 [gpu_check run options]}"
  shift
  [ -f "$KEEP/gguf.part1" ] && [ -x "$KEEP/themisto" ] ||
    die "$KEEP holds no part 1: call 2 must run on the machine of call 1 (it was given back in between?)"
  local b="$KEEP/bundle" t0
  t0=$(date +%s)
  rm -rf "$b"
  mkdir -p "$b/bin" "$b/models/gguf" "$b/models/safetensors"
  cp "$KEEP/themisto" "$b/bin/themisto"
  local gguf="$b/models/gguf/$(cat "$src/gguf-name")"
  cat "$KEEP/gguf.part1" "$src/gguf.part2" >"$gguf"
  cp "$repo/scripts/gpu_check.sh" "$src/MANIFEST.txt" "$b/"
  "${PYTHON:-python3}" -m pip install -q --upgrade --no-index --no-deps --no-compile --no-cache-dir --target "$KEEP/site" "$src"/gguf-*.whl >&2
  THEMISTO_IN_VENV=1 PYTHONPATH="$KEEP/site${PYTHONPATH:+:$PYTHONPATH}" "${PYTHON:-python3}" \
    "$repo/scripts/gguf_to_safetensors.py" "$gguf" "$b/models/safetensors" >&2
  cp "$src"/safetensors/*.json "$b/models/safetensors/"
  say "checking the bundle against MANIFEST.txt (model.safetensors by its tensors)"
  (cd "$b" && grep '  \./' MANIFEST.txt | grep -v -e ' ./gpu_check.sh$' -e '/model.safetensors$' | sha256sum -c --quiet -) ||
    die "the bundle put together here differs from the one packed"
  [ "$("${PYTHON:-python3}" -c "$DIGEST_PY" "$b/models/safetensors/model.safetensors")" = "$(cat "$src/tensors.sha256")" ] ||
    die "the safetensors converted here hold other tensors than the ones packed"
  say "bundle ready in $(($(date +%s) - t0)) s: $b"
  local rc=0
  bash "$b/gpu_check.sh" run "$b" --out "$KEEP/results" "$@" || rc=$?
  if [ -n "${OUT:-}" ]; then
    cp "$KEEP/results/table.md" "$OUT/" 2>/dev/null || true
    tar czf "$OUT/gpu-check.tar.gz" -C "$KEEP" results
  fi
  return "$rc"
}

case "${1:-}" in
  prepare) shift; prepare "$@" ;;
  first) shift; first "$@" ;;
  second) shift; second "$@" ;;
  -h | --help | "") sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//' ;;
  *) die "unknown mode $1 (prepare, first or second)" ;;
esac
