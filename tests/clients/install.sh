#!/bin/bash
# install.sh : installs the pinned agent clients the client tests drive, and everything they need
# to run offline, into a cache folder outside the repository. Idempotent: a second run checks and
# prints where things are. Needs the npm registry (and Debian's archive for tmux/iproute2/curl
# when they are missing); run it as root.
#
#   MC_CACHE=/var/tmp/mneme-clients bash tests/clients/install.sh
#
# What it installs (see FINDINGS.md for why):
#   claude-code-<v>/  @anthropic-ai/claude-code  (native binary: the platform package
#                     @anthropic-ai/claude-code-linux-x64 comes from npm as an optional dependency;
#                     nothing is downloaded at run time)
#   opencode-<v>/     opencode-ai (native binary, platform package opencode-linux-x64 from npm)
#   opencode-<v>/offline/deps/  package.json + package-lock.json + node_modules with
#                     @opencode-ai/plugin@<v>: copied into each opencode config dir so that
#                     opencode does not try (and hang ~70 s failing) to npm-install it at start
#   inspector-<v>/    @modelcontextprotocol/inspector (runs on the machine's node 20 despite its
#                     engines field asking for >= 22.19)
# Prints one line per client: NAME VERSION PATH.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"

need_deb() {  # need_deb COMMAND PACKAGE
  command -v "$1" >/dev/null 2>&1 && return 0
  echo "install.sh: installing $2 (apt-get)" >&2
  if [ -z "${MC_APT_UPDATED:-}" ]; then apt-get update -qq >&2; MC_APT_UPDATED=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >&2
}
need_deb ip iproute2
need_deb unshare util-linux
need_deb tmux tmux
need_deb curl curl
need_deb git git
need_deb npm npm
[ -x /usr/bin/python3 ] || need_deb python3 python3

npm_pkg() {  # npm_pkg DIR SPEC... : exact versions into DIR/node_modules, once
  local dir=$1; shift
  mkdir -p "$dir"
  if [ -f "$dir/.installed" ] && [ "$(cat "$dir/.installed")" = "$*" ]; then return 0; fi
  [ -f "$dir/package.json" ] || echo '{"private": true}' > "$dir/package.json"
  (cd "$dir" && npm install --no-fund --no-audit --save-exact --loglevel=error "$@" > npm-install.log 2>&1) || {
    echo "install.sh: npm install $* failed; see $dir/npm-install.log" >&2; tail -20 "$dir/npm-install.log" >&2; return 1; }
  echo "$*" > "$dir/.installed"
}

# Claude Code: the wrapper's postinstall links the platform binary over bin/claude.exe.
npm_pkg "$MC_CACHE/claude-code-$MC_CLAUDE_VERSION" "@anthropic-ai/claude-code@$MC_CLAUDE_VERSION"
# opencode: same scheme (postinstall picks opencode-linux-x64 or the -baseline build).
npm_pkg "$MC_CACHE/opencode-$MC_OPENCODE_VERSION" "opencode-ai@$MC_OPENCODE_VERSION"
# What opencode would npm-install into every config dir at start (peer deps of the plugin
# package are TUI-only and not needed by server-side plugins).
deps=$MC_OPENCODE_CACHE/deps
if [ ! -f "$deps/.installed" ]; then
  mkdir -p "$deps"
  printf '{"dependencies": {"@opencode-ai/plugin": "%s"}}\n' "$MC_OPENCODE_VERSION" > "$deps/package.json"
  (cd "$deps" && npm install --no-fund --no-audit --legacy-peer-deps --ignore-scripts --loglevel=error > npm-install.log 2>&1)
  echo "@opencode-ai/plugin@$MC_OPENCODE_VERSION" > "$deps/.installed"
fi
npm_pkg "$MC_INSPECTOR_DIR" "@modelcontextprotocol/inspector@$MC_INSPECTOR_VERSION"
# oh-my-pi and the bun it runs on (optional dependencies left out: they are platform builds of
# other tools), then its native addon on its own (npm leaves it out with the optional ones).
npm_pkg "$MC_OMP_DIR" "@oh-my-pi/pi-coding-agent@$MC_OMP_VERSION" "bun@$MC_BUN_VERSION" --omit=optional
if [ ! -d "$MC_OMP_DIR/node_modules/@oh-my-pi/pi-natives-linux-x64" ]; then
  (cd "$MC_OMP_DIR" && npm install --no-fund --no-audit --save-exact --loglevel=error \
    "@oh-my-pi/pi-natives-linux-x64@$MC_OMP_VERSION" >> npm-install.log 2>&1)
fi

# npm 11 warns that these postinstall scripts are "not yet covered by allowScripts"; today it still
# runs them. Should a later npm skip them, run them here (they only copy/link the platform binary).
if ! "$MC_CLAUDE" --version >/dev/null 2>&1; then
  (cd "$MC_CACHE/claude-code-$MC_CLAUDE_VERSION/node_modules/@anthropic-ai/claude-code" && node install.cjs)
fi
if ! env HOME="$MC_CACHE/.probe-home" "$MC_OPENCODE" --version >/dev/null 2>&1; then
  (cd "$MC_CACHE/opencode-$MC_OPENCODE_VERSION/node_modules/opencode-ai" && node postinstall.mjs)
fi

# Check that each one starts (offline-safe: --version / --help touch no network).
v_claude=$("$MC_CLAUDE" --version 2>/dev/null | head -1)
v_opencode=$(env HOME="$MC_CACHE/.probe-home" "$MC_OPENCODE" --version 2>/dev/null | head -1)
v_omp=$(env HOME="$MC_CACHE/.probe-home" PATH="$MC_OMP_DIR/node_modules/.bin:$PATH" omp --version 2>/dev/null | head -1)
v_inspector=$(node "$MC_INSPECTOR_DIR/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js" --version 2>/dev/null | head -1)
case $v_claude in "$MC_CLAUDE_VERSION"*) ;; *) echo "install.sh: claude --version said '$v_claude'" >&2; exit 1 ;; esac
[ "$v_opencode" = "$MC_OPENCODE_VERSION" ] || { echo "install.sh: opencode --version said '$v_opencode'" >&2; exit 1; }
[ "$v_omp" = "omp/$MC_OMP_VERSION" ] || { echo "install.sh: omp --version said '$v_omp'" >&2; exit 1; }
echo "claude-code $MC_CLAUDE_VERSION $MC_CLAUDE"
echo "oh-my-pi $MC_OMP_VERSION $MC_OMP_DIR"
echo "opencode $MC_OPENCODE_VERSION $MC_OPENCODE"
echo "opencode-offline-deps $MC_OPENCODE_VERSION $deps"
echo "inspector ${v_inspector:-$MC_INSPECTOR_VERSION} $MC_INSPECTOR_DIR"
