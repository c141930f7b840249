#!/usr/bin/env bash
# Render a report page (`themisto report ... --out DIR` writes DIR/report.html)
# headless to a PNG, so a person can check that the page shows its tables and
# plots with nothing but Debian's chromium installed. The page itself needs no
# network; the browser is started with its own background networking off.
#
# usage: scripts/screenshot_report.sh REPORT.html|REPORT_DIR [OUT.png] [WIDTH,HEIGHT]
#   OUT.png        default: report.png beside report.html
#   WIDTH,HEIGHT   window size in pixels, default 1400,2400
#
# Installs chromium with apt-get when no chromium is on PATH (needs root).
set -euo pipefail

if [ $# -lt 1 ]; then
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
page="$1"
if [ -d "$page" ]; then
    page="$page/report.html"
fi
if [ ! -f "$page" ]; then
    echo "error: $page: no such report page" >&2
    exit 2
fi
page="$(cd "$(dirname "$page")" && pwd)/$(basename "$page")"
out="${2:-$(dirname "$page")/report.png}"
size="${3:-1400,2400}"

# shellcheck source=scripts/chromium.sh
. "$(dirname "$0")/chromium.sh"
browser="$(find_chromium)"

profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT
mkdir -p "$(dirname "$out")"
out_abs="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"
rm -f "$out_abs"
"$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --hide-scrollbars --user-data-dir="$profile" \
    --screenshot="$out_abs" --window-size="$size" "file://$page" >"$profile/browser.log" 2>&1 || true
if [ ! -s "$out_abs" ]; then
    cat "$profile/browser.log" >&2
    echo "error: $browser wrote no screenshot to $out_abs" >&2
    exit 1
fi
echo "$out_abs"
