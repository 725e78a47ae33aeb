#!/bin/bash
# check-opencode.sh OUT : the `opencode run` runs tests/real_clients.rs checks, in one
# loopback-only namespace (run it through netns.sh), against one daemon (retain.idle_after = 2s,
# so a one-turn session's tail is retained soon after it goes idle: `opencode run` never deletes
# its session). Each step appends {step, ms, rc} to OUT/steps.jsonl.
#
#   first      a fact with a <private> span, in a one-turn session
#   later      a later session: its main request must carry the fact in a <memories> block,
#              its title request no memory at all
#   tool       the model calls mneme_retain
#   baseline-1/2 (no plugin), stopped-1/2 (nothing listens), hung-1/2 (the daemon SIGSTOPped)
set -u
. "$(dirname "$0")/lib.sh"
out=$1
mc_begin "$out"
printf '[retain]\nidle_after = "2s"\n' >> "$MC_RUN/mneme.toml"
mc_start_stub || exit 1
mc_start_daemon || exit 1
step() {  # step NAME PROMPT
  local ms rc
  ms=$(mc_opencode_run "$2"); rc=$?
  cp "$MC_RUN/logs/opencode.out" "$MC_RUN/logs/opencode-$1.out"
  # What each of mneme's plugin hooks took in this run.
  mv "$MC_RUN/hooks/mneme-plugin.jsonl" "$MC_RUN/hooks/plugin-$1.jsonl" 2>/dev/null || : > "$MC_RUN/hooks/plugin-$1.jsonl"
  echo "{\"step\":\"$1\",\"project\":\"$(basename "$MC_PROJ")\",\"ms\":$ms,\"rc\":$rc}" >> "$MC_RUN/steps.jsonl"
}
mc_opencode_project
step first "Note for later: OCFACT-1 the CI image is ubuntu-24.04 <private>OCSECRET-1</private>"
sleep 4   # idle past retain.idle_after: the sweep retains the one turn
step later "Which CI image do we use? OCLATER-1"
step tool 'Remember this. OCSTEP-1 [[call mneme_retain {"content": "OCTOOL-2: opencode tests run with bun"}]]'
sleep 4
mc_mneme flush >/dev/null 2>&1
mc_mneme export > "$MC_RUN/logs/export.jsonl" 2>/dev/null

mc_project baseline
mc_opencode_project --no-plugin
step baseline-1 "Say hello BASE-1"
step baseline-2 "Say hello BASE-2"
mc_project proj
mc_stop_daemon
step stopped-1 "Say hello STOPPED-1"
step stopped-2 "Say hello STOPPED-2"
mc_start_daemon || exit 1
mc_hang_daemon
step hung-1 "Say hello HUNG-1"
step hung-2 "Say hello HUNG-2"
mc_unhang_daemon
exit 0
