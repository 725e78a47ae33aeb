# Harness helpers for driving the real agent clients against mneme and the stub model, offline.
# Source it from bash:   . tests/clients/lib.sh
#
# Everything here must run inside a loopback-only network namespace: use `mc_netns CMD...` (a
# fresh `unshare -n` with lo up) or run your script under tests/clients/netns.sh. Inside a fresh
# namespace the fixed ports below are always free, so each test can use its own namespace.
#
# Variables you may set before sourcing (defaults in brackets):
#   MC_CACHE      where install.sh put the clients          [/var/tmp/mneme-clients]
#   MNEME_BIN     the mneme binary to test                  [/var/tmp/clients/bin/mneme]
#   MC_DAEMON_PORT, MC_STUB_PORT, MC_TAP_PORT               [6366, 18080, 16367]

MC_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
: "${MC_CACHE:=/var/tmp/mneme-clients}"
: "${MNEME_BIN:=/var/tmp/clients/bin/mneme}"
: "${MC_DAEMON_PORT:=6366}"
: "${MC_STUB_PORT:=18080}"
: "${MC_TAP_PORT:=16367}"
MC_PY=/usr/bin/python3
[ -x "$MC_PY" ] || MC_PY=$(command -v python3)

# Pinned versions (install.sh installs exactly these).
MC_CLAUDE_VERSION=2.1.332
MC_OPENCODE_VERSION=1.18.33
MC_INSPECTOR_VERSION=2.12.0
MC_CLAUDE=$MC_CACHE/claude-code-$MC_CLAUDE_VERSION/node_modules/.bin/claude
MC_OPENCODE=$MC_CACHE/opencode-$MC_OPENCODE_VERSION/node_modules/.bin/opencode
MC_INSPECTOR_DIR=$MC_CACHE/inspector-$MC_INSPECTOR_VERSION
# oh-my-pi: 18.2.3 is the newest whose @oh-my-pi/* dependencies are on the registry these
# machines reach; it runs on bun (from npm), with its native addon installed separately.
MC_OMP_VERSION=18.2.3
MC_BUN_VERSION=1.4.5
MC_OMP_DIR=$MC_CACHE/omp-$MC_OMP_VERSION
# What opencode needs offline (see FINDINGS.md and mc_opencode_offline).
MC_OPENCODE_CACHE=$MC_CACHE/opencode-$MC_OPENCODE_VERSION/offline

mc_log() { printf '[mc %s] %s\n' "$(date +%H:%M:%S.%3N)" "$*" >&2; }

# Milliseconds since the epoch.
mc_now_ms() { date +%s%3N; }

# mc_netns CMD... : run CMD in a fresh network namespace that has only loopback.
mc_netns() {
  unshare -n sh -c 'ip link set lo up && exec "$@"' mc-netns "$@"
}

# Refuse to go on outside a loopback-only namespace (a safety net for scripts).
mc_require_netns() {
  local ifs
  ifs=$(ip -o link show | awk -F': ' '{print $2}' | tr '\n' ' ')
  if [ "$ifs" != "lo " ]; then
    echo "mc: not in a loopback-only network namespace (interfaces: $ifs); use mc_netns or netns.sh" >&2
    return 1
  fi
}

# mc_begin OUT : how every check script starts: refuse to run outside a loopback-only
# namespace, make OUT a fresh run folder (mc_run_dir), and stop whatever the script starts when
# it exits.
mc_begin() {
  mc_require_netns || exit 1
  rm -rf "$1"; mc_run_dir "$1"
  trap mc_stop_all EXIT
}

# mc_wait_http URL [TIMEOUT_S] : wait until URL answers (any HTTP status).
mc_wait_http() {
  local url=$1 t=${2:-15} end
  end=$(( $(date +%s) + t ))
  while [ "$(date +%s)" -lt "$end" ]; do
    curl -s -o /dev/null --max-time 1 "$url" && return 0
    sleep 0.1
  done
  echo "mc: $url did not come up within ${t}s" >&2
  return 1
}

# mc_run_dir DIR : a fresh run folder: home/ proj/ (a git repo) mneme/ logs/ hooks/ + mneme.toml
# Sets MC_RUN, MC_HOME, MC_PROJ, MNEME_CONFIG.
mc_run_dir() {
  MC_RUN=$(mkdir -p "$1" && cd "$1" && pwd)
  MC_HOME=$MC_RUN/home MC_PROJ=$MC_RUN/proj
  mkdir -p "$MC_HOME" "$MC_PROJ" "$MC_RUN/mneme" "$MC_RUN/logs" "$MC_RUN/hooks"
  chmod 700 "$MC_RUN/mneme"
  cat > "$MC_RUN/mneme.toml" <<EOF
[server]
listen = "127.0.0.1:$MC_DAEMON_PORT"
[storage]
dir = "$MC_RUN/mneme"
EOF
  export MNEME_CONFIG=$MC_RUN/mneme.toml
  (cd "$MC_PROJ" && [ -d .git ] || git -c init.defaultBranch=main init -q .)
}

# mc_project NAME : another project (a git repo) in the run folder becomes MC_PROJ.
mc_project() {
  MC_PROJ=$MC_RUN/$1
  mkdir -p "$MC_PROJ"
  (cd "$MC_PROJ" && [ -d .git ] || git -c init.defaultBranch=main init -q .)
}

# mc_start_daemon : `mneme serve` in the background; sets MC_DAEMON_PID, MC_TOKEN.
mc_start_daemon() {
  MNEME_CONFIG=$MC_RUN/mneme.toml "$MNEME_BIN" serve >> "$MC_RUN/logs/daemon.log" 2>&1 &
  MC_DAEMON_PID=$!
  mc_wait_http "http://127.0.0.1:$MC_DAEMON_PORT/v1/health" 20 || return 1
  MC_TOKEN=$(cat "$MC_RUN/mneme/token")
}

# mc_stop_daemon : SIGTERM and wait.
mc_stop_daemon() {
  [ -n "${MC_DAEMON_PID:-}" ] || return 0
  kill -CONT "$MC_DAEMON_PID" 2>/dev/null
  kill -TERM "$MC_DAEMON_PID" 2>/dev/null
  wait "$MC_DAEMON_PID" 2>/dev/null
  MC_DAEMON_PID=
}

# mc_hang_daemon / mc_unhang_daemon : SIGSTOP / SIGCONT (the port stays open, nothing answers).
mc_hang_daemon() { kill -STOP "$MC_DAEMON_PID"; }
mc_unhang_daemon() { kill -CONT "$MC_DAEMON_PID"; }

# mc_start_stub [extra stub_model.py args] : the stub model server; sets MC_STUB_PID, MC_STUB_LOG.
mc_start_stub() {
  MC_STUB_LOG=$MC_RUN/logs/stub.jsonl
  "$MC_PY" "$MC_HERE/stub_model.py" --port "$MC_STUB_PORT" --log "$MC_STUB_LOG" "$@" \
    >> "$MC_RUN/logs/stub.out" 2>&1 &
  MC_STUB_PID=$!
  mc_wait_http "http://127.0.0.1:$MC_STUB_PORT/" 10
}

# mc_start_http_tap : the logging proxy http_tap.py on MC_TAP_PORT in front of the daemon
# (log: $MC_RUN/logs/mcp-wire.jsonl); point a client at http://127.0.0.1:$MC_TAP_PORT/mcp.
mc_start_http_tap() {
  "$MC_PY" "$MC_HERE/http_tap.py" --listen "$MC_TAP_PORT" --target "127.0.0.1:$MC_DAEMON_PORT" \
    --log "$MC_RUN/logs/mcp-wire.jsonl" >> "$MC_RUN/logs/http_tap.out" 2>&1 &
  MC_HTTP_TAP_PID=$!
  mc_wait_http "http://127.0.0.1:$MC_TAP_PORT/v1/health" 10
}

mc_stop_all() {
  [ -n "${MC_HTTP_TAP_PID:-}" ] && kill "$MC_HTTP_TAP_PID" 2>/dev/null && wait "$MC_HTTP_TAP_PID" 2>/dev/null
  MC_HTTP_TAP_PID=
  mc_stop_daemon
  [ -n "${MC_STUB_PID:-}" ] && kill "$MC_STUB_PID" 2>/dev/null && wait "$MC_STUB_PID" 2>/dev/null
  MC_STUB_PID=
  [ -n "${MC_TMUX:-}" ] && tmux -L "$MC_TMUX" kill-server 2>/dev/null
  return 0
}

# mc_mneme ARGS... : the mneme CLI against this run's daemon.
mc_mneme() { MNEME_CONFIG=$MC_RUN/mneme.toml "$MNEME_BIN" "$@"; }

# ------------------------------------------------------------------------------------ Claude Code

MC_DUMMY_KEY=sk-ant-api03-stub-0000000000000000000000000000000000000000

# The environment Claude Code runs with: only these variables (use with `env -i`).
mc_claude_envlist() {
  printf '%s\n' \
    "PATH=/usr/local/bin:/usr/bin:/bin" "HOME=$MC_HOME" "TERM=xterm-256color" "LANG=C.UTF-8" \
    "SHELL=/bin/bash" "USER=root" "PWD=$MC_PROJ" \
    "ANTHROPIC_BASE_URL=http://127.0.0.1:$MC_STUB_PORT" "ANTHROPIC_API_KEY=$MC_DUMMY_KEY" \
    "DISABLE_TELEMETRY=1" "DISABLE_AUTOUPDATER=1" "DISABLE_ERROR_REPORTING=1" \
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1" "DISABLE_UPDATES=1" \
    "MNEME_CONFIG=$MC_RUN/mneme.toml"
}

# mc_claude_project [--no-hooks] [--no-mcp] [--mcp|--mcp-tap] [--watch-ms N] : hooks and mneme's
# MCP server installed by mneme itself into the project (`--install --write`; --no-mcp: hooks
# only), hooks wrapped in hook_tap.py (logs to $MC_RUN/hooks), onboarding/trust pre-answered;
# --mcp / --mcp-tap replace .mcp.json with a static bearer header (--mcp-tap: through
# mc_start_http_tap).
mc_claude_project() {
  local hooks=1 mcp=() watch=() install=()
  while [ $# -gt 0 ]; do
    case $1 in
      --no-hooks) hooks=0 ;;
      --no-mcp) install=(--no-mcp) ;;
      --mcp) mcp=(--mcp-url "http://127.0.0.1:$MC_DAEMON_PORT/mcp" --mcp-token "$(cat "$MC_RUN/mneme/token")") ;;
      --mcp-tap) mcp=(--mcp-url "http://127.0.0.1:$MC_TAP_PORT/mcp" --mcp-token "$(cat "$MC_RUN/mneme/token")") ;;
      --watch-ms) watch=(--watch-ms "$2"); shift ;;
      --mcp-header) mcp+=(--mcp-header "$2"); shift ;;
    esac
    shift
  done
  if [ $hooks = 1 ]; then
    (cd "$MC_PROJ" && MNEME_CONFIG=$MC_RUN/mneme.toml "$MNEME_BIN" hook claude-code --install --write "${install[@]}" >/dev/null) || return 1
    "$MC_PY" "$MC_HERE/claude_setup.py" --home "$MC_HOME" --project "$MC_PROJ" --api-key "$MC_DUMMY_KEY" \
      --tap "$MC_RUN/hooks" --tap-extra "${watch[@]}" "${mcp[@]}" >/dev/null
  else
    "$MC_PY" "$MC_HERE/claude_setup.py" --home "$MC_HOME" --project "$MC_PROJ" --api-key "$MC_DUMMY_KEY" "${mcp[@]}" >/dev/null
  fi
}

# mc_claude_p PROMPT [extra claude args] : one `claude -p` run in the project. Output in
# $MC_RUN/logs/claude-p.{out,err}; prints the wall time in ms on stdout; returns claude's code.
mc_claude_p() {
  local prompt=$1 t0 rc; shift
  t0=$(mc_now_ms)
  (cd "$MC_PROJ" && mapfile -t envs < <(mc_claude_envlist) && env -i "${envs[@]}" timeout 300 "$MC_CLAUDE" -p "$prompt" "$@" \
    > "$MC_RUN/logs/claude-p.out" 2> "$MC_RUN/logs/claude-p.err" < /dev/null)
  rc=$?
  echo $(( $(mc_now_ms) - t0 ))
  return $rc
}

# Interactive Claude Code in tmux (its own tmux server, socket name MC_TMUX).
# mc_tmux_claude [extra claude args] : start it and wait for the prompt box.
mc_tmux_claude() {
  MC_TMUX=mc$$
  local envs
  envs=$(mc_claude_envlist | sed "s/'/'\\\\''/g; s/^/'/; s/$/'/" | tr '\n' ' ')
  tmux -L "$MC_TMUX" new-session -d -s cc -x 200 -y 50 \
    "cd '$MC_PROJ' && exec env -i $envs '$MC_CLAUDE' $* 2>> '$MC_RUN/logs/claude-tui.err'"
  mc_tmux_wait '❯' 30
}

mc_tmux_capture() { tmux -L "$MC_TMUX" capture-pane -p -t cc; }

# mc_tmux_wait TEXT [TIMEOUT_S] : wait until the screen shows TEXT (fixed string).
mc_tmux_wait() {
  local text=$1 t=${2:-30} end
  end=$(( $(date +%s) + t ))
  while [ "$(date +%s)" -lt "$end" ]; do
    mc_tmux_capture 2>/dev/null | grep -qF -- "$text" && return 0
    sleep 0.2
  done
  echo "mc: the screen did not show '$text' within ${t}s; it shows:" >&2
  mc_tmux_capture >&2 2>/dev/null
  return 1
}

# mc_tmux_send TEXT : type TEXT, then Enter (separately: a pasted Enter is taken as a newline).
mc_tmux_send() {
  tmux -L "$MC_TMUX" send-keys -t cc -l -- "$1"
  sleep 0.5
  tmux -L "$MC_TMUX" send-keys -t cc Enter
}

# mc_tmux_turn TEXT WAIT_FOR [TIMEOUT_S] : one turn; waits for WAIT_FOR on screen, then until the
# Stop hook has been logged for it (counted in hooks.jsonl).
mc_tmux_turn() {
  local before
  before=$(grep -c '"hook_event_name": "Stop"' "$MC_RUN/hooks/hooks.jsonl" 2>/dev/null || true)
  mc_tmux_send "$1"
  mc_tmux_wait "$2" "${3:-30}" || return 1
  mc_wait_count '"hook_event_name": "Stop"' "$MC_RUN/hooks/hooks.jsonl" $(( ${before:-0} + 1 )) 30
}

# mc_wait_count PATTERN FILE N [TIMEOUT_S] : wait until FILE has at least N lines matching PATTERN.
mc_wait_count() {
  local end=$(( $(date +%s) + ${4:-30} )) n
  while [ "$(date +%s)" -lt "$end" ]; do
    n=$(grep -cF -- "$1" "$2" 2>/dev/null || true)
    [ "${n:-0}" -ge "$3" ] && return 0
    sleep 0.1
  done
  echo "mc: $2 has ${n:-0} lines with '$1', wanted $3" >&2
  return 1
}

# mc_tmux_exit : /exit, then wait for the tmux server to go away (SessionEnd has run by then).
mc_tmux_exit() {
  mc_tmux_send "/exit"
  local end=$(( $(date +%s) + 30 ))
  while [ "$(date +%s)" -lt "$end" ]; do
    tmux -L "$MC_TMUX" has-session -t cc 2>/dev/null || { MC_TMUX=; return 0; }
    sleep 0.2
  done
  return 1
}

# ------------------------------------------------------------------------------------ opencode

# The environment opencode runs with (use with `env -i`). The plugin finds the daemon and its
# token through mneme's config, as it does on a user's machine (no MNEME_URL).
mc_opencode_envlist() {
  printf '%s\n' \
    "PATH=/usr/local/bin:/usr/bin:/bin" "HOME=$MC_HOME" "TERM=xterm-256color" "LANG=C.UTF-8" \
    "SHELL=/bin/bash" "USER=root" \
    "XDG_CONFIG_HOME=$MC_HOME/.config" "XDG_DATA_HOME=$MC_HOME/.local/share" \
    "XDG_CACHE_HOME=$MC_HOME/.cache" "XDG_STATE_HOME=$MC_HOME/.local/state" \
    "OPENCODE_DISABLE_AUTOUPDATE=1" "OPENCODE_DISABLE_SHARE=1" "OPENCODE_DISABLE_MODELS_FETCH=1" \
    "OPENCODE_DISABLE_LSP_DOWNLOAD=1" "OPENCODE_DISABLE_DEFAULT_PLUGINS=1" \
    "OPENCODE_DISABLE_CLAUDE_CODE=1" "OPENCODE_DISABLE_EXTERNAL_SKILLS=1" \
    "MNEME_CONFIG=$MC_RUN/mneme.toml" \
    "MNEME_TIMEOUT_MS=${MNEME_TIMEOUT_MS:-3000}" "MC_PLUGIN_TAP=$MC_RUN/hooks/opencode-plugin.jsonl" \
    "MNEME_PLUGIN_LOG=$MC_RUN/hooks/mneme-plugin.jsonl"
}

# mc_opencode_project [--no-plugin] [--tap] : opencode.json with the stub provider, mneme's plugin
# in .opencode/plugins/ (with --tap also a plugin that logs every hook's input/output), and the
# offline cache (see FINDINGS.md) copied into HOME.
mc_opencode_project() {
  local plugin=1 tap=0
  for a in "$@"; do
    case $a in --no-plugin) plugin=0 ;; --tap) tap=1 ;; esac
  done
  mkdir -p "$MC_PROJ/.opencode/plugins" "$MC_HOME/.config/opencode" "$MC_HOME/.local/share" "$MC_HOME/.cache"
  sed "s|@STUB_PORT@|$MC_STUB_PORT|g" "$MC_HERE/opencode/opencode.json" > "$MC_PROJ/opencode.json"
  [ $plugin = 1 ] && cp "$MC_HERE/../../integrations/opencode/mneme.ts" "$MC_PROJ/.opencode/plugins/mneme.ts"
  [ $tap = 1 ] && cp "$MC_HERE/opencode/tap.ts" "$MC_PROJ/.opencode/plugins/tap.ts"
  mc_opencode_offline
}

# Pre-fills what opencode would otherwise try to install from the network at start: in every
# config dir it uses (the project's .opencode/ and ~/.config/opencode/) it runs an npm install of
# @opencode-ai/plugin unless node_modules/ exists and package-lock.json's root lists every
# dependency of package.json. install.sh prepared such a folder ($MC_OPENCODE_CACHE/deps); it is
# hard-linked (or copied) into both places. MC_OPENCODE_NO_OFFLINE=1 skips this (to see the hang).
mc_opencode_offline() {
  [ "${MC_OPENCODE_NO_OFFLINE:-0}" = 1 ] && return 0
  local deps=$MC_OPENCODE_CACHE/deps d
  [ -d "$deps/node_modules" ] || { echo "mc: $deps is missing; run tests/clients/install.sh" >&2; return 1; }
  for d in "$MC_PROJ/.opencode" "$MC_HOME/.config/opencode"; do
    mkdir -p "$d"
    cp -al "$deps/node_modules" "$d/" 2>/dev/null || cp -a "$deps/node_modules" "$d/"
    cp "$deps/package.json" "$deps/package-lock.json" "$d/"
  done
}

# mc_opencode_run PROMPT [extra args] : `opencode run` in the project; output in
# $MC_RUN/logs/opencode.{out,err}; prints the wall time in ms.
# (opencode joins its message arguments with spaces but puts one that holds a space in quotes, so
# the prompt goes in as separate words.)
mc_opencode_run() {
  local prompt=$1 t0 rc words; shift
  read -ra words <<< "$prompt"
  t0=$(mc_now_ms)
  (cd "$MC_PROJ" && mapfile -t envs < <(mc_opencode_envlist) && env -i "${envs[@]}" timeout 300 "$MC_OPENCODE" run --print-logs --log-level "${MC_OPENCODE_LOG_LEVEL:-INFO}" \
     -m stub/stub-model "$@" -- "${words[@]}" \
     > "$MC_RUN/logs/opencode.out" 2> "$MC_RUN/logs/opencode.err" < /dev/null)
  rc=$?
  echo $(( $(mc_now_ms) - t0 ))
  return $rc
}

# ------------------------------------------------------------------------------------ Inspector

# mc_inspector ARGS... : the MCP Inspector CLI against this run's daemon (http transport, token).
# (Its engines field asks for node >= 22.19; the machine's node 20 runs it fine.)
mc_inspector() {
  env -i PATH="/usr/local/bin:/usr/bin:/bin" HOME="$MC_HOME" \
    node "$MC_INSPECTOR_DIR/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js" \
    --cli "http://127.0.0.1:$MC_DAEMON_PORT/mcp" --transport http \
    --header "Authorization: Bearer $(cat "$MC_RUN/mneme/token")" "$@"
}

# ------------------------------------------------------------------------------------ oh-my-pi

# mc_omp_project [API_URL] : oh-my-pi's settings in MC_HOME/.omp/agent: the stub model, and its
# own `hindsight` memory backend pointed at mneme's Hindsight API (through the tap by default),
# with mneme's token as its API token; retains after every turn.
mc_omp_project() {
  local url=${1:-http://127.0.0.1:$MC_TAP_PORT/hindsight}
  mkdir -p "$MC_HOME/.omp/agent"
  cat > "$MC_HOME/.omp/agent/models.yml" <<YML
providers:
  stub:
    baseUrl: http://127.0.0.1:$MC_STUB_PORT/v1
    apiKey: x
    api: openai-completions
    models:
      - id: stub-model
YML
  cat > "$MC_HOME/.omp/agent/config.yml" <<YML
memory:
  backend: hindsight
hindsight:
  apiUrl: $url
  apiToken: $MC_TOKEN
  retainEveryNTurns: 1
YML
}

# mc_omp_env : the environment oh-my-pi runs with (bun on PATH, no update checks).
mc_omp_env() {
  echo HOME="$MC_HOME" PATH="$MC_OMP_DIR/node_modules/.bin:$PATH" OMP_NO_UPDATE_CHECK=1 \
    DO_NOT_TRACK=1 OMP_TELEMETRY=0
}

# mc_omp_p PROMPT [extra omp args] : one `omp -p` in the project with the stub model; output in
# $MC_RUN/logs/omp.out; prints the wall time in ms; returns omp's exit code.
mc_omp_p() {
  local prompt=$1 start rc; shift
  start=$(mc_now_ms)
  (cd "$MC_PROJ" && env $(mc_omp_env) timeout 120 omp -p --model stub/stub-model --no-title --no-lsp "$@" "$prompt") \
    > "$MC_RUN/logs/omp.out" 2>&1
  rc=$?
  echo $(( $(mc_now_ms) - start ))
  return $rc
}
