//! `mneme hook claude-code` with event payloads in Claude Code's documented shapes.

mod common;

use std::time::{Duration, Instant};

use common::Daemon;
use serde_json::{json, Value};

fn hook_raw(d: &Daemon, event: &Value) -> String {
    let out = d.cli().args(["hook", "claude-code"]).write_stdin(event.to_string()).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn hook(d: &Daemon, event: &Value) -> Value {
    let out = hook_raw(d, event);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
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
    let instructions = ctx.trim_end().to_owned();

    let mut prompt = common("UserPromptSubmit");
    prompt["prompt"] = json!("Make the gannet importer idempotent");
    let v = hook(&d, &prompt);
    assert_eq!(v["hookSpecificOutput"]["hookEventName"], "UserPromptSubmit");
    assert!(v["hookSpecificOutput"]["additionalContext"].as_str().unwrap().starts_with("<memories>"), "{v}");
    assert_eq!(hook(&d, &prompt), json!({}), "recall happens on the first turn only");

    let mut stop = common("Stop");
    stop["stop_hook_active"] = json!(false);
    assert_eq!(hook(&d, &stop), json!({}));
    // The hook does not wait for delivery; the flush does.
    d.post("/v1/flush", json!({})).await;
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
    // Claude Code puts a PreCompact hook's output into the compaction prompt: it prints nothing.
    assert_eq!(hook_raw(&d, &pre), "");
    let mut after = common("SessionStart");
    after["source"] = json!("compact");
    let v = hook(&d, &after);
    let ctx = v["hookSpecificOutput"]["additionalContext"].as_str().unwrap();
    assert!(ctx.contains("before compaction") && ctx.contains("<memories>"), "{ctx}");
    // One recalled block: the instructions' cached first-turn block is left out beside it, and
    // nothing else of them (the guide names the tag: every span from there to the block's end
    // went with it).
    assert_eq!(ctx.matches("<memories>\n").count(), 1, "{ctx}");
    assert!(ctx.starts_with(&format!("{instructions}\n\nMemories relevant to the conversation before")), "{ctx}");

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
    let addr = common::never_answering().await;
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

/// `--uninstall` takes out what `--install --write` put in, and leaves the user's settings and
/// other MCP servers as they were; run again it changes nothing.
#[test]
fn uninstall_takes_out_what_install_put_in() {
    let project = tempfile::tempdir().unwrap();
    let settings = project.path().join(".claude/settings.json");
    let mcp = project.path().join(".mcp.json");
    std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
    let users = json!({"permissions": {"allow": ["Bash(ls)"]}, "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify"}]}]}});
    let servers = json!({"mcpServers": {"github": {"type": "http", "url": "https://example.invalid/mcp"}}});
    std::fs::write(&settings, users.to_string()).unwrap();
    std::fs::write(&mcp, servers.to_string()).unwrap();
    let run = |args: &[&str]| {
        assert_cmd::Command::new(common::bin())
            .args(["hook", "claude-code"])
            .args(args)
            .current_dir(project.path())
            .output()
            .unwrap()
    };
    let read = |p: &std::path::Path| serde_json::from_str::<Value>(&std::fs::read_to_string(p).unwrap()).unwrap();
    assert!(run(&["--install", "--write"]).status.success());
    assert!(read(&mcp)["mcpServers"]["mneme"].is_object());
    let out = run(&["--uninstall", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let said: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(said["written"], json!([".claude/settings.json", ".mcp.json"]));
    assert_eq!(read(&settings), users);
    assert_eq!(read(&mcp), servers);
    let out = run(&["--uninstall"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing changed"), "{out:?}");
    assert_eq!(read(&settings), users);
    // With --install it makes no sense: refused before anything is touched.
    assert!(!run(&["--install", "--uninstall"]).status.success());
}

/// A config given by `MNEME_CONFIG` goes into the hook commands as `--config`, as one given by
/// the flag does: Claude Code runs its hooks without that variable, and on the default config
/// they found no daemon.
#[test]
fn install_names_a_config_given_by_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("my config.toml");
    std::fs::write(&config, "[server]\nlisten = \"127.0.0.1:23999\"\n").unwrap();
    let out = assert_cmd::Command::new(common::bin())
        .args(["hook", "claude-code", "--install"])
        .env("MNEME_CONFIG", &config)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let command = v["hooks"]["Stop"][0]["hooks"][0]["command"].as_str().unwrap();
    let quoted = format!("--config '{}' hook claude-code", config.display());
    assert!(command.ends_with(&quoted), "{command}");
}

/// `--install --write` refuses a settings or `.mcp.json` key of the wrong shape, naming the file
/// and the key, and leaves both files as they were (it used to replace the key with its own);
/// `--no-mcp` leaves the user's approved MCP servers alone (it used to drop the whole list).
#[test]
fn install_refuses_a_malformed_key_and_touches_nothing() {
    let install = |dir: &std::path::Path, extra: &[&str]| {
        assert_cmd::Command::new(common::bin())
            .args(["hook", "claude-code", "--install", "--write"])
            .args(extra)
            .current_dir(dir)
            .output()
            .unwrap()
    };
    let project = tempfile::tempdir().unwrap();
    let settings = project.path().join(".claude/settings.json");
    std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
    let mine = r#"{"hooks": {"Stop": "my-own-script.sh"}, "enabledMcpjsonServers": ["github"]}"#;
    std::fs::write(&settings, mine).unwrap();
    let out = install(project.path(), &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(".claude/settings.json") && err.contains("hooks.Stop") && err.contains("a string"), "{err}");
    assert_eq!(std::fs::read_to_string(&settings).unwrap(), mine, "the settings are untouched");
    assert!(!project.path().join(".mcp.json").exists(), "nothing written");

    // A file that is not UTF-8 cannot be read: refused, not replaced by mneme's keys alone.
    let latin1 = b"{\"model\": \"opus\", \"note\": \"caf\xe9\"}".to_vec();
    std::fs::write(&settings, &latin1).unwrap();
    let out = install(project.path(), &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be read"), "{out:?}");
    assert_eq!(std::fs::read(&settings).unwrap(), latin1, "the settings are untouched");

    let fixed = r#"{"hooks": {"Stop": []}, "enabledMcpjsonServers": ["github"]}"#;
    std::fs::write(&settings, fixed).unwrap();
    let mcp = project.path().join(".mcp.json");
    std::fs::write(&mcp, r#"{"mcpServers": ["github"]}"#).unwrap();
    let out = install(project.path(), &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(".mcp.json") && err.contains("mcpServers"), "{err}");
    assert_eq!(std::fs::read_to_string(&settings).unwrap(), fixed, "neither file is written when one is refused");

    let out = install(project.path(), &["--no-mcp"]);
    assert!(out.status.success(), "{out:?}");
    let merged: Value = serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
    assert_eq!(merged["enabledMcpjsonServers"], json!(["github"]), "the user's approvals are kept");
    assert_eq!(merged["hooks"]["Stop"].as_array().unwrap().len(), 1);
    std::fs::write(&mcp, r#"{"mcpServers": {"github": {"type": "http", "url": "https://example.invalid"}}}"#).unwrap();
    assert!(install(project.path(), &[]).status.success());
    let merged: Value = serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
    assert_eq!(merged["enabledMcpjsonServers"], json!(["github", "mneme"]));
    let servers: Value = serde_json::from_str(&std::fs::read_to_string(&mcp).unwrap()).unwrap();
    assert!(servers["mcpServers"]["github"].is_object() && servers["mcpServers"]["mneme"].is_object(), "{servers}");
}

/// A transcript as Claude Code has it when a hook runs: `turns` complete turns, then (when
/// `asked` is set) a prompt whose reply is not written yet.
fn lagging_transcript(path: &std::path::Path, turns: usize, asked: Option<&str>) {
    let mut lines = Vec::new();
    for i in 0..turns {
        lines.push(json!({"type": "user", "message": {"role": "user", "content": format!("prompt {i} about the puffin parser")}}));
        lines.push(json!({"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": format!("reply {i} about the puffin parser")}]}}));
    }
    if let Some(prompt) = asked {
        lines.push(json!({"type": "user", "message": {"role": "user", "content": prompt}}));
    }
    std::fs::write(path, lines.iter().map(|l| l.to_string()).collect::<Vec<_>>().join("\n") + "\n").unwrap();
}

/// A hook event of session `session` in `cwd` with its transcript at `tpath`, plus `extra`.
fn event_of(session: &str, tpath: &std::path::Path, cwd: &str, name: &str, extra: Value) -> Value {
    let mut e = json!({"session_id": session, "transcript_path": tpath, "cwd": cwd, "hook_event_name": name});
    for (k, v) in extra.as_object().unwrap() {
        e[k] = v.clone();
    }
    e
}

async fn stored(d: &Daemon) -> Vec<Value> {
    let (_, v) = d.get("/v1/export").await;
    v["memories"].as_array().cloned().unwrap_or_default()
}

/// A SessionEnd for a session the daemon ended by itself (idle for 30 days, or past the most
/// live sessions) retains the turns it never got: taken as nothing to do, they were lost
/// (review68 #5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_end_after_the_daemon_ended_the_session_keeps_its_last_turns() {
    let d = Daemon::start("[retain]\nevery_n_turns = 1\n[queue]\nflush_interval = \"50ms\"\n");
    let project = tempfile::tempdir().unwrap();
    let cwd = project.path().join("gannet").display().to_string();
    std::fs::create_dir_all(&cwd).unwrap();
    let tpath = transcript(project.path(), 1);
    let event = |name: &str, extra: Value| event_of("cc-idle", &tpath, &cwd, name, extra);
    hook(&d, &event("SessionStart", json!({"source": "startup"})));
    hook(&d, &event("Stop", json!({"stop_hook_active": false})));
    let (status, v) = d.req(reqwest::Method::DELETE, "/v1/sessions/cc-idle", None).await;
    assert_eq!(status, 200, "{v}");
    // A turn whose Stop never reached the daemon, then the end.
    transcript(project.path(), 2);
    hook(&d, &event("SessionEnd", json!({"reason": "other"})));
    d.post("/v1/flush", json!({})).await;
    let text: String = stored(&d).await.iter().map(|m| m["content"].as_str().unwrap().to_owned()).collect();
    assert!(text.contains("retries? (1)"), "the last turn is lost: {text}");
    assert_eq!(text.matches("retries? (0)").count(), 1, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_turn_is_retained_once_whatever_the_transcript_holds() {
    // The default cadence (every 3 turns): a one-turn session and the tail of a longer one are
    // retained when the session ends; a Stop that runs before the transcript has the reply
    // retains the turn with the event's last_assistant_message.
    let d = Daemon::start("[queue]\nflush_interval = \"50ms\"\n");
    let project = tempfile::tempdir().unwrap();
    let cwd = project.path().join("puffin").display().to_string();
    std::fs::create_dir_all(&cwd).unwrap();
    let tpath = project.path().join("t.jsonl");
    let event = |name: &str, extra: Value| event_of("cc-p", &tpath, &cwd, name, extra);
    // `claude -p`: the transcript does not exist at SessionStart and UserPromptSubmit.
    hook(&d, &event("SessionStart", json!({"source": "startup"})));
    hook(&d, &event("UserPromptSubmit", json!({"prompt": "prompt 0 about the puffin parser"})));
    // Stop before the reply reached the transcript.
    lagging_transcript(&tpath, 0, Some("prompt 0 about the puffin parser"));
    hook(
        &d,
        &event("Stop", json!({"last_assistant_message": "reply 0 about the puffin parser", "stop_hook_active": false})),
    );
    lagging_transcript(&tpath, 1, None);
    hook(&d, &event("SessionEnd", json!({"reason": "other"})));
    d.post("/v1/flush", json!({})).await;
    let memories = stored(&d).await;
    assert_eq!(memories.len(), 1, "{memories:?}");
    let text = memories[0]["content"].as_str().unwrap();
    assert!(text.contains("[role: user]\nprompt 0 about the puffin parser\n[user:end]"), "{text}");
    assert!(text.contains("[role: assistant]\nreply 0 about the puffin parser\n[assistant:end]"), "{text}");

    // Interactive: four turns, each Stop racing the transcript; the first three are retained at
    // the cadence, the fourth when the session ends.
    let tpath2 = project.path().join("t2.jsonl");
    let event2 = |name: &str, extra: Value| event_of("cc-tui", &tpath2, &cwd, name, extra);
    hook(&d, &event2("SessionStart", json!({"source": "startup"})));
    for turn in 0..4 {
        let prompt = format!("prompt {turn} about the puffin parser");
        lagging_transcript(&tpath2, turn, None);
        hook(&d, &event2("UserPromptSubmit", json!({"prompt": prompt})));
        lagging_transcript(&tpath2, turn, Some(&prompt));
        let reply = format!("reply {turn} about the puffin parser");
        hook(&d, &event2("Stop", json!({"last_assistant_message": reply, "stop_hook_active": false})));
    }
    lagging_transcript(&tpath2, 4, None);
    hook(&d, &event2("SessionEnd", json!({"reason": "prompt_input_exit"})));
    d.post("/v1/flush", json!({})).await;
    let memories: Vec<Value> = stored(&d).await.into_iter().filter(|m| m["document_id"] == "cc-tui").collect();
    assert_eq!(memories.len(), 1, "one document for the session: {memories:?}");
    let text = memories[0]["content"].as_str().unwrap();
    for turn in 0..4 {
        for part in [format!("prompt {turn} about"), format!("reply {turn} about")] {
            assert_eq!(text.matches(&part).count(), 1, "{part} once in: {text}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_daemon_costs_one_timeout_then_the_hooks_skip_it() {
    // A "daemon" that accepts connections and never answers.
    let addr = common::never_answering().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    let config = dir.path().join("c.toml");
    std::fs::write(&config, format!("[server]\nlisten = \"{addr}\"\n[recall]\ntimeout = \"3s\"\n")).unwrap();
    let recall_first = dir.path().join("recall-first.toml");
    // A recall budget past the CLI's health check (5 s): the check gives up first, and counts.
    std::fs::write(&recall_first, format!("[server]\nlisten = \"{addr}\"\n[recall]\ntimeout = \"8s\"\n")).unwrap();
    let run_with = |config: &std::path::Path, data: std::path::PathBuf, event: Value| {
        let config = config.to_owned();
        tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            let out = assert_cmd::Command::new(common::bin())
                .args(["hook", "claude-code", "--config"])
                .arg(&config)
                .env("MNEME_STORAGE__DIR", data)
                .write_stdin(event.to_string())
                .timeout(Duration::from_secs(10))
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(0));
            (started.elapsed(), String::from_utf8_lossy(&out.stdout).trim().to_owned())
        })
    };
    let run = |event: Value| run_with(&config, dir.path().join("data"), event);
    let ev = |name: &str| json!({"session_id": "x", "cwd": "/", "hook_event_name": name, "prompt": "hi"});
    // The recall hook first, its budget past the health check's 5 s: one wait, then the breaker.
    let other_data = dir.path().join("other-data");
    std::fs::create_dir_all(&other_data).unwrap();
    let (took, out) = run_with(&recall_first, other_data.clone(), ev("UserPromptSubmit")).await.unwrap();
    assert_eq!(out, "{}");
    assert!(took < Duration::from_millis(7500), "{took:?}");
    let (took, _) = run_with(&recall_first, other_data, ev("UserPromptSubmit")).await.unwrap();
    assert!(took < Duration::from_millis(700), "the second prompt skips the daemon: {took:?}");
    // SessionStart gives up after hooks.timeout (1 s), not recall.timeout.
    let (took, out) = run(ev("SessionStart")).await.unwrap();
    assert_eq!(out, "{}");
    assert!(took >= Duration::from_millis(900) && took < Duration::from_millis(2500), "{took:?}");
    // Every hook after it skips the daemon, the recall hook included.
    for name in ["UserPromptSubmit", "Stop", "SessionEnd"] {
        let (took, out) = run(ev(name)).await.unwrap();
        assert_eq!(out, "{}", "{name}");
        assert!(took < Duration::from_millis(700), "{name} took {took:?} with the breaker open");
    }
}

#[test]
fn install_writes_the_mcp_server_and_quotes_the_binary_path() {
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("My Tools");
    std::fs::create_dir_all(&tools).unwrap();
    let exe = tools.join("mneme");
    std::fs::copy(common::bin(), &exe).unwrap();
    let project = dir.path().join("proj");
    std::fs::create_dir_all(&project).unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("token"), "t0k3n-for-the-headers-helper-0123456789").unwrap();
    let env = [("MNEME_CONFIG", dir.path().join("none.toml")), ("MNEME_STORAGE__DIR", data.clone())];
    let out = std::process::Command::new(&exe)
        .args(["hook", "claude-code", "--install", "--write"])
        .current_dir(&project)
        .envs(env.clone())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let settings: Value =
        serde_json::from_str(&std::fs::read_to_string(project.join(".claude/settings.json")).unwrap()).unwrap();
    let command = settings["hooks"]["Stop"][0]["hooks"][0]["command"].as_str().unwrap().to_owned();
    assert!(command.starts_with(&format!("'{}'", exe.display())), "{command}");
    assert_eq!(settings["enabledMcpjsonServers"], json!(["mneme"]));
    // The command runs as the shell sees it.
    let mut child = std::process::Command::new("sh")
        .args(["-c", &command])
        .envs(env.clone())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(br#"{"hook_event_name":"Notification","session_id":"s"}"#).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "{}");
    // .mcp.json names mneme's server; its headers come from a helper, not from the file.
    let mcp_text = std::fs::read_to_string(project.join(".mcp.json")).unwrap();
    assert!(!mcp_text.contains("t0k3n"), "no secret in .mcp.json: {mcp_text}");
    let mcp: Value = serde_json::from_str(&mcp_text).unwrap();
    assert_eq!(mcp["mcpServers"]["mneme"]["url"], "http://127.0.0.1:6366/mcp");
    let helper = mcp["mcpServers"]["mneme"]["headersHelper"].as_str().unwrap();
    let out = std::process::Command::new("sh")
        .args(["-c", helper])
        .envs(env)
        .env("CLAUDE_PROJECT_DIR", &project)
        .env("CLAUDE_CODE_MCP_SERVER_URL", "http://127.0.0.1:6366/mcp")
        .output()
        .unwrap();
    // No daemon answers there to prove it holds the token (another user's program may, a
    // moment later): the helper runs, and gives nothing (tests/cli.rs: a daemon that proves it
    // is given the headers).
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("t0k3n"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not running at 127.0.0.1:6366"), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transcript_longer_than_a_request_is_sent_without_its_start_and_the_turn_kept() {
    // A 64 KiB body limit and a ~600 KB transcript: the hooks send the newest messages that fit.
    let d = Daemon::start("[server]\nmax_body_bytes = 65536\n[queue]\nflush_interval = \"50ms\"\n");
    // Raised in the file since, a restart pending: the running daemon's limit is the one that
    // holds (sized by the file's, the turns were refused; review67 #7).
    std::fs::write(d.config_path(), "[server]\nmax_body_bytes = 4194304\n[queue]\nflush_interval = \"50ms\"\n")
        .unwrap();
    let project = tempfile::tempdir().unwrap();
    let cwd = project.path().join("puffin").display().to_string();
    std::fs::create_dir_all(&cwd).unwrap();
    let tpath = project.path().join("long.jsonl");
    let padding = "the puffin parser keeps its tokens in a ring buffer ".repeat(50);
    let mut lines = Vec::new();
    for i in 0..120 {
        lines.push(json!({"type": "user", "message": {"role": "user", "content": format!("prompt {i}: {padding}")}}));
        lines.push(json!({"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": format!("reply {i}: {padding}")}]}}));
    }
    std::fs::write(&tpath, lines.iter().map(|l| l.to_string()).collect::<Vec<_>>().join("\n") + "\n").unwrap();
    assert!(std::fs::metadata(&tpath).unwrap().len() > 600_000);
    let event = |name: &str, extra: Value| event_of("cc-long", &tpath, &cwd, name, extra);
    hook(&d, &event("SessionStart", json!({"source": "startup"})));
    hook(&d, &event("UserPromptSubmit", json!({"prompt": "prompt 119"})));
    hook(
        &d,
        &event("Stop", json!({"last_assistant_message": format!("reply 119: {padding}"), "stop_hook_active": false})),
    );
    d.post("/v1/flush", json!({})).await;
    let memories = stored(&d).await;
    assert_eq!(memories.len(), 1, "the turn was retained: {memories:?}");
    let text = memories[0]["content"].as_str().unwrap();
    assert!(text.contains("reply 119:") && !text.contains("prompt 0:"), "the newest turns, not the start");
    let document = memories[0]["document_id"].as_str().unwrap();
    assert!(document.starts_with("cc-long-"), "the new turns, a document of their own, not the session's: {document}");
    assert!(text.len() < 40_000, "the new turns, not the whole window sent: {} characters", text.len());
    // The next turn counts from where the omitted turns left off: nothing is retained twice.
    hook(&d, &event("SessionEnd", json!({"reason": "other"})));
    d.post("/v1/flush", json!({})).await;
    assert_eq!(stored(&d).await.len(), 1, "no new turn since: nothing more");
}

/// Claude Code reads a hook's exit status 2 as "block" (the prompt refused, the stop undone): a
/// log format the hook does not know, or arguments this build cannot parse, never give it.
#[tokio::test]
async fn a_hook_never_exits_with_the_status_that_blocks_the_agent() {
    let d = Daemon::start("");
    let event = json!({"hook_event_name": "UserPromptSubmit", "session_id": "cc-exit", "cwd": "/p/exit",
        "prompt": "which linter do we use?"});
    let out = d
        .cli()
        .args(["hook", "claude-code"])
        .env("MNEME_LOG_FORMAT", "JSON")
        .write_stdin(event.to_string())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("MNEME_LOG_FORMAT"), "{out:?}");
    let out = d.cli().args(["hook", "claude-code", "--a-flag-of-a-later-version"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    // As `--install --config FILE` writes the command: the global option first.
    let config = d.config_path().display().to_string();
    let out =
        d.cli().args(["--config", &config, "hook", "claude-code", "--a-flag-of-a-later-version"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let out = d
        .cli()
        .args(["--config", &config, "hook", "claude-code"])
        .env("MNEME_LOG_FORMAT", "JSON")
        .write_stdin(event.to_string())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let out = d.cli().args(["hook", "--help"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // Any other command still refuses a bad log format as a usage error.
    let out = d.cli().args(["status"]).env("MNEME_LOG_FORMAT", "JSON").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

/// The event's `cwd` follows Claude Code's shell (`cd frontend`): the session stays with the
/// project Claude Code started in, which it names to its hooks as `CLAUDE_PROJECT_DIR`.
#[tokio::test]
async fn the_session_keeps_the_project_claude_code_started_in() {
    let d = Daemon::start("");
    let root = tempfile::tempdir().unwrap();
    let project = root.path().join("alpha");
    let moved_to = project.join("frontend");
    std::fs::create_dir_all(&moved_to).unwrap();
    let event = json!({"hook_event_name": "SessionStart", "source": "startup", "session_id": "cc-dir",
        "cwd": moved_to.display().to_string()});
    let out = d
        .cli()
        .args(["hook", "claude-code"])
        .env("CLAUDE_PROJECT_DIR", &project)
        .write_stdin(event.to_string())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    d.post("/v1/sessions/cc-dir/retain", json!({"items": [{"content": "alpha builds with make"}]})).await;
    d.post("/v1/flush", json!({})).await;
    let (_, v) = d.post("/v1/sessions/cc-dir/recall", json!({"query": "alpha builds"})).await;
    assert_eq!(v["results"][0]["tags"], json!(["project:alpha"]), "{v}");
}

/// A transcript longer than the hook reads (32 MiB: big tool results) whose text is also cut to
/// fit a request: the turns in the unread start cannot be counted, so the hook does not tell the
/// daemon a count too small, which made it take every new turn for one retained already.
#[tokio::test]
async fn turns_after_a_transcript_outgrew_what_the_hook_reads_are_retained() {
    let d = Daemon::start("[retain]\nevery_n_turns = 1\n[server]\nmax_body_bytes = 65536\n");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long.jsonl");
    let write = |turns: usize| {
        let tool_output = "o".repeat(4 << 20);
        let mut file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        for i in 0..turns {
            for line in [
                json!({"type": "user", "message": {"role": "user", "content": format!("question {i} about gannets")}}),
                json!({"type": "assistant", "message": {"role": "assistant", "content": format!("answer {i} {}", "x".repeat(5000))}}),
                json!({"type": "user", "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": tool_output}]}}),
            ] {
                use std::io::Write;
                writeln!(file, "{line}").unwrap();
            }
        }
    };
    let stop = json!({"hook_event_name": "Stop", "session_id": "cc-long", "cwd": "/p/gannet",
        "transcript_path": path.display().to_string(), "stop_hook_active": false});
    d.start_session("cc-long", "/p/gannet").await;
    for turns in [6, 12] {
        write(turns);
        hook(&d, &stop);
        d.post("/v1/flush", json!({})).await;
    }
    let (_, v) = d.get("/v1/memories?limit=100").await;
    let all = v.to_string();
    for i in 0..12 {
        assert!(all.contains(&format!("question {i} about gannets")), "turn {i} was never retained");
    }
}

/// A rewind leaves the turns it took back in the transcript file, the next prompt parented on
/// the turn the user went back to: the hooks follow the branch, and the session's stored
/// document loses the turns taken back (a secret pasted by mistake among them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_a_rewind_took_back_are_not_kept() {
    let d = Daemon::start("[queue]\nflush_interval = \"50ms\"\n[retain]\nevery_n_turns = 1\n");
    let project = tempfile::tempdir().unwrap();
    let cwd = project.path().join("puffin").display().to_string();
    std::fs::create_dir_all(&cwd).unwrap();
    let tpath = project.path().join("t.jsonl");
    let event = |name: &str, extra: Value| event_of("cc-rw", &tpath, &cwd, name, extra);
    let line = |uuid: &str, parent: Option<&str>, role: &str, text: &str| {
        json!({"type": role, "uuid": uuid, "parentUuid": parent, "sessionId": "cc-rw",
               "message": {"role": role, "content": [{"type": "text", "text": text}]}})
    };
    let write = |lines: &[Value]| {
        std::fs::write(&tpath, lines.iter().map(|l| l.to_string()).collect::<Vec<_>>().join("\n") + "\n").unwrap()
    };
    hook(&d, &event("SessionStart", json!({"source": "startup"})));
    let mut lines = vec![
        line("u1", None, "user", "set up the puffin parser"),
        line("a1", Some("u1"), "assistant", "the puffin parser is set up"),
        line("u2", Some("a1"), "user", "the puffin token is PUFFINSECRET42"),
        line("a2", Some("u2"), "assistant", "noted the puffin token"),
    ];
    write(&lines);
    hook(&d, &event("Stop", json!({"stop_hook_active": false})));
    d.post("/v1/flush", json!({})).await;
    let text = |m: &[Value]| m.iter().map(|m| m["content"].as_str().unwrap_or("").to_owned()).collect::<String>();
    assert!(text(&stored(&d).await).contains("PUFFINSECRET42"));
    // Esc Esc back to the first reply, and another prompt.
    lines.push(line("u3", Some("a1"), "user", "add puffin parser docs"));
    lines.push(line("a3", Some("u3"), "assistant", "added the puffin parser docs"));
    write(&lines);
    hook(&d, &event("Stop", json!({"stop_hook_active": false})));
    hook(&d, &event("SessionEnd", json!({"reason": "exit"})));
    d.post("/v1/flush", json!({})).await;
    let all = text(&stored(&d).await);
    assert!(!all.contains("PUFFINSECRET42"), "{all}");
    assert_eq!(all.matches("set up the puffin parser").count(), 1, "{all}");
    assert!(all.contains("added the puffin parser docs"), "{all}");
}

/// With `server.listen` on port 0 (the system picks one at each start), the MCP server's URL
/// would name no daemon: installing it is refused, saying why; the hooks alone install.
#[test]
fn installing_the_mcp_server_on_port_0_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        assert_cmd::Command::new(common::bin())
            .args(["hook", "claude-code", "--install"])
            .args(args)
            .current_dir(dir.path())
            .env("MNEME_CONFIG", dir.path().join("none.toml"))
            .env("MNEME_SERVER__LISTEN", "127.0.0.1:0")
            .output()
            .unwrap()
    };
    let out = run(&[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("port 0"), "{out:?}");
    assert!(run(&["--no-mcp"]).status.success());
}

/// The hook reads one event, not stdin to its end: a caller that keeps the pipe open after a
/// whole event is answered without waiting on it (it was held for as long as the pipe stayed
/// open), and one that never finishes its event is let go after a bounded wait.
#[tokio::test]
async fn the_hook_does_not_wait_for_stdin_to_close() {
    use std::io::{Read, Write};
    let d = Daemon::start("");
    let cwd = tempfile::tempdir().unwrap();
    let event =
        json!({"session_id": "cc-open", "cwd": cwd.path(), "hook_event_name": "SessionStart", "source": "startup"});
    for (input, whole) in [(event.to_string(), true), ("{\"session_id\": ".to_owned(), false)] {
        let mut child = std::process::Command::new(common::bin())
            .args(["hook", "claude-code"])
            .env("MNEME_CONFIG", d.config_path())
            .env("MNEME_LOG", "error")
            .envs(common::env_for(d.dir.path()))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).unwrap();
        stdin.flush().unwrap();
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(started.elapsed() < Duration::from_secs(20), "the hook still waits on an open stdin: {input}");
            std::thread::sleep(Duration::from_millis(20));
        };
        drop(stdin);
        assert_eq!(status.code(), Some(0), "{input}");
        let (mut out, mut err) = (String::new(), String::new());
        child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"));
        match whole {
            true => {
                assert!(!err.contains("no whole event"), "{err}");
                assert_eq!(v["hookSpecificOutput"]["hookEventName"], "SessionStart", "{out}");
            }
            false => {
                assert!(err.contains("no whole event on stdin"), "{err}");
                assert_eq!(v, json!({}));
            }
        }
    }
}
