#!/bin/bash
# check-omp.sh OUT : oh-my-pi 18.2.3 (`omp -p`) with its own `hindsight` memory backend pointed
# at mneme's Hindsight API (through http_tap.py, so OUT/logs/mcp-wire.jsonl holds every request it
# made), in one loopback-only namespace (run it through netns.sh), with the stub model. Each step
# appends {step, ms, rc} to OUT/steps.jsonl.
#
#   first   a fact with a <private> span; the model calls omp's `retain` tool
#   later   a later session: its request to the model must carry the fact in a <memories> block
#   kill    omp is SIGKILLed as soon as mneme has answered its retain (queue.flush_interval is an
#           hour, so the item is only in mneme's spool then): it must be stored all the same
# Then `mneme recall` in the project (logs/recall.out) and `mneme export` (logs/export.jsonl).
set -u
. "$(dirname "$0")/lib.sh"
out=$1
mc_begin "$out"
# oh-my-pi's bank is "omp" and its tags "project:<name>", as mneme's own scoping: the same memories.
printf '[memory]\nbank_id = "omp"\n[queue]\nflush_interval = "1h"\n' >> "$MC_RUN/mneme.toml"
mc_start_stub || exit 1
mc_start_daemon || exit 1
mc_start_http_tap || exit 1
mc_omp_project
step() {  # step NAME PROMPT
  local ms rc
  ms=$(mc_omp_p "$2" --tools read,retain,recall); rc=$?
  cp "$MC_RUN/logs/omp.out" "$MC_RUN/logs/omp-$1.out"
  echo "{\"step\":\"$1\",\"ms\":$ms,\"rc\":$rc}" >> "$MC_RUN/steps.jsonl"
}
step first 'Note for later: OMPFACT-1 the CI image is debian-13 <private>OMPSECRET-1</private> [[call retain {"items": [{"content": "OMPTOOL-2: omp tests run on bun 1.4"}]}]]'
mc_mneme flush >/dev/null 2>&1
step later "Which CI image do we use? OMPLATER-1"
mc_mneme flush >/dev/null 2>&1

# kill: watch the tap for mneme's answer to the retain, then SIGKILL omp at once.
# A retain mneme answered with 200, as the tap logs it (one JSON line per exchange).
answered='"path": "/hindsight/v1/default/banks/omp/memories", .*"status": 200,'
retains() { grep -cE "$answered" "$MC_RUN/logs/mcp-wire.jsonl" 2>/dev/null || true; }
before=$(retains)
start=$(mc_now_ms)
(cd "$MC_PROJ" && exec env $(mc_omp_env) omp -p --model stub/stub-model --no-title --no-lsp "Remember OMPKILL-3: the cache lives in /var/cache/ci") \
  > "$MC_RUN/logs/omp-kill.out" 2>&1 &
pid=$!
alive=false
for _ in $(seq 1 6000); do
  if [ "$(retains)" -gt "$before" ]; then
    kill -0 "$pid" 2>/dev/null && alive=true
    kill -KILL "$pid" 2>/dev/null
    break
  fi
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.01
done
wait "$pid" 2>/dev/null; rc=$?
echo "{\"step\":\"kill\",\"ms\":$(( $(mc_now_ms) - start )),\"rc\":$rc,\"alive_at_kill\":$alive}" >> "$MC_RUN/steps.jsonl"
mc_mneme status > "$MC_RUN/logs/status-after-kill.out" 2>&1
mc_mneme flush >/dev/null 2>&1
(cd "$MC_PROJ" && mc_mneme recall "which CI image") > "$MC_RUN/logs/recall.out" 2>&1
mc_mneme export > "$MC_RUN/logs/export.jsonl" 2>/dev/null
exit 0
