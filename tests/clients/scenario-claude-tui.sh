#!/bin/bash
# scenario-claude-tui.sh OUT_DIR [TURNS] : interactive Claude Code in tmux, in a fresh loopback-only
# namespace (run it through netns.sh): TURNS turns (default 3), /compact, one more turn, /exit.
# mneme's hooks are installed and tapped with --watch-ms 3000 (OUT_DIR/hooks/{hooks,watch}.jsonl),
# and a memory is retained first so the first prompt gets a <memories> block.
# Prints one JSON line per step: {step, ms}; a screen dump goes to OUT_DIR/logs/screen.txt.
set -u
. "$(dirname "$0")/lib.sh"
out=$1 turns=${2:-3}
mc_begin "$out"
mc_start_stub || exit 1
mc_start_daemon || exit 1
(cd "$MC_PROJ" && mc_mneme retain "The deploy script is scripts/ship.sh TUIMEM-1" >/dev/null && mc_mneme flush >/dev/null)
mc_claude_project --watch-ms 3000
t() { echo "{\"step\":\"$1\",\"ms\":$(( $(mc_now_ms) - $2 ))}"; }
t0=$(mc_now_ms); mc_tmux_claude || exit 1; t start "$t0"
for i in $(seq 1 "$turns"); do
  t0=$(mc_now_ms)
  mc_tmux_turn "where is the deploy script, turn $i TUI-$i" "re: where is the deploy script, turn $i TUI-$i" || exit 1
  t "turn $i" "$t0"
  sleep 1
done
t0=$(mc_now_ms); mc_tmux_send "/compact"; mc_tmux_wait "Compacted" 60 || exit 1; t compact "$t0"
sleep 1
t0=$(mc_now_ms); mc_tmux_turn "after compaction TUI-X" "re: after compaction TUI-X" || exit 1; t "turn after compaction" "$t0"
sleep 1
mc_tmux_capture > "$MC_RUN/logs/screen.txt"
t0=$(mc_now_ms); mc_tmux_exit || exit 1; t exit "$t0"
sleep 3   # let the transcript watchers finish
mc_mneme flush >/dev/null 2>&1; mc_mneme export > "$MC_RUN/logs/export.jsonl" 2>/dev/null
