//! The MCP endpoint at `/mcp` (streamable HTTP, the `rmcp` crate): the tools `retain`, `recall`
//! and `reflect`, answering exactly what the HTTP routes answer. Behind the same bearer token and
//! loopback guard as every other route.

use std::sync::Arc;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{schemars, tool, tool_handler, tool_router, ErrorData, ServerHandler};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::session::{SessionError, Sessions, StartRequest};

/// The session MCP calls use when they name none.
const DEFAULT_SESSION: &str = "mcp";

/// Which session a tool call works in.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub struct Target {
    /// The agent session to use (default: an "mcp" session in `cwd`).
    #[serde(default)]
    pub session_id: Option<String>,
    /// Working directory, which picks the project (used for the default session).
    #[serde(default)]
    pub cwd: Option<String>,
}

/// `retain` arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct RetainArgs {
    /// The fact worth remembering across sessions.
    pub content: String,
    /// What it is about (optional).
    #[serde(default)]
    pub context: Option<String>,
    /// Which session.
    #[serde(flatten)]
    pub target: Target,
}

/// `recall` arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct RecallArgs {
    /// What to look for.
    pub query: String,
    /// Which session.
    #[serde(flatten)]
    pub target: Target,
}

/// `reflect` arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ReflectArgs {
    /// The question to answer from memory.
    pub query: String,
    /// Extra context for the answer.
    #[serde(default)]
    pub context: Option<String>,
    /// Which session.
    #[serde(flatten)]
    pub target: Target,
}

/// The MCP server: one per MCP session, all sharing the daemon's sessions.
#[derive(Clone)]
pub struct MemoryTools {
    sessions: Sessions,
    tool_router: ToolRouter<Self>,
}

fn tool_error(e: SessionError) -> ErrorData {
    match e {
        SessionError::NotFound(_) | SessionError::Invalid(_) => ErrorData::invalid_params(e.to_string(), None),
        other => ErrorData::internal_error(other.to_string(), None),
    }
}

impl MemoryTools {
    /// Tools over the daemon's sessions.
    pub fn new(sessions: Sessions) -> Self {
        Self { sessions, tool_router: Self::tool_router() }
    }

    /// The named session, or the default MCP session in `cwd` when none is named. The default
    /// session is (re)started only when it is missing or its directory changed.
    async fn session(&self, target: Target) -> Result<String, ErrorData> {
        if let Some(id) = target.session_id {
            return Ok(id);
        }
        let cwd = target.cwd.filter(|c| !c.trim().is_empty()).unwrap_or_else(|| "/".into());
        if self.sessions.get(DEFAULT_SESSION).is_ok_and(|s| s.cwd == cwd) {
            return Ok(DEFAULT_SESSION.into());
        }
        let req = StartRequest {
            session_id: DEFAULT_SESSION.into(),
            cwd,
            agent: Some("mcp".into()),
            parent_session_id: None,
            tools: None,
        };
        self.sessions.start(req).await.map_err(tool_error)?;
        Ok(DEFAULT_SESSION.into())
    }
}

#[tool_router]
impl MemoryTools {
    /// Same answer as `POST /v1/sessions/{id}/retain`.
    #[tool(
        description = "Remember a durable fact across sessions (decisions and their reasons, conventions, how to build and test, user preferences). Queued at once and stored in the background."
    )]
    async fn retain(&self, Parameters(a): Parameters<RetainArgs>) -> Result<String, ErrorData> {
        let id = self.session(a.target).await?;
        let message = self.sessions.retain(&id, vec![(a.content, a.context)]).await.map_err(tool_error)?.message;
        Ok(message)
    }

    /// Same answer as `POST /v1/sessions/{id}/recall`.
    #[tool(
        description = "Search long-term memory for what earlier sessions learned about the current work. Use before answering about past work, decisions or preferences."
    )]
    async fn recall(&self, Parameters(a): Parameters<RecallArgs>) -> Result<String, ErrorData> {
        let id = self.session(a.target).await?;
        Ok(self.sessions.recall(&id, &a.query).await.map_err(tool_error)?.message)
    }

    /// Same answer as `POST /v1/sessions/{id}/reflect`.
    #[tool(description = "Answer a question by reasoning over long-term memory (needs the hindsight backend).")]
    async fn reflect(&self, Parameters(a): Parameters<ReflectArgs>) -> Result<String, ErrorData> {
        let id = self.session(a.target).await?;
        self.sessions.reflect(&id, &a.query, a.context).await.map_err(tool_error)
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for MemoryTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_instructions(crate::session::GUIDE)
    }
}

/// The tower service to nest at `/mcp`.
pub fn service(sessions: Sessions, stop: CancellationToken) -> StreamableHttpService<MemoryTools, LocalSessionManager> {
    StreamableHttpService::new(
        move || Ok(MemoryTools::new(sessions.clone())),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default().with_cancellation_token(stop.child_token()),
    )
}
