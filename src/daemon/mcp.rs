//! The MCP endpoint at `/mcp` (streamable HTTP, the `rmcp` crate): the tools `retain`, `recall`
//! and `reflect`, answering exactly what the HTTP routes answer. Behind the same bearer token and
//! loopback guard as every other route.

use std::sync::Arc;

use axum::http::request::Parts;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::Extension;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{schemars, tool, tool_handler, tool_router, ErrorData, ServerHandler};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::session::{project_label, SessionError, Sessions, StartRequest};

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
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(me)
            .with_instructions(crate::session::guide(None, crate::session::Behaviour::of(&self.sessions.settings())))
    }
}

/// What a request naming an MCP session that is not open is told.
const UNKNOWN_SESSION: &str =
    "no such MCP session: it ended (a session idle for 5 minutes is closed) or never was; initialize again";

/// What a POST to `/mcp` must be before the MCP library sees it: a JSON-RPC 2.0 message in a
/// JSON body. The library answers anything else with a bare 415; a client is owed a 400 saying
/// which of JSON-RPC's errors it is, a parse error (-32700) or an invalid request (-32600), in
/// the API's error shape (`{"error": {"code", "message"}}`, JSON-RPC's number in `data`).
///
/// A DELETE of a session that is not open (ended, closed when idle, or never opened) is a 404,
/// as MCP says of any request naming such a session; the library answered 202 as if it had
/// ended one.
pub async fn check_message(
    axum::extract::State(Checks { max_body, open, stop, streams }): axum::extract::State<Checks>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::{header, Method, StatusCode};
    use axum::response::IntoResponse;
    if req.method() == Method::DELETE {
        let named = req.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(|s| s.to_owned().into());
        if let Some(id) = named {
            if !open.has(&id).await {
                return super::ApiError::new(StatusCode::NOT_FOUND, "unknown_session", UNKNOWN_SESSION).into_response();
            }
        }
    }
    if req.method() != Method::POST {
        let (method, headers) = (req.method().clone(), req.headers().clone());
        let mut req = req;
        let primed = open.serves_primed(&headers, primes(&headers, None)).await;
        req.extensions_mut().insert(Priming(primed));
        // A GET opens an event stream that keeps its connection for as long as the client
        // likes: without a bound, a client's streams (dozens a session) filled
        // `server.max_connections`, and nothing else was answered, the health check included.
        let place = match method == Method::GET {
            true => match streams.clone().try_acquire_owned() {
                Ok(place) => Some(place),
                Err(_) => {
                    let why = format!(
                        "{MAX_MCP_STREAMS} MCP event streams (GET /mcp) are open: close one, or try again later"
                    );
                    return super::ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "too_many_streams", why)
                        .retry_after(MCP_STREAM_RETRY_SECS)
                        .into_response();
                }
            },
            false => None,
        };
        let response = held_while_streaming(next.run(req).await, place);
        if response.status() == StatusCode::NOT_FOUND && headers.contains_key("mcp-session-id") {
            return super::ApiError::new(StatusCode::NOT_FOUND, "unknown_session", UNKNOWN_SESSION).into_response();
        }
        return explained(response, || bare_refusal(&method, &headers, false)).await;
    }
    let json = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| {
        let essence = v.split(';').next().unwrap_or_default().trim();
        essence.eq_ignore_ascii_case("application/json")
    });
    if !json {
        return super::ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "an MCP message is sent as Content-Type: application/json",
        )
        .into_response();
    }
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, max_body).await {
        Ok(b) => b,
        // Too long, or cut short (the body's deadline): the API's own answers.
        Err(e) => {
            let mut source = std::error::Error::source(&e);
            let mut too_long = false;
            while let Some(s) = source {
                too_long |= s.is::<http_body_util::LengthLimitError>();
                source = s.source();
            }
            return if too_long {
                super::ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", "the MCP message is too long")
            } else {
                super::ApiError::invalid(format!("cannot read the MCP message: {e}"))
            }
            .into_response();
        }
    };
    // The API's error shape (a string code), in a JSON-RPC response whose error carries
    // JSON-RPC's number in `data`, and the request's id once it could be read (JSON-RPC: null
    // only when it could not), so that the client can tell which of its requests failed.
    let refused_request = |id: serde_json::Value, rpc_code: i64, message: &str| {
        let body = serde_json::json!({"jsonrpc": "2.0", "id": id,
            "error": {"code": rpc_code_name(rpc_code), "message": message, "data": {"jsonrpc_code": rpc_code}}});
        (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
    };
    let refused = |rpc_code: i64, message: &str| refused_request(serde_json::Value::Null, rpc_code, message);
    let (initialize, stateless, tool_problem, primed) = match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Err(e) => return refused(-32700, &format!("Parse error: the body is not JSON ({e})")),
        Ok(serde_json::Value::Object(m))
            if m.get("jsonrpc").and_then(|v| v.as_str()) == Some("2.0")
                && (m.contains_key("method") || m.contains_key("id")) =>
        {
            // The library takes a string or a 64-bit integer; anything else it answered with 415.
            if m.get("id").is_some_and(|id| !(id.is_string() || id.is_i64())) {
                return refused(-32600, "Invalid Request: the id must be a string or an integer");
            }
            let id = m.get("id").cloned().unwrap_or_default();
            if m.get("method").is_some_and(|v| !v.is_string()) {
                return refused_request(id, -32600, "Invalid Request: the method must be a string");
            }
            // The library's "method not found" repeats the name it was given: one holding a
            // private span is refused here, unrepeated.
            if m.get("method").and_then(|v| v.as_str()).is_some_and(mneme_core::text::has_private_tag) {
                return refused_request(id, -32601, "Method not found (its name holds a <private> tag)");
            }
            // The shapes the library tells apart; any other it answered with a bare 415.
            let (result, error) = (m.contains_key("result"), m.contains_key("error"));
            let known_shape =
                if m.contains_key("method") { !result && !error } else { m.contains_key("id") && result != error };
            if !known_shape {
                return refused_request(
                    id,
                    -32600,
                    "Invalid Request: a message is a request (method and id), a notification (method) or a response (id with result or error)",
                );
            }
            if let Some(why) = params_problem(&m) {
                return refused_request(id, -32602, &format!("Invalid params: {why}"));
            }
            let initialize = m.get("method").and_then(|v| v.as_str()) == Some("initialize");
            let asked = m.get("params").and_then(|p| p.get("protocolVersion")).and_then(|v| v.as_str());
            let stateless = is_stateless(&m, &parts.headers);
            let primed = stateless || primes(&parts.headers, asked.filter(|_| initialize));
            (initialize, stateless, tool_call_problem(&m).map(|why| (id, why)), primed)
        }
        Ok(_) => {
            let why = "Invalid Request: a request is one JSON-RPC 2.0 message, an object with \"jsonrpc\": \"2.0\"";
            return refused(-32600, why);
        }
    };
    // What initialize names (clientInfo, capabilities) is kept for the session's life: a few
    // hundred bytes from a real client, megabytes a session from one that loops on initialize.
    if initialize && bytes.len() > MAX_INITIALIZE_BYTES {
        let why = format!(
            "Invalid params: an initialize is at most {} KiB (its clientInfo and capabilities are kept while the session is open)",
            MAX_INITIALIZE_BYTES / 1024
        );
        return super::ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", why).into_response();
    }
    // Each session holds a task and its tools until it has been idle 5 minutes: a client
    // looping on initialize would grow the daemon without bound.
    // An `initialize` always opens a session, whatever version it names (the library takes it
    // for the earlier revisions): naming a stateless one in it got past the bound.
    if initialize && open.len().await >= MAX_MCP_SESSIONS {
        let why = format!(
            "{MAX_MCP_SESSIONS} MCP sessions are open (each ends when its client deletes it or after 5 minutes idle): try again later"
        );
        return super::ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "too_many_sessions", why)
            .retry_after(30)
            .into_response();
    }
    let mut parts = parts;
    accept_both(&mut parts.headers);
    let primed = open.serves_primed(&parts.headers, primed).await;
    parts.extensions.insert(Priming(primed));
    let session = parts.headers.contains_key("mcp-session-id");
    if !initialize && !session && !stateless {
        let why = "before MCP 2026-07-28 every message but initialize names its session: send the Mcp-Session-Id header that initialize answered with (or speak 2026-07-28, which needs none)";
        return super::ApiError::invalid(why).into_response();
    }
    // A tool's argument missing or of the wrong type is the model's mistake, in a session that
    // goes on: a JSON-RPC error (its code a number) in a 200, as the library answers an argument
    // mneme refuses. A 400 with the API's string code ended the Python SDK's session, and the
    // TypeScript SDK took it for a transport error.
    if let Some((id, why)) = tool_problem {
        let named = parts.headers.get("mcp-session-id").and_then(|v| v.to_str().ok()).map(|s| s.to_owned().into());
        if let Some(named) = named {
            if !open.has(&named).await {
                return super::ApiError::new(StatusCode::NOT_FOUND, "unknown_session", UNKNOWN_SESSION).into_response();
            }
        }
        let message = format!("Invalid params: {why}");
        let body = serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": message}});
        return (StatusCode::OK, axum::Json(body)).into_response();
    }
    let parts_headers = parts.headers.clone();
    let response = next.run(axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes))).await;
    if session && response.status() == StatusCode::NOT_FOUND {
        return super::ApiError::new(StatusCode::NOT_FOUND, "unknown_session", UNKNOWN_SESSION).into_response();
    }
    if response.status().is_client_error() {
        let headers = parts_headers;
        let response = with_string_code(response).await;
        return explained(response, || bare_refusal(&Method::POST, &headers, initialize)).await;
    }
    // The library answers a call it cut short at shutdown with a 500 ("empty response").
    if response.status() == StatusCode::INTERNAL_SERVER_ERROR && stop.is_cancelled() {
        let why = "mneme is stopping and cut this call short: try again once it is back";
        return super::ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "stopping", why).retry_after(1).into_response();
    }
    response
}

/// The longest `initialize` message taken (see [`check_message`]).
const MAX_INITIALIZE_BYTES: usize = 64 * 1024;

/// `response`, or, when the library refused the request with a bare 400 (plain text, "Bad
/// Request"), the API's error saying why (`why`).
async fn explained(response: axum::response::Response, why: impl FnOnce() -> String) -> axum::response::Response {
    use axum::response::IntoResponse;
    let plain = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|v| !v.contains("json") && !v.contains("event-stream"));
    if response.status() != axum::http::StatusCode::BAD_REQUEST || !plain {
        return response;
    }
    super::ApiError::invalid(why()).into_response()
}

/// Why the library refused a request with a bare 400, as far as its headers tell.
fn bare_refusal(method: &axum::http::Method, headers: &axum::http::HeaderMap, initialize: bool) -> String {
    use axum::http::Method;
    use rmcp::model::ProtocolVersion;
    let known: Vec<&str> = ProtocolVersion::KNOWN_VERSIONS.iter().map(|v| v.as_str()).collect();
    let version = headers.get("mcp-protocol-version").map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_owned());
    if let Some(version) = version.filter(|v| !known.contains(&v.as_str())) {
        return format!(
            "MCP-Protocol-Version {} is not a revision this server speaks ({})",
            mneme_core::text::quoted_unless_private(&version),
            known.join(", ")
        );
    }
    let session = headers.contains_key("mcp-session-id");
    match *method {
        Method::GET if !session => {
            "GET /mcp opens a session's event stream: send the Mcp-Session-Id header that initialize answered with".into()
        }
        Method::DELETE if !session => {
            "DELETE /mcp ends a session: send the Mcp-Session-Id header that initialize answered with".into()
        }
        _ if initialize => "initialize was refused: its params name protocolVersion (a string), capabilities (an object) and clientInfo (an object with name and version)".into(),
        _ => "the MCP request was refused: its headers or params are not as MCP asks".into(),
    }
}

/// The API's string code for a JSON-RPC error number.
fn rpc_code_name(number: i64) -> &'static str {
    match number {
        -32700 => "invalid_json",
        -32600 => "invalid_request",
        -32601 => "method_not_found",
        -32602 => "invalid_params",
        -32020 => "header_mismatch", // MCP's: a header disagrees with the message
        _ => "bad_request",
    }
}

/// The API's error shape for a JSON-RPC error the library answered with a 4xx itself (a
/// header that disagrees with the message, a method a stateless request cannot call): a string
/// `code`, JSON-RPC's number in `data.jsonrpc_code`, as [`check_message`]'s own refusals.
async fn with_string_code(response: axum::response::Response) -> axum::response::Response {
    /// A JSON-RPC error is small; a larger body is passed on as it is.
    const MAX_ERROR_BODY: usize = 64 * 1024;
    let (parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_ERROR_BODY).await else {
        let refused = super::ApiError::new(parts.status, "bad_request", "the MCP request was refused");
        return axum::response::IntoResponse::into_response(refused);
    };
    let mut value: serde_json::Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(_) => return axum::response::Response::from_parts(parts, axum::body::Body::from(bytes)),
    };
    let Some(number) = value.pointer("/error/code").and_then(serde_json::Value::as_i64) else {
        return axum::response::Response::from_parts(parts, axum::body::Body::from(bytes));
    };
    let error = &mut value["error"];
    // The library may quote what it refuses (a tool name, a header): not repeated when private.
    if error["message"].as_str().is_some_and(mneme_core::text::has_private_tag) {
        error["message"] = "the MCP request was refused (its message quoted a value with <private> text)".into();
    }
    error["code"] = rpc_code_name(number).into();
    if !error["data"].is_object() {
        error["data"] = serde_json::json!({});
    }
    error["data"]["jsonrpc_code"] = number.into();
    let mut parts = parts;
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    axum::response::Response::from_parts(parts, axum::body::Body::from(value.to_string()))
}

/// Whether a message is of MCP's stateless revisions (2026-07-28 on: no `initialize`, no
/// session), as the library decides it: the version in the message's `_meta`, else in the
/// `MCP-Protocol-Version` header. Claude Code 2.1 speaks it; only the earlier revisions name a
/// session in every message.
fn is_stateless(m: &serde_json::Map<String, serde_json::Value>, headers: &axum::http::HeaderMap) -> bool {
    const FIRST_STATELESS: &str = "2026-07-28";
    let in_meta = m
        .get("params")
        .and_then(|p| p.get("_meta"))
        .and_then(|meta| meta.get("io.modelcontextprotocol/protocolVersion"))
        .and_then(|v| v.as_str());
    let in_header = headers.get("mcp-protocol-version").and_then(|v| v.to_str().ok());
    // Versions are dates, so they compare as strings.
    in_meta.or(in_header).is_some_and(|v| v.trim() >= FIRST_STATELESS)
}

/// What is wrong with a request's `params`, for the methods whose params the library would
/// otherwise refuse without saying (a bare 400 or 415, or "method not found" for a bad
/// `tools/call`): params are an object; `initialize` names its protocol version; `tools/call`
/// names its tool and passes its arguments as an object.
fn params_problem(m: &serde_json::Map<String, serde_json::Value>) -> Option<&'static str> {
    let params = m.get("params");
    if params.is_some_and(|p| !p.is_object() && !p.is_null()) {
        return Some("params must be an object");
    }
    // The library answered another `_meta` with a bare 415, as if the body were not JSON.
    if params.and_then(|p| p.get("_meta")).is_some_and(|meta| !meta.is_object() && !meta.is_null()) {
        return Some("params._meta must be an object");
    }
    let field = |name: &str| params.and_then(|p| p.get(name));
    match m.get("method").and_then(|v| v.as_str()) {
        Some("initialize") if !field("protocolVersion").is_some_and(|v| v.is_string()) => {
            Some("initialize needs params.protocolVersion, a string such as \"2025-06-18\"")
        }
        _ => None,
    }
}

/// What is wrong with a `tools/call`: it names its tool and passes its arguments as an object,
/// those one of mneme's tools takes ([`tool_arguments_problem`]). Answered as a JSON-RPC error in
/// a 200 (see [`check_message`]): a bridge that passes the model's arguments as a JSON string
/// got a 400 the SDKs take for a broken transport.
fn tool_call_problem(m: &serde_json::Map<String, serde_json::Value>) -> Option<&'static str> {
    if m.get("method").and_then(|v| v.as_str()) != Some("tools/call") {
        return None;
    }
    let field = |name: &str| m.get("params").and_then(|p| p.get(name));
    let Some(name) = field("name").and_then(|n| n.as_str()) else {
        return Some("tools/call needs params.name, the tool's name");
    };
    if field("arguments").is_some_and(|a| !a.is_object() && !a.is_null()) {
        return Some("tools/call's params.arguments must be an object");
    }
    tool_arguments_problem(name, field("arguments"))
}

/// What is wrong with a call's arguments to one of mneme's tools: the library answered a missing
/// or mistyped argument with a result marked `isError` ("failed to deserialize parameters"),
/// where an empty one, which mneme checks, is a JSON-RPC error as the README says.
fn tool_arguments_problem(tool: &str, arguments: Option<&serde_json::Value>) -> Option<&'static str> {
    let (required, missing) = match tool {
        "retain" => ("content", "retain needs arguments.content, a string"),
        "recall" => ("query", "recall needs arguments.query, a string"),
        "reflect" => ("query", "reflect needs arguments.query, a string"),
        _ => return None,
    };
    let argument = |name: &str| arguments.and_then(|a| a.get(name));
    if !argument(required).is_some_and(|v| v.is_string()) {
        return Some(missing);
    }
    let optional = ["context", "session_id", "cwd"];
    if optional.iter().any(|name| argument(name).is_some_and(|v| !v.is_string() && !v.is_null())) {
        return Some("a tool's optional arguments (context, session_id, cwd) are strings when given");
    }
    None
}

/// A client that accepts anything (`*/*`, or no Accept at all) is answered as one that named
/// both of streamable HTTP's types; the library refused it with 406.
fn accept_both(headers: &mut axum::http::HeaderMap) {
    use axum::http::header::ACCEPT;
    let any = headers.get_all(ACCEPT).iter().all(|v| {
        v.to_str().is_ok_and(|v| v.split(',').any(|t| t.split(';').next().is_some_and(|t| t.trim() == "*/*")))
    });
    if any {
        headers.insert(ACCEPT, axum::http::HeaderValue::from_static("application/json, text/event-stream"));
    }
}

/// MCP sessions open at once, at most (an agent opens one a process).
const MAX_MCP_SESSIONS: usize = 256;

/// MCP event streams (GET /mcp) open at once, at most; one more is a 503.
const MAX_MCP_STREAMS: usize = 64;
/// When a stream refused at [`MAX_MCP_STREAMS`] may try again.
const MCP_STREAM_RETRY_SECS: u64 = 5;

/// The response, its body holding `place` until the body is done or dropped (the client went
/// away).
fn held_while_streaming(
    response: axum::response::Response,
    place: Option<tokio::sync::OwnedSemaphorePermit>,
) -> axum::response::Response {
    use http_body_util::BodyExt;
    match place {
        None => response,
        Some(place) => response.map(|body| {
            axum::body::Body::new(body.map_frame(move |frame| {
                let _held = &place;
                frame
            }))
        }),
    }
}

/// The router to nest at `/mcp`: the library's service behind [`check_message`].
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
    axum::Router::new().fallback(serve).layer(axum::middleware::from_fn_with_state(
        Checks { max_body, open, stop, streams: Arc::new(tokio::sync::Semaphore::new(MAX_MCP_STREAMS)) },
        check_message,
    ))
}

/// The open MCP sessions, in two managers: those whose streams begin with a priming event and
/// those whose do not (the library configures them per manager).
#[derive(Clone)]
pub struct OpenSessions {
    primed: Arc<LocalSessionManager>,
    plain: Arc<LocalSessionManager>,
}

impl OpenSessions {
    fn new() -> Self {
        let mut plain = LocalSessionManager::default();
        plain.session_config.sse_retry = None;
        OpenSessions { primed: Arc::new(LocalSessionManager::default()), plain: Arc::new(plain) }
    }

    /// Whether the session is open.
    async fn has(&self, id: &rmcp::transport::streamable_http_server::SessionId) -> bool {
        use rmcp::transport::streamable_http_server::session::SessionManager;
        self.primed.has_session(id).await.unwrap_or(true) || self.plain.has_session(id).await.unwrap_or(true)
    }

    /// Sessions open, in both.
    async fn len(&self) -> usize {
        self.primed.sessions.read().await.len() + self.plain.sessions.read().await.len()
    }

    /// Whether the request goes to the primed service: a session's own manager decides (a
    /// client that left out its version header later is still served), else `by_version`.
    async fn serves_primed(&self, headers: &axum::http::HeaderMap, by_version: bool) -> bool {
        use rmcp::transport::streamable_http_server::session::SessionManager;
        let named = headers.get("mcp-session-id").and_then(|v| v.to_str().ok());
        match named {
            Some(id) => {
                let id = id.to_owned().into();
                match (self.primed.has_session(&id).await.unwrap_or(false), self.plain.has_session(&id).await) {
                    (true, _) => true,
                    (false, Ok(true)) => false,
                    _ => by_version,
                }
            }
            None => by_version,
        }
    }
}

/// Whether a request's answer may begin with an SSE priming event: [`check_message`] decides by
/// the client's protocol revision, the router serves by it.
#[derive(Debug, Clone, Copy)]
struct Priming(bool);

/// The first MCP revision whose clients expect SSE priming events.
const FIRST_PRIMED: &str = "2025-11-25";

/// Whether the client speaks [`FIRST_PRIMED`] or later: by the `MCP-Protocol-Version` header
/// every request after initialize carries from 2025-06-18 on (none before), else by the version
/// an initialize asks for. Versions are dates, so they compare as strings.
fn primes(headers: &axum::http::HeaderMap, asked: Option<&str>) -> bool {
    let in_header = headers.get("mcp-protocol-version").and_then(|v| v.to_str().ok());
    in_header.or(asked).is_some_and(|v| v.trim() >= FIRST_PRIMED)
}

/// What [`check_message`] needs: the body bound, the open sessions and the daemon's shutdown.
#[derive(Clone)]
pub struct Checks {
    max_body: usize,
    open: OpenSessions,
    /// The daemon's shutdown: the library cuts the calls in progress short then.
    stop: CancellationToken,
    /// Places for event streams ([`MAX_MCP_STREAMS`]).
    streams: Arc<tokio::sync::Semaphore>,
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
