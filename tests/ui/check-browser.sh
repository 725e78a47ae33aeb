#!/bin/bash
# check-browser.sh OUT : the web view in Debian's Chromium, headless, against this build's
# `mneme serve`, inside a loopback-only network namespace (run it through
# tests/clients/netns.sh): nothing the browser does can leave the machine. browser_check.py
# drives it over WebDriver (chromedriver) and writes OUT/results.json and OUT/screenshots/.
set -u
out=$1
rm -rf "$out"; mkdir -p "$out"
# Chromium wants a writable HOME and XDG dirs; keep them inside the run.
export HOME=$out/home XDG_CONFIG_HOME=$out/home/.config XDG_CACHE_HOME=$out/home/.cache
mkdir -p "$HOME"
exec python3 "$(dirname "$0")/browser_check.py" "$out"
