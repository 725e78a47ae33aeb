#!/bin/bash
# scenario-opencode-serve.sh OUT_DIR : `opencode serve` driven over its HTTP API, in a fresh
# loopback-only namespace (run it through netns.sh): three turns in one session, a compaction
# (POST /session/{id}/summarize), one more turn, then DELETE /session/{id} (session.deleted).
# mneme's plugin and tap.ts are loaded; plugin -> daemon traffic goes through http_tap.py.
# Prints one JSON line per step: {step, ms, http}.
set -u
. "$(dirname "$0")/lib.sh"
out=$1
mc_begin "$out"
mc_start_stub || exit 1
mc_start_daemon || exit 1
mc_start_http_tap || exit 1
mc_opencode_project --tap
OC_PORT=${MC_OPENCODE_PORT:-4096}
(cd "$MC_PROJ" && mapfile -t envs < <(MC_DAEMON_PORT=$MC_TAP_PORT mc_opencode_envlist) && exec env -i "${envs[@]}" \
   "$MC_OPENCODE" serve --port "$OC_PORT" --hostname 127.0.0.1 --print-logs --log-level INFO \
   > "$MC_RUN/logs/opencode-serve.out" 2> "$MC_RUN/logs/opencode-serve.err") &
OC_PID=$!
trap 'kill $OC_PID 2>/dev/null; wait $OC_PID 2>/dev/null; mc_stop_all' EXIT
t0=$(mc_now_ms)
mc_wait_http "http://127.0.0.1:$OC_PORT/session" 60 || exit 1
echo "{\"step\":\"serve-up\",\"ms\":$(( $(mc_now_ms) - t0 ))}"
api() {  # api METHOD PATH [JSON] -> body on stdout; a JSON line about it on stderr... kept simple
  local t0 code
  t0=$(mc_now_ms)
  code=$(curl -s -o "$MC_RUN/logs/api.last" -w '%{http_code}' -X "$1" "http://127.0.0.1:$OC_PORT$2" \
    -H 'content-type: application/json' ${3:+--data "$3"} --max-time 120)
  echo "{\"step\":\"$1 $2\",\"ms\":$(( $(mc_now_ms) - t0 )),\"http\":$code}" >&2
  cat "$MC_RUN/logs/api.last"
}
sid=$(api POST /session '{}' | "$MC_PY" -c 'import json,sys; print(json.load(sys.stdin)["id"])')
model='"model":{"providerID":"stub","modelID":"stub-model"}'
for i in 1 2 3; do
  api POST "/session/$sid/message" "{$model,\"parts\":[{\"type\":\"text\",\"text\":\"serve turn $i SVMARK-$i\"}]}" > /dev/null
done
api POST "/session/$sid/summarize" '{"providerID":"stub","modelID":"stub-model"}' > /dev/null
api POST "/session/$sid/message" "{$model,\"parts\":[{\"type\":\"text\",\"text\":\"after compaction SVMARK-4\"}]}" > /dev/null
sleep 1
api DELETE "/session/$sid" > /dev/null
sleep 2
mc_mneme flush >/dev/null 2>&1; mc_mneme export > "$MC_RUN/logs/export.jsonl" 2>/dev/null
