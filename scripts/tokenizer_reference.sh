#!/usr/bin/env bash
# Regenerate tests/fixtures/tokenizer/*.json (see scripts/tokenizer_reference.py for what
# the references are). Extra arguments pass through, e.g. --fetch-vocabs-only.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 scripts/tokenizer_reference.py "$@"
