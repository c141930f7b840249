#!/usr/bin/env bash
# The GPU check: the cuda binary on a GPU machine without network or Rust, against
# its own CPU runs of the same samples.
#
#   bash scripts/gpu_check.sh pack DIR [--small] [--no-libs]    # here: Rust + network
#   bash DIR/gpu_check.sh run [DIR] [--limit N] [--cpu-only] [--cpu-threads N] [--out DIR]   # there
#
# pack builds the cuda binary (scripts/cuda_build.sh) and writes DIR:
#   bin/themisto          the cuda binary (stripped; x86-64-v3)
#   models/gguf/          the default model's GGUF (SmolLM2-135M-Instruct Q4_1, 98 MB)
#   models/safetensors/   the same weights as a Hugging Face folder, dequantized to f32
#                         by scripts/gguf_to_safetensors.py (540 MB), tokenizer.json
#                         written by `themisto models tokenizer`
#   lib/                  the CUDA 13.0 libraries the binary links (cuBLAS, cuRAND, the
#                         runtime, NVRTC; about 700 MB) unless --no-libs
#   gpu_check.sh, MANIFEST.txt (git revision, build flags, sha256 of every file)
# --small writes a bundle under 64 MiB (for a GPU machine that takes at most 64 MiB a
# transfer): a tiny RANDOM-weight llama with the real tokenizer (scripts/tiny_gguf.py)
# instead of the real model, and no lib/. It checks that every row runs end to end on
# both devices and how often greedy tokens agree on random weights (many near ties);
# it is not a real-model check.
#
# run (there) puts lib/ and the CUDA libraries of the machine's pip packages
# (site-packages/nvidia/*/lib, e.g. nvidia/cu13/lib) on LD_LIBRARY_PATH (the driver's
# libcuda.so.1 comes from the system), then for each row runs `themisto bench-model`
# (prompt and generation speed) and `themisto run --limit N` (default 2 per task x
# runtime group, 8 samples) and prints one table: path and engine, device, weights,
# prompt tok/s, gen tok/s, samples, and how many predictions equal those of the
# reference row (the candle engine on the CPU with f32 weights: same engine, same
# weights), and how long each row's run took.
# Results go to DIR/results/ or --out (table.md, per-row bench JSON and run folders).
# --cpu-only skips the cuda rows (for trying the script on a machine without a GPU);
# --cpu-threads N (default 2) sets the threads of the candle CPU rows.
set -euo pipefail

die() { echo "gpu_check.sh: $*" >&2; exit 1; }
say() { echo "gpu_check.sh: $*" >&2; }

pack() {
  local dir="" small=0 libs=1
  for arg in "$@"; do
    case "$arg" in
      --small) small=1; libs=0 ;;
      --no-libs) libs=0 ;;
      -*) die "pack: unknown option $arg" ;;
      *) dir="$arg" ;;
    esac
  done
  [ -n "$dir" ] || die "usage: gpu_check.sh pack DIR [--small] [--no-libs]"
  local repo bin vars
  repo="$(cd "$(dirname "$0")/.." && pwd)"
  [ -f "$repo/Cargo.toml" ] || die "pack runs from the repository (scripts/gpu_check.sh)"
  bin="$(bash "$repo/scripts/cuda_build.sh")"
  rm -rf "$dir"
  mkdir -p "$dir/bin" "$dir/models/gguf" "$dir/models/safetensors"
  dir="$(cd "$dir" && pwd)"
  cp "$bin" "$dir/bin/themisto"
  strip "$dir/bin/themisto"
  local needed
  needed="$(readelf -d "$dir/bin/themisto" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')"

  # The binary runs here too (CPU jobs): with the driver's libcuda.so.1 when there is
  # one, else with the toolchain's stub.
  if ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
    vars="$(bash "$repo/scripts/cuda_toolchain.sh")"
  else
    vars="$(bash "$repo/scripts/cuda_toolchain.sh" --no-driver 2>/dev/null)"
  fi
  local envs
  mapfile -t envs <<<"$vars"
  t() { env "${envs[@]}" "$dir/bin/themisto" "$@"; }

  local gguf
  gguf="$(t models fetch smollm2-135m-instruct | awk 'NR == 1 { print $2 }')"
  [ -f "$gguf" ] || die "the default model's GGUF was not found ($gguf)"
  if [ "$small" = 1 ]; then
    python3 "$repo/scripts/tiny_gguf.py" "$gguf" "$dir/models/gguf/tiny-random-llama.gguf"
  else
    cp "$gguf" "$dir/models/gguf/"
  fi
  local packed
  packed="$(ls "$dir"/models/gguf/*.gguf)"
  python3 "$repo/scripts/gguf_to_safetensors.py" "$packed" "$dir/models/safetensors" >&2
  t models tokenizer "$packed" --out "$dir/models/safetensors/tokenizer.json" >&2

  if [ "$libs" = 1 ]; then
    local cu="${vars#*CUDA_ROOT=}"
    cu="${cu%%$'\n'*}"
    mkdir -p "$dir/lib"
    # The libraries the binary names, then theirs (cuBLAS needs cuBLASLt), from the
    # toolchain; NVRTC, if linked, loads its builtins at run time.
    local todo seen=" " name
    todo="$needed"
    while [ -n "$todo" ]; do
      name="${todo%%$'\n'*}"
      [ "$name" = "$todo" ] && todo="" || todo="${todo#*$'\n'}"
      case "$seen" in *" $name "*) continue ;; esac
      seen="$seen$name "
      [ -e "$cu/lib/$name" ] || continue
      cp -L "$cu/lib/$name" "$dir/lib/"
      todo="$todo"$'\n'"$(readelf -d "$cu/lib/$name" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')"
      todo="${todo#$'\n'}"
    done
    if compgen -G "$dir/lib/libnvrtc.so.*" >/dev/null; then
      cp -L "$cu"/lib/libnvrtc-builtins.so.* "$dir/lib/"
    fi
  fi

  if [ "$small" = 1 ]; then
    # 80 MB stripped (a third of it candle's CUDA kernels); about 12 MB compressed.
    say "compressing the binary (xz)"
    xz -T0 -6 "$dir/bin/themisto"
  fi
  cp "$repo/scripts/gpu_check.sh" "$dir/gpu_check.sh"
  {
    echo "themisto GPU check bundle ($([ "$small" = 1 ] && echo "small: tiny random-weight model" || echo "default model"))"
    echo "git revision: $(git -C "$repo" rev-parse HEAD)$(git -C "$repo" diff --quiet HEAD || echo ' (with local changes)')"
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ), cargo build --release --features cuda, RUSTFLAGS=-C target-cpu=x86-64-v3, CUDA 13.0 wheels, CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-90}"
    echo "needs: NVIDIA driver >= 580 (CUDA 13.0), python3 (the table); the binary links $(grep -E '^lib(cuda|cublas|curand|cudart|nvrtc)' <<<"$needed" | tr '\n' ' ')"
    echo
    (cd "$dir" && find . -type f ! -name MANIFEST.txt | sort | xargs sha256sum)
  } >"$dir/MANIFEST.txt"
  say "packed $dir ($(du -sh "$dir" | cut -f1)); there: bash $(basename "$dir")/gpu_check.sh run"
}

# The CUDA library folders of the pip packages of a Python (nvidia/*/lib).
pip_cuda_libs() {
  "${PYTHON:-python3}" - <<'EOF' 2>/dev/null || true
import glob, os
try:
    import nvidia
except ImportError:
    raise SystemExit
for p in list(nvidia.__path__):
    for d in sorted(glob.glob(os.path.join(p, "*", "lib"))):
        print(d)
EOF
}

run_check() {
  local dir="" limit=2 cpu_only=0 out="" cpu_threads=2
  while [ $# -gt 0 ]; do
    case "$1" in
      --limit) limit="$2"; shift ;;
      --cpu-threads) cpu_threads="$2"; shift ;;
      --cpu-only) cpu_only=1 ;;
      --out) out="$2"; shift ;;
      -*) die "run: unknown option $1" ;;
      *) dir="$1" ;;
    esac
    shift
  done
  dir="$(cd "${dir:-$(dirname "$0")}" && pwd)"
  local bin="$dir/bin/themisto"
  out="${out:-$dir/results}"
  if [ ! -x "$bin" ] && [ -f "$bin.xz" ]; then
    say "decompressing $bin.xz"
    if command -v xz >/dev/null; then
      xz -dk "$bin.xz"
    else
      "${PYTHON:-python3}" -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$bin.xz" "$bin"
    fi
    chmod +x "$bin"
  fi
  [ -x "$bin" ] || die "$bin: no cuda binary (make the bundle with: scripts/gpu_check.sh pack DIR)"
  local libpath="" d
  [ -d "$dir/lib" ] && libpath="$dir/lib"
  while read -r d; do
    [ -n "$d" ] && libpath="${libpath:+$libpath:}$d"
  done < <(pip_cuda_libs)
  export LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  local missing
  missing="$(ldd "$bin" | awk '/not found/ { print $1 }' | tr '\n' ' ')"
  if [ -n "$missing" ]; then
    die "the cuda binary cannot start, missing: $missing(libcuda.so.1 comes with the NVIDIA driver; the others with the CUDA 13 pip packages nvidia-cublas, nvidia-curand, nvidia-cuda-runtime, nvidia-cuda-nvrtc, or the bundle's lib/: pack without --no-libs)"
  fi
  say "libraries: $(ldd "$bin" | awk '/lib(cuda|cublas|curand|cudart|nvrtc)/ { print $3 }' | tr '\n' ' ')"
  if command -v nvidia-smi >/dev/null; then nvidia-smi -L >&2 || true; fi
  head -4 "$dir/MANIFEST.txt" >&2 || true

  local gguf st="$dir/models/safetensors"
  gguf="$(ls "$dir"/models/gguf/*.gguf)"
  rm -rf "$out"
  mkdir -p "$out"
  # Rows: name | model | device | engine | weights (the table's label) | options.
  # The GGUF reference is candle on the CPU with every weight in f32, which is what
  # candle's CPU engine does for Q4_1 anyway (it has no SIMD kernel for it); the cuda
  # rows with f32 weights do the same arithmetic on the GPU. The quantized cuda row
  # (candle's CUDA kernels, 8-bit activations), bf16 and the native engine (8-bit
  # activations) compute differently by design. The batch-8 rows decode 8 sequences
  # in each pass (candle_stack, for GGUF files and for llama/mistral/qwen2/qwen3 checkpoints;
  # CUDA makes no promise that its rows equal rows decoded alone, so the predictions
  # column says whether they did).
  local rows=()
  [ "$cpu_only" = 1 ] || rows+=("gguf-candle-cuda|$gguf|cuda|candle|quantized|" "gguf-candle-cuda-f32|$gguf|cuda|candle|f32|--weights f32" "gguf-candle-cuda-f32-batch8|$gguf|cuda|candle|f32, batch 8|--weights f32 --batch 8" "st-cuda-f32|$st|cuda|candle|f32|--dtype f32" "st-cuda-bf16|$st|cuda|candle|bf16|--dtype bf16" "st-cuda-bf16-batch8|$st|cuda|candle|bf16, batch 8|--dtype bf16 --batch 8")
  # candle's CPU engine ran at 5.6 generated tokens/s with 16 threads on the H200
  # machine (16 cores) and at 24 with 2 threads on a 2-core machine: its rows get
  # --cpu-threads (default 2); the native engine takes every core.
  local ct="--threads $cpu_threads"
  rows+=("gguf-candle-cpu|$gguf|cpu|candle|f32|--weights f32 $ct" "gguf-native-cpu|$gguf|cpu|native|quantized|" "st-cpu-f32|$st|cpu|candle|f32|--dtype f32 $ct")
  local row name model device engine label opt problems rc failed=0
  for row in "${rows[@]}"; do
    IFS='|' read -r name model device engine label opt <<<"$row"
    problems=""
    say "$name: bench-model"
    # shellcheck disable=SC2086 # $opt is an option and its value, or nothing
    "$bin" bench-model --model "$model" --device "$device" --engine "$engine" $opt \
      --prompt-tokens 512 --gen-tokens 128 --repeats 3 --output json >"$out/$name.bench.json" 2>"$out/$name.bench.err" ||
      problems="bench-model failed: $(tail -1 "$out/$name.bench.err")"
    say "$name: run --limit $limit"
    rc=0
    # shellcheck disable=SC2086
    "$bin" run --model "$model" --device "$device" --engine "$engine" $opt --limit "$limit" \
      --out "$out/$name" --quiet >"$out/$name.run.log" 2>&1 || rc=$?
    [ "$rc" = 0 ] || problems="${problems:+$problems; }run exited $rc: $(tail -1 "$out/$name.run.log")"
    [ -z "$problems" ] || { failed=1; say "$name: $problems"; }
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$device" "$engine" "$label" "${problems:-ok}" >>"$out/rows.tsv"
  done
  "${PYTHON:-python3}" - "$out" <<'EOF'
import json, os, sys
out = sys.argv[1]
rows = [l.rstrip("\n").split("\t") for l in open(os.path.join(out, "rows.tsv"))]

def samples(name):
    path = os.path.join(out, name, "samples.jsonl")
    if not os.path.exists(path):
        return None
    recs = {}
    for line in open(path):
        r = json.loads(line)
        recs[r["id"]] = r
    return recs

def wall(name):
    try:
        return json.load(open(os.path.join(out, name, "results.json")))["throughput"]["wall_s"]
    except Exception:
        return None

def bench(name):
    try:
        b = json.load(open(os.path.join(out, name + ".bench.json")))
        row = b["rows"][0]
        return row["prompt_tokens_per_s_median"], row["gen_tokens_per_s_median"], b["model"].get("dtype") or b["model"].get("quantization", "")
    except Exception:
        return None, None, ""

ref_of = {"gguf": "gguf-candle-cpu", "st": "st-cpu-f32"}
lines = ["| path / engine | device | weights | prompt tok/s | gen tok/s | samples | run s | predictions vs CPU candle |",
         "|---|---|---|---:|---:|---:|---:|---|"]
for name, device, engine, weights, status in rows:
    path = "GGUF" if name.startswith("gguf") else "safetensors"
    p, g, kind = bench(name)
    recs = samples(name)
    ref_name = ref_of[name.split("-")[0]]
    ref = samples(ref_name)
    n = len(recs) if recs is not None else 0
    errs = sum(1 for r in (recs or {}).values() if r.get("error"))
    if recs is None:
        cmp = "no samples"
    elif name == ref_name:
        cmp = "reference"
    elif ref is None:
        cmp = "no reference"
    else:
        both = [i for i in recs if i in ref]
        same = sum(1 for i in both if recs[i].get("raw_prediction") == ref[i].get("raw_prediction"))
        cmp = f"{same} equal, {len(both) - same} differ"
    if errs:
        cmp += f"; {errs} samples failed"
    if status != "ok":
        cmp += f"; {status}"
    fmt = lambda x: "-" if x is None else f"{x:.1f}"
    lines.append(f"| {path} / {engine} | {device} | {kind + ' quantized' if weights == 'quantized' and kind else weights} | {fmt(p)} | {fmt(g)} | {n} | {fmt(wall(name))} | {cmp} |")
table = "\n".join(lines)
open(os.path.join(out, "table.md"), "w").write(table + "\n")
print(table)
EOF
  say "results in $out (table.md, <row>.bench.json, <row>/samples.jsonl)"
  [ "$cpu_only" = 1 ] && say "--cpu-only: the cuda rows were not run"
  return "$failed"
}

case "${1:-}" in
  pack) shift; pack "$@" ;;
  run) shift; run_check "$@" ;;
  -h | --help | "") sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//' ;;
  *) die "unknown mode $1 (pack or run)" ;;
esac
