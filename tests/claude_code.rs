//! `mneme hook claude-code` with event payloads in Claude Code's documented shapes.

mod common;

use std::time::{Duration, Instant};

use common::Daemon;
use serde_json::{json, Value};

fn hook(d: &Daemon, event: &Value) -> Value {
    let out = d.cli().args(["hook", "claude-code"]).write_stdin(event.to_string()).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

/// A transcript as Claude Code writes it: one JSON object a line.
fn transcript(dir: &std::path::Path, turns: usize) -> std::path::PathBuf {
    let mut lines = vec![json!({"type": "summary", "summary": "earlier", "leafUuid": "x"})];
    for i in 0..turns {
        lines.push(json!({"type": "user", "isSidechain": false, "sessionId": "cc-1", "message": {"role": "user", "content": format!("How should the gannet importer handle retries? ({i})")}}));
        lines.push(json!({"type": "assistant", "isSidechain": false, "message": {"role": "assistant", "content": [
            {"type": "text", "text": format!("The gannet importer retries with jittered backoff ({i}).")},
            {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "/x"}}]}}));
        lines.push(json!({"type": "user", "isSidechain": false, "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "file body"}]}}));
        lines.push(json!({"type": "assistant", "isSidechain": true, "message": {"role": "assistant", "content": "subagent chatter"}}));
    }
    let path = dir.join("transcript.jsonl");
    std::fs::write(&path, lines.iter().map(|l| l.to_string()).collect::<Vec<_>>().join("\n") + "\n").unwrap();
    path
}

#[tokio::test]
async fn a_claude_code_session_through_the_hooks() {
    let d = Daemon::start("[retain]\nevery_n_turns = 2\n");
    let project = tempfile::tempdir().unwrap();
    let cwd = project.path().join("gannet");
    std::fs::create_dir_all(&cwd).unwrap();
    let cwd = cwd.display().to_string();
    let tpath = transcript(project.path(), 3);
    let common =
        |name: &str| json!({"session_id": "cc-1", "transcript_path": tpath, "cwd": cwd, "hook_event_name": name});

    // A memory from an earlier session in the same project.
    d.start_session("earlier", &cwd).await;
    d.post("/v1/sessions/earlier/retain", json!({"items": [{"content": "The gannet importer must stay idempotent"}]}))
        .await;
    d.post("/v1/flush", json!({})).await;

    let mut start = common("SessionStart");
    start["source"] = json!("startup");
    let v = hook(&d, &start);
    assert_eq!(v["hookSpecificOutput"]["hookEventName"], "SessionStart");
    let ctx = v["hookSpecificOutput"]["additionalContext"].as_str().unwrap();
    assert!(ctx.contains("# Memory") && ctx.contains("gannet importer must stay idempotent"), "{ctx}");

    let mut prompt = common("UserPromptSubmit");
    prompt["prompt"] = json!("Make the gannet importer idempotent");
    let v = hook(&d, &prompt);
    assert_eq!(v["hookSpecificOutput"]["hookEventName"], "UserPromptSubmit");
    assert!(v["hookSpecificOutput"]["additionalContext"].as_str().unwrap().starts_with("<memories>"), "{v}");
    assert_eq!(hook(&d, &prompt), json!({}), "recall happens on the first turn only");

    let mut stop = common("Stop");
    stop["stop_hook_active"] = json!(false);
    assert_eq!(hook(&d, &stop), json!({}));
    let (_, v) = d.post("/v1/sessions/cc-1/recall", json!({"query": "jittered backoff"})).await;
    let text = v["results"][0]["text"].as_str().unwrap_or_default().to_owned();
    assert!(
        text.contains("[role: assistant]\nThe gannet importer retries with jittered backoff (2).\n[assistant:end]"),
        "{v}"
    );
    assert!(!text.contains("subagent chatter") && !text.contains("file body"), "{text}");

    let mut pre = common("PreCompact");
    pre["trigger"] = json!("auto");
    pre["custom_instructions"] = json!("");
    assert_eq!(hook(&d, &pre), json!({}));
    let mut after = common("SessionStart");
    after["source"] = json!("compact");
    let v = hook(&d, &after);
    let ctx = v["hookSpecificOutput"]["additionalContext"].as_str().unwrap();
    assert!(ctx.contains("before compaction") && ctx.contains("<memories>"), "{ctx}");

    let mut end = common("SessionEnd");
    end["reason"] = json!("exit");
    assert_eq!(hook(&d, &end), json!({}));
    let (status, _) = d.get("/v1/sessions/cc-1/instructions").await;
    assert_eq!(status, 404, "the session ended");
    assert_eq!(hook(&d, &json!({"hook_event_name": "Notification", "session_id": "cc-1"})), json!({}));
}

#[test]
fn a_daemon_that_is_down_never_blocks_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.toml");
    std::fs::write(&config, "[server]\nlisten = \"127.0.0.1:9\"\n[recall]\ntimeout = \"2s\"\n").unwrap();
    for payload in [
        json!({"session_id": "x", "cwd": "/", "hook_event_name": "UserPromptSubmit", "prompt": "hi"}).to_string(),
        "not json at all".to_owned(),
    ] {
        let started = Instant::now();
        let out = assert_cmd::Command::new(common::bin())
            .args(["hook", "claude-code", "--config"])
            .arg(&config)
            .env("MNEME_STORAGE__DIR", dir.path().join("data"))
            .write_stdin(payload)
            .timeout(Duration::from_secs(10))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "{}");
        assert!(started.elapsed() < Duration::from_secs(3));
    }
}

#[tokio::test]
async fn a_slow_daemon_gives_an_empty_answer_within_the_recall_timeout() {
    // A "daemon" that accepts connections and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.toml");
    std::fs::write(&config, format!("[server]\nlisten = \"{addr}\"\n[recall]\ntimeout = \"1s\"\n")).unwrap();
    let started = Instant::now();
    let out = tokio::task::spawn_blocking(move || {
        assert_cmd::Command::new(common::bin())
            .args(["hook", "claude-code", "--config"])
            .arg(&config)
            .env("MNEME_STORAGE__DIR", dir.path().join("data"))
            .write_stdin(
                json!({"session_id": "x", "cwd": "/", "hook_event_name": "SessionStart", "source": "startup"})
                    .to_string(),
            )
            .timeout(Duration::from_secs(10))
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "{}");
    assert!(started.elapsed() < Duration::from_millis(2500), "{:?}", started.elapsed());
}

#[test]
fn install_prints_and_merges_the_hooks() {
    let out = assert_cmd::Command::new(common::bin()).args(["hook", "claude-code", "--install"]).output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    for e in ["SessionStart", "UserPromptSubmit", "PreCompact", "Stop", "SessionEnd"] {
        assert!(v["hooks"][e][0]["hooks"][0]["command"].as_str().unwrap().ends_with("hook claude-code"), "{e}");
    }
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(project.path().join(".claude")).unwrap();
    std::fs::write(project.path().join(".claude/settings.json"), r#"{"permissions": {"allow": ["Bash(ls)"]}}"#)
        .unwrap();
    for _ in 0..2 {
        assert_cmd::Command::new(common::bin())
            .args(["hook", "claude-code", "--install", "--write"])
            .current_dir(project.path())
            .assert()
            .success();
    }
    let merged: Value =
        serde_json::from_str(&std::fs::read_to_string(project.path().join(".claude/settings.json")).unwrap()).unwrap();
    assert_eq!(merged["permissions"]["allow"][0], "Bash(ls)");
    assert_eq!(merged["hooks"]["Stop"].as_array().unwrap().len(), 1, "writing twice adds nothing");
}
