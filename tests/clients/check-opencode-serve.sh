#!/bin/bash
# check-opencode-serve.sh OUT : `opencode serve` driven over its HTTP API as tests/real_clients.rs
# checks it, in a fresh loopback-only namespace (run it through netns.sh): three turns in one
# session, a compaction (POST /session/{id}/summarize), one more turn, then DELETE /session/{id}
# (session.deleted). Then a second session whose turns outgrow the daemon's body limit (64 KiB
# here): three turns of ~30 KB each. Then a third with an undo (/undo, then a new prompt). Each
# step appends {step, ms, http} to OUT/steps.jsonl.
set -u
. "$(dirname "$0")/lib.sh"
out=$1
mc_begin "$out"
mc_start_stub || exit 1
sed -i '/^\[server\]/a max_body_bytes = 65536' "$MC_RUN/mneme.toml"
mc_start_daemon || exit 1
mc_opencode_project
OC_PORT=${MC_OPENCODE_PORT:-4096}
(cd "$MC_PROJ" && mapfile -t envs < <(mc_opencode_envlist) && exec env -i "${envs[@]}" \
   "$MC_OPENCODE" serve --port "$OC_PORT" --hostname 127.0.0.1 --print-logs --log-level INFO \
   > "$MC_RUN/logs/opencode-serve.out" 2> "$MC_RUN/logs/opencode-serve.err") &
OC_PID=$!
trap 'kill $OC_PID 2>/dev/null; wait $OC_PID 2>/dev/null; mc_stop_all' EXIT
t0=$(mc_now_ms)
mc_wait_http "http://127.0.0.1:$OC_PORT/session" 60 || exit 1
echo "{\"step\":\"serve-up\",\"ms\":$(( $(mc_now_ms) - t0 )),\"http\":200}" >> "$MC_RUN/steps.jsonl"
api() {  # api STEP METHOD PATH [JSON] : the body on stdout
  local t0 code
  t0=$(mc_now_ms)
  code=$(curl -s -o "$MC_RUN/logs/api.last" -w '%{http_code}' -X "$2" "http://127.0.0.1:$OC_PORT$3" \
    -H 'content-type: application/json' ${4:+--data "$4"} --max-time 120)
  echo "{\"step\":\"$1\",\"ms\":$(( $(mc_now_ms) - t0 )),\"http\":$((10#$code))}" >> "$MC_RUN/steps.jsonl"  # 000 (no answer) as 0
  cat "$MC_RUN/logs/api.last"
}
sid=$(api new POST /session '{}' | "$MC_PY" -c 'import json,sys; print(json.load(sys.stdin)["id"])')
echo "$sid" > "$MC_RUN/logs/session-id"
model='"model":{"providerID":"stub","modelID":"stub-model"}'
for i in 1 2 3; do
  api "turn-$i" POST "/session/$sid/message" "{$model,\"parts\":[{\"type\":\"text\",\"text\":\"serve turn $i SVMARK-$i\"}]}" > /dev/null
done
api compact POST "/session/$sid/summarize" '{"providerID":"stub","modelID":"stub-model"}' > /dev/null
api turn-4 POST "/session/$sid/message" "{$model,\"parts\":[{\"type\":\"text\",\"text\":\"after compaction SVMARK-4\"}]}" > /dev/null
sleep 1
api delete DELETE "/session/$sid" > /dev/null
long=$(api long-new POST /session '{}' | "$MC_PY" -c 'import json,sys; print(json.load(sys.stdin)["id"])')
echo "$long" > "$MC_RUN/logs/long-session-id"
pad=$("$MC_PY" -c 'print("lorem ipsum dolor sit amet " * 1000)')
for i in 1 2 3; do
  api "long-turn-$i" POST "/session/$long/message" "{$model,\"parts\":[{\"type\":\"text\",\"text\":\"LGMARK-$i $pad\"}]}" > /dev/null
done
sleep 1
api long-delete DELETE "/session/$long" > /dev/null
# A third: two turns, an undo of the second (POST /session/{id}/revert to its user message) and a
# new prompt, after which opencode deletes the messages undone.
undo=$(api undo-new POST /session '{}' | "$MC_PY" -c 'import json,sys; print(json.load(sys.stdin)["id"])')
echo "$undo" > "$MC_RUN/logs/undo-session-id"
api undo-turn-1 POST "/session/$undo/message" "{$model,\"parts\":[{\"type\":\"text\",\"text\":\"undo turn 1 UNDOMARK-1\"}]}" > /dev/null
second=$(api undo-turn-2 POST "/session/$undo/message" "{$model,\"parts\":[{\"type\":\"text\",\"text\":\"the key is UNDOMARK-SECRET-2\"}]}" \
  | "$MC_PY" -c 'import json,sys; print(json.load(sys.stdin)["info"]["parentID"])')
sleep 1
api undo-revert POST "/session/$undo/revert" "{\"messageID\":\"$second\"}" > /dev/null
api undo-turn-3 POST "/session/$undo/message" "{$model,\"parts\":[{\"type\":\"text\",\"text\":\"undo turn 3 UNDOMARK-3\"}]}" > /dev/null
sleep 1
api undo-delete DELETE "/session/$undo" > /dev/null
sleep 2
mc_mneme flush >/dev/null 2>&1
mc_mneme export > "$MC_RUN/logs/export.jsonl" 2>/dev/null
exit 0
