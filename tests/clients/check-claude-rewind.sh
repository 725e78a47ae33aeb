#!/bin/bash
# check-claude-rewind.sh OUT : interactive Claude Code in tmux, as tests/real_clients.rs checks it,
# in a fresh loopback-only namespace (run it through netns.sh): two turns, a rewind (Esc Esc, the
# second prompt chosen, "Restore conversation") that takes the second turn back, the prompt it
# puts back cleared, a third turn, /exit. The session is retained in full-session mode (the
# default) after every turn (retain.every_n_turns = 1), so the second turn was stored before the
# rewind took it back.
# Each step appends {step, ms} to OUT/steps.jsonl; the memories at the end are OUT/logs/export.jsonl.
set -u
. "$(dirname "$0")/lib.sh"
out=$1
mc_begin "$out"
# Every turn retained (the default is every third), so the turn taken back was stored.
printf '[retain]\nevery_n_turns = 1\n' >> "$MC_RUN/mneme.toml"
mc_start_stub || exit 1
mc_start_daemon || exit 1
mc_claude_project --no-mcp
t() { echo "{\"step\":\"$1\",\"ms\":$(( $(mc_now_ms) - $2 ))}" >> "$MC_RUN/steps.jsonl"; }
keys() { tmux -L "$MC_TMUX" send-keys -t cc "$@"; sleep 0.4; }
t0=$(mc_now_ms); mc_tmux_claude || exit 1; t start "$t0"
mc_tmux_turn "first question KEEP-1" "re: first question KEEP-1" || exit 1
mc_tmux_turn "second question REWOUND-2" "re: second question REWOUND-2" || exit 1
# The second turn is stored before it is taken back (the Stop hook's retain may still be on its
# way when the hook is logged).
for _ in $(seq 1 50); do
  mc_mneme flush >/dev/null 2>&1
  mc_mneme export > "$MC_RUN/logs/export-before.jsonl" 2>/dev/null
  grep -q "REWOUND-2" "$MC_RUN/logs/export-before.jsonl" && break
  sleep 0.2
done
t0=$(mc_now_ms)
keys Escape; keys Escape
mc_tmux_wait "Restore the code and/or conversation" 15 || exit 1
keys Up   # from "(current)" to the second prompt
keys Enter
mc_tmux_wait "Restore conversation" 15 || exit 1
keys Enter
# Claude Code puts the prompt taken back into the input; it is cleared before the next one.
mc_tmux_wait "second question REWOUND-2" 15 || exit 1
keys C-u
t rewind "$t0"
t0=$(mc_now_ms); mc_tmux_turn "third question AFTER-3" "re: third question AFTER-3" || exit 1; t turn-3 "$t0"
mc_tmux_capture > "$MC_RUN/logs/screen.txt"
t0=$(mc_now_ms); mc_tmux_exit || exit 1; t exit "$t0"
mc_mneme flush >/dev/null 2>&1
mc_mneme export > "$MC_RUN/logs/export.jsonl" 2>/dev/null
exit 0
