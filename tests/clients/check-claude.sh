#!/bin/bash
# check-claude.sh OUT : the `claude -p` runs tests/real_clients.rs checks, in one loopback-only
# namespace (run it through netns.sh), against one daemon. Each step appends
# {step, project, ms, rc} to OUT/steps.jsonl; the test reads that, the stub's request log
# (OUT/logs/stub.jsonl), the hook log (OUT/hooks/hooks.jsonl), the exports and the storage dir.
#
#   hooks-only project (`--install --write --no-mcp`):
#     first      a fact with a <private> span, in a one-turn session
#     later      a later session: its request must carry the fact in a <memories> block
#   MCP project (`--install --write`: hooks + mneme's MCP server through a headersHelper):
#     mcp-retain the model calls mcp__mneme__retain
#     mcp-seen   a later session: the hooks' recall brings the MCP fact
#     hook-fact  a fact retained by the hooks (the session's transcript)
#     mcp-recall the model calls mcp__mneme__recall and gets the hooks' fact
#   timing (a project without hooks as the baseline):
#     baseline-1/2, stopped-1/2 (nothing listens), hung-1/2 (the daemon SIGSTOPped)
set -u
. "$(dirname "$0")/lib.sh"
out=$1
mc_begin "$out"
# Deliveries 1 s after a retain (5 s by default), so the next session a moment later finds it.
printf '[queue]\nflush_interval = "1s"\n' >> "$MC_RUN/mneme.toml"
mc_start_stub || exit 1
mc_start_daemon || exit 1
step() {  # step NAME PROMPT [claude args]
  local name=$1 prompt=$2 ms rc; shift 2
  ms=$(mc_claude_p "$prompt" "$@"); rc=$?
  cp "$MC_RUN/logs/claude-p.out" "$MC_RUN/logs/claude-$name.out"
  # The hook events of this run, with what each mneme hook took (real_ms).
  mv "$MC_RUN/hooks/hooks.jsonl" "$MC_RUN/hooks/hooks-$name.jsonl" 2>/dev/null || : > "$MC_RUN/hooks/hooks-$name.jsonl"
  echo "{\"step\":\"$name\",\"project\":\"$(basename "$MC_PROJ")\",\"ms\":$ms,\"rc\":$rc}" >> "$MC_RUN/steps.jsonl"
}
tools=(--allowedTools "mcp__mneme__retain,mcp__mneme__recall,mcp__mneme__reflect")

mc_project hooks-only
mc_claude_project --no-mcp
step first "Note for later: the release script is scripts/ship.sh CCFACT-1 <private>CCSECRET-1</private>"
step later "Where is the release script? LATER-1"

mc_project with-mcp
mc_claude_project
step mcp-retain 'Remember this. MCPSTEP-1 [[call retain {"content": "MCPFACT-2: the linter runs clippy with -D warnings"}]]' "${tools[@]}"
sleep 1.5
step mcp-seen "Which linter do we run? MCPSEEN-1"
step hook-fact "Note for later: HOOKFACT-3 deploys go out on Fridays"
sleep 1.5
step mcp-recall 'Look it up. MCPSTEP-2 [[call recall {"query": "HOOKFACT-3 deploys Fridays"}]]' "${tools[@]}"
mc_mneme flush >/dev/null 2>&1
mc_mneme export > "$MC_RUN/logs/export.jsonl" 2>/dev/null

mc_project baseline
mc_claude_project --no-hooks
step baseline-1 "Say hello. BASE-1"
step baseline-2 "Say hello. BASE-2"
mc_project hooks-only
mc_stop_daemon
step stopped-1 "Say hello. STOPPED-1"
step stopped-2 "Say hello. STOPPED-2"
mc_start_daemon || exit 1
mc_hang_daemon
step hung-1 "Say hello. HUNG-1"
step hung-2 "Say hello. HUNG-2"
mc_unhang_daemon
exit 0
