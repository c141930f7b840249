#!/usr/bin/env bash
# Regenerate the embedded sample (src/data/sample.jsonl) from scratch:
#
#     bash scripts/make_sample.sh
#
# It (1) creates .venv-sample (git-ignored; scripts/pyvenv.py) with the pinned pandas and
# numpy below,
# (2) rewrites the CSV files under tests/fixtures/sample_notebooks/data/ with their seeded
# generator (same bytes every time), (3) builds the release binary, and (4) runs
# `themisto record` on each notebook in tests/fixtures/sample_notebooks/ and concatenates
# the trajectories, in the order listed below, into src/data/sample.jsonl. The
# file is replaced only when every notebook ran to its end.
#
# Environment: PYTHON (interpreter for the venv, default python3; the committed
# sample was made with CPython 3.11), THEMISTO_BIN (use this binary instead of
# building one), REPR_LIMIT (variable repr limit, default 200).
# The notebooks' code runs with your rights: they only read the CSV files beside them.
set -euo pipefail

PANDAS_VERSION=2.3.3
NUMPY_VERSION=2.3.5
NOTEBOOKS=(sales_cleaning weather_explore survey_analysis sensor_logs review_text churn_model)

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv="$root/.venv-sample"
python="${PYTHON:-python3}"
repr_limit="${REPR_LIMIT:-200}"
start=$(date +%s)

"$python" scripts/pyvenv.py "$venv" "pandas==$PANDAS_VERSION" "numpy==$NUMPY_VERSION" >/dev/null
echo "using $("$venv/bin/python" --version 2>&1), pandas $PANDAS_VERSION, numpy $NUMPY_VERSION" >&2

"$venv/bin/python" tests/fixtures/sample_notebooks/data/make_data.py

if [ -n "${THEMISTO_BIN:-}" ]; then
    bin="$THEMISTO_BIN"
else
    cargo build --release --quiet
    bin="$root/target/release/themisto"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for name in "${NOTEBOOKS[@]}"; do
    "$bin" record "tests/fixtures/sample_notebooks/$name.ipynb" \
        --python "$venv/bin/python" --trajectory "$name" \
        --timeout 120 --repr-limit "$repr_limit" --out "$work/$name.jsonl"
    if grep -q '"recorder_end"' "$work/$name.jsonl"; then
        echo "error: $name did not run to its end; sample left unchanged" >&2
        exit 1
    fi
    cat "$work/$name.jsonl" >> "$work/sample.jsonl"
done

mv "$work/sample.jsonl" src/data/sample.jsonl
"$venv/bin/python" - src/data/sample.jsonl <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
trajectories = sorted({r["trajectory"] for r in rows})
errors = sum(r["output_kind"] == "error" for r in rows)
with_runtime = sum("runtime" in r for r in rows)
size = sum(len(line) for line in open(sys.argv[1], "rb"))
print(f"{sys.argv[1]}: {len(trajectories)} trajectories, {len(rows)} steps, "
      f"{errors} errors, {with_runtime} with runtime, {size} bytes", file=sys.stderr)
PY
echo "done in $(( $(date +%s) - start )) s" >&2
