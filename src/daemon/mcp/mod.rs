//! The MCP endpoint at `/mcp` (streamable HTTP, the `rmcp` crate): the tools `retain`, `recall`
//! and `reflect`, answering exactly what the HTTP routes answer. Behind the same bearer token and
//! loopback guard as every other route.

use axum::http::request::Parts;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::Extension;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{schemars, tool, tool_handler, tool_router, ErrorData, ServerHandler};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::session::{project_label, SessionError, Sessions, StartRequest};

mod check;
mod open;

use check::{check_message, Checks};
use open::{OpenSessions, Priming};

/// The session MCP calls use when they name none.
const DEFAULT_SESSION: &str = "mcp";

/// Which session a tool call works in. Optional arguments are plain optional properties (no
/// `null` type): strict tool-schema dialects (Gemini's) reject `["string", "null"]`.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub struct Target {
    /// The agent session to use (default: an "mcp" session in `cwd`).
    #[serde(default)]
    #[schemars(with = "String")]
    pub session_id: Option<String>,
    /// Working directory, which picks the project (used for the default session; a client may
    /// send it as the `X-Mneme-Cwd` header instead).
    #[serde(default)]
    #[schemars(with = "String")]
    pub cwd: Option<String>,
}

/// Drops the `"default": null` schemars writes for optional arguments: absent is the default.
fn plain_optionals(schema: &mut schemars::Schema) {
    if let Some(props) = schema.get_mut("properties").and_then(|p| p.as_object_mut()) {
        for prop in props.values_mut().filter_map(|p| p.as_object_mut()) {
            if prop.get("default").is_some_and(|d| d.is_null()) {
                prop.remove("default");
            }
        }
    }
}

/// Headers a client can configure once instead of passing arguments on every call (Claude Code
/// sends no cwd with tool calls; its `.mcp.json` can send headers).
const CWD_HEADER: &str = "x-mneme-cwd";
const SESSION_HEADER: &str = "x-mneme-session";

impl Target {
    /// Arguments win; the request's headers fill in what they leave out.
    fn or_headers(mut self, parts: &Parts) -> Self {
        let header = |name: &str| {
            let text = parts.headers.get(name).map(|v| header_text(v.as_bytes()))?;
            Some(text.trim().to_owned()).filter(|v| !v.is_empty())
        };
        self.session_id = self.session_id.filter(|s| !s.trim().is_empty()).or_else(|| header(SESSION_HEADER));
        self.cwd = self.cwd.filter(|c| !c.trim().is_empty()).or_else(|| header_path(header(CWD_HEADER)));
        self
    }
}

/// A header's text: its bytes as UTF-8 (curl sends a path so), else as Latin-1 (a fetch client,
/// Node's among them, sends `é` as one byte). Read as `to_str` does (visible ASCII only), a
/// project path like `/home/josé/app` came to nothing, and its memories went to the "/" session
/// and scope.
fn header_text(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.to_owned(),
        Err(_) => bytes.iter().map(|&b| char::from(b)).collect(),
    }
}

/// A path from a header, percent-decoded when it is sent encoded whole (`%2F…`: a path is
/// absolute, so none begins so as it is). `mneme hook claude-code --mcp-headers` encodes a path
/// that is not ASCII, which a fetch client cannot send otherwise (beyond U+00FF not at all).
fn header_path(text: Option<String>) -> Option<String> {
    let text = text?;
    if !text.get(..3).is_some_and(|start| start.eq_ignore_ascii_case("%2f")) {
        return Some(text);
    }
    percent_encoding::percent_decode_str(&text).decode_utf8().ok().map(|path| path.into_owned())
}

/// A path as `--mcp-headers` sends it in `X-Mneme-Cwd`: as it is when ASCII, else
/// percent-encoded whole ([`header_path`] reads it back).
pub(crate) fn path_for_header(path: &str) -> String {
    match path.is_ascii() || !path.starts_with('/') {
        true => path.to_owned(),
        false => percent_encoding::utf8_percent_encode(path, percent_encoding::NON_ALPHANUMERIC).to_string(),
    }
}

/// `retain` arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[schemars(transform = plain_optionals)]
pub struct RetainArgs {
    /// The fact worth remembering across sessions.
    pub content: String,
    /// What it is about (optional).
    #[serde(default)]
    #[schemars(with = "String")]
    pub context: Option<String>,
    /// Which session.
    #[serde(flatten)]
    pub target: Target,
}

/// `recall` arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[schemars(transform = plain_optionals)]
pub struct RecallArgs {
    /// What to look for.
    pub query: String,
    /// Which session.
    #[serde(flatten)]
    pub target: Target,
}

/// `reflect` arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[schemars(transform = plain_optionals)]
pub struct ReflectArgs {
    /// The question to answer from memory.
    pub query: String,
    /// Extra context for the answer.
    #[serde(default)]
    #[schemars(with = "String")]
    pub context: Option<String>,
    /// Which session.
    #[serde(flatten)]
    pub target: Target,
}

/// The MCP server: one per MCP session, all sharing the daemon's sessions.
#[derive(Clone)]
pub struct MemoryTools {
    sessions: Sessions,
    /// The daemon's shutdown: a call still in progress then is answered that it was cut short.
    stop: CancellationToken,
    tool_router: ToolRouter<Self>,
}

/// What a tool call the daemon's shutdown cut short answers.
const STOPPING: &str = "mneme is stopping and cut this call short: try again once it is back";

/// How long a retain in progress when the daemon's shutdown begins may take to end as it would
/// ([`MemoryTools::finished_unless_stuck`]): within [`LIBRARY_STOP_DELAY`], so that its answer
/// is sent before the library ends the session.
const WRITE_GRACE: std::time::Duration = std::time::Duration::from_millis(200);

/// `call`'s answer or, when `stop` comes first and the call does not end within `grace` after
/// it, a result marked `isError` saying it was cut short.
async fn answered_unless_stopping(
    stop: &CancellationToken,
    call: impl std::future::Future<Output = Result<CallToolResult, ErrorData>>,
    grace: std::time::Duration,
) -> Result<CallToolResult, ErrorData> {
    let cut_short = || Ok(CallToolResult::error(vec![ContentBlock::text(STOPPING.to_owned())]));
    tokio::pin!(call);
    tokio::select! {
        biased;
        answer = &mut call => return answer,
        () = stop.cancelled() => {}
    }
    match grace.is_zero() {
        true => cut_short(),
        false => tokio::time::timeout(grace, call).await.unwrap_or_else(|_| cut_short()),
    }
}

/// How long after the daemon's shutdown begins the library ends its sessions and streams: the
/// calls it cut short have been answered by then ([`MemoryTools::unless_stopping`]). Ended at
/// once, a session's event stream closed without an answer to the call in progress.
const LIBRARY_STOP_DELAY: std::time::Duration = std::time::Duration::from_millis(250);

/// A tool's answer. A call the model got wrong (an unknown session, an unusable argument, a tool
/// the backend lacks) is a JSON-RPC error; memory failing to do its part (a backend down, a full
/// disk, a spool that cannot write) is a tool result marked `isError`, as MCP asks of a tool's
/// own failures, so the model is shown it, with what the HTTP route says and when to try again.
fn tool_answer(answer: Result<String, SessionError>) -> Result<CallToolResult, ErrorData> {
    let e = match answer {
        Ok(text) => return Ok(CallToolResult::success(vec![ContentBlock::text(text)])),
        // Said in the tool's own terms: the model cannot start a session over HTTP, and a tool
        // call carries one item, not `items`.
        Err(SessionError::NotFound(id)) => {
            let id = mneme_core::text::quoted_unless_private(&id);
            let why = format!("unknown session {id}: leave session_id out to use this directory's own session");
            return Err(ErrorData::invalid_params(why, None));
        }
        Err(e @ SessionError::Invalid(_)) => {
            let why = e.to_string().replacen("items[0].", "", 1);
            return Err(ErrorData::invalid_params(why, None));
        }
        // What the backend cannot do at all (reflect on the local store) is the caller's to know.
        Err(e @ SessionError::Backend(mneme_core::BackendError::Unsupported(_))) => {
            return Err(ErrorData::invalid_request(e.to_string(), None))
        }
        Err(e) => super::ApiError::from(e),
    };
    let text = match e.retry_after {
        Some(secs) => format!("{} (try again in {secs} s)", e.message),
        None => e.message,
    };
    Ok(CallToolResult::error(vec![ContentBlock::text(text)]))
}

impl MemoryTools {
    /// Tools over the daemon's sessions, answering a call in progress at `stop` as cut short.
    pub fn new(sessions: Sessions, stop: CancellationToken) -> Self {
        Self { sessions, stop, tool_router: Self::tool_router() }
    }

    /// The call's answer, or, if the daemon stops first, a result marked `isError` saying it
    /// was cut short (the model is told to try again, as when the backend is down). A call that
    /// is done when the stop comes is answered as it ended.
    async fn unless_stopping(
        &self,
        call: impl std::future::Future<Output = Result<CallToolResult, ErrorData>>,
    ) -> Result<CallToolResult, ErrorData> {
        answered_unless_stopping(&self.stop, call, std::time::Duration::ZERO).await
    }

    /// [`Self::unless_stopping`] for a call that writes (a retain): once the stop comes it is
    /// given [`WRITE_GRACE`] to end as it would. Its item may be in the spool's hands already,
    /// and stored whatever comes: told it was cut short, the model tried again and stored it
    /// twice. (Only a write that takes longer than the grace is still answered so.)
    async fn finished_unless_stuck(
        &self,
        call: impl std::future::Future<Output = Result<CallToolResult, ErrorData>>,
    ) -> Result<CallToolResult, ErrorData> {
        answered_unless_stopping(&self.stop, call, WRITE_GRACE).await
    }

    /// The named session, or the default MCP session of `cwd` when none is named (started when
    /// it is missing).
    async fn session(&self, target: Target) -> Result<String, SessionError> {
        if let Some(id) = target.session_id {
            return Ok(id);
        }
        let cwd = target.cwd.filter(|c| !c.trim().is_empty()).unwrap_or_else(|| "/".into());
        let id = crate::ids::directory_session(DEFAULT_SESSION, &cwd);
        if let Ok(session) = self.sessions.get(&id) {
            // The folder may be another project's since (a worktree's path reused for another
            // repository, a link switched): then started again, it moves there, as the CLI's
            // folder session does each command. It kept its first project for good.
            let folder = cwd.clone();
            let project = tokio::task::spawn_blocking(move || project_label(std::path::Path::new(&folder))).await;
            if project.is_ok_and(|p| p == session.project) {
                return Ok(id);
            }
        }
        let req = StartRequest {
            session_id: id.clone(),
            cwd,
            agent: Some(DEFAULT_SESSION.into()),
            parent_session_id: None,
            tools: None,
        };
        self.sessions.start(req).await?;
        Ok(id)
    }
}

#[tool_router]
impl MemoryTools {
    /// Same answer as `POST /v1/sessions/{id}/retain`.
    #[tool(
        description = "Remember a durable fact across sessions (decisions and their reasons, conventions, how to build and test, user preferences). Queued at once and stored in the background."
    )]
    async fn retain(
        &self,
        Extension(parts): Extension<Parts>,
        Parameters(a): Parameters<RetainArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        self.finished_unless_stuck(async {
            tool_answer(
                async {
                    let id = self.session(a.target.or_headers(&parts)).await?;
                    Ok(self.sessions.retain(&id, vec![(a.content, a.context)]).await?.message)
                }
                .await,
            )
        })
        .await
    }

    /// Same answer as `POST /v1/sessions/{id}/recall`.
    #[tool(
        description = "Search long-term memory for what earlier sessions learned about the current work. Use before answering about past work, decisions or preferences."
    )]
    async fn recall(
        &self,
        Extension(parts): Extension<Parts>,
        Parameters(a): Parameters<RecallArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        self.unless_stopping(async {
            tool_answer(
                async {
                    let id = self.session(a.target.or_headers(&parts)).await?;
                    Ok(self.sessions.recall(&id, &a.query).await?.message)
                }
                .await,
            )
        })
        .await
    }

    /// Same answer as `POST /v1/sessions/{id}/reflect`.
    #[tool(description = "Answer a question by reasoning over long-term memory (needs the hindsight backend).")]
    async fn reflect(
        &self,
        Extension(parts): Extension<Parts>,
        Parameters(a): Parameters<ReflectArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        self.unless_stopping(async {
            tool_answer(
                async {
                    let id = self.session(a.target.or_headers(&parts)).await?;
                    self.sessions.reflect(&id, &a.query, a.context).await
                }
                .await,
            )
        })
        .await
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for MemoryTools {
    fn get_info(&self) -> ServerConfig {
        // The library's default names the library ("rmcp").
        let me = rmcp::model::Implementation::new("mneme", env!("CARGO_PKG_VERSION")).with_title("mneme memory");
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_server_info(me).with_instructions(
            match self.sessions.memory_is_on() {
                true => crate::session::guide(None, crate::session::Behaviour::of(&self.sessions.settings())),
                false => crate::session::OFF_GUIDE.to_owned(),
            },
        )
    }
}

/// The router to nest at `/mcp`: the library's service behind [`check::check_message`].
pub fn router(sessions: Sessions, stop: CancellationToken, max_body: usize) -> axum::Router {
    let open = OpenSessions::new();
    let stop_tools = stop.clone();
    let library_stop = match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            let later = CancellationToken::new();
            let (stop, library_stop) = (stop.clone(), later.clone());
            runtime.spawn(async move {
                stop.cancelled().await;
                tokio::time::sleep(LIBRARY_STOP_DELAY).await;
                library_stop.cancel();
            });
            later
        }
        // Built outside a runtime (a test of the router alone): nothing runs to stop it later.
        Err(_) => stop.child_token(),
    };
    let tools = move || Ok(MemoryTools::new(sessions.clone(), stop_tools.clone()));
    // The daemon's guard checks every request's Host already (loopback names, or any with
    // `server.allow_remote`); the library's own list refused other loopback names
    // (`app.localhost`, `127.0.0.2`) and every remote host, on this route alone.
    let config = StreamableHttpServerConfig::default().disable_allowed_hosts().with_cancellation_token(library_stop);
    // SSE priming events (an empty `data`, MCP 2025-11-25) go only to clients of that revision
    // or later: clients of earlier ones parse every `data` as a message, and their SDKs reported
    // an error on every call. The library sets them per service and per session manager, so
    // there are two of each (see `OpenSessions`).
    let priming = StreamableHttpService::new(tools.clone(), open.primed.clone(), config.clone());
    let plain = StreamableHttpService::new(tools, open.plain.clone(), config.with_sse_retry(None));
    let serve = move |req: axum::extract::Request| {
        use tower::ServiceExt;
        let primes = req.extensions().get::<Priming>().is_some_and(|p| p.0);
        let (priming, plain) = (priming.clone(), plain.clone());
        async move {
            match primes {
                true => priming.oneshot(req).await,
                false => plain.oneshot(req).await,
            }
        }
    };
    axum::Router::new()
        .fallback(serve)
        .layer(axum::middleware::from_fn_with_state(Checks::new(max_body, open, stop), check_message))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(answer: Result<CallToolResult, ErrorData>) -> String {
        let result = answer.unwrap();
        serde_json::to_value(&result.content).unwrap().to_string()
    }

    /// A retain under way when the stop comes ends as it would, within the grace: told it was cut
    /// short, a model tried again a retain that was stored, and stored it twice. One stuck past
    /// the grace is still answered, and a read is cut short at once.
    /// A project path that is not ASCII reaches the daemon from any client: percent-encoded
    /// whole (what `--mcp-headers` sends for it), as UTF-8 bytes (curl) or as Latin-1 bytes (a
    /// fetch client). As Latin-1 it was dropped, and its memories went to the "/" scope.
    #[test]
    fn a_path_that_is_not_ascii_is_read_from_its_header_however_sent() {
        for path in ["/home/josé/app", "/srv/日本/app", "/plain/path", "/a%2Fb/100%done"] {
            let sent = path_for_header(path);
            assert!(sent.is_ascii(), "{sent}");
            assert_eq!(header_path(Some(header_text(sent.as_bytes()))).as_deref(), Some(path), "{sent}");
            assert_eq!(header_path(Some(header_text(path.as_bytes()))).as_deref(), Some(path));
        }
        let latin1: Vec<u8> = "/home/josé/app".chars().map(|c| c as u8).collect();
        assert_eq!(header_text(&latin1), "/home/josé/app");
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_under_way_at_the_stop_is_answered_as_it_ended() {
        let stop = CancellationToken::new();
        let ends_after = |ms: u64| async move {
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
            Ok(CallToolResult::success(vec![ContentBlock::text("1 memory queued.".to_owned())]))
        };
        let stopper = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            stopper.cancel();
        });
        let write = answered_unless_stopping(&stop, ends_after(60), WRITE_GRACE).await;
        assert!(said(write).contains("1 memory queued."));
        let stuck = answered_unless_stopping(&stop, ends_after(60_000), WRITE_GRACE).await;
        assert!(said(stuck).contains("cut this call short"));
        let read = answered_unless_stopping(&stop, ends_after(60), std::time::Duration::ZERO).await;
        assert!(said(read).contains("cut this call short"));
        assert!(WRITE_GRACE < LIBRARY_STOP_DELAY);
    }
}
