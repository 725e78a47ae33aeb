#!/bin/bash
# scenario-inspector.sh OUT_DIR : the MCP Inspector CLI against mneme's /mcp, in a fresh
# loopback-only namespace (run it through netns.sh): tools/list, tools/list --strict, and
# tools/call for retain and recall. Each step's output goes to OUT_DIR/logs/inspector-*.txt and
# one JSON line {step, rc, ms} is printed.
set -u
. "$(dirname "$0")/lib.sh"
out=$1
mc_begin "$out"
mc_start_daemon || exit 1
step() {
  local name=$1 t0 rc; shift
  t0=$(mc_now_ms)
  mc_inspector "$@" > "$MC_RUN/logs/inspector-$name.txt" 2>&1; rc=$?
  echo "{\"step\":\"$name\",\"rc\":$rc,\"ms\":$(( $(mc_now_ms) - t0 ))}"
}
step list --method tools/list
step strict --method tools/list --strict
step retain --method tools/call --tool-name retain --tool-arg "content=Inspector can call retain INSPMARK-3" --tool-arg "cwd=$MC_PROJ"
step recall --method tools/call --tool-name recall --tool-arg "query=Inspector retain" --tool-arg "cwd=$MC_PROJ"
step retain-null --method tools/call --tool-name retain --tool-arg "content=x" --tool-arg "context=null"
step bad-args --method tools/call --tool-name retain --tool-arg "nothing=1"
