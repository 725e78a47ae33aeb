//! The integrations inside the real clients from npm — Claude Code, opencode, the MCP Inspector
//! and oh-my-pi (through mneme's Hindsight API) (`tests/clients/install.sh` pins and installs them) — offline: every check script in
//! `tests/clients/` runs in its own loopback-only network namespace (`unshare -n`) with this
//! build's `mneme serve` and the stub model server, with the clients' telemetry and updates off.
//! This file asserts on what the clients sent: the stub's request log, the hooks' and the
//! plugin's timing logs, what the daemon stored, and the raw storage dir.
//!
//! Needs root (for the namespace) and the installed clients; `.ci/run` provides both. Elsewhere
//! the tests say why they did not run (under `CI=true` they fail instead).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Instant;

use serde_json::Value;

/// The clients are timed: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn clients() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

fn cache() -> PathBuf {
    std::env::var_os("MC_CACHE").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/var/tmp/mneme-clients"))
}

/// Why the real clients cannot run here, if they cannot.
fn unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root: the clients run in a network namespace of their own (unshare -n)".into());
    }
    for (what, path) in [
        ("Claude Code", "claude-code-2.1.332/node_modules/.bin/claude"),
        ("opencode", "opencode-1.18.33/node_modules/.bin/opencode"),
        ("the MCP Inspector", "inspector-2.12.0/node_modules/@modelcontextprotocol/inspector"),
        ("oh-my-pi", "omp-18.2.3/node_modules/.bin/omp"),
    ] {
        if !cache().join(path).exists() {
            return Some(format!("{what} is not installed in {}: run tests/clients/install.sh", cache().display()));
        }
    }
    let probe = Command::new("unshare").args(["-n", "true"]).status();
    if !probe.is_ok_and(|s| s.success()) {
        return Some("unshare -n does not work here".into());
    }
    None
}

/// One check script's run: its folder and the steps it logged.
struct Run {
    _dir: tempfile::TempDir,
    out: PathBuf,
    steps: Vec<Value>,
}

impl Run {
    fn step(&self, name: &str) -> &Value {
        self.steps.iter().find(|s| s["step"] == name).unwrap_or_else(|| panic!("no step {name}: {:?}", self.steps))
    }

    fn ms(&self, name: &str) -> u64 {
        self.step(name)["ms"].as_u64().unwrap()
    }

    /// Every request the clients made to the model, as logged by the stub.
    fn requests(&self) -> Vec<Value> {
        jsonl(&self.out.join("logs/stub.jsonl"))
            .into_iter()
            .filter(|r| r["path"].as_str().is_some_and(|p| p.starts_with("/v1/messages") || p.starts_with("/v1/chat")))
            .collect()
    }

    /// The requests that carry `marker`, as their JSON text.
    fn requests_with(&self, marker: &str) -> Vec<String> {
        let found: Vec<String> =
            self.requests().iter().map(|r| r["body"].to_string()).filter(|b| b.contains(marker)).collect();
        assert!(!found.is_empty(), "no model request carries {marker}");
        found
    }

    /// What the daemon stored (`mneme export` at the end of the script).
    fn memories(&self) -> Vec<Value> {
        jsonl(&self.out.join("logs/export.jsonl"))
    }

    /// Memories whose content holds `needle`.
    fn memories_with(&self, needle: &str) -> Vec<Value> {
        self.memories().into_iter().filter(|m| m["content"].as_str().unwrap_or("").contains(needle)).collect()
    }

    /// Whether any file of the daemon's storage dir holds `needle`, byte for byte.
    fn stored_anywhere(&self, needle: &str) -> Option<PathBuf> {
        fn walk(dir: &Path, needle: &[u8]) -> Option<PathBuf> {
            for entry in std::fs::read_dir(dir).ok()?.flatten() {
                let path = entry.path();
                if path.is_dir() {
                    if let Some(hit) = walk(&path, needle) {
                        return Some(hit);
                    }
                } else if std::fs::read(&path).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle)) {
                    return Some(path);
                }
            }
            None
        }
        walk(&self.out.join("mneme"), needle.as_bytes())
    }

    /// (hook, milliseconds) of a step's runs of mneme's hooks or plugin hooks.
    fn hook_times(&self, log: &str) -> Vec<(String, u64)> {
        jsonl(&self.out.join(log))
            .iter()
            .map(|h| {
                let name = h["hook_event_name"].as_str().or(h["hook"].as_str()).unwrap_or("?").to_owned();
                let ms = h["real_ms"].as_u64().or(h["ms"].as_u64());
                (name, ms.unwrap_or_else(|| panic!("{log}: a hook without its time: {h}")))
            })
            .collect()
    }
}

/// The lines of a JSON-lines log (none if the file was never written); a line that is not JSON
/// fails the test rather than dropping a step's record.
fn jsonl(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let line = |l: &str| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}: {l}", path.display()));
    text.lines().filter(|l| !l.trim().is_empty()).map(line).collect()
}

/// Runs `tests/clients/SCRIPT` in a fresh namespace; `None` (with the reason printed) where the
/// clients cannot run.
fn run(script: &str) -> Option<Run> {
    if let Some(reason) = unavailable() {
        assert!(std::env::var("CI").is_err(), "the real-client tests must run under CI: {reason}");
        println!("{script} skipped: {reason}");
        return None;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let started = Instant::now();
    let status = Command::new(clients().join("netns.sh"))
        .arg(clients().join(script))
        .arg(&out)
        .env("MNEME_BIN", common::bin())
        .env("MC_CACHE", cache())
        .status()
        .unwrap();
    println!("{script}: {:.1} s", started.elapsed().as_secs_f64());
    let steps = jsonl(&out.join("steps.jsonl"));
    assert!(status.success(), "{script} failed ({status}); steps: {steps:?}; logs in {}", out.display());
    for s in &steps {
        println!("  {s}");
    }
    // Keep the folder when asked, to look at a run afterwards.
    if std::env::var_os("MC_KEEP").is_some() {
        let kept = std::env::temp_dir().join(format!("mc-{}", script.trim_end_matches(".sh")));
        let _ = std::fs::remove_dir_all(&kept);
        let _ = Command::new("cp").arg("-a").arg(&out).arg(&kept).status();
    }
    Some(Run { _dir: dir, out, steps })
}

/// The recalled block as it reaches the model (the guide's own mention of the tag does not count).
const BLOCK: &str = "<memories>\\nRelevant memories from earlier sessions";

fn sum(times: &[(String, u64)]) -> u64 {
    times.iter().map(|(_, ms)| ms).sum()
}

#[test]
fn claude_code_p_hooks_and_mcp() {
    let Some(r) = run("check-claude.sh") else { return };
    for s in &r.steps {
        assert_eq!(s["rc"], 0, "{s}");
        let name = s["step"].as_str().unwrap();
        let out = std::fs::read_to_string(r.out.join(format!("logs/claude-{name}.out"))).unwrap();
        assert!(out.contains("STUB-REPLY"), "{name}: the model's reply reached the user: {out}");
    }
    // The instructions reach the model and name the tools that exist: none with hooks only ...
    for body in r.requests_with("CCFACT-1") {
        assert!(body.contains("# Memory") && body.contains("recalled for you"), "hooks only: {body}");
        assert!(!body.contains("`recall` tool") && !body.contains("mcp__mneme__recall` tool"), "{body}");
    }
    // ... and mneme's MCP tools where .mcp.json has them.
    for body in r.requests_with("MCPSEEN-1") {
        assert!(body.contains("use the `mcp__mneme__recall` tool") && body.contains("mcp__mneme__retain"), "{body}");
    }
    // A later session gets the earlier session's fact in a <memories> block.
    assert!(r.requests_with("LATER-1").iter().any(|b| b.contains(BLOCK) && b.contains("CCFACT-1")));
    // Every one-turn session is retained once (at SessionEnd, below the cadence of 3).
    for prompt in [
        "Note for later: the release script is scripts/ship.sh CCFACT-1",
        "Where is the release script? LATER-1",
        "Remember this. MCPSTEP-1",
        "Which linter do we run? MCPSEEN-1",
        "Note for later: HOOKFACT-3",
        "Look it up. MCPSTEP-2",
    ] {
        // A session's document starts with its prompt (a later one may quote it).
        let start = format!("[role: user]\n{prompt}");
        let docs: Vec<Value> =
            r.memories().into_iter().filter(|m| m["content"].as_str().unwrap_or("").starts_with(&start)).collect();
        assert_eq!(docs.len(), 1, "{prompt}: {docs:?}");
        assert_eq!(docs[0]["type"], "experience");
    }
    // Private text is in no file of the storage dir (WAL files included).
    assert_eq!(r.stored_anywhere("CCSECRET"), None);
    // MCP: retained through the client into the project's scope; the hooks' recall finds it ...
    let mcp: Vec<Value> = r.memories_with("MCPFACT-2").into_iter().filter(|m| m["type"] == "world").collect();
    assert_eq!(mcp.len(), 1, "{mcp:?}");
    assert_eq!(mcp[0]["tags"], serde_json::json!(["project:with-mcp"]), "{mcp:?}");
    let seen = r.requests_with("MCPSEEN-1");
    assert!(seen
        .iter()
        .any(|b| b.contains(BLOCK) && b.contains("MCPFACT-2: the linter runs clippy with -D warnings [world]")));
    // ... and back: the model's recall through MCP finds what the hooks retained.
    assert!(
        r.requests_with("MCPSTEP-2")
            .iter()
            .any(|b| b.contains("Found") && b.contains("HOOKFACT-3 deploys go out on Fridays")),
        "the recall tool's answer reached the model"
    );
    // A daemon that is not running costs the hooks almost nothing ...
    for step in ["stopped-1", "stopped-2"] {
        let hooks = r.hook_times(&format!("hooks/hooks-{step}.jsonl"));
        assert!(hooks.len() >= 4, "{step}: {hooks:?}");
        assert!(sum(&hooks) < 500, "{step}: the hooks took {} ms: {hooks:?}", sum(&hooks));
    }
    // ... a hung one one timeout of 1 s, then the hooks skip it.
    let hung = r.hook_times("hooks/hooks-hung-1.jsonl");
    assert!(hung.iter().any(|(hook, _)| hook == "UserPromptSubmit"), "hung: the hooks ran: {hung:?}");
    for (hook, ms) in &hung {
        let bound = if hook == "UserPromptSubmit" { 5000 } else { 1000 };
        assert!(*ms < bound + 400, "hung: {hook} took {ms} ms (bound {bound}): {hung:?}");
    }
    let second = r.hook_times("hooks/hooks-hung-2.jsonl");
    assert!(second.iter().any(|(hook, _)| hook == "UserPromptSubmit"), "the second prompt's hooks ran: {second:?}");
    assert!(sum(&second) < 1000, "the second prompt's hooks took {} ms: {second:?}", sum(&second));
    let base = r.ms("baseline-1").min(r.ms("baseline-2"));
    println!(
        "claude -p wall: baseline {base} ms, daemon stopped {} ms, hung {} then {} ms; hooks stopped {:?}, hung {hung:?}, then {second:?}",
        r.ms("stopped-1").min(r.ms("stopped-2")),
        r.ms("hung-1"),
        r.ms("hung-2"),
        r.hook_times("hooks/hooks-stopped-1.jsonl"),
    );
}

#[test]
fn claude_code_interactive_turns_and_compact() {
    let Some(r) = run("check-claude-tui.sh") else { return };
    // The first prompt got the memory retained beforehand.
    assert!(r.requests_with("TUI-1").iter().any(|b| b.contains(BLOCK) && b.contains("TUIMEM-1")));
    // The request after /compact carries the compaction context.
    assert!(
        r.requests_with("TUI-X").iter().any(|b| b.contains("Memories relevant to the conversation before compaction")),
        "the compaction context reached the next request"
    );
    // One document for the session: every turn once (the last one retained at /exit), and none
    // of the lines Claude Code writes around a compaction.
    let docs: Vec<Value> = r.memories().into_iter().filter(|m| m["type"] == "experience").collect();
    assert_eq!(docs.len(), 1, "{docs:?}");
    let text = docs[0]["content"].as_str().unwrap();
    for turn in ["1", "2", "3"] {
        let prompt = format!("[role: user]\nwhere is the deploy script, turn {turn} TUI-{turn}\n[user:end]");
        assert_eq!(text.matches(&prompt).count(), 1, "turn {turn} once: {text}");
        assert_eq!(
            text.matches(&format!("re: where is the deploy script, turn {turn} TUI-{turn}")).count(),
            1,
            "{text}"
        );
    }
    // A custom command run with arguments: the user's turn as they typed it, not the prompt
    // it expanded into.
    assert_eq!(text.matches("[role: user]\n/facts TUI-CMD release notes\n[user:end]").count(), 1, "{text}");
    assert_eq!(text.matches("re: Summarize the project facts for: TUI-CMD release notes").count(), 1, "{text}");
    assert!(!text.contains("[role: user]\nSummarize the project facts"), "{text}");
    assert_eq!(text.matches("[role: user]\nafter compaction TUI-X\n[user:end]").count(), 1, "{text}");
    assert_eq!(text.matches("re: after compaction TUI-X").count(), 1, "the last turn: {text}");
    for noise in ["STUB-SUMMARY", "<command-name>", "<local-command", "This session is being continued"] {
        assert!(!text.contains(noise), "{noise} in {text}");
    }
}

/// A rewind in the real Claude Code (Esc Esc, the second prompt, "Restore conversation") takes
/// back a turn that was stored already: the session's document is stored again without it, and
/// the turn had after the rewind follows the first.
#[test]
fn claude_code_rewind_takes_a_stored_turn_back() {
    let Some(r) = run("check-claude-rewind.sh") else { return };
    let experience = |file: &str| -> Vec<String> {
        jsonl(&r.out.join(file))
            .into_iter()
            .filter(|m| m["type"] == "experience")
            .map(|m| m["content"].as_str().unwrap().to_owned())
            .collect()
    };
    let before = experience("logs/export-before.jsonl");
    assert!(before.iter().any(|t| t.contains("REWOUND-2")), "stored before the rewind: {before:?}");
    let after = experience("logs/export.jsonl");
    assert_eq!(after.len(), 1, "one document for the session: {after:?}");
    let text = &after[0];
    assert!(!text.contains("REWOUND-2"), "the turn taken back is gone: {text}");
    let (keep, third) = (text.find("re: first question KEEP-1"), text.find("[role: user]\nthird question AFTER-3"));
    assert!(keep.is_some() && third.is_some() && keep < third, "{text}");
    assert_eq!(text.matches("KEEP-1").count(), 2, "the first turn once (prompt and reply): {text}");
}

#[test]
fn opencode_run_plugin() {
    let Some(r) = run("check-opencode.sh") else { return };
    for s in &r.steps {
        assert_eq!(s["rc"], 0, "{s}");
        let name = s["step"].as_str().unwrap();
        let out = std::fs::read_to_string(r.out.join(format!("logs/opencode-{name}.out"))).unwrap();
        assert!(out.contains("STUB-REPLY"), "{name}: {out}");
    }
    let (titles, main): (Vec<String>, Vec<String>) =
        r.requests().iter().map(|q| q["body"].to_string()).partition(|b| b.contains("You are a title generator"));
    assert!(!titles.is_empty(), "opencode made its title requests");
    // The title generator's side requests get no memory at all.
    for t in &titles {
        assert!(!t.contains("# Memory") && !t.contains(BLOCK), "{t}");
    }
    // The agent's requests get the guide naming the plugin's tools, and a later session the fact.
    let with_plugin: Vec<&String> = main.iter().filter(|b| b.contains("OCFACT-1") || b.contains("OCLATER-1")).collect();
    assert!(with_plugin.iter().all(|b| b.contains("use the `mneme_recall` tool") && b.contains("`mneme_retain` tool")));
    assert!(r.requests_with("OCLATER-1").iter().any(|b| b.contains(BLOCK) && b.contains("OCFACT-1")));
    // The one-turn session was retained once (when it went idle), the tool's fact in the project.
    let docs: Vec<Value> = r.memories_with("OCFACT-1").into_iter().filter(|m| m["type"] == "experience").collect();
    assert_eq!(docs.len(), 1, "{docs:?}");
    let tool: Vec<Value> = r.memories_with("OCTOOL-2").into_iter().filter(|m| m["type"] == "world").collect();
    assert_eq!(tool.len(), 1, "{tool:?}");
    assert_eq!(tool[0]["tags"], serde_json::json!(["project:proj"]));
    assert_eq!(r.stored_anywhere("OCSECRET"), None);
    // A daemon that is down costs the plugin almost nothing; a hung one one bounded timeout, then
    // the next process skips it (the breaker file is shared).
    for step in ["stopped-1", "stopped-2"] {
        let hooks = r.hook_times(&format!("hooks/plugin-{step}.jsonl"));
        assert!(!hooks.is_empty(), "{step}: the plugin ran");
        assert!(sum(&hooks) < 500, "{step}: the plugin's hooks took {} ms: {hooks:?}", sum(&hooks));
    }
    let hung = r.hook_times("hooks/plugin-hung-1.jsonl");
    assert!(hung.iter().any(|(hook, _)| hook == "chat.message"), "hung: the plugin ran: {hung:?}");
    for (hook, ms) in &hung {
        let bound = if hook == "chat.message" { 3000 } else { 1000 };
        assert!(*ms < bound + 400, "hung: {hook} took {ms} ms (bound {bound}): {hung:?}");
    }
    let second = r.hook_times("hooks/plugin-hung-2.jsonl");
    assert!(!second.is_empty(), "the second prompt's plugin hooks ran");
    assert!(sum(&second) < 1000, "the second prompt's hooks took {} ms: {second:?}", sum(&second));
    let base = r.ms("baseline-1").min(r.ms("baseline-2"));
    println!(
        "opencode run wall: baseline {base} ms, daemon stopped {} ms, hung {} then {} ms; plugin hooks hung {hung:?}, then {second:?}",
        r.ms("stopped-1").min(r.ms("stopped-2")),
        r.ms("hung-1"),
        r.ms("hung-2"),
    );
}

#[test]
fn opencode_serve_every_turn_and_the_deleted_session() {
    let Some(r) = run("check-opencode-serve.sh") else { return };
    let names: Vec<&str> = r.steps.iter().filter_map(|s| s["step"].as_str()).collect();
    let wanted = ["serve-up", "new", "turn-1", "turn-2", "turn-3", "compact", "turn-4", "delete", "long-new"];
    let wanted = wanted.into_iter().chain(["long-turn-1", "long-turn-2", "long-turn-3", "long-delete"]);
    let wanted = wanted.chain(["undo-new", "undo-turn-1", "undo-turn-2", "undo-revert", "undo-turn-3", "undo-delete"]);
    assert_eq!(names, wanted.collect::<Vec<_>>(), "every step ran");
    for s in &r.steps {
        assert_eq!(s["http"], 200, "{s}");
    }
    let session = std::fs::read_to_string(r.out.join("logs/session-id")).unwrap().trim().to_owned();
    let docs: Vec<Value> = r.memories().into_iter().filter(|m| m["document_id"] == session.as_str()).collect();
    assert_eq!(docs.len(), 1, "{:?}", r.memories());
    let text = docs[0]["content"].as_str().unwrap();
    for prompt in
        ["serve turn 1 SVMARK-1", "serve turn 2 SVMARK-2", "serve turn 3 SVMARK-3", "after compaction SVMARK-4"]
    {
        let framed = format!("[role: user]\n{prompt}\n[user:end]");
        assert_eq!(
            text.matches(&framed).count(),
            1,
            "{prompt} once (the last turn retained when the session was deleted): {text}"
        );
    }
    // A session longer than the daemon's 64 KiB body limit: the plugin sent its newest turns, and
    // every turn was retained once (the later ones as documents of their own).
    let long = std::fs::read_to_string(r.out.join("logs/long-session-id")).unwrap().trim().to_owned();
    let docs: Vec<String> = r
        .memories()
        .into_iter()
        .filter(|m| m["document_id"].as_str().is_some_and(|d| d.starts_with(&long)))
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect();
    for i in 1..=3 {
        let framed = format!("[role: user]\nLGMARK-{i} lorem ipsum");
        let times: usize = docs.iter().map(|d| d.matches(&framed).count()).sum();
        assert_eq!(times, 1, "turn {i} of the long session retained once: {} documents", docs.len());
    }
    // The undone turn (the plugin tells the daemon, which replaces the session's document with
    // the branch now taken) is not kept; the turns before and after it are, once.
    let undo = std::fs::read_to_string(r.out.join("logs/undo-session-id")).unwrap().trim().to_owned();
    let text: String = r
        .memories()
        .into_iter()
        .filter(|m| m["document_id"].as_str().is_some_and(|d| d.starts_with(&undo)))
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect();
    assert!(!text.contains("UNDOMARK-SECRET-2"), "{text}");
    for prompt in ["undo turn 1 UNDOMARK-1", "undo turn 3 UNDOMARK-3"] {
        let framed = format!("[role: user]\n{prompt}\n[user:end]");
        assert_eq!(text.matches(&framed).count(), 1, "{prompt} once: {text}");
    }
}

#[test]
fn mcp_inspector_lists_and_calls_the_tools() {
    let Some(r) = run("check-inspector.sh") else { return };
    for s in &r.steps {
        assert_eq!(s["rc"], 0, "{s}");
    }
    let read = |step: &str| std::fs::read_to_string(r.out.join(format!("logs/inspector-{step}.txt"))).unwrap();
    let list = read("list");
    for tool in ["\"retain\"", "\"recall\"", "\"reflect\""] {
        assert!(list.contains(tool), "{list}");
    }
    let strict = read("strict");
    assert!(!strict.contains("Warning") && !strict.contains("Error"), "strict schema findings: {strict}");
    assert!(read("retain").contains("1 memory queued."));
    assert!(read("recall").contains("INSPMARK-3"));
}

/// The opencode plugin's own smoke test (fails open when the daemon is down; its tools answer,
/// and say what the daemon refused; the instructions reach the agent's system prompt and not a
/// title generator's; a recall waits out the daemon's recall.timeout), run by the bun inside the
/// pinned opencode.
#[test]
fn opencode_plugin_smoke_test() {
    let Some(r) = run("check-opencode-plugin.sh") else { return };
    let out = std::fs::read_to_string(r.out.join("logs/plugin-smoke.txt")).unwrap();
    assert_eq!(r.step("smoke")["rc"], 0, "{out}");
    assert!(out.contains(" 19 pass") && out.contains(" 0 fail"), "{out}");
}

#[test]
fn oh_my_pi_through_the_hindsight_api() {
    let Some(r) = run("check-omp.sh") else { return };
    for step in ["first", "later"] {
        assert_eq!(r.step(step)["rc"], 0, "{:?}", r.step(step));
        let out = std::fs::read_to_string(r.out.join(format!("logs/omp-{step}.out"))).unwrap();
        assert!(out.contains("STUB-REPLY"), "{step}: {out}");
    }
    // Every request oh-my-pi made to mneme's Hindsight API was answered with success.
    let wire: Vec<Value> = jsonl(&r.out.join("logs/mcp-wire.jsonl"))
        .into_iter()
        .filter(|x| x["path"].as_str().is_some_and(|p| p.starts_with("/hindsight/")))
        .collect();
    let mut routes: Vec<String> = wire
        .iter()
        .map(|x| {
            let path = x["path"].as_str().unwrap().split('?').next().unwrap().replace("/banks/omp", "/banks/{bank}");
            format!("{} {path}", x["method"].as_str().unwrap())
        })
        .collect();
    routes.sort();
    routes.dedup();
    println!("oh-my-pi called: {routes:?}");
    for x in &wire {
        assert_eq!(x["status"], 200, "{} {} -> {}: {}", x["method"], x["path"], x["status"], x["resp_body"]);
    }
    for needed in [
        "PUT /hindsight/v1/default/banks/{bank}",
        "POST /hindsight/v1/default/banks/{bank}/memories",
        "POST /hindsight/v1/default/banks/{bank}/memories/recall",
        "POST /hindsight/v1/default/banks/{bank}/mental-models",
        "GET /hindsight/v1/default/banks/{bank}/mental-models",
    ] {
        assert!(routes.iter().any(|r| r == needed), "{needed} not in {routes:?}");
    }
    // Its automatic retain (the turn, as a document) and its retain tool reached the store, in the
    // project's scope, without the private span.
    let turn: Vec<Value> = r.memories_with("OMPFACT-1").into_iter().filter(|m| m["type"] == "experience").collect();
    assert_eq!(turn.len(), 1, "{turn:?}");
    assert_eq!(turn[0]["bank"], "omp");
    assert_eq!(turn[0]["tags"], serde_json::json!(["project:proj"]));
    assert!(turn[0]["document_id"].as_str().is_some(), "{turn:?}");
    let tool: Vec<Value> = r.memories_with("OMPTOOL-2").into_iter().filter(|m| m["type"] == "world").collect();
    assert_eq!(tool.len(), 1, "{tool:?}");
    assert_eq!(tool[0]["content"], "OMPTOOL-2: omp tests run on bun 1.4");
    assert_eq!(tool[0]["tags"], serde_json::json!(["project:proj"]));
    assert_eq!(r.stored_anywhere("OMPSECRET"), None);
    // `mneme recall` in the project finds it; a later session's first turn carries it.
    let recall = std::fs::read_to_string(r.out.join("logs/recall.out")).unwrap();
    assert!(recall.contains("OMPFACT-1"), "{recall}");
    assert!(r.requests_with("OMPLATER-1").iter().any(|b| b.contains("<memories>\\n") && b.contains("OMPFACT-1")));
    // Killed as soon as mneme answered its retain (only in the spool then: the flush interval is
    // an hour), the retain is stored all the same.
    let kill = r.step("kill");
    let status = std::fs::read_to_string(r.out.join("logs/status-after-kill.out")).unwrap();
    assert!(status.contains("1 pending"), "the retain waited in the spool: {status}");
    assert_eq!(r.memories_with("OMPKILL-3").len(), 1, "kill step: {kill}");
    println!("oh-my-pi: killed while running: {}", kill["alive_at_kill"]);
}
