//! The HTTP daemon: startup (storage dir, single-instance lock, token, spool, backend, queue,
//! sessions), the axum router, and a graceful drain on shutdown.
//!
//! [`Daemon::serve`] takes its listener and shutdown future, so tests run it on 127.0.0.1:0.

mod accept;
pub mod api;
mod auth;
mod body;
mod error;
mod hindsight;
mod idle;
mod json_object;
mod mcp;
mod memories;
mod own_files;
mod parse_errors;
mod routes;
mod startup;
mod ui;
mod write_stall;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body as HttpBody;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::Router;
use futures_util::FutureExt;
use mneme_core::BackendStatus;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use auth::{constant_time_eq, is_loopback_host};
pub use body::{IMPORT_PATH, IMPORT_ROOM};
pub(crate) use error::quoting_request;
pub use error::{error_body, ApiError};
pub(crate) use mcp::path_for_header;
pub use routes::{import_problem, reused_id, ImportProblem};
pub use startup::{lend_token_and_address, Daemon, StartError};

use crate::config::ServerSettings;
use crate::metrics::Metrics;
use crate::notices::Notices;
use crate::queue::Queue;
use crate::session::Sessions;

/// What every handler can reach.
pub struct AppState {
    sessions: Sessions,
    hindsight: crate::hindsight_api::HindsightApi,
    queue: Queue,
    notices: Notices,
    metrics: Arc<Metrics>,
    reloader: Arc<crate::reload::Reloader>,
    token: String,
    token_path: PathBuf,
    allow_remote: bool,
    started: Instant,
    listen: SocketAddr,
    config_path: PathBuf,
    storage_dir: PathBuf,
    /// `server.max_body_bytes` as the router was built with (server settings need a restart).
    max_body_bytes: usize,
    stopping: CancellationToken,
    ui: ui::UiAuth,
    /// Places for notice streams ([`routes::MAX_NOTICE_STREAMS`]).
    notice_streams: Arc<tokio::sync::Semaphore>,
}

impl AppState {
    async fn sessions_backend_status(&self) -> BackendStatus {
        self.queue.backend().status().await
    }

    /// The web view's session cookie for this daemon's port.
    fn cookie_name(&self) -> String {
        ui::auth::cookie_name(self.listen.port())
    }
}

/// The router with every route and layer.
fn router(state: Arc<AppState>, server: &ServerSettings) -> Router {
    let body = body::BodyLimits { max_bytes: server.max_body_bytes, timeout: server.body_timeout };
    Router::new()
        .route("/v1/health", get(routes::health))
        .route("/v1/status", get(routes::status))
        .route("/v1/sessions", post(routes::start_session))
        .route("/v1/sessions/{id}", delete(routes::end_session))
        .route("/v1/sessions/{id}/retain", post(routes::retain))
        .route("/v1/sessions/{id}/recall", post(routes::recall))
        .route("/v1/sessions/{id}/reflect", post(routes::reflect))
        .route("/v1/sessions/{id}/agent-start", post(routes::agent_start))
        .route("/v1/sessions/{id}/agent-end", post(routes::agent_end))
        .route("/v1/sessions/{id}/instructions", get(routes::instructions))
        .route("/v1/sessions/{id}/compaction", post(routes::compaction))
        .route("/v1/flush", post(routes::flush))
        .route("/v1/clear", post(routes::clear))
        .route("/v1/retry", post(routes::retry))
        .route("/v1/reload", post(routes::reload))
        .route("/v1/classify", post(routes::classify))
        .route("/v1/export", get(routes::export))
        .route(
            body::IMPORT_PATH,
            post(routes::import).layer(DefaultBodyLimit::max(server.max_body_bytes.saturating_add(body::IMPORT_ROOM))),
        )
        .route("/v1/notices", get(routes::notices))
        .route("/v1/notices/stream", get(routes::notice_stream))
        .route("/v1/banks", get(memories::banks))
        .route("/v1/memories", get(memories::browse))
        .route("/v1/memories/{id}", get(memories::memory).delete(memories::forget_memory))
        .route("/v1/documents/{id}", delete(memories::forget_document))
        .route("/v1/search", post(memories::search))
        .route("/v1/queue", get(memories::queue))
        .route("/v1/ui/codes", post(ui::new_code))
        .route("/ui", get(ui::to_index))
        .route("/ui/", get(ui::index))
        .route("/ui/app.js", get(ui::app_js))
        .route("/ui/app.css", get(ui::app_css))
        .route("/ui/login", get(ui::login))
        .route("/ui/session", get(ui::session))
        .route("/ui/logout", post(ui::logout))
        .route("/metrics", get(routes::metrics))
        .nest(hindsight::PREFIX, hindsight::routes())
        .nest_service("/mcp", mcp::router(state.sessions.clone(), state.stopping.clone(), server.max_body_bytes))
        .fallback(routes::not_found)
        .layer(DefaultBodyLimit::max(server.max_body_bytes))
        .layer(middleware::from_fn_with_state(body, body::bound))
        .layer(middleware::from_fn_with_state(state.clone(), auth::guard))
        .layer(middleware::from_fn_with_state(state.clone(), observe))
        .with_state(state)
}

/// Counts and times every request, and gives errors that axum produced itself (405, 413, …) the
/// API's JSON error shape.
async fn observe(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let matched = req.extensions().get::<MatchedPath>().cloned();
    let method = req.method().clone();
    let hindsight_route = req.uri().path().starts_with(hindsight::PREFIX);
    // A panic in a handler is a bug; caught here, it is answered (a 500 in the API's shape,
    // counted and logged) instead of dropping the connection with no answer.
    let mut response = match std::panic::AssertUnwindSafe(next.run(req)).catch_unwind().await {
        Ok(response) => response,
        Err(_) => {
            tracing::error!(%method, "a request's handler panicked (a bug): answered 500");
            let body = error_body("internal", "mneme failed on this request (a bug; the log says where)");
            (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(body)).into_response()
        }
    };
    let status = response.status();
    let is_json =
        response.headers().get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if (status.is_client_error() || status.is_server_error()) && !is_json {
        let code = match status {
            StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
            StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
            StatusCode::NOT_FOUND => "not_found",
            StatusCode::NOT_ACCEPTABLE => "not_acceptable",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
            StatusCode::REQUEST_TIMEOUT => "request_timeout",
            StatusCode::URI_TOO_LONG => "uri_too_long",
            StatusCode::UNAUTHORIZED => "unauthorized",
            StatusCode::FORBIDDEN => "forbidden",
            s if s.is_server_error() => "internal",
            _ => "bad_request",
        };
        let message = status.canonical_reason().unwrap_or("request failed").to_owned();
        let body = error_body(code, &message).to_string();
        let (mut parts, _) = response.into_parts();
        parts.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        parts.headers.remove(header::CONTENT_LENGTH);
        response = Response::from_parts(parts, HttpBody::from(body));
    }
    if hindsight_route && (status.is_client_error() || status.is_server_error()) {
        response = hindsight::with_detail(response).await;
    }
    // So a Hindsight backend pointed at this daemon's own /hindsight knows it (a loop).
    response.headers_mut().insert(mneme_core::INSTANCE_HEADER, HeaderValue::from_static(mneme_core::instance_id()));
    let route = route_label(matched.as_ref().map(MatchedPath::as_str));
    let took = started.elapsed();
    // The route pattern, never the path or a body: nothing here can hold a memory or a token.
    tracing::debug!(%method, route, status = status.as_u16(), ?took, "request");
    state.metrics.request(route, status.as_u16(), took);
    response
}

/// The route pattern for metrics: the pattern the router matched (so session ids are `{id}`),
/// never the raw path, which anyone who can connect chooses; everything unmatched is `other`.
fn route_label(matched: Option<&str>) -> &str {
    match matched {
        Some(p) if p.starts_with("/mcp") => "/mcp",
        Some(p) => p,
        None => crate::metrics::OTHER_ROUTE,
    }
}

impl Daemon {
    /// Serves the API on `listener` until `shutdown` completes, then drains: stops accepting,
    /// lets requests finish, flushes queues for at most `queue.shutdown_grace`, leaves the rest spooled.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let addr = listener.local_addr()?;
        if !addr.ip().is_loopback() && !self.settings.server.allow_remote {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!("refusing to serve on non-loopback {addr}: set server.allow_remote = true to allow it"),
            ));
        }
        let state = self.state(addr);
        let stopping = state.stopping.clone();
        let queue = state.queue.clone();
        let app = router(state, &self.settings.server);
        self.reloader.clone().reload_on_hangup(stopping.clone());
        self.reloader.clone().watch(stopping.clone());
        // Announced once the config is watched: an edit right after the start is seen.
        self.own_files.pidfile.record_addr(addr);
        tracing::info!(%addr, backend = %queue.backend().id(), "mneme listening");
        let stop = stopping.clone();
        tokio::spawn(async move {
            shutdown.await;
            stop.cancel();
        });
        let sweep = tokio::spawn(sweep_idle_sessions(self.sessions.clone(), stopping.clone()));
        let keep_files = tokio::spawn(own_files::keep(self.own_files.clone(), queue.clone(), stopping.clone()));
        let limits = accept::Limits::from(&self.settings.server);
        let result = accept::run(listener, app, limits, stopping.clone()).await;
        let _ = sweep.await;
        let _ = keep_files.await;
        // A reload under way (the config watcher's, SIGHUP's) ends before the drain closes what
        // it writes to, and none begins after.
        self.reloader.stop().await;
        let idle = self.sessions.retain_idle(self.sessions.settings().retain.idle_after).await;
        if idle > 0 {
            tracing::info!("retained the last turns of {idle} idle sessions");
        }
        // The grace in force now: a reload may have changed it since the start.
        let grace = self.sessions.settings().queue.shutdown_grace;
        tracing::info!("draining the retain queue (at most {grace:?})");
        let report = queue.shutdown(grace).await;
        let left = queue.depths().await.spooled;
        // The store's and the spool's files closed before the process ends (see
        // `MemoryBackend::close` and `Spool::close`).
        queue.backend().close().await;
        queue.close_spool().await;
        tracing::info!(delivered = report.delivered, failed = report.failed, spooled = left, "mneme stopped");
        result
    }
}

impl Daemon {
    /// The router exactly as [`Daemon::serve`] runs it (auth, limits, error shapes), to drive
    /// in-process: the API's property tests call it without a socket. `listen` is what status
    /// reports.
    pub fn router(&self, listen: SocketAddr) -> Router {
        router(self.state(listen), &self.settings.server)
    }
}

/// Every so often, the sessions idle past `retain.idle_after` have their last turns retained;
/// every hour, those idle past [`crate::session::SESSION_TTL`] are forgotten.
async fn sweep_idle_sessions(sessions: Sessions, stop: CancellationToken) {
    let mut expired_at = std::time::Instant::now();
    loop {
        let idle = sessions.settings().retain.idle_after;
        let every = (idle / 4).clamp(std::time::Duration::from_secs(1), std::time::Duration::from_secs(60));
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
            // A reload changed the interval: sessions idle past the new one are due now, and the
            // next pass comes on its timer, not at the end of the old interval (up to a minute).
            _ = sessions.idle_after_change() => {}
        }
        let idle = sessions.settings().retain.idle_after;
        let n = sessions.retain_idle(idle).await;
        if n > 0 {
            tracing::info!("retained the last turns of {n} idle sessions");
        }
        if expired_at.elapsed() >= std::time::Duration::from_secs(3600) {
            expired_at = std::time::Instant::now();
            let n = sessions.forget_expired().await;
            if n > 0 {
                tracing::info!(
                    "ended {n} sessions idle for more than 30 days (started again, each goes on where it stopped)"
                );
            }
            // A start trims past the most as well; this also covers a spool that held more.
            sessions.forget_least_recent(crate::session::MAX_SESSIONS).await;
        }
    }
}

/// Resolves on SIGINT or SIGTERM. The handlers are installed when this is called, not when the
/// future is first polled: the daemon records its address (which tells clients it is up) before
/// the shutdown watcher runs, and a SIGTERM in between must drain, not kill. Call it inside the
/// runtime.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
        async move {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            tracing::info!("shutdown requested");
        }
    }
    #[cfg(not(unix))]
    async move {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutdown requested");
    }
}
