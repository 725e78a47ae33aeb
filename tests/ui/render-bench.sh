#!/bin/bash
# render-bench.sh OUT [N] : tests/ui/render_bench.py in its own HOME (run it through
# tests/clients/netns.sh: loopback only). `cargo bench --bench web_ui` runs it.
set -u
out=$1; shift
rm -rf "$out"; mkdir -p "$out"
export HOME=$out/home XDG_CONFIG_HOME=$out/home/.config XDG_CACHE_HOME=$out/home/.cache
mkdir -p "$HOME"
exec python3 "$(dirname "$0")/render_bench.py" "$out" "$@"
