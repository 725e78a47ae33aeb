//! `mneme hook claude-code`: a Claude Code hook. Reads the event's JSON on stdin, talks to the
//! daemon, writes the hook's answer on stdout. It never blocks the agent: a daemon that is down,
//! slow or confused means an empty answer, exit code 0, within the hook's budget — automatic
//! recall waits `recall.timeout` plus `hooks.timeout`, every other hook `hooks.timeout` (1 s) — and once a hook timed
//! out, every hook skips the daemon for `hooks.cooldown` (see [`breaker`]).
//!
//! | event | what mneme does | answer |
//! |---|---|---|
//! | SessionStart | start the session (naming the tools the client has); instructions, and after a compaction the compaction context | `additionalContext` |
//! | UserPromptSubmit | first-turn automatic recall; the prompt is kept for the turn's retain | `additionalContext` (the `<memories>` block) |
//! | PreCompact | start delivering the session's queue | nothing: Claude Code would put any output into the compaction prompt |
//! | Stop | automatic retain of the transcript, completed with the event's `last_assistant_message` (the transcript is often written after the hook runs) | `{}` (never `decision: block`) |
//! | SessionEnd | retain what is not retained yet from the complete transcript, end the session | `{}` |
//!
//! Claude Code honours `additionalContext` for SessionStart and UserPromptSubmit, so the
//! compaction context is injected by the SessionStart that follows a compaction (`source:
//! "compact"`).

mod branch;
mod breaker;
mod install;
mod transcript;
mod uninstall;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use mneme_core::text::Message;
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

pub use install::{install, mcp_headers, Install, EVENTS};
pub use transcript::{read_transcript, tail_within, turns_within, Commands};
pub use uninstall::uninstall;

use super::commands::load_client_settings;
use super::{CliError, Client};
use crate::config::Settings;
use crate::daemon::api::{
    AgentEnded, AgentStart, CompactionContext, Flush, Flushed, Inject, Instructions, Messages, SessionStarted,
    StartSession, TurnInfo,
};
use crate::session::ToolNames;

/// Largest event accepted on stdin.
const MAX_EVENT_BYTES: u64 = 16 * 1024 * 1024;
/// How long the hook waits for its event on stdin, at most.
const EVENT_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The event on stdin: one JSON value, read without waiting for the end of stdin (a caller that
/// kept the pipe open after a whole event held the hook for as long), and for at most
/// [`EVENT_WAIT`] (the read goes on in a thread the hook's exit ends). Half an emoji in it
/// (`\ud83d`) is read as U+FFFD, as the daemon reads it: refused, the event was dropped whole
/// (no recall for its prompt, nothing retained of its turn).
fn read_event() -> Result<Value, String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(read_one_value(std::io::stdin().lock().take(MAX_EVENT_BYTES)));
    });
    match rx.recv_timeout(EVENT_WAIT) {
        Ok(Some(Ok(event))) => Ok(event),
        Ok(Some(Err(e))) => Err(format!("the event on stdin is not JSON: {e}")),
        Ok(None) => Err("no event on stdin".into()),
        Err(_) => Err(format!("no whole event on stdin within {EVENT_WAIT:?}")),
    }
}

/// The first JSON value `input` holds, read as it comes; one refused for an unpaired surrogate
/// escape is read again from the bytes read so far, and more, until it is whole.
fn read_one_value(input: impl std::io::Read) -> Option<serde_json::Result<Value>> {
    let mut kept = Kept { input, bytes: Vec::new() };
    let refused = match serde_json::Deserializer::from_reader(std::io::BufReader::new(&mut kept)).into_iter().next()? {
        Ok(value) => return Some(Ok(value)),
        Err(e) if e.is_eof() || !e.to_string().contains("surrogate") && !e.to_string().contains("hex escape") => {
            return Some(Err(e))
        }
        Err(e) => e,
    };
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let mended = crate::json_text::lone_surrogates_mended(&kept.bytes).unwrap_or_else(|| kept.bytes.clone());
        match serde_json::Deserializer::from_slice(&mended).into_iter::<Value>().next() {
            Some(Ok(value)) => return Some(Ok(value)),
            Some(Err(e)) if e.is_eof() => {}
            _ => return Some(Err(refused)),
        }
        match std::io::Read::read(&mut kept.input, &mut chunk) {
            Ok(0) | Err(_) => return Some(Err(refused)),
            Ok(n) => kept.bytes.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A reader that keeps what it read.
struct Kept<R> {
    input: R,
    bytes: Vec<u8>,
}

impl<R: std::io::Read> std::io::Read for Kept<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.input.read(buf)?;
        self.bytes.extend_from_slice(&buf[..n]);
        Ok(n)
    }
}

/// What a hook prints.
enum Answer {
    /// A JSON object.
    Json(Value),
    /// Nothing at all.
    Nothing,
}

impl Answer {
    fn empty_for(event: &str) -> Answer {
        if event == "PreCompact" {
            Answer::Nothing
        } else {
            Answer::Json(json!({}))
        }
    }

    fn print(&self) {
        if let Answer::Json(v) = self {
            println!("{v}");
        }
    }
}

pub(super) async fn claude_code(config: Option<&Path>) -> ExitCode {
    let event = match read_event() {
        Ok(v) => v,
        Err(why) => {
            crate::say!("mneme hook: {why}");
            Answer::Json(json!({})).print();
            return ExitCode::SUCCESS;
        }
    };
    let name = event["hook_event_name"].as_str().unwrap_or_default().to_owned();
    // A problem in the file does not cost the turn: the daemon runs on its last good config.
    let settings = match load_client_settings(config) {
        Ok(loaded) => loaded.settings,
        Err(e) => {
            crate::say!("mneme hook: {e}");
            Answer::empty_for(&name).print();
            return ExitCode::SUCCESS;
        }
    };
    let breaker = breaker::Breaker::new(&settings.storage.dir, settings.hooks.cooldown);
    if let Some(left) = breaker.open() {
        crate::say!("mneme hook: the daemon did not answer a moment ago; skipping it for {left:?} more");
        Answer::empty_for(&name).print();
        return ExitCode::SUCCESS;
    }
    let budget = hook_budget(&name, &event, &settings);
    let answer = match tokio::time::timeout(budget, handle(&settings, &name, &event)).await {
        Ok(Ok(answer)) => {
            breaker.close();
            answer
        }
        Ok(Err(e @ CliError::Silent(_))) => {
            // As good as a timeout: the next hooks would wait as long.
            breaker.trip();
            crate::say!("mneme hook: {e}; going on without memory (hooks skip it for {:?})", settings.hooks.cooldown);
            Answer::empty_for(&name)
        }
        Ok(Err(e)) => {
            crate::say!("mneme hook: {e}");
            Answer::empty_for(&name)
        }
        Err(_) => {
            breaker.trip();
            crate::say!(
                "mneme hook: the daemon did not answer within {budget:?}; going on without memory (hooks skip it for {:?})",
                settings.hooks.cooldown
            );
            Answer::empty_for(&name)
        }
    };
    answer.print();
    ExitCode::SUCCESS
}

fn context(event: &str, text: Option<String>) -> Answer {
    Answer::Json(match text.filter(|t| !t.trim().is_empty()) {
        Some(t) => json!({"hookSpecificOutput": {"hookEventName": event, "additionalContext": t}}),
        None => json!({}),
    })
}

/// One hook event's calls to the daemon.
struct Hook<'a> {
    client: Client,
    session: &'a str,
    base: String,
    start: StartSession,
}

/// An answer whose content the hook does not need.
#[derive(serde::Deserialize)]
struct Ignored {}

impl Hook<'_> {
    /// A call on the session; a session the daemon does not know (it ended, or SessionStart did
    /// not get through) is started first.
    async fn call<T: DeserializeOwned, B: Serialize>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<T, CliError> {
        let url = format!("{}{path}", self.base);
        match self.client.request(method.clone(), &url, body).await {
            Err(CliError::Daemon { status: 404, .. }) => {
                self.start().await?;
                self.client.request(method, &url, body).await
            }
            other => other,
        }
    }

    async fn post<T: DeserializeOwned, B: Serialize>(&self, path: &str, body: &B) -> Result<T, CliError> {
        self.call(Method::POST, path, Some(body)).await
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, CliError> {
        self.call(Method::GET, path, None::<&()>).await
    }

    async fn start(&self) -> Result<SessionStarted, CliError> {
        self.client.post("/v1/sessions", &self.start).await
    }
}

/// What the session routes answer, or a 404 (the session is gone) taken as nothing to do.
fn unless_gone<T>(r: Result<T, CliError>) -> Result<(), CliError> {
    match r {
        Ok(_) | Err(CliError::Daemon { status: 404, .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

fn claude_turn(messages: Vec<Message>) -> Messages {
    Messages { turn: TurnInfo { agent: Some(AGENT.into()), request: None }, ..Messages::new(messages) }
}

/// The agent name the hook reports.
const AGENT: &str = "claude-code";

/// The session's project folder: `CLAUDE_PROJECT_DIR`, which Claude Code sets for its hooks to
/// the folder it started in, else the event's `cwd`. The `cwd` follows the agent's shell (`cd
/// frontend`, a worktree it entered), and would re-scope the session to whatever project that is.
fn project_dir(event: &Value) -> String {
    std::env::var("CLAUDE_PROJECT_DIR")
        .ok()
        .filter(|dir| Path::new(dir).is_absolute())
        .or_else(|| event["cwd"].as_str().map(str::to_owned))
        .unwrap_or_else(|| super::working_folder().unwrap_or_else(|| "/".into()))
}

async fn handle(settings: &Settings, name: &str, event: &Value) -> Result<Answer, CliError> {
    let session = event["session_id"].as_str().unwrap_or_default();
    if session.is_empty() || !EVENTS.contains(&name) {
        return Ok(Answer::empty_for(name));
    }
    let cwd = project_dir(event);
    let transcript = event["transcript_path"].as_str().map(PathBuf::from);
    let tools = tools_in(Path::new(&cwd), dirs_home().as_deref());
    let client = Client::connect(settings).await?;
    // The messages sent stay within half the running daemon's body limit (the rest is room for
    // the prompt or reply): a longer transcript goes without its start instead of being refused.
    // The daemon's, not the config file's: raised there and waiting for a restart, a long
    // session's turns were refused, on a stderr Claude Code does not show (review67 #7).
    let budget = client.max_body() / 2;
    let hook = Hook {
        client,
        session,
        base: super::browse::api_path(&["v1", "sessions", session], None),
        start: StartSession {
            session_id: session.to_owned(),
            cwd,
            agent: Some(AGENT.into()),
            parent_session_id: None,
            tools: Some(tools),
        },
    };
    let commands = match hook.client.counts_command_turns() {
        true => Commands::AsTyped,
        false => Commands::LeftOut,
    };
    match name {
        "SessionStart" => {
            let messages = || tail_within(read_transcript(transcript.as_deref(), commands), budget).0;
            hook.start().await?;
            let v: Instructions = hook.get("/instructions").await?;
            let mut text = v.markdown.unwrap_or_default();
            if event["source"] == "compact" {
                let v: CompactionContext = hook.post("/compaction", &Messages::new(messages())).await?;
                if let Some(c) = v.context {
                    // One recalled block: the session's cached first-turn block, in the
                    // instructions, held much the same memories again (and the two went past
                    // recall.max_tokens together).
                    text = without_recalled_block(&text).to_owned();
                    text.push_str(&format!("\n\nMemories relevant to the conversation before compaction:\n{c}\n"));
                }
            }
            Ok(context(name, Some(text)))
        }
        "UserPromptSubmit" => {
            let prompt = event["prompt"].as_str().unwrap_or_default().to_owned();
            let (messages, _) = tail_within(read_transcript(transcript.as_deref(), commands), budget);
            let turn = TurnInfo { agent: Some(AGENT.into()), request: None };
            let v: Inject = hook.post("/agent-start", &AgentStart { prompt, messages, turn }).await?;
            Ok(context(name, v.inject))
        }
        "PreCompact" => {
            let body = Flush { session_id: Some(hook.session.to_owned()), wait: false };
            unless_gone(hook.client.post::<Flushed, _>("/v1/flush", &body).await)?;
            Ok(Answer::Nothing)
        }
        "Stop" => {
            let t = turns_within(transcript.as_deref(), budget, commands);
            let reply = event["last_assistant_message"].as_str().map(|r| bounded_reply(r, budget));
            let (omitted_user_turns, rewound) = (t.omitted_user_turns, t.rewound);
            let body = Messages { reply, wait: false, omitted_user_turns, rewound, ..claude_turn(t.messages) };
            let _: AgentEnded = hook.post("/agent-end", &body).await?;
            Ok(Answer::Json(json!({})))
        }
        "SessionEnd" => {
            // The transcript is complete by now: whatever the cadence left is retained.
            let t = turns_within(transcript.as_deref(), budget, commands);
            let (omitted_user_turns, rewound) = (t.omitted_user_turns, t.rewound);
            let body =
                Messages { ends_session: true, wait: false, omitted_user_turns, rewound, ..claude_turn(t.messages) };
            // Started again when the daemon does not know it (it ended the session, idle for 30
            // days; its last turns reached it while it was down): taken as nothing to do, the turns
            // it never got were lost (review68 #5). A resumed session goes on where it stopped.
            hook.post::<AgentEnded, _>("/agent-end", &body).await?;
            unless_gone(hook.client.send::<Ignored>(Method::DELETE, &format!("{}?wait=false", hook.base)).await)?;
            Ok(Answer::Json(json!({})))
        }
        _ => Ok(Answer::empty_for(name)),
    }
}

/// Session instructions without the recalled block cached at their end (the first turn's
/// `<memories>` block). Cut at the block's opening line: the guide before it names the tag in a
/// sentence, and removing every `<memories>…</memories>` span took the guide from there on
/// with the block.
fn without_recalled_block(instructions: &str) -> &str {
    let text = instructions.trim_end();
    if !text.ends_with("</memories>") {
        return text;
    }
    // The block's opening tag stands on a line of its own; the guide's mention does not, and
    // what the backend adds has its tags defused. A memory in the block can hold a line with an
    // unclosed tag (retain leaves one alone): the first such line is the block's.
    let opening =
        text.match_indices("<memories>\n").map(|(at, _)| at).find(|&at| at == 0 || text[..at].ends_with('\n'));
    opening.map_or(text, |at| text[..at].trim_end())
}

/// The reply as it is sent beside the transcript's tail (which takes up to `budget`, half the
/// body limit): within half of the rest, its end kept as a long message's is (an unbounded reply
/// of a few megabytes made the request too large, and the turn was not retained).
fn bounded_reply(reply: &str, budget: usize) -> String {
    let (mut kept, _) = tail_within(vec![Message::new("assistant", reply)], budget / 2);
    kept.pop().map(|m| m.content).unwrap_or_default()
}

fn dirs_home() -> Option<PathBuf> {
    std::env::var_os("HOME").map(PathBuf::from)
}

/// Claude Code's names for mneme's MCP tools.
fn mcp_tools() -> ToolNames {
    ToolNames {
        recall: Some("mcp__mneme__recall".into()),
        retain: Some("mcp__mneme__retain".into()),
        reflect: Some("mcp__mneme__reflect".into()),
    }
}

/// The tools a Claude Code session in `cwd` has: mneme's MCP tools when a `mneme` MCP server is
/// configured for it (a `.mcp.json` in the project that the settings enable, or `~/.claude.json`
/// for the user or the project); none otherwise (hooks only). Settings are read as Claude Code
/// merges them: the project's, the user's (`~/.claude/settings.json`, where `--install` advises
/// the approval: review113 #4) and the managed ones.
fn tools_in(cwd: &Path, home: Option<&Path>) -> ToolNames {
    tools_in_with(cwd, home, Path::new(MANAGED_SETTINGS))
}

/// Where Claude Code reads its managed (system-wide) settings on Linux.
const MANAGED_SETTINGS: &str = "/etc/claude-code/managed-settings.json";

/// The longest settings or `.mcp.json` file read (as `--mcp-headers` reads `.mcp.json`).
const MAX_SETTINGS_FILE: u64 = 1024 * 1024;

/// The longest `~/.claude.json` read: Claude Code keeps each project's state in it.
const MAX_USER_STATE_FILE: u64 = 64 * 1024 * 1024;

/// [`tools_in`], with the managed settings file given.
fn tools_in_with(cwd: &Path, home: Option<&Path>, managed: &Path) -> ToolNames {
    // Regular files only, bounded: in a shared folder above the project (/tmp) another user's
    // `.mcp.json` may be a FIFO, which hung every hook past Claude Code's timeout (the breaker
    // never tripped), or a link to /dev/zero, read into gigabytes (review113 #2).
    let read_at_most = |p: &Path, max: u64| {
        crate::files::read_regular_bounded(p, max).ok().and_then(|t| serde_json::from_str::<Value>(&t).ok())
    };
    let read = |p: &Path| read_at_most(p, MAX_SETTINGS_FILE);
    let user = home.and_then(|h| read_at_most(&h.join(".claude.json"), MAX_USER_STATE_FILE));
    if user.as_ref().is_some_and(|u| u["mcpServers"]["mneme"].is_object()) {
        return mcp_tools();
    }
    // A project's .mcp.json servers run only once approved.
    let approves = |v: &Value| {
        v["enableAllProjectMcpServers"] == true
            || v["enabledMcpjsonServers"].as_array().is_some_and(|a| a.iter().any(|s| s == "mneme"))
    };
    let user_settings = home.and_then(|h| read(&h.join(".claude/settings.json")));
    let approved_for_every_project = user_settings.iter().chain(read(managed).iter()).any(approves);
    for dir in cwd.ancestors() {
        let key = dir.display().to_string();
        let project = user.as_ref().map(|u| &u["projects"][&key]);
        if project.is_some_and(|p| p["mcpServers"]["mneme"].is_object()) {
            return mcp_tools();
        }
        let Some(mcp) = read(&dir.join(".mcp.json")) else { continue };
        if !mcp["mcpServers"]["mneme"].is_object() {
            continue;
        }
        if approved_for_every_project {
            return mcp_tools();
        }
        let settings = [".claude/settings.json", ".claude/settings.local.json"].map(|f| read(&dir.join(f)));
        if settings.iter().flatten().any(approves) || project.is_some_and(approves) {
            return mcp_tools();
        }
    }
    ToolNames::default()
}

/// How long the hooks installed for each event may run, as Claude Code's `timeout` (seconds):
/// the hook's own budget and a margin.
fn event_timeout(event: &str, settings: &Settings) -> u64 {
    // Claude Code's timeout is per event: SessionStart's covers the one after a compaction.
    let recalling = json!({"hook_event_name": event, "source": "compact"});
    hook_budget(event, &recalling, settings).as_secs() + 5
}

/// How long a hook waits for the daemon. Only automatic recall needs seconds; everything else
/// is quick or can wait. The daemon bounds its recall by `recall.timeout` and answers without
/// memories then, so the prompt's hook waits that and a usual hook's bound on top: a daemon that
/// gave up on a slow backend answers in time, and does not trip the breaker, which would skip
/// the turn's retains. The SessionStart after a compaction recalls too (the compaction context),
/// after a flush.
fn hook_budget(event: &str, payload: &Value, settings: &Settings) -> Duration {
    let recalls = event == "UserPromptSubmit" || (event == "SessionStart" && payload["source"] == "compact");
    if recalls {
        settings.recall.timeout + settings.hooks.timeout
    } else {
        settings.hooks.timeout
    }
}

#[cfg(test)]
mod tests {
    /// An event with half an emoji is read, U+FFFD in its place; the first value is taken
    /// whatever follows it; what is no JSON stays refused.
    #[test]
    fn an_event_is_read_with_half_an_emoji() {
        let read = |bytes: &[u8]| super::read_one_value(bytes);
        let event = read(br#"{"prompt": "cut \ud83d", "n": [1, 2]} {"next": 1}"#).unwrap().unwrap();
        assert_eq!(event, serde_json::json!({"prompt": "cut \u{fffd}", "n": [1, 2]}));
        let event = read(br#"{"prompt": "a pair \ud83d\ude00"}"#).unwrap().unwrap();
        assert_eq!(event["prompt"], "a pair \u{1f600}");
        assert!(read(br#"{"prompt": "cut \ud83d", }"#).unwrap().is_err());
        assert!(read(br#"{"prompt": "cut \ud83d"#).unwrap().is_err());
        assert!(read(b"").is_none());
    }

    /// The cached block goes, the guide that names its tag stays, and a memory in the block
    /// holding a line with an unclosed tag does not move the cut.
    #[test]
    fn the_recalled_block_and_only_it_leaves_the_instructions() {
        let guide = "# Memory\n- Blocks inside <memories> tags are background.\n- Use `recall`.\n";
        let block = "<memories>\nRelevant memories:\n\n- a note ending in\n<memories>\nunclosed\n</memories>";
        assert_eq!(super::without_recalled_block(&format!("{guide}\n{block}\n")), guide.trim_end());
        assert_eq!(super::without_recalled_block(guide), guide.trim_end(), "no block");
        assert_eq!(super::without_recalled_block(&format!("{block}\n")), "", "the block alone");
    }

    #[test]
    fn a_long_reply_fits_beside_the_transcript_and_keeps_its_private_span_closed() {
        let budget = 2 * 1024 * 1024;
        let short = "Done: the tests pass.";
        assert_eq!(super::bounded_reply(short, budget), short);
        let long = format!("<private>{}SECRET</private> and {}", "x".repeat(3 << 20), "y".repeat(100));
        let kept = super::bounded_reply(&long, budget);
        assert!(serde_json::to_string(&kept).unwrap().len() <= budget / 2, "{}", kept.len());
        assert!(kept.ends_with(&"y".repeat(100)));
        assert!(!mneme_core::text::strip_private(&kept).contains("SECRET"));
    }

    use super::*;

    #[test]
    fn the_prompt_hook_outlasts_the_daemons_own_recall_bound() {
        let settings = Settings::default();
        let budget = |event: &str, source: &str| hook_budget(event, &json!({"source": source}), &settings);
        let prompt = budget("UserPromptSubmit", "");
        assert!(prompt > settings.recall.timeout, "{prompt:?}: the daemon's answer at its bound would be lost");
        assert_eq!(budget("Stop", ""), settings.hooks.timeout);
        assert!(event_timeout("UserPromptSubmit", &settings) > prompt.as_secs());
        // The compaction context is a recall too.
        assert_eq!(budget("SessionStart", "compact"), prompt);
        assert_eq!(budget("SessionStart", "startup"), settings.hooks.timeout);
        assert!(event_timeout("SessionStart", &settings) > prompt.as_secs());
    }

    #[test]
    fn tools_follow_the_mcp_configuration() {
        let home = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let cwd = project.path().join("sub");
        std::fs::create_dir_all(&cwd).unwrap();
        assert_eq!(tools_in(&cwd, Some(home.path())), ToolNames::default(), "hooks only");
        std::fs::write(project.path().join(".mcp.json"), r#"{"mcpServers": {"mneme": {"type": "http"}}}"#).unwrap();
        assert_eq!(tools_in(&cwd, Some(home.path())), ToolNames::default(), "not approved yet");
        std::fs::create_dir_all(project.path().join(".claude")).unwrap();
        std::fs::write(project.path().join(".claude/settings.json"), r#"{"enabledMcpjsonServers": ["mneme"]}"#)
            .unwrap();
        assert_eq!(tools_in(&cwd, Some(home.path())), mcp_tools());
        let other = tempfile::tempdir().unwrap();
        std::fs::write(home.path().join(".claude.json"), r#"{"mcpServers": {"mneme": {"type": "http"}}}"#).unwrap();
        assert_eq!(tools_in(other.path(), Some(home.path())), mcp_tools(), "a user-scope server");
    }

    /// The approval in the user's settings (where `--install` advises it) or the managed ones
    /// counts for every project (review113 #4).
    #[test]
    fn an_approval_in_the_users_or_the_managed_settings_counts() {
        let (home, project, etc) =
            (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let managed = etc.path().join("managed-settings.json");
        std::fs::write(project.path().join(".mcp.json"), r#"{"mcpServers": {"mneme": {"type": "http"}}}"#).unwrap();
        let tools = || tools_in_with(project.path(), Some(home.path()), &managed);
        assert_eq!(tools(), ToolNames::default(), "not approved yet");
        std::fs::create_dir_all(home.path().join(".claude")).unwrap();
        std::fs::write(home.path().join(".claude/settings.json"), r#"{"enabledMcpjsonServers": ["mneme"]}"#).unwrap();
        assert_eq!(tools(), mcp_tools(), "approved in ~/.claude/settings.json");
        std::fs::remove_file(home.path().join(".claude/settings.json")).unwrap();
        std::fs::write(&managed, r#"{"enableAllProjectMcpServers": true}"#).unwrap();
        assert_eq!(tools(), mcp_tools(), "approved in the managed settings");
    }

    /// A `.mcp.json` (or settings file) above the project that is a FIFO or a link to /dev/zero
    /// (another user's, in /tmp) is passed over at once: it hung every hook, or was read into
    /// gigabytes (review113 #2).
    #[test]
    fn a_fifo_or_an_endless_file_above_the_project_is_passed_over() {
        let (home, shared) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let project = shared.path().join("proj");
        std::fs::create_dir_all(project.join(".claude")).unwrap();
        std::fs::write(project.join(".mcp.json"), r#"{"mcpServers": {"mneme": {"type": "http"}}}"#).unwrap();
        std::os::unix::fs::symlink("/dev/zero", project.join(".claude/settings.json")).unwrap();
        let fifo =
            std::ffi::CString::new(shared.path().join(".mcp.json").into_os_string().into_encoded_bytes()).unwrap();
        // SAFETY: a valid C string; mkfifo(3) only creates the file.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        let (cwd, home_dir) = (project.clone(), home.path().to_owned());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(tools_in(&cwd, Some(&home_dir))).unwrap());
        let tools = rx.recv_timeout(std::time::Duration::from_secs(5)).expect("tools_in returned; it hung on the FIFO");
        assert_eq!(tools, ToolNames::default(), "not approved: the settings file is no regular file");
    }
}
