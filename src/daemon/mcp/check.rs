//! What a request to `/mcp` must be before the MCP library sees it, and the API's error shape
//! for what the library refuses itself; the bounds on open sessions and event streams.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::open::{primes, OpenSessions, Priming};

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
pub(super) async fn check_message(
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
                return crate::daemon::ApiError::new(StatusCode::NOT_FOUND, "unknown_session", UNKNOWN_SESSION)
                    .into_response();
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
                    return crate::daemon::ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "too_many_streams", why)
                        .retry_after(MCP_STREAM_RETRY_SECS)
                        .into_response();
                }
            },
            false => None,
        };
        let response = held_while_streaming(next.run(req).await, place);
        let ended = !stop.is_cancelled() && ended_meanwhile(response.status(), &headers, &open).await;
        if ended || (response.status() == StatusCode::NOT_FOUND && headers.contains_key("mcp-session-id")) {
            return crate::daemon::ApiError::new(StatusCode::NOT_FOUND, "unknown_session", UNKNOWN_SESSION)
                .into_response();
        }
        return explained(response, || bare_refusal(&method, &headers, false)).await;
    }
    let json = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| {
        let essence = v.split(';').next().unwrap_or_default().trim();
        essence.eq_ignore_ascii_case("application/json")
    });
    if !json {
        return crate::daemon::ApiError::new(
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
                crate::daemon::ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "payload_too_large",
                    "the MCP message is too long",
                )
            } else {
                crate::daemon::ApiError::invalid(format!("cannot read the MCP message: {e}"))
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
    // Half an emoji (`\ud83d`, a client's text cut by UTF-16 units) is read as U+FFFD, as every
    // other route reads it: the library refused the message whole ("Parse error"), and the memory
    // was not stored. (Such an escape is in no JSON serde_json reads, and its mend keeps its
    // length: the body's length stays right.)
    let bytes = crate::json_text::lone_surrogates_mended(&bytes).map_or(bytes, Into::into);
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
        return crate::daemon::ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", why).into_response();
    }
    // Each session holds a task and its tools until it has been idle 5 minutes: a client
    // looping on initialize would grow the daemon without bound.
    // An `initialize` always opens a session, whatever version it names (the library takes it
    // for the earlier revisions): naming a stateless one in it got past the bound.
    if initialize && open.len().await >= MAX_MCP_SESSIONS {
        let why = format!(
            "{MAX_MCP_SESSIONS} MCP sessions are open (each ends when its client deletes it or after 5 minutes idle): try again later"
        );
        return crate::daemon::ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "too_many_sessions", why)
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
        return crate::daemon::ApiError::invalid(why).into_response();
    }
    // A tool's argument missing or of the wrong type is the model's mistake, in a session that
    // goes on: a JSON-RPC error (its code a number) in a 200, as the library answers an argument
    // mneme refuses. A 400 with the API's string code ended the Python SDK's session, and the
    // TypeScript SDK took it for a transport error.
    if let Some((id, why)) = tool_problem {
        let named = parts.headers.get("mcp-session-id").and_then(|v| v.to_str().ok()).map(|s| s.to_owned().into());
        if let Some(named) = named {
            if !open.has(&named).await {
                return crate::daemon::ApiError::new(StatusCode::NOT_FOUND, "unknown_session", UNKNOWN_SESSION)
                    .into_response();
            }
        }
        let message = format!("Invalid params: {why}");
        let body = serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": message}});
        return (StatusCode::OK, axum::Json(body)).into_response();
    }
    let parts_headers = parts.headers.clone();
    let response = next.run(axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes))).await;
    if session && response.status() == StatusCode::NOT_FOUND {
        return crate::daemon::ApiError::new(StatusCode::NOT_FOUND, "unknown_session", UNKNOWN_SESSION).into_response();
    }
    if session && !stop.is_cancelled() && ended_meanwhile(response.status(), &parts_headers, &open).await {
        return crate::daemon::ApiError::new(StatusCode::NOT_FOUND, "unknown_session", UNKNOWN_SESSION).into_response();
    }
    if response.status().is_client_error() {
        let headers = parts_headers;
        let response = with_string_code(response).await;
        return explained(response, || bare_refusal(&Method::POST, &headers, initialize)).await;
    }
    // The library answers a call it cut short at shutdown with a 500 ("empty response").
    if response.status() == StatusCode::INTERNAL_SERVER_ERROR && stop.is_cancelled() {
        let why = "mneme is stopping and cut this call short: try again once it is back";
        return crate::daemon::ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "stopping", why)
            .retry_after(1)
            .into_response();
    }
    response
}

/// Whether the library's 500 is for a session that ended while the request was on its way to it
/// (a DELETE, or the idle close, racing a call: "Session service terminated"). The session is
/// gone and the call did not reach its tools: the client is owed the 404 of any request naming
/// such a session, not a 500 (review105 #1).
async fn ended_meanwhile(status: axum::http::StatusCode, headers: &axum::http::HeaderMap, open: &OpenSessions) -> bool {
    if status != axum::http::StatusCode::INTERNAL_SERVER_ERROR {
        return false;
    }
    let named = headers.get("mcp-session-id").and_then(|v| v.to_str().ok()).map(|s| s.to_owned().into());
    match named {
        Some(id) => !open.has(&id).await,
        None => false,
    }
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
    crate::daemon::ApiError::invalid(why()).into_response()
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
        let refused = crate::daemon::ApiError::new(parts.status, "bad_request", "the MCP request was refused");
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

/// What [`check_message`] needs: the body bound, the open sessions and the daemon's shutdown.
#[derive(Clone)]
pub(super) struct Checks {
    max_body: usize,
    open: OpenSessions,
    /// The daemon's shutdown: the library cuts the calls in progress short then.
    stop: CancellationToken,
    /// Places for event streams ([`MAX_MCP_STREAMS`]).
    streams: Arc<tokio::sync::Semaphore>,
}

impl Checks {
    pub(super) fn new(max_body: usize, open: OpenSessions, stop: CancellationToken) -> Self {
        Checks { max_body, open, stop, streams: Arc::new(tokio::sync::Semaphore::new(MAX_MCP_STREAMS)) }
    }
}
