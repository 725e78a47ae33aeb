#!/bin/bash
# check-opencode-plugin.sh OUT : the plugin's own smoke test (integrations/opencode/smoke.test.ts)
# run by the bun inside the pinned opencode (BUN_BE_BUN=1: the same runtime that loads the plugin
# in opencode), against a stopped port and this run's daemon, in a fresh loopback-only namespace
# (run it through netns.sh). Output in OUT/logs/plugin-smoke.txt, {step, rc, ms} in
# OUT/steps.jsonl.
set -u
. "$(dirname "$0")/lib.sh"
out=$1
mc_begin "$out"
mc_start_daemon || exit 1
dir=$MC_RUN/plugin
mkdir -p "$dir"
cp "$MC_HERE/../../integrations/opencode/mneme.ts" "$MC_HERE/../../integrations/opencode/smoke.test.ts" "$dir/"
# The plugin imports @opencode-ai/plugin: the offline copy install.sh prepared.
cp -al "$MC_OPENCODE_CACHE/deps/node_modules" "$dir/" 2>/dev/null || cp -a "$MC_OPENCODE_CACHE/deps/node_modules" "$dir/"
t0=$(mc_now_ms)
(cd "$dir" && env -i PATH="/usr/local/bin:/usr/bin:/bin" HOME="$MC_HOME" BUN_BE_BUN=1 DO_NOT_TRACK=1 \
   MNEME_LIVE_URL="http://127.0.0.1:$MC_DAEMON_PORT" MNEME_TOKEN_FILE="$MC_RUN/mneme/token" \
   timeout 120 "$MC_OPENCODE" test ./smoke.test.ts) > "$MC_RUN/logs/plugin-smoke.txt" 2>&1
rc=$?
echo "{\"step\":\"smoke\",\"rc\":$rc,\"ms\":$(( $(mc_now_ms) - t0 ))}" >> "$MC_RUN/steps.jsonl"
exit 0
