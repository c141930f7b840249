# Sourced by the scripts that drive a headless browser: `find_chromium` prints
# the first Chromium-like browser on PATH, installing Debian's chromium with
# apt-get (needs root) when there is none.
find_chromium() {
    local b
    for b in chromium chromium-browser google-chrome; do
        if command -v "$b" >/dev/null 2>&1; then
            echo "$b"
            return 0
        fi
    done
    echo "installing chromium (apt-get)..." >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq chromium >&2
    echo chromium
}
