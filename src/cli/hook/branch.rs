//! The branch of a Claude Code transcript the conversation is on. The file is append-only and
//! shaped as a tree: each line names the line it follows (`parentUuid`), and a rewind (Esc Esc,
//! `/rewind`) writes nothing of its own: the next prompt is simply parented on the turn the user
//! went back to, and the turns taken back stay in the file. Read in file order, they were stored
//! as if the conversation had gone on through them — a secret pasted by mistake and rewound
//! included.
//!
//! Only what is certainly a rewind is left out. Claude Code's own bugs leave lines off the chain
//! too (a compaction that parented what followed on a line before it, a parent never written),
//! and the turns those cut off are real: a run of messages off the chain is dropped only when a
//! prompt of the user's comes right after it and it holds no compaction; any other break in the
//! chain, and the transcript is read in file order as before.

use std::collections::{HashMap, HashSet};

use mneme_core::text::Message;
use serde_json::Value;

/// What the branch needs of one line, with the message it holds (if any).
pub struct Row {
    uuid: Option<String>,
    /// `parentUuid`, or across a compaction's boundary (whose parent is null) `logicalParentUuid`.
    parent: Option<String>,
    /// A `user` line with text: a prompt the user typed (or a command they ran).
    prompt: bool,
    /// A compaction's boundary or summary.
    compaction: bool,
    /// A subagent's line (older versions wrote them into the main transcript): never the leaf.
    sidechain: bool,
    pub message: Option<Message>,
    /// The text of a line Claude Code flags as its own, read only for the private spans it
    /// leaves open.
    pub own_text: Option<String>,
    /// The line is a custom slash command's prompt as it expanded (`isMeta`): the command's
    /// line before it holds words of the user's (see `transcript::conversation`).
    pub expands_command: bool,
}

impl Row {
    /// The line `v`, whose message (see `line_message`) is `message`.
    pub fn new(v: &Value, message: Option<Message>) -> Self {
        let text = |key: &str| v[key].as_str().filter(|s| !s.is_empty()).map(str::to_owned);
        Row {
            uuid: text("uuid"),
            parent: text("parentUuid").or_else(|| text("logicalParentUuid")),
            prompt: v["type"] == "user" && message.is_some(),
            compaction: v["subtype"] == "compact_boundary" || v["isCompactSummary"] == true,
            sidechain: v["isSidechain"] == true,
            message,
            own_text: None,
            expands_command: false,
        }
    }
}

/// The rows of the branch the conversation is on (see the module's documentation), and whether
/// a rewind took messages back: all of them when the transcript has no ids, its chain breaks,
/// or what is off it is not a rewind.
pub fn active_branch(rows: Vec<Row>) -> (Vec<Row>, bool) {
    match rewound_rows(&rows) {
        Some(dropped) if !dropped.is_empty() => {
            (rows.into_iter().enumerate().filter(|(i, _)| !dropped.contains(i)).map(|(_, r)| r).collect(), true)
        }
        _ => (rows, false),
    }
}

/// The indices of the rows a rewind took back, or `None` when the chain cannot be trusted.
fn rewound_rows(rows: &[Row]) -> Option<HashSet<usize>> {
    let index: HashMap<&str, usize> =
        rows.iter().enumerate().filter_map(|(i, r)| r.uuid.as_deref().map(|u| (u, i))).collect();
    let leaf = rows.iter().rposition(|r| r.uuid.is_some() && !r.sidechain)?;
    // Walk back from the newest line to the root; a parent missing from the file (or from the
    // part of it read) or a cycle: not to be trusted.
    let mut on_branch = HashSet::new();
    let mut at = leaf;
    loop {
        if !on_branch.insert(at) {
            return None;
        }
        match rows[at].parent.as_deref() {
            None => break,
            Some(parent) => at = *index.get(parent)?,
        }
    }
    // Runs of messages off the branch, each ended by the next line on it.
    let mut dropped = HashSet::new();
    let mut run: Vec<usize> = Vec::new();
    let mut run_has_compaction = false;
    for (i, row) in rows.iter().enumerate() {
        if row.uuid.is_none() {
            continue; // on no branch, kept as read
        }
        if on_branch.contains(&i) {
            if !run.is_empty() {
                if !row.prompt || run_has_compaction {
                    return None;
                }
                dropped.extend(run.drain(..));
            }
            run_has_compaction = false;
        } else {
            if row.message.is_some() && !row.sidechain {
                run.push(i);
            }
            run_has_compaction |= row.compaction;
        }
    }
    Some(dropped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(uuid: &str, parent: Option<&str>, role: &str, text: &str) -> Value {
        json!({"type": role, "uuid": uuid, "parentUuid": parent, "message": {"role": role, "content": text}})
    }

    fn tool_line(uuid: &str, parent: &str) -> Value {
        json!({"type": "user", "uuid": uuid, "parentUuid": parent,
               "message": {"role": "user", "content": [{"type": "tool_result", "content": "x"}]}})
    }

    fn texts(lines: &[Value]) -> Vec<String> {
        let rows = lines
            .iter()
            .map(|v| {
                let message = match &v["message"]["content"] {
                    Value::String(s) => Some(Message::new(v["type"].as_str().unwrap(), s.clone())),
                    _ => None,
                };
                Row::new(v, message)
            })
            .collect();
        let (rows, rewound) = active_branch(rows);
        let texts: Vec<String> = rows.into_iter().filter_map(|r| r.message).map(|m| m.content).collect();
        assert_eq!(rewound, texts.len() < lines.iter().filter(|v| v["message"]["content"].is_string()).count());
        texts
    }

    #[test]
    fn turns_taken_back_by_a_rewind_are_left_out() {
        let lines = [
            line("u1", None, "user", "set up the repo"),
            line("a1", Some("u1"), "assistant", "done"),
            line("u2", Some("a1"), "user", "my key is sk-PASTED-BY-MISTAKE"),
            line("a2", Some("u2"), "assistant", "noted the key"),
            line("u3", Some("a2"), "user", "and more"),
            line("a3", Some("u3"), "assistant", "more"),
            // Rewound to before u2.
            line("u2b", Some("a1"), "user", "add a README"),
            line("a2b", Some("u2b"), "assistant", "added"),
        ];
        assert_eq!(texts(&lines), ["set up the repo", "done", "add a README", "added"]);
        // Rewound twice, the second time to the very first reply.
        let mut twice = lines.to_vec();
        twice.push(line("u3c", Some("a1"), "user", "no, a LICENSE"));
        assert_eq!(texts(&twice), ["set up the repo", "done", "no, a LICENSE"]);
    }

    #[test]
    fn a_straight_transcript_and_tool_calls_off_the_chain_are_read_as_they_are() {
        let lines = [
            line("u1", None, "user", "run both"),
            line("a1", Some("u1"), "assistant", "running"),
            // Parallel tool calls: results parented on their own call, not on the line before.
            json!({"type": "assistant", "uuid": "t1", "parentUuid": "a1", "message": {"content": [{"type": "tool_use"}]}}),
            json!({"type": "assistant", "uuid": "t2", "parentUuid": "t1", "message": {"content": [{"type": "tool_use"}]}}),
            tool_line("r1", "t1"),
            tool_line("r2", "t2"),
            line("a2", Some("r2"), "assistant", "both ran"),
            json!({"type": "last-prompt", "lastPrompt": "run both"}),
        ];
        assert_eq!(texts(&lines), ["run both", "running", "both ran"]);
        // No ids at all (an old transcript, a test's): file order.
        let plain = [
            json!({"type": "user", "message": {"content": "a"}}),
            json!({"type": "assistant", "message": {"content": "b"}}),
        ];
        assert_eq!(texts(&plain), ["a", "b"]);
    }

    #[test]
    fn a_compaction_is_crossed_by_its_logical_parent() {
        let lines = [
            line("u1", None, "user", "before the compaction"),
            line("a1", Some("u1"), "assistant", "reply"),
            json!({"type": "system", "subtype": "compact_boundary", "uuid": "b", "parentUuid": null, "logicalParentUuid": "a1"}),
            json!({"type": "user", "uuid": "s", "parentUuid": "b", "isCompactSummary": true, "message": {"content": "summary"}}),
            line("u2", Some("s"), "user", "after it"),
        ];
        assert_eq!(texts(&lines), ["before the compaction", "reply", "summary", "after it"]);
    }

    #[test]
    fn a_chain_claude_code_broke_itself_is_read_in_file_order() {
        // A parent never written (a compaction that lost it): nothing is left out.
        let lines = [
            line("u1", None, "user", "first"),
            line("a1", Some("u1"), "assistant", "reply"),
            line("u2", Some("gone"), "user", "second"),
        ];
        assert_eq!(texts(&lines), ["first", "reply", "second"]);
        // What was cut off holds a compaction (a second compaction parented what followed on a
        // line before the first): real turns, kept.
        let lines = [
            line("u1", None, "user", "first"),
            line("a1", Some("u1"), "assistant", "reply"),
            json!({"type": "system", "subtype": "compact_boundary", "uuid": "b", "parentUuid": null, "logicalParentUuid": "a1"}),
            line("u2", Some("b"), "user", "between the compactions"),
            line("u3", Some("a1"), "user", "after the second"),
        ];
        assert_eq!(texts(&lines), ["first", "reply", "between the compactions", "after the second"]);
        // A run off the chain that no prompt of the user's follows: not a rewind.
        let lines = [
            line("u1", None, "user", "first"),
            line("a1", Some("u1"), "assistant", "reply"),
            line("a2", Some("u1"), "assistant", "another reply"),
            line("a3", Some("a1"), "assistant", "a third"),
        ];
        assert_eq!(texts(&lines), ["first", "reply", "another reply", "a third"]);
        // A cycle.
        let lines = [line("u1", Some("a1"), "user", "one"), line("a1", Some("u1"), "assistant", "two")];
        assert_eq!(texts(&lines), ["one", "two"]);
    }
}
