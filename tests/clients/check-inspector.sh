#!/bin/bash
# check-inspector.sh OUT : the MCP Inspector CLI against mneme's /mcp as tests/real_clients.rs
# checks it, in a fresh loopback-only namespace (run it through netns.sh): tools/list with the
# strict schema check, and tools/call of retain and recall. Each step's output goes to
# OUT/logs/inspector-STEP.txt and {step, rc, ms} to OUT/steps.jsonl.
set -u
. "$(dirname "$0")/lib.sh"
out=$1
mc_begin "$out"
mc_start_daemon || exit 1
step() {
  local name=$1 t0 rc; shift
  t0=$(mc_now_ms)
  mc_inspector "$@" > "$MC_RUN/logs/inspector-$name.txt" 2>&1; rc=$?
  echo "{\"step\":\"$name\",\"rc\":$rc,\"ms\":$(( $(mc_now_ms) - t0 ))}" >> "$MC_RUN/steps.jsonl"
}
step list --method tools/list
step strict --method tools/list --strict
step retain --method tools/call --tool-name retain --tool-arg "content=Inspector can call retain INSPMARK-3" --tool-arg "cwd=$MC_PROJ"
mc_mneme flush >/dev/null 2>&1
step recall --method tools/call --tool-name recall --tool-arg "query=Inspector retain" --tool-arg "cwd=$MC_PROJ"
exit 0
