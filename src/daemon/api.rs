//! Request and response bodies of the HTTP API: the only place JSON types live.

use mneme_core::text::Message;
use mneme_core::{BackendStatus, Recalled, Scope};
use serde::{Deserialize, Serialize};

use crate::queue::{Depths, FlushReport};

/// Every error answer: `{"error": {"code", "message"}}` (some carry more fields beside these).
#[derive(Debug, Serialize, Deserialize)]
pub struct ErrorAnswer {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// The `error` of an [`ErrorAnswer`].
#[derive(Debug, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// Stable, machine-readable.
    pub code: String,
    /// For a person.
    pub message: String,
}

/// `POST /v1/reload` with an invalid file: a 422 whose `error` also lists every problem.
#[derive(Debug, Serialize, Deserialize)]
pub struct InvalidConfigAnswer {
    /// `code` is `invalid_config`.
    pub error: InvalidConfigDetail,
}

/// The `error` of an [`InvalidConfigAnswer`].
#[derive(Debug, Serialize, Deserialize)]
pub struct InvalidConfigDetail {
    /// `invalid_config`.
    pub code: String,
    /// Every problem in one text.
    pub message: String,
    /// Each problem with its key and line.
    pub errors: Vec<ConfigProblem>,
}

/// One problem of a config file.
#[derive(Debug, Serialize, Deserialize)]
pub struct ConfigProblem {
    /// The key (`queue.batch_size`), or the file itself.
    pub key: String,
    /// Its line in the file, when it is in the file.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

/// Bumped when the API changes incompatibly; the CLI refuses a daemon that speaks another.
pub const PROTOCOL: u32 = 1;

/// `GET /v1/health`
#[derive(Debug, Serialize, Deserialize)]
pub struct Health {
    /// Always "ok".
    pub status: String,
    /// mneme's version.
    pub version: String,
    /// API protocol version.
    pub protocol: u32,
    /// Asked with `?challenge=`: HMAC-SHA256 of `mneme-health:<challenge>` keyed with the token,
    /// in hex. A client checks it before it sends the token: whatever answers on the port may
    /// be another user's process (which took the port while the daemon was down).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof: Option<String>,
    /// Asked with `?challenge=`: HMAC-SHA256 of `mneme-health:<challenge>@<address>` keyed with
    /// the token, in hex, where `<address>` is the daemon's end of the connection the question
    /// came on (`127.0.0.1:6366`, `[::1]:6366`). A client checks it against the address it
    /// connected to: a relay another user runs on another port (or address) passes the
    /// question on to the daemon, which proves its own address, not the relay's (`proof` alone
    /// was passed on and taken, and the client gave that user the token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address_proof: Option<String>,
    /// The format of the session records the daemon keeps (`crate::session::SESSION_FORMAT`);
    /// 2 and later count a custom slash command the Claude Code hooks keep as a turn. Absent
    /// (0) from a daemon before: the hooks then leave commands out.
    #[serde(default)]
    pub session_format: u32,
    /// The largest request body the running daemon takes (`server.max_body_bytes` as it
    /// started): a client sizes its requests by it, not by a config file edited since, whose
    /// value waits for a restart (review64 #3). Absent from a daemon before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_body_bytes: Option<usize>,
    /// The largest `/v1/import` request body it takes (64 KiB over `max_body_bytes`: an exported
    /// memory carries its id, bank and dates). Absent from a daemon before, which takes
    /// `max_body_bytes` there too (review110 #1: a newer CLI sent it larger requests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_import_bytes: Option<usize>,
}

/// The proof of holding `token` for `challenge`, answered at `address` (see
/// [`Health::address_proof`]). An IPv4 address a dual-stack socket shows as IPv6
/// (`::ffff:127.0.0.1`) is written as IPv4, as a client that connected to it names it.
pub fn health_proof_at(token: &str, challenge: &str, address: std::net::SocketAddr) -> String {
    let address = std::net::SocketAddr::new(address.ip().to_canonical(), address.port());
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, token.trim().as_bytes());
    let tag = ring::hmac::sign(&key, format!("mneme-health:{challenge}@{address}").as_bytes());
    tag.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// The proof of holding `token` for `challenge` (see [`Health::proof`]).
pub fn health_proof(token: &str, challenge: &str) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, token.trim().as_bytes());
    let tag = ring::hmac::sign(&key, format!("mneme-health:{challenge}").as_bytes());
    tag.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// `POST /v1/sessions`
#[derive(Debug, Serialize, Deserialize)]
pub struct StartSession {
    /// The agent's session id.
    pub session_id: String,
    /// Working directory.
    pub cwd: String,
    /// Agent name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Makes this session an alias of a known one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session_id: Option<String>,
    /// The names under which the client offers mneme's tools (`{}`: none; absent: `recall` and
    /// `retain`, or what the session said before). The instructions name only these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<crate::session::ToolNames>,
}

/// The answer to a session start.
#[derive(Debug, Serialize, Deserialize)]
pub struct SessionStarted {
    /// The id.
    pub session_id: String,
    /// Bank and tags.
    pub scope: Scope,
    /// Project label.
    pub project: String,
    /// The parent, when this is an alias.
    pub alias_of: Option<String>,
    /// The largest request body the daemon accepts (`server.max_body_bytes`): a plugin sends a
    /// transcript's newest messages within it rather than have the whole refused.
    #[serde(default)]
    pub max_body_bytes: usize,
    /// How long the daemon gives an automatic recall (`recall.timeout`) before it answers without
    /// memories: a plugin waits that and its own bound on top, so a slow backend is not taken for
    /// a hung daemon.
    #[serde(default)]
    pub recall_timeout_ms: u64,
    /// `memory.scoping` as the daemon reads it (`global`, `per-project`, `per-project-tagged`):
    /// under `global` a folder has no project of its own, and its scope is the whole bank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scoping: Option<String>,
}

/// One item of a retain.
#[derive(Debug, Serialize, Deserialize)]
pub struct RetainItem {
    /// The memory.
    pub content: String,
    /// What it is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
}

/// `POST /v1/sessions/{id}/retain`
#[derive(Debug, Serialize, Deserialize)]
pub struct Retain {
    /// Items to retain.
    pub items: Vec<RetainItem>,
}

/// The answer to a retain.
#[derive(Debug, Serialize, Deserialize)]
pub struct Queued {
    /// Items accepted.
    pub queued: usize,
    /// Items not stored: nothing but `<private>` or recalled text was in them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped: usize,
    /// For the agent's model.
    pub message: String,
}

/// `POST /v1/sessions/{id}/recall`
#[derive(Debug, Serialize, Deserialize)]
pub struct Recall {
    /// What to look for.
    pub query: String,
}

/// The answer to a recall.
#[derive(Debug, Serialize, Deserialize)]
pub struct RecallAnswer {
    /// Best first.
    pub results: Vec<Recalled>,
    /// For the agent's model.
    pub message: String,
}

/// `POST /v1/sessions/{id}/reflect`
#[derive(Debug, Serialize, Deserialize)]
pub struct Reflect {
    /// The question.
    pub query: String,
    /// Extra context.
    pub context: Option<String>,
}

/// The answer to a reflect.
#[derive(Debug, Serialize, Deserialize)]
pub struct Reflected {
    /// The answer.
    pub text: String,
}

/// `POST /v1/classify`, and the optional `request` of the session routes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClassifyRequest {
    /// The provider request's headers (names in any case).
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
    /// The raw provider body (Anthropic Messages, OpenAI Chat Completions or Responses).
    pub body: serde_json::Value,
    /// Only the request's system prompt is known (the opencode plugin's hook sees no more):
    /// judged by the patterns alone, since the score would count the messages and tools the
    /// body lacks (a custom agent's short prompt scored 8, meta, and got no memory).
    #[serde(default)]
    pub system_only: bool,
}

/// The optional fields of the session routes that say what a turn is: a meta or compaction turn
/// is neither recalled for nor retained.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct TurnInfo {
    /// The agent making this turn (judged by the header layer's agent lists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The provider request of this turn, classified in full.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<ClassifyRequest>,
}

/// `POST /v1/sessions/{id}/agent-start`
#[derive(Debug, Serialize, Deserialize)]
pub struct AgentStart {
    /// The user's prompt.
    pub prompt: String,
    /// The conversation so far.
    #[serde(default)]
    pub messages: Vec<Message>,
    /// What kind of turn this is.
    #[serde(flatten)]
    pub turn: TurnInfo,
}

/// The answer to agent-start.
#[derive(Debug, Serialize, Deserialize)]
pub struct Inject {
    /// A `<memories>` block for the prompt, or null.
    pub inject: Option<String>,
}

/// A body holding messages (agent-end, compaction).
#[derive(Debug, Serialize, Deserialize)]
pub struct Messages {
    /// The conversation.
    #[serde(default)]
    pub messages: Vec<Message>,
    /// What kind of turn this is.
    #[serde(flatten)]
    pub turn: TurnInfo,
    /// agent-end: the session ends with this turn, so what is not retained yet is retained now,
    /// whatever the cadence.
    #[serde(default)]
    pub ends_session: bool,
    /// agent-end: wait for the session's queue to be delivered (default); `false` answers at once
    /// (what is spooled is safe) with a zero `flushed`.
    #[serde(default = "yes")]
    pub wait: bool,
    /// agent-end: the assistant's final reply of this turn, when the messages may not hold it
    /// yet (a transcript written after the hook runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<String>,
    /// agent-end: user turns the client left out before `messages` (a transcript too long for
    /// one request is sent without its start); they count as there when telling new turns from
    /// retained ones.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted_user_turns: usize,
    /// agent-end: the client knows the user went back to an earlier turn and on from there
    /// (Claude Code's rewind), so `messages` leave out turns sent before: in `full-session` mode
    /// the session's document is replaced by the branch now taken, and loses the turns taken back.
    #[serde(default, skip_serializing_if = "is_false")]
    pub rewound: bool,
}

impl Messages {
    /// A body of `messages` with the defaults (a work turn, the session goes on, wait).
    pub fn new(messages: Vec<Message>) -> Self {
        Messages {
            messages,
            turn: TurnInfo::default(),
            ends_session: false,
            wait: true,
            reply: None,
            omitted_user_turns: 0,
            rewound: false,
        }
    }
}

fn yes() -> bool {
    true
}

fn is_false(b: &bool) -> bool {
    !b
}

/// `DELETE /v1/sessions/{id}` query.
#[derive(Debug, Deserialize)]
pub struct EndQuery {
    /// Wait for the final delivery (default); `false` answers at once.
    #[serde(default = "yes")]
    pub wait: bool,
}

/// The answer to agent-end.
#[derive(Debug, Serialize, Deserialize)]
pub struct AgentEnded {
    /// Transcripts queued by automatic retain (0 or 1).
    pub retained: usize,
    /// What the flush of the session's queue did.
    pub flushed: Flushed,
}

/// The answer to a compaction.
#[derive(Debug, Serialize, Deserialize)]
pub struct CompactionContext {
    /// The memory context to splice into the summary, or null.
    pub context: Option<String>,
}

/// `GET /v1/sessions/{id}/instructions`
#[derive(Debug, Serialize, Deserialize)]
pub struct Instructions {
    /// Markdown for the system prompt, or null when memory is off.
    pub markdown: Option<String>,
}

/// The answer to a session end.
#[derive(Debug, Serialize, Deserialize)]
pub struct SessionEnded {
    /// What the final flush did.
    pub flushed: Flushed,
}

/// What a flush did (`POST /v1/flush`, and inside the answers of agent-end and a session end).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flushed {
    /// Items stored by the backend.
    pub delivered: u64,
    /// Items that could not be stored (still spooled for a retry, or dead-lettered).
    pub failed: u64,
    /// Items kept spooled for the next backend that stores, memory being `off` (`POST /v1/flush`
    /// only; left out when none).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub held: u64,
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

impl From<FlushReport> for Flushed {
    fn from(r: FlushReport) -> Self {
        Flushed { delivered: r.delivered, failed: r.failed, held: 0 }
    }
}

/// `POST /v1/flush`
#[derive(Debug, Serialize, Deserialize)]
pub struct Flush {
    /// One session, or all when absent.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Wait for the deliveries (default); `false` starts them and answers at once with zeros.
    #[serde(default = "yes")]
    pub wait: bool,
}

impl Default for Flush {
    fn default() -> Self {
        Flush { session_id: None, wait: true }
    }
}

/// `POST /v1/clear`
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Clear {
    /// One session's scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Everything (extension: the CLI's `--all`).
    #[serde(default)]
    pub all: bool,
    /// Also the server's memories (hindsight).
    #[serde(default)]
    pub remote: bool,
}

/// The answer to a clear.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cleared {
    /// Memories deleted from the store, where known.
    pub deleted: Option<u64>,
    /// Spooled items dropped.
    pub discarded: u64,
    /// One line for the user.
    pub message: String,
    /// Memory was off: no store was open, so none of what it holds was deleted (only what was
    /// queued). Left out when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub memory_off: bool,
}

impl From<crate::session::ClearOutcome> for Cleared {
    fn from(c: crate::session::ClearOutcome) -> Self {
        Cleared { deleted: c.deleted, discarded: c.discarded, message: c.message, memory_off: c.memory_off }
    }
}

/// `GET /v1/notices` query.
#[derive(Debug, Default, Deserialize)]
pub struct NoticesQuery {
    /// Only notices with a greater id.
    pub after: Option<i64>,
    /// At most this many (default 100, at most 1000).
    pub limit: Option<usize>,
}

/// The answer to `GET /v1/notices`.
#[derive(Debug, Serialize, Deserialize)]
pub struct NoticeList {
    /// Oldest first.
    pub notices: Vec<Notice>,
}

/// A notice on the wire.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Notice {
    /// Increasing id.
    pub id: i64,
    /// RFC 3339 UTC.
    pub at: String,
    /// info | warning | error.
    pub level: String,
    /// Who raised it.
    pub source: String,
    /// The session it concerns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// For the user.
    pub message: String,
}

/// `POST /v1/retry`
#[derive(Debug, Serialize, Deserialize)]
pub struct Requeued {
    /// Dead letters put back.
    pub requeued: u64,
}

/// `GET /v1/export` query.
#[derive(Debug, Default, Deserialize)]
pub struct ExportQuery {
    /// Only this bank (required by Hindsight; defaults to the configured bank there).
    pub bank: Option<String>,
    /// Where to continue (the previous page's `next`).
    pub cursor: Option<String>,
    /// Page size (default 500, at most 1000).
    pub limit: Option<usize>,
}

/// One page of an export.
#[derive(Debug, Serialize, Deserialize)]
pub struct ExportAnswer {
    /// Stored memories.
    pub memories: Vec<mneme_core::StoredMemory>,
    /// Cursor of the next page, null at the end.
    pub next: Option<String>,
    /// Which store the page was read from (as an import's answer names it): an export whose
    /// pages or passes name two went across a reload that switched the backend or its store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<String>,
}

/// `POST /v1/import`
#[derive(Debug, Serialize, Deserialize)]
pub struct ImportBody {
    /// Memories as export wrote them.
    pub memories: Vec<mneme_core::StoredMemory>,
}

/// The answer to an import.
#[derive(Debug, Serialize, Deserialize)]
pub struct Imported {
    /// Memories received.
    pub received: usize,
    /// New memories stored, where the backend can tell (the rest were already there).
    pub imported: Option<u64>,
    /// Memories not stored: nothing but `<private>` text was in their content.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped: usize,
    /// Which store took them (16 hex digits; another after a reload switched the backend or
    /// its store): an import that sees it change went to two stores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<String>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The answer to `POST /v1/reload`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Reloaded {
    /// The backend now in force.
    pub backend: mneme_core::BackendId,
    /// Whether the backend was switched, or reopened with other settings (see
    /// `previous_backend`).
    pub changed: bool,
    /// The backend in force before the reload (absent from daemons before it was added).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_backend: Option<mneme_core::BackendId>,
    /// Changed keys that only apply after a restart.
    pub restart_needed: Vec<String>,
    /// Why the file was not read (gone, or empty): the running configuration stays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_read: Option<String>,
}

/// `GET /v1/status`
#[derive(Debug, Serialize, Deserialize)]
pub struct Status {
    /// mneme's version.
    pub version: String,
    /// API protocol version.
    pub protocol: u32,
    /// Daemon process id.
    pub pid: u32,
    /// Seconds since start.
    pub uptime_seconds: u64,
    /// Bound address.
    pub listen: String,
    /// The config file.
    pub config_path: String,
    /// Whether it exists.
    pub config_exists: bool,
    /// Storage directory.
    pub storage_dir: String,
    /// The local store's file, when the local backend runs (`mneme export -o` refuses it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_store: Option<String>,
    /// Which thesaurus recall uses, when the local backend runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thesaurus: Option<ThesaurusInfo>,
    /// Backend health and counts.
    pub backend: BackendStatus,
    /// Queue depths.
    pub queue: Depths,
    /// Known sessions.
    pub sessions: usize,
    /// Newest notice id.
    pub last_notice_id: i64,
}

/// `local.thesaurus` and `local.thesaurus_file` in force (the word count is the backend's).
#[derive(Debug, Serialize, Deserialize)]
pub struct ThesaurusInfo {
    /// Whether the built-in developer thesaurus is used.
    pub builtin: bool,
    /// The user's own file, if any.
    pub file: Option<String>,
}

/// `GET /v1/memories` query: newest first.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct BrowseParams {
    /// Only this bank (required by Hindsight; defaults to the configured bank there).
    pub bank: Option<String>,
    /// Only memories with every one of these tags, comma-separated (`project:api,x`; `\,` is a
    /// comma inside a tag).
    pub tags: Option<String>,
    /// Where to continue (the previous page's `next`).
    pub cursor: Option<String>,
    /// Page size (default 50, at most 1000).
    pub limit: Option<usize>,
    /// Cut each memory's content to about this many characters (ending in `…`): a list page
    /// stays small when memories are whole session transcripts.
    pub preview: Option<usize>,
}

/// `GET /v1/banks`
#[derive(Debug, Serialize, Deserialize)]
pub struct BankList {
    /// Banks that hold memories, with their counts where known.
    pub banks: Vec<mneme_core::BankCount>,
    /// On a backend read a bank at a time (Hindsight): the banks of the daemon's configuration
    /// (its base bank first, listed or not; under `per-project` scoping each project's), which
    /// `mneme export` without `--bank` writes. By the daemon's settings, not a client's reading
    /// of a file edited since (review67 #5). Left out elsewhere.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub of_configuration: Vec<String>,
}

/// The `?bank=` of `GET`/`DELETE /v1/memories/{id}` (required by Hindsight, optional on local)
/// and of `DELETE /v1/documents/{id}` (required).
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct BankParam {
    /// The bank.
    pub bank: Option<String>,
}

/// `POST /v1/search`: what recall gives an agent for `query` in a bank, without a session.
#[derive(Debug, Serialize, Deserialize)]
pub struct Search {
    /// The question.
    pub query: String,
    /// Bank (default: the configured one).
    #[serde(default)]
    pub bank: Option<String>,
    /// Recall's tag filter (memories with any of them, or untagged).
    #[serde(default)]
    pub tags: Vec<String>,
    /// Budget in tokens (default `recall.max_tokens`).
    #[serde(default)]
    pub max_tokens: Option<usize>,
}

/// The answer to a search.
#[derive(Debug, Serialize, Deserialize)]
pub struct SearchAnswer {
    /// The bank searched.
    pub bank: String,
    /// Best first, within the budget.
    pub results: Vec<Recalled>,
    /// How long recall took, in milliseconds.
    pub took_ms: f64,
}

/// `POST /v1/ui/codes` (bearer only): a one-time code for the web view's login URL.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct UiCodeRequest {
    /// How long the browser session lasts once the code is used, in seconds (default 12 h,
    /// at most 30 days; it ends earlier when the daemon stops).
    #[serde(default)]
    pub valid_for_seconds: Option<u64>,
}

/// A one-time login code.
#[derive(Debug, Serialize, Deserialize)]
pub struct UiCode {
    /// Open this (once, within `code_expires_in_seconds`) to log in.
    pub url: String,
    /// How long the code may be used.
    pub code_expires_in_seconds: u64,
    /// How long the browser session will last.
    pub valid_for_seconds: u64,
}

/// `GET /ui/session`: whether the browser is logged in, and what the page needs for
/// state-changing requests.
#[derive(Debug, Serialize, Deserialize)]
pub struct UiSession {
    /// Whether the request carried a live session cookie.
    pub logged_in: bool,
    /// Send it as `X-Mneme-CSRF` on every POST and DELETE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csrf: Option<String>,
    /// Seconds left in the browser session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in_seconds: Option<u64>,
}
