#!/bin/bash
# scenario-claude-p.sh OUT_DIR [MODE] : one `claude -p` run in a fresh loopback-only namespace
# (run it through netns.sh). MODE:
#   up       daemon running, mneme hooks installed (default)
#   nohooks  daemon running, no hooks (baseline)
#   down     hooks installed, daemon never started (nothing listens on its port)
#   hung     hooks installed, daemon started then SIGSTOPped (port open, nothing answers)
#   mcp      daemon running, hooks + the mneme MCP server in .mcp.json; the prompt asks the stub
#            to call mcp__mneme__retain; the MCP traffic goes through http_tap.py
#            (OUT_DIR/logs/mcp-wire.jsonl); .mcp.json also carries probe headers X-Probe-Pwd=${PWD},
#            X-Probe-Session=${CLAUDE_CODE_SESSION_ID:-unset}, X-Probe-Project=${CLAUDE_PROJECT_DIR:-unset}
#            to show which variables Claude Code expands
# Prints one JSON line: {mode, ms, rc, out}. Logs: OUT_DIR/logs, hook payloads: OUT_DIR/hooks.
set -u
. "$(dirname "$0")/lib.sh"
out=$1 mode=${2:-up}
mc_begin "$out"
mc_start_stub || exit 1
case $mode in
  up|nohooks|hung|mcp) mc_start_daemon || exit 1 ;;
  down) mkdir -p "$MC_RUN/mneme"; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$MC_RUN/mneme/token" ;;
esac
case $mode in
  nohooks) mc_claude_project --no-hooks ;;
  mcp) mc_start_http_tap || exit 1
       mc_claude_project --mcp-tap --mcp-header 'X-Probe-Pwd=${PWD}' \
         --mcp-header 'X-Probe-Session=${CLAUDE_CODE_SESSION_ID:-unset}' \
         --mcp-header 'X-Probe-Project=${CLAUDE_PROJECT_DIR:-unset}' ;;
  *) mc_claude_project ;;
esac
[ "$mode" = hung ] && mc_hang_daemon
prompt="Say hello. PMARK-1"
[ "$mode" = mcp ] && prompt='Remember this. [[call retain {"content": "The build uses cargo-nextest MCPMARK-7", "context": "build"}]]'
extra=()
[ "$mode" = mcp ] && extra=(--allowedTools "mcp__mneme__retain,mcp__mneme__recall,mcp__mneme__reflect")
ms=$(mc_claude_p "$prompt" "${extra[@]}"); rc=$?
if [ "$mode" != down ] && [ "$mode" != hung ]; then
  mc_mneme flush >/dev/null 2>&1; mc_mneme export > "$MC_RUN/logs/export.jsonl" 2>/dev/null
fi
printf '{"mode":"%s","ms":%s,"rc":%s,"out":%s}\n' "$mode" "$ms" "$rc" \
  "$("$MC_PY" -c 'import json,sys; print(json.dumps(open(sys.argv[1]).read()))' "$MC_RUN/logs/claude-p.out")"
