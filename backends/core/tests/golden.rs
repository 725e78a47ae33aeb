//! Runs every case of every `*.jsonl` in `MNEME_GOLDEN_DIR` (default `../shared/golden`, next to
//! the workspace) against the text utilities.

use std::path::PathBuf;

use mneme_core::text::*;
use serde_json::Value;

fn golden_dir() -> PathBuf {
    match std::env::var_os("MNEME_GOLDEN_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/golden"),
    }
}

fn messages(v: &Value) -> Vec<Message> {
    v.as_array()
        .expect("messages is an array")
        .iter()
        .map(|m| Message::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect()
}

fn str_or_empty(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

#[test]
fn golden_cases_pass() {
    let dir = golden_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("golden dir {} unreadable: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    let mut ran = 0;
    let mut failures = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let case: Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{}:{}: not JSON: {e}", file.display(), n + 1));
            let id = case["id"].as_str().unwrap_or("?").to_owned();
            let (input, expect) = (&case["input"], &case["expect"]);
            let msgs = messages(&input["messages"]);
            let latest = input["latest_query"].as_str().unwrap();
            let turns = input["recall_context_turns"].as_i64().unwrap();
            let max = input["max_chars"].as_i64().unwrap();
            let results: Vec<MemoryLine> = input["results"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| MemoryLine {
                    text: str_or_empty(&r["text"]),
                    kind: str_or_empty(&r["type"]),
                    mentioned_at: str_or_empty(&r["mentioned_at"]),
                })
                .collect();
            let mut check = |what: &str, got: Value| {
                if got != expect[what] {
                    failures.push(format!("{id} {what}: got {got} want {}", expect[what]));
                }
            };
            check("strip_memory_tags", Value::from(strip_memory_tags(input["strip"].as_str().unwrap())));
            check("format_memories", Value::from(format_memories(&results)));
            check("slice_last_turns", serde_json::to_value(slice_last_turns(&msgs, turns)).unwrap());
            let composed = compose_recall_query(latest, &msgs, turns);
            check("compose_recall_query", Value::from(composed.clone()));
            check("truncate_recall_query", Value::from(truncate_recall_query(&composed, latest, max)));
            for (key, full) in [("retention_last_turn", false), ("retention_full_window", true)] {
                let t = retention_transcript(&msgs, full);
                check(key, serde_json::json!({"transcript": t.text, "messageCount": t.message_count}));
            }
            ran += 1;
        }
    }
    println!("golden: {ran} cases ran from {} file(s) in {}", files.len(), dir.display());
    assert!(ran > 0, "no golden cases found in {}", dir.display());
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures[..failures.len().min(20)].join("\n"));
}
