#!/usr/bin/env bash
# themisto's model speed beside llama.cpp's on the same GGUF files, threads and machine.
#
#   bash scripts/bench_vs_llamacpp.sh [MODEL ...]
#
# MODEL: registry ids (default: the three registry models). Builds llama-bench and
# llama-batched-bench once from the llama-cpp-python source package (PyPI, pinned below)
# for the instructions this CPU lists (AMX left out, see cpu_options), into
# $THEMISTO_HOME/llamacpp (default ~/.cache/themisto/llamacpp); cmake and ninja come from
# PyPI into a venv there. Then, per model, back to back: `themisto bench-model` and
# `llama-bench` with the same prompt length, generated tokens, repeats and threads, and one
# table of medians with the ratio themisto / llama.cpp.
#
# Environment: THREADS (2), PP (512), TG (128), REPEATS (3), THEMISTO (the binary; default
# target/release/themisto, built if missing), LLAMA_CPP_PYTHON (0.3.36), ISA (native: the
# best this CPU has, for both programs; avx2: llama.cpp built without AVX-512 and AVX-VNNI
# into $THEMISTO_HOME/llamacpp/build-avx2, and themisto run with
# THEMISTO_NATIVE_KERNELS=avx2-sums, what an AVX2-only CPU runs by default (set
# THEMISTO_NATIVE_KERNELS=avx2 for the AVX2 products without the block sums), so that the
# AVX2 kernels of both can be compared on an AVX-512 machine; the compiler still has the
# AVX-512 registers there unless RUSTFLAGS="-C target-cpu=x86-64-v3" built THEMISTO;
# avx2-vnni: the same with AVX-VNNI, as a CPU with AVX2 and AVX-VNNI but no AVX-512 (Intel's
# Alder Lake and later client cores) runs them: llama.cpp built with GGML_AVX_VNNI into
# build-avx2-vnni, themisto with THEMISTO_NATIVE_KERNELS=avx2-vnni; the CPU must list
# avx_vnni), RUN (the arguments of a whole `themisto run`, e.g. "--limit 5" or
# "--protocol themisto"; default: none).
#
# With RUN set, a whole run of the first MODEL follows the table, measured in one go:
# llama-bench's pp and tg on that model, the run (the process's wall
# time, model loading included), llama-bench again; then the run's wall time over
# llama.cpp's one-by-one cost of its tokens (prompt tokens / pp + generated tokens / tg,
# from the run's results.json), with llama.cpp's figures from before and from after.
# With THEMISTO_PHASES=1 the run also prints where its passes spent their time.
# ROUNDS=N (1) repeats the run N times in the same go, each between two llama-bench
# measurements (llama-bench, run, llama-bench, run, ..., llama-bench: N runs, N + 1
# llama-bench), and prints each run's ratio to the mean of the llama.cpp figures around it,
# then the median of the rounds: on a machine whose speed drifts by a third within
# minutes (as shared VMs can) one round reads whichever way the drift went. TABLE=0
# skips the bench-model table (the run's model is only fetched).
set -euo pipefail
cd "$(dirname "$0")/.."

THREADS=${THREADS:-2}
PP=${PP:-512}
TG=${TG:-128}
REPEATS=${REPEATS:-3}
VERSION=${LLAMA_CPP_PYTHON:-0.3.36}
HOME_DIR=${THEMISTO_HOME:-$HOME/.cache/themisto}
WORK=$HOME_DIR/llamacpp
THEMISTO=${THEMISTO:-target/release/themisto}
ISA=${ISA:-native}
case $ISA in
  native) BUILD=$WORK/build ;;
  avx2) BUILD=$WORK/build-avx2; export THEMISTO_NATIVE_KERNELS=${THEMISTO_NATIVE_KERNELS:-avx2-sums} ;;
  avx2-vnni)
    grep -qw avx_vnni /proc/cpuinfo || { echo "ISA=avx2-vnni: this CPU does not list avx_vnni" >&2; exit 2; }
    BUILD=$WORK/build-avx2-vnni; export THEMISTO_NATIVE_KERNELS=${THEMISTO_NATIVE_KERNELS:-avx2-vnni} ;;
  *) echo "ISA must be native, avx2 or avx2-vnni, not $ISA" >&2; exit 2 ;;
esac
MODELS=("$@")
[ ${#MODELS[@]} -gt 0 ] || MODELS=(smollm2-135m-instruct qwen2.5-coder-0.5b-instruct qwen2.5-coder-1.5b-instruct)

log() { echo "== $*" >&2; }

# GGML options for the instructions this CPU lists. Not -march=native, and AMX stays off:
# on an AMX machine that grants the tile state (scripts/amx_probe.c runs tdpbusd
# there), llama.cpp 0.3.36 built with GGML_AMX_TILE=ON GGML_AMX_INT8=ON died with
# SIGILL at its first tile instruction (tilezero in ggml_backend_amx_mul_mat, exit 132).
cpu_options() {
  local flags opts=(-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF) pair
  flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
  for pair in sse4_2:SSE42 avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 avx_vnni:AVX_VNNI avx512f:AVX512 \
    avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16; do
    if [ "$ISA" != native ] && [[ ${pair%%:*} == avx512* || ( $ISA = avx2 && ${pair%%:*} == avx_vnni ) ]]; then
      opts+=("-DGGML_${pair#*:}=OFF")
    elif [[ $flags == *" ${pair%%:*} "* ]]; then opts+=("-DGGML_${pair#*:}=ON"); else opts+=("-DGGML_${pair#*:}=OFF"); fi
  done
  echo "${opts[@]}"
}

build_llamacpp() {
  local bin=$BUILD/bin opts
  opts=$(cpu_options)
  if [ -x "$bin/llama-bench" ] && [ -x "$bin/llama-batched-bench" ] \
    && [ "$(cat "$BUILD/themisto-options" 2>/dev/null)" = "$opts" ]; then
    return
  fi
  mkdir -p "$WORK"
  python3 scripts/pyvenv.py "$WORK/venv" cmake ninja >/dev/null   # cmake and ninja from PyPI
  local sdist=$WORK/llama_cpp_python-$VERSION.tar.gz
  if [ ! -f "$sdist" ]; then
    log "llama-cpp-python $VERSION source package from PyPI"
    # Only this package from source; its build tools may come as wheels.
    "$WORK/venv/bin/pip" download -q --no-deps --no-binary llama-cpp-python -d "$WORK" "llama-cpp-python==$VERSION"
  fi
  local src=$WORK/llama_cpp_python-$VERSION/vendor/llama.cpp
  [ -d "$src" ] || tar -xzf "$sdist" -C "$WORK"
  log "building llama-bench for this CPU ($opts; a few minutes)"
  # shellcheck disable=SC2086 # one word per option
  PATH=$WORK/venv/bin:$PATH cmake -S "$src" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release $opts \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON >"$BUILD.cmake.log"
  PATH=$WORK/venv/bin:$PATH cmake --build "$BUILD" --target llama-bench llama-batched-bench -j "$(nproc)" \
    >"$BUILD.build.log"
  echo "$opts" >"$BUILD/themisto-options"
}

RUN=${RUN:-}
ROUNDS=${ROUNDS:-1}
TABLE=${TABLE:-1}
[ -x "$THEMISTO" ] || cargo build --release
build_llamacpp
LLAMA_BENCH=$BUILD/bin/llama-bench

# llama-bench's pp and tg (tokens/s) on a GGUF file, as two words.
llama_pp_tg() {
  "$LLAMA_BENCH" -m "$1" -p "$PP" -n "$TG" -r "$REPEATS" -t "$THREADS" -o json | python3 -c '
import json, sys
rows = json.load(sys.stdin)
pp = [r["avg_ts"] for r in rows if r["n_gen"] == 0]
tg = [r["avg_ts"] for r in rows if r["n_prompt"] == 0]
print(pp[0], tg[0])'
}

rows=()
TABLE_MODELS=("${MODELS[@]}")
if [ "$TABLE" = 0 ]; then
  first_path=$("$THEMISTO" models fetch "${MODELS[0]}" | awk 'NR == 1 { print $2 }')
  TABLE_MODELS=()
fi
for m in ${TABLE_MODELS[@]+"${TABLE_MODELS[@]}"}; do
  log "$m: themisto bench-model"
  "$THEMISTO" models fetch "$m" >&2
  ours=$("$THEMISTO" bench-model --model "$m" --prompt-tokens "$PP" --gen-tokens "$TG" --repeats "$REPEATS" \
    --threads "$THREADS" --output json)
  path=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["model"]["path"])' <<<"$ours")
  [ -n "${first_path:-}" ] || first_path=$path
  log "$m: llama-bench on $path"
  theirs=$("$LLAMA_BENCH" -m "$path" -p "$PP" -n "$TG" -r "$REPEATS" -t "$THREADS" -o json)
  rows+=("$(python3 - "$m" "$PP" "$TG" <<PY
import json, sys
m, pp, tg = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ours = json.loads('''$ours''')
theirs = json.loads('''$theirs''')
def lc(kind):
    for r in theirs:
        if kind == "pp" and r["n_prompt"] == pp and r["n_gen"] == 0:
            return r["avg_ts"]
        if kind == "tg" and r["n_gen"] == tg and r["n_prompt"] == 0:
            return r["avg_ts"]
    raise SystemExit(f"llama-bench printed no {kind} row")
pp_o, tg_o = ours["rows"][0]["prompt_tokens_per_s_median"], ours["rows"][0]["gen_tokens_per_s_median"]
pp_l, tg_l = lc("pp"), lc("tg")
print(f"| {m} | {ours['model']['quantization']} | {pp_o:.1f} | {pp_l:.1f} | {pp_o / pp_l:.2f}x | {tg_o:.1f} | {tg_l:.1f} | {tg_o / tg_l:.2f}x |")
PY
)")
done

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')
if [ "$TABLE" != 0 ]; then
  echo
  echo "$cpu, $THREADS threads, ISA=$ISA; pp$PP and tg$TG tokens/s (themisto: median of $REPEATS; llama.cpp: mean of $REPEATS)"
  echo
  echo "| model | weights | themisto pp$PP | llama.cpp pp$PP | ratio | themisto tg$TG | llama.cpp tg$TG | ratio |"
  echo "|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
fi

if [ -n "$RUN" ]; then
  m=${MODELS[0]}
  path=$first_path
  out=$(mktemp -d)
  log "$m: one go ($ROUNDS round(s)): llama-bench, themisto run $RUN, llama-bench"
  read -r pp tg < <(llama_pp_tg "$path")
  llama=("$pp $tg")
  walls=()
  for round in $(seq "$ROUNDS"); do
    rm -rf "$out/run"
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086 # RUN is a list of arguments
    "$THEMISTO" run --model "$m" --threads "$THREADS" --quiet --out "$out/run" $RUN >"$out/log" 2>&1 \
      || { cat "$out/log" >&2; exit 1; }
    t1=$(date +%s.%N)
    walls+=("$(python3 -c "print($t1 - $t0)")")
    read -r pp tg < <(llama_pp_tg "$path")
    llama+=("$pp $tg")
    # The run's summary line (and, with THEMISTO_PHASES=1, where its passes spent their time).
    log "round $round"
    grep -E '^(prompt|decoding passes)' "$out/log" >&2 || true
  done
  python3 - "$out/run/results.json" "$m" "$RUN" "${walls[*]}" "${llama[@]}" <<'PY'
import json, statistics, sys
r = json.load(open(sys.argv[1]))["throughput"]
m, run, walls = sys.argv[2], sys.argv[3], [float(w) for w in sys.argv[4].split()]
llama = [tuple(map(float, x.split())) for x in sys.argv[5:]]
p, g = r["prompt_tokens"], r["generated_tokens"]
print(f"\nthemisto run {run} ({m}): {p} prompt tokens ({100 * r['reuse_share']:.0f}% reused), {g} generated")
ratios = []
for i, wall in enumerate(walls):
    (pp0, tg0), (pp1, tg1) = llama[i], llama[i + 1]
    before, after = p / pp0 + g / tg0, p / pp1 + g / tg1
    if i == 0:
        print(f"llama.cpp before: pp {pp0:.1f}, tg {tg0:.1f} tokens/s; one by one {before:.1f} s")
    mean = (before + after) / 2
    ratios.append(wall / mean)
    print(f"run {i + 1}: {wall:.1f} s; llama.cpp after: pp {pp1:.1f}, tg {tg1:.1f} tokens/s; one by one "
          f"{after:.1f} s; the run took {wall / before:.3f}x of the cost before, {wall / after:.3f}x after, "
          f"{wall / mean:.3f}x of their mean")
if len(ratios) > 1:
    print(f"median over {len(ratios)} rounds: {statistics.median(ratios):.3f}x of the mean one-by-one cost "
          f"(rounds from {min(ratios):.3f}x to {max(ratios):.3f}x)")
PY
  rm -rf "$out"
fi
