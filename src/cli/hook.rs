//! `mneme hook claude-code`: a Claude Code hook. Reads the event's JSON on stdin, talks to the
//! daemon, writes the hook's JSON answer on stdout. It never blocks the agent: a daemon that is
//! down, slow or confused means an empty answer (`{}`) within `recall.timeout`, exit code 0.
//!
//! | event | what mneme does | answer |
//! |---|---|---|
//! | SessionStart | start the session; instructions (and, after a compaction, the compaction context) | `additionalContext` |
//! | UserPromptSubmit | first-turn automatic recall | `additionalContext` (the `<memories>` block) |
//! | PreCompact | flush the session's queue, so compaction cannot outrun delivery | `{}` |
//! | Stop | automatic retain from the transcript, then flush | `{}` (never `decision: block`) |
//! | SessionEnd | end the session (flush) | `{}` |
//!
//! Claude Code honours `additionalContext` for SessionStart and UserPromptSubmit but not for
//! PreCompact, so the compaction context is injected by the SessionStart that follows a
//! compaction (`source: "compact"`).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use mneme_core::text::Message;
use reqwest::Method;
use serde_json::{json, Value};

use super::commands::load_settings;
use super::{CliError, Client};
use crate::config::Settings;

/// Largest event accepted on stdin.
const MAX_EVENT_BYTES: u64 = 16 * 1024 * 1024;
/// Transcript bytes read at most (the tail, where the recent turns are).
const MAX_TRANSCRIPT_BYTES: u64 = 32 * 1024 * 1024;

/// Every event mneme handles, in the order `--install` writes them.
pub const EVENTS: [&str; 5] = ["SessionStart", "UserPromptSubmit", "PreCompact", "Stop", "SessionEnd"];

pub(super) async fn claude_code(config: Option<&Path>) -> ExitCode {
    let mut input = String::new();
    let _ = std::io::stdin().take(MAX_EVENT_BYTES).read_to_string(&mut input);
    let settings = match load_settings(config) {
        Ok(loaded) => loaded.settings,
        Err(e) => {
            eprintln!("mneme hook: {e}");
            println!("{{}}");
            return ExitCode::SUCCESS;
        }
    };
    let answer = match serde_json::from_str::<Value>(&input) {
        Ok(event) => {
            let timeout = settings.recall.timeout;
            match tokio::time::timeout(timeout, handle(&settings, &event)).await {
                Ok(Ok(answer)) => answer,
                Ok(Err(e)) => {
                    eprintln!("mneme hook: {e}");
                    json!({})
                }
                Err(_) => {
                    eprintln!("mneme hook: the daemon did not answer within {timeout:?}; going on without memory");
                    json!({})
                }
            }
        }
        Err(e) => {
            eprintln!("mneme hook: the event on stdin is not JSON: {e}");
            json!({})
        }
    };
    println!("{answer}");
    ExitCode::SUCCESS
}

fn context(event: &str, text: Option<String>) -> Value {
    match text.filter(|t| !t.trim().is_empty()) {
        Some(t) => json!({"hookSpecificOutput": {"hookEventName": event, "additionalContext": t}}),
        None => json!({}),
    }
}

async fn handle(settings: &Settings, event: &Value) -> Result<Value, CliError> {
    let name = event["hook_event_name"].as_str().unwrap_or_default();
    let session = event["session_id"].as_str().unwrap_or_default();
    if session.is_empty() || !EVENTS.contains(&name) {
        return Ok(json!({}));
    }
    let cwd = event["cwd"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| std::env::current_dir().map(|p| p.display().to_string()).unwrap_or_else(|_| "/".into()));
    let transcript = event["transcript_path"].as_str().map(PathBuf::from);
    let client = Client::connect(settings).await?;
    let start = json!({"session_id": session, "cwd": cwd, "agent": "claude-code"});
    let base = format!("/v1/sessions/{session}");
    match name {
        "SessionStart" => {
            let _: Value = client.call(Method::POST, "/v1/sessions", Some(&start)).await?;
            let v: Value = client.call(Method::GET, &format!("{base}/instructions"), None).await?;
            let mut text = v["markdown"].as_str().unwrap_or_default().to_owned();
            if event["source"] == "compact" {
                let messages = read_transcript(transcript.as_deref());
                let v: Value = client
                    .call(Method::POST, &format!("{base}/compaction"), Some(&json!({"messages": messages})))
                    .await?;
                if let Some(c) = v["context"].as_str() {
                    text.push_str(&format!("\n\nMemories relevant to the conversation before compaction:\n{c}\n"));
                }
            }
            Ok(context(name, Some(text)))
        }
        "UserPromptSubmit" => {
            let _: Value = client.call(Method::POST, "/v1/sessions", Some(&start)).await?;
            let prompt = event["prompt"].as_str().unwrap_or_default();
            let messages = read_transcript(transcript.as_deref());
            let body = json!({"prompt": prompt, "messages": messages, "agent": "claude-code"});
            let v: Value = client.call(Method::POST, &format!("{base}/agent-start"), Some(&body)).await?;
            Ok(context(name, v["inject"].as_str().map(str::to_owned)))
        }
        "PreCompact" => {
            let _: Value = client.call(Method::POST, "/v1/flush", Some(&json!({"session_id": session}))).await?;
            Ok(json!({}))
        }
        "Stop" => {
            let _: Value = client.call(Method::POST, "/v1/sessions", Some(&start)).await?;
            let messages = read_transcript(transcript.as_deref());
            let body = json!({"messages": messages, "agent": "claude-code"});
            let _: Value = client.call(Method::POST, &format!("{base}/agent-end"), Some(&body)).await?;
            Ok(json!({}))
        }
        "SessionEnd" => {
            match client.call::<Value>(Method::DELETE, &base, None).await {
                Ok(_) | Err(CliError::Daemon { status: 404, .. }) => {}
                Err(e) => return Err(e),
            }
            Ok(json!({}))
        }
        _ => Ok(json!({})),
    }
}

/// The conversation in a Claude Code transcript (JSON lines): user and assistant messages of the
/// main thread, their text blocks joined; tool calls and results carry no text and drop out.
pub fn read_transcript(path: Option<&Path>) -> Vec<Message> {
    let Some(path) = path else { return Vec::new() };
    let Ok(file) = std::fs::File::open(path) else { return Vec::new() };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut text = String::new();
    {
        use std::io::{Seek, SeekFrom};
        let mut file = file;
        let skip = len.saturating_sub(MAX_TRANSCRIPT_BYTES);
        if file.seek(SeekFrom::Start(skip)).is_err() {
            return Vec::new();
        }
        let _ = file.take(MAX_TRANSCRIPT_BYTES).read_to_string(&mut text);
        if skip > 0 {
            // Drop the partial first line.
            text = text.split_once('\n').map(|(_, rest)| rest.to_owned()).unwrap_or_default();
        }
    }
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|v| v["isSidechain"] != true && matches!(v["type"].as_str(), Some("user" | "assistant")))
        .filter_map(|v| {
            let msg = &v["message"];
            let role = msg["role"].as_str().or(v["type"].as_str())?.to_owned();
            let content = match &msg["content"] {
                Value::String(s) => s.clone(),
                Value::Array(blocks) => blocks
                    .iter()
                    .filter(|b| b["type"] == "text")
                    .filter_map(|b| b["text"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n"),
                _ => return None,
            };
            (!content.trim().is_empty()).then(|| Message::new(role, content))
        })
        .collect()
}

/// The hooks configuration for `.claude/settings.json`.
pub fn hooks_config(command: &str) -> Value {
    let entry = |timeout: u64| json!([{"hooks": [{"type": "command", "command": command, "timeout": timeout}]}]);
    let mut hooks = serde_json::Map::new();
    for event in EVENTS {
        hooks.insert(event.to_owned(), entry(if event == "Stop" || event == "PreCompact" { 30 } else { 10 }));
    }
    json!({ "hooks": hooks })
}

/// Merges our hooks into an existing settings object, keeping everything else; idempotent.
pub fn merge_hooks(existing: &mut Value, command: &str) {
    if !existing.is_object() {
        *existing = json!({});
    }
    let ours = hooks_config(command);
    let hooks = existing.as_object_mut().expect("object").entry("hooks").or_insert_with(|| json!({}));
    if !hooks.is_object() {
        *hooks = json!({});
    }
    for event in EVENTS {
        let list = hooks.as_object_mut().expect("object").entry(event).or_insert_with(|| json!([]));
        if !list.is_array() {
            *list = json!([]);
        }
        let present = list.as_array().expect("array").iter().any(|group| {
            group["hooks"].as_array().is_some_and(|hs| hs.iter().any(|h| h["command"].as_str() == Some(command)))
        });
        if !present {
            list.as_array_mut().expect("array").extend(ours["hooks"][event].as_array().expect("array").iter().cloned());
        }
    }
}

/// `--install`: print the configuration, or merge it into `.claude/settings.json` with `--write`.
pub(super) fn install(write: bool, as_json: bool) -> Result<ExitCode, CliError> {
    let exe = std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_else(|_| "mneme".into());
    let command = format!("{exe} hook claude-code");
    if !write {
        println!("{}", serde_json::to_string_pretty(&hooks_config(&command)).expect("json"));
        return Ok(ExitCode::SUCCESS);
    }
    let path = PathBuf::from(".claude/settings.json");
    let mut settings: Value = match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text)
            .map_err(|e| CliError::Other(format!("{} is not valid JSON ({e}); not touching it", path.display())))?,
        Err(_) => json!({}),
    };
    merge_hooks(&mut settings, &command);
    std::fs::create_dir_all(".claude").map_err(|e| CliError::Other(format!("cannot create .claude: {e}")))?;
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(&settings).expect("json") + "\n")
        .and_then(|_| std::fs::rename(&tmp, &path))
        .map_err(|e| CliError::Other(format!("cannot write {}: {e}", path.display())))?;
    if as_json {
        println!("{}", json!({"written": path, "events": EVENTS}));
    } else {
        println!("Wrote the mneme hooks ({}) into {}.", EVENTS.join(", "), path.display());
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merging_keeps_other_settings_and_is_idempotent() {
        let mut s = json!({"model": "opus", "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "other"}]}]}});
        merge_hooks(&mut s, "mneme hook claude-code");
        merge_hooks(&mut s, "mneme hook claude-code");
        assert_eq!(s["model"], "opus");
        assert_eq!(s["hooks"]["Stop"].as_array().unwrap().len(), 2);
        for e in EVENTS {
            assert_eq!(
                s["hooks"][e][s["hooks"][e].as_array().unwrap().len() - 1]["hooks"][0]["command"],
                "mneme hook claude-code"
            );
        }
    }
}
