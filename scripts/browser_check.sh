#!/usr/bin/env bash
# Check the sample explorer of report.html in headless Chromium, without a
# model: build a run folder from hand-written sample records (re-scored by
# `themisto score`, with a prompts.jsonl as `themisto prompt --dump` writes
# it), or take the run folders given, write `themisto report`, open
# `report.html#sample=ID` and check in the DOM that every sample is listed
# and that the opened one shows its prediction, reference and diff; then save
# a screenshot.
#
# usage: scripts/browser_check.sh [--screenshot OUT.png] [--sample ID] [RUN_DIR...]
#   --screenshot   default: docs/img/explorer.png
#   --sample       the sample to open (default: the first of the first run)
#   RUN_DIR        run folders (default: a fixture made here)
#
# Needs a built themisto (THEMISTO=path, else target/debug/themisto, built
# with cargo when missing) and installs chromium with apt-get when no
# chromium is on PATH (needs root).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
shot="$root/docs/img/explorer.png"
sample=""
runs=()
while [ $# -gt 0 ]; do
    case "$1" in
        --screenshot) shot="$2"; shift 2 ;;
        --sample) sample="$2"; shift 2 ;;
        -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) runs+=("$(cd "$1" && pwd)"); shift ;;
    esac
done

bin="${THEMISTO:-$root/target/debug/themisto}"
if [ ! -x "$bin" ]; then
    (cd "$root" && cargo build --quiet)
fi

# shellcheck source=scripts/chromium.sh
. "$(dirname "$0")/chromium.sh"
browser="$(find_chromium)"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if [ ${#runs[@]} -eq 0 ]; then
    # Eight samples: both tasks and runtime variants, one skipped, texts that
    # need escaping, a prompt with the fitter's marks.
    python3 - "$work" <<'EOF'
import json, sys
work = sys.argv[1]
recs, prompts = [], []
for step in (5, 6):
    for task in ("next_cell", "output"):
        for runtime in (False, True):
            rid = f"{task}-{step}-{'on' if runtime else 'off'}"
            ref = f"df.groupby('k{step}').mean()"
            pred = ref if step == 5 else f"df.groupby('k{step}').sum()  </script>"
            r = dict(id=rid, task=task, runtime=runtime, dataset="fixture", trajectory="nb", step=step,
                     template=f"{task}.plain.completion.v1", prompt_tokens=400 + step, dropped_steps=3,
                     steps_kept=step - 3, truncated_chars=812, prediction=pred, raw_prediction=pred + "\n# In[9]:",
                     reference=ref, finish_reason="stop", generated_tokens=12, answer_kind="answer")
            if step == 6 and task == "output" and runtime:
                r.update(skipped="over_budget", skip_detail="target too long", prediction="", raw_prediction="",
                         finish_reason=None, answer_kind=None)
            else:
                prompts.append(dict(id=rid, template=r["template"], prompt_tokens=r["prompt_tokens"],
                                    dropped_steps=3, steps_kept=step - 3, truncated_chars=812,
                                    prompt="# (3 earlier cells not shown)\n# In[4]:\ndf = load()\n# Out[4]:\n"
                                           "row 1\n...[812 characters cut]...\nrow 99\n# In[5]:\n"))
            recs.append(r)
with open(f"{work}/samples.jsonl", "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in recs)
with open(f"{work}/prompts.jsonl", "w") as f:
    f.writelines(json.dumps(p) + "\n" for p in prompts)
EOF
    "$bin" score "$work/samples.jsonl" --out "$work/run" >/dev/null
    cp "$work/prompts.jsonl" "$work/run/prompts.jsonl"
    runs=("$work/run")
fi

"$bin" report "${runs[@]}" --samples --out "$work/report" >/dev/null
page="$work/report/report.html"
total=0
for r in "${runs[@]}"; do
    total=$((total + $(grep -c . "$r/samples.jsonl")))
done
if [ -z "$sample" ]; then
    sample="$(head -n 1 "${runs[0]}/samples.jsonl" | sed -E 's/^\{"id":"([^"]+)".*/\1/')"
fi

flags=(--headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking
    --disable-component-update --disable-sync --hide-scrollbars --user-data-dir="$work/profile"
    --virtual-time-budget=5000)
url="file://$page#sample=$sample&run=0"
start=$(date +%s.%N)
"$browser" "${flags[@]}" --dump-dom "$url" >"$work/dom.html" 2>"$work/browser.log" || true
end=$(date +%s.%N)

fail() {
    echo "FAIL: $1" >&2
    tail -n 20 "$work/browser.log" >&2
    exit 1
}
grep -q 'data-ready="1"' "$work/dom.html" || fail "the explorer script did not run"
grep -q "id=\"explorer-table\" data-rows=\"$total\"" "$work/dom.html" || fail "the explorer does not list all $total samples"
rows=$(python3 -c 'import sys; d = open(sys.argv[1]).read(); t = d[d.index("id=\"explorer-table\""):]; print(t[:t.index("</table>")].count("<tr data-i="))' "$work/dom.html")
[ "$rows" -eq "$total" ] || fail "$rows table rows for $total samples"
grep -q "data-open=\"$sample\"" "$work/dom.html" || fail "#sample=$sample did not open the sample"
grep -q 'id="sv-prediction"' "$work/dom.html" || fail "no prediction shown"
grep -q 'id="sv-reference"' "$work/dom.html" || fail "no reference shown"
grep -Eq 'Diff of the prediction against the reference|too far apart to diff' "$work/dom.html" || fail "no diff shown"
init=$(grep -o 'data-init-ms="[0-9]*"' "$work/dom.html" | grep -o '[0-9]*')
size=$(stat -c %s "$page")

mkdir -p "$(dirname "$shot")"
shot_abs="$(cd "$(dirname "$shot")" && pwd)/$(basename "$shot")"
rm -f "$shot_abs"
"$browser" "${flags[@]}" --screenshot="$shot_abs" --window-size=1400,1500 "$url&view=samples" >>"$work/browser.log" 2>&1 || true
[ -s "$shot_abs" ] || fail "no screenshot written"
printf 'ok: %d samples listed, sample %s opened; report.html %d bytes, explorer script %s ms, chromium %.2f s wall\n' \
    "$total" "$sample" "$size" "$init" "$(echo "$end - $start" | bc)"
echo "screenshot: $shot_abs"
