#!/bin/bash
# check-claude-tui.sh OUT : interactive Claude Code in tmux, as tests/real_clients.rs checks it,
# in a fresh loopback-only namespace (run it through netns.sh): a memory retained first (so
# recall and compaction have something to bring), three turns, a custom slash command with
# arguments (.claude/commands/facts.md), /compact, one more turn, /exit.
# Each step appends {step, ms} to OUT/steps.jsonl; the screen at the end is OUT/logs/screen.txt.
set -u
. "$(dirname "$0")/lib.sh"
out=$1
mc_begin "$out"
mc_start_stub || exit 1
mc_start_daemon || exit 1
(cd "$MC_PROJ" && mc_mneme retain "The deploy script is scripts/ship.sh TUIMEM-1" >/dev/null && mc_mneme flush >/dev/null)
mc_claude_project --no-mcp
mkdir -p "$MC_PROJ/.claude/commands"
printf 'Summarize the project facts for: $ARGUMENTS\n' > "$MC_PROJ/.claude/commands/facts.md"
t() { echo "{\"step\":\"$1\",\"ms\":$(( $(mc_now_ms) - $2 ))}" >> "$MC_RUN/steps.jsonl"; }
t0=$(mc_now_ms); mc_tmux_claude || exit 1; t start "$t0"
for i in 1 2 3; do
  t0=$(mc_now_ms)
  mc_tmux_turn "where is the deploy script, turn $i TUI-$i" "re: where is the deploy script, turn $i TUI-$i" || exit 1
  t "turn-$i" "$t0"
done
# Enter after a pause, as the command menu updates while the text is typed.
t0=$(mc_now_ms)
tmux -L "$MC_TMUX" send-keys -t cc -l -- "/facts TUI-CMD release notes"; sleep 0.8
tmux -L "$MC_TMUX" send-keys -t cc Enter
mc_tmux_wait "re: Summarize the project facts for: TUI-CMD" 30 || exit 1
mc_wait_count '"hook_event_name": "Stop"' "$MC_RUN/hooks/hooks.jsonl" 4 30 || exit 1
t slash-command "$t0"
t0=$(mc_now_ms); mc_tmux_send "/compact"; mc_tmux_wait "Compacted" 60 || exit 1; t compact "$t0"
sleep 1
t0=$(mc_now_ms); mc_tmux_turn "after compaction TUI-X" "re: after compaction TUI-X" || exit 1; t turn-after-compact "$t0"
mc_tmux_capture > "$MC_RUN/logs/screen.txt"
t0=$(mc_now_ms); mc_tmux_exit || exit 1; t exit "$t0"
mc_mneme flush >/dev/null 2>&1
mc_mneme export > "$MC_RUN/logs/export.jsonl" 2>/dev/null
exit 0
