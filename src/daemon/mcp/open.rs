//! The open MCP sessions, and which of the library's two services serves a request: the one
//! whose event streams begin with an SSE priming event, or the one whose do not.

use std::sync::Arc;

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

/// The open MCP sessions, in two managers: those whose streams begin with a priming event and
/// those whose do not (the library configures them per manager).
#[derive(Clone)]
pub(super) struct OpenSessions {
    pub(super) primed: Arc<LocalSessionManager>,
    pub(super) plain: Arc<LocalSessionManager>,
}

impl OpenSessions {
    pub(super) fn new() -> Self {
        let mut plain = LocalSessionManager::default();
        plain.session_config.sse_retry = None;
        OpenSessions { primed: Arc::new(LocalSessionManager::default()), plain: Arc::new(plain) }
    }

    /// Whether the session is open.
    pub(super) async fn has(&self, id: &rmcp::transport::streamable_http_server::SessionId) -> bool {
        use rmcp::transport::streamable_http_server::session::SessionManager;
        self.primed.has_session(id).await.unwrap_or(true) || self.plain.has_session(id).await.unwrap_or(true)
    }

    /// Sessions open, in both.
    pub(super) async fn len(&self) -> usize {
        self.primed.sessions.read().await.len() + self.plain.sessions.read().await.len()
    }

    /// Whether the request goes to the primed service: a session's own manager decides (a
    /// client that left out its version header later is still served), else `by_version`.
    pub(super) async fn serves_primed(&self, headers: &axum::http::HeaderMap, by_version: bool) -> bool {
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

/// Whether a request's answer may begin with an SSE priming event: [`super::check::check_message`] decides by
/// the client's protocol revision, the router serves by it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Priming(pub(super) bool);

/// The first MCP revision whose clients expect SSE priming events.
const FIRST_PRIMED: &str = "2025-11-25";

/// Whether the client speaks [`FIRST_PRIMED`] or later: by the `MCP-Protocol-Version` header
/// every request after initialize carries from 2025-06-18 on (none before), else by the version
/// an initialize asks for. Versions are dates, so they compare as strings.
pub(super) fn primes(headers: &axum::http::HeaderMap, asked: Option<&str>) -> bool {
    let in_header = headers.get("mcp-protocol-version").and_then(|v| v.to_str().ok());
    in_header.or(asked).is_some_and(|v| v.trim() >= FIRST_PRIMED)
}
