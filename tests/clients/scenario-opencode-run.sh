#!/bin/bash
# scenario-opencode-run.sh OUT_DIR [MODE] : one `opencode run` in a fresh loopback-only namespace
# (run it through netns.sh), with mneme's plugin in .opencode/plugins/ and the recording plugin
# tap.ts beside it (OUT_DIR/hooks/opencode-plugin.jsonl). The plugin reaches the daemon through
# http_tap.py, so OUT_DIR/logs/mcp-wire.jsonl holds every plugin -> daemon request. MODE:
#   up        daemon running (default)
#   noplugin  daemon running, neither plugin (baseline)
#   down      daemon never started (nothing listens)
#   hung      daemon started, then SIGSTOPped (the tap still accepts, nothing answers)
#   tool      the prompt asks the stub to call mneme_retain
#   offline0  like up but without the offline cache (shows the npm install hang)
# Prints one JSON line: {mode, ms, rc, out}.
set -u
. "$(dirname "$0")/lib.sh"
out=$1 mode=${2:-up}
mc_begin "$out"
mc_start_stub || exit 1
if [ "$mode" != down ]; then
  mc_start_daemon || exit 1
  mc_start_http_tap || exit 1
else
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$MC_RUN/mneme/token"
fi
case $mode in
  noplugin) mc_opencode_project --no-plugin ;;
  offline0) MC_OPENCODE_NO_OFFLINE=1 mc_opencode_project --tap ;;
  *) mc_opencode_project --tap ;;
esac
[ "$mode" = hung ] && mc_hang_daemon
prompt="Hello from opencode OCMARK-1"
[ "$mode" = tool ] && prompt='Remember this. [[call mneme_retain {"content": "opencode tests run with bun OCMEM-9"}]]'
ms=$(MC_DAEMON_PORT=$MC_TAP_PORT mc_opencode_run "$prompt"); rc=$?
if [ "$mode" != down ] && [ "$mode" != hung ]; then
  mc_mneme flush >/dev/null 2>&1; mc_mneme export > "$MC_RUN/logs/export.jsonl" 2>/dev/null
fi
printf '{"mode":"%s","ms":%s,"rc":%s,"out":%s}\n' "$mode" "$ms" "$rc" \
  "$("$MC_PY" -c 'import json,sys; print(json.dumps(open(sys.argv[1]).read()))' "$MC_RUN/logs/opencode.out")"
