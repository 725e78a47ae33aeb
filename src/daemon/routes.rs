//! Route handlers: decode, call the session layer or the queue, encode. No logic of their own.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRequest, Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream::{self, Stream, StreamExt};
use serde::de::DeserializeOwned;

use super::api::*;
use super::error::{quoting_input, ApiError};
use super::AppState;
use crate::classify;
use crate::session::{ClearRequest, Delivery, StartRequest, Turn, TurnEnd};
use crate::spool::NoticeRow;

type AppResult<T> = Result<T, ApiError>;
type St = State<Arc<AppState>>;

/// A JSON body whose rejections answer in the API's error shape.
#[derive(FromRequest)]
#[from_request(via(super::json_object::ObjectJson), rejection(ApiError))]
pub struct Body<T>(pub T);

/// A JSON body that may be absent (empty) and then takes its default.
pub(super) fn optional_body<T: DeserializeOwned + Default>(bytes: &Bytes) -> AppResult<T> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    // A body that is not JSON is a 400 like every route's; JSON of the wrong shape (an array
    // where an object goes, a wrong type) a 422.
    // Half an emoji (`\ud83d`) is read as U+FFFD, as every route reads it: a session started
    // under an id holding one is then flushed or cleared by the same id.
    let value: serde_json::Value = crate::json_text::from_slice_mended(bytes).map_err(|e| {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_json", quoting_input(format!("the body is not JSON: {e}")))
    })?;
    if !value.is_object() {
        return Err(ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_field", "the body must be a JSON object"));
    }
    serde_json::from_value(value).map_err(|e| {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_field", quoting_input(format!("invalid body: {e}")))
    })
}

/// `GET /v1/health[?challenge=…]`: open to all; with a challenge (up to 128 letters and digits),
/// the proof that this daemon holds the token. The rest of a query is ignored (health answers a
/// probe whatever it adds), but a challenge it cannot prove is refused: answered without a
/// proof, a client's token check failed as if the daemon were another's.
pub async fn health(
    State(s): St,
    arrived_at: Option<axum::Extension<super::accept::ArrivedAt>>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> Result<Json<Health>, ApiError> {
    let challenge = query.as_deref().unwrap_or_default().split('&').find_map(|p| p.strip_prefix("challenge="));
    let (proof, address_proof) = match challenge {
        None => (None, None),
        Some(c) if !c.is_empty() && c.len() <= 128 && c.bytes().all(|b| b.is_ascii_alphanumeric()) => {
            let at = arrived_at.map(|axum::Extension(at)| health_proof_at(&s.token, c, at.0));
            (Some(health_proof(&s.token, c)), at)
        }
        Some(c) => {
            let why = match c.len() {
                0 => "is empty".to_owned(),
                n if n > 128 => format!("has {n} characters"),
                _ => "holds a character that is not an ASCII letter or digit".to_owned(),
            };
            let message = format!("the challenge {why}: give 1 to 128 ASCII letters and digits (hex, say)");
            return Err(ApiError::new(StatusCode::BAD_REQUEST, "invalid_field", message));
        }
    };
    Ok(Json(Health {
        status: "ok".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        protocol: PROTOCOL,
        proof,
        address_proof,
        session_format: crate::session::SESSION_FORMAT,
        max_body_bytes: Some(s.max_body_bytes),
        max_import_bytes: Some(s.max_body_bytes.saturating_add(super::body::IMPORT_ROOM)),
    }))
}

pub async fn status(State(s): St) -> Json<Status> {
    let backend = s.sessions_backend_status().await;
    Json(Status {
        version: env!("CARGO_PKG_VERSION").into(),
        protocol: PROTOCOL,
        pid: std::process::id(),
        uptime_seconds: s.started.elapsed().as_secs(),
        listen: s.listen.to_string(),
        config_path: s.config_path.display().to_string(),
        // As it is now: the file may have been deleted (or created) since the start.
        config_exists: s.config_path.exists(),
        storage_dir: s.storage_dir.display().to_string(),
        local_store: Some(s.sessions.settings())
            .filter(|c| c.memory.backend == mneme_core::BackendId::Local)
            .map(|c| c.local_db_path().display().to_string()),
        thesaurus: Some(s.sessions.settings()).filter(|c| c.memory.backend == mneme_core::BackendId::Local).map(|c| {
            ThesaurusInfo {
                builtin: c.local.thesaurus,
                file: c.local.thesaurus_file.as_ref().map(|f| f.path.display().to_string()),
            }
        }),
        backend,
        queue: s.queue.depths().await,
        sessions: s.sessions.count(),
        last_notice_id: s.notices.last_id().await,
    })
}

pub async fn start_session(State(s): St, Body(b): Body<StartSession>) -> AppResult<Json<SessionStarted>> {
    let session = s
        .sessions
        .start(StartRequest {
            session_id: b.session_id,
            cwd: b.cwd,
            agent: b.agent,
            parent_session_id: b.parent_session_id,
            tools: b.tools,
        })
        .await?;
    Ok(Json(SessionStarted {
        session_id: session.id,
        scope: session.scope,
        project: session.project,
        alias_of: session.parent,
        max_body_bytes: s.max_body_bytes,
        recall_timeout_ms: u64::try_from(s.sessions.settings().recall.timeout.as_millis()).unwrap_or(u64::MAX),
        scoping: Some(s.sessions.settings().memory.scoping.as_str().to_owned()),
    }))
}

pub async fn end_session(
    State(s): St,
    Path(id): Path<String>,
    q: Result<Query<EndQuery>, axum::extract::rejection::QueryRejection>,
) -> AppResult<Json<SessionEnded>> {
    let Query(q) = q?;
    Ok(Json(SessionEnded { flushed: s.sessions.end(&id, delivery(q.wait)).await?.into() }))
}

fn delivery(wait: bool) -> Delivery {
    if wait {
        Delivery::Wait
    } else {
        Delivery::Background
    }
}

pub async fn retain(State(s): St, Path(id): Path<String>, Body(b): Body<Retain>) -> AppResult<Response> {
    let items = b.items.into_iter().map(|i| (i.content, i.context)).collect();
    let r = s.sessions.retain(&id, items).await?;
    // From the outcome, not the backend now: a switch to or from `off` may land in between.
    let status = if r.off || r.queued == 0 { StatusCode::OK } else { StatusCode::ACCEPTED };
    Ok((status, Json(Queued { queued: r.queued, skipped: r.skipped, message: r.message })).into_response())
}

pub async fn recall(State(s): St, Path(id): Path<String>, Body(b): Body<Recall>) -> AppResult<Json<RecallAnswer>> {
    let answer = s.sessions.recall(&id, &b.query).await?;
    Ok(Json(RecallAnswer { results: answer.results, message: answer.message }))
}

pub async fn reflect(State(s): St, Path(id): Path<String>, Body(b): Body<Reflect>) -> AppResult<Json<Reflected>> {
    Ok(Json(Reflected { text: s.sessions.reflect(&id, &b.query, b.context).await? }))
}

/// What kind of turn a session route is serving: a meta or compaction turn is neither recalled
/// for nor retained.
fn turn_of(s: &AppState, info: &TurnInfo) -> Turn {
    let settings = s.sessions.settings();
    let kind = match (&info.request, &info.agent) {
        (Some(r), _) => Some(classify_request(&settings.classify, r).kind),
        (None, Some(a)) => classify::classify_agent(&settings.classify, a),
        (None, None) => None,
    };
    match kind {
        Some(classify::Kind::Meta | classify::Kind::Compaction) => Turn::Side,
        _ => Turn::Work,
    }
}

fn classify_request(settings: &classify::ClassifySettings, r: &ClassifyRequest) -> classify::Classification {
    if r.system_only {
        return classify::classify_system(settings, &r.body);
    }
    let headers: Vec<(String, String)> = r.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    classify::classify(settings, &headers, &r.body)
}

/// Messages whose role mneme would pass over as a system or tool message's though the client
/// meant a turn: a known role in another case (`User`) or LangChain's `human` and `ai`. Passed
/// over, a whole conversation was answered 200 and stored as nothing (review120 #6). Other
/// roles (system, tool, developer, …) are left out by design.
fn check_roles(messages: &[mneme_core::text::Message]) -> Result<(), ApiError> {
    for (i, m) in messages.iter().enumerate() {
        let role = m.role.as_str();
        if matches!(role, "user" | "assistant" | "system" | "tool") {
            continue;
        }
        let read = role.trim();
        let meant = match ["user", "assistant", "system", "tool", "human", "ai"]
            .into_iter()
            .find(|r| r.eq_ignore_ascii_case(read))
        {
            Some("human") => "user",
            Some("ai") => "assistant",
            Some(known) => known,
            None => continue,
        };
        return Err(ApiError::invalid(format!(
            "messages[{i}].role is {role:?}: mneme reads the roles user and assistant, written so (did you mean {meant:?}?); other roles (system, tool) are left out"
        )));
    }
    Ok(())
}

pub async fn agent_start(State(s): St, Path(id): Path<String>, Body(b): Body<AgentStart>) -> AppResult<Json<Inject>> {
    check_roles(&b.messages)?;
    let turn = turn_of(&s, &b.turn);
    Ok(Json(Inject { inject: s.sessions.agent_start(&id, &b.prompt, &b.messages, turn).await? }))
}

/// More user turns than any conversation holds: a client's count past it is a bug, which would
/// count every later turn as retained already.
const MAX_OMITTED_USER_TURNS: usize = 1_000_000;

pub async fn agent_end(State(s): St, Path(id): Path<String>, Body(b): Body<Messages>) -> AppResult<Json<AgentEnded>> {
    if b.omitted_user_turns > MAX_OMITTED_USER_TURNS {
        return Err(ApiError::invalid(format!(
            "omitted_user_turns is {}: at most {MAX_OMITTED_USER_TURNS} (the user turns left out before messages)",
            b.omitted_user_turns
        )));
    }
    check_roles(&b.messages)?;
    let turn = turn_of(&s, &b.turn);
    let end = TurnEnd {
        last: b.ends_session,
        delivery: delivery(b.wait),
        reply: b.reply,
        omitted_user_turns: b.omitted_user_turns,
        rewound: b.rewound,
    };
    let (retained, flushed) = s.sessions.agent_end(&id, &b.messages, turn, end).await?;
    Ok(Json(AgentEnded { retained, flushed: flushed.into() }))
}

pub async fn classify(State(s): St, Body(b): Body<ClassifyRequest>) -> Json<classify::Classification> {
    Json(classify_request(&s.sessions.settings().classify, &b))
}

pub async fn instructions(State(s): St, Path(id): Path<String>) -> AppResult<Json<Instructions>> {
    Ok(Json(Instructions { markdown: s.sessions.instructions(&id).await? }))
}

pub async fn compaction(
    State(s): St,
    Path(id): Path<String>,
    Body(b): Body<Messages>,
) -> AppResult<Json<CompactionContext>> {
    check_roles(&b.messages)?;
    Ok(Json(CompactionContext { context: s.sessions.compaction(&id, &b.messages).await? }))
}

pub async fn flush(State(s): St, body: Bytes) -> AppResult<Json<Flushed>> {
    let b: Flush = optional_body(&body)?;
    let queue_id = match &b.session_id {
        Some(id) => Some(s.sessions.get(id)?.queue_id().to_owned()),
        None => None,
    };
    let queue = s.queue.clone();
    let held_of = queue_id.clone();
    let flush = async move {
        match queue_id {
            Some(id) => queue.flush(&id).await,
            None => queue.flush_all().await,
        }
    };
    let report = if b.wait {
        flush.await
    } else {
        tokio::spawn(flush);
        crate::queue::FlushReport::default()
    };
    if let Some(fault) = report.spool_fault {
        let waiting = s.queue.depths().await.spooled;
        return Err(ApiError::flush_stopped(fault, report.delivered, waiting));
    }
    // With memory off nothing is delivered and nothing fails: what stays spooled is said.
    let held = s.queue.held(held_of.as_deref()).await;
    Ok(Json(Flushed { held, ..report.into() }))
}

pub async fn clear(State(s): St, body: Bytes) -> AppResult<Json<Cleared>> {
    let b: Clear = optional_body(&body)?;
    let cleared = s.sessions.clear(ClearRequest { session_id: b.session_id, all: b.all, remote: b.remote }).await?;
    s.hindsight.recompute_after_forget(None).await;
    if b.all {
        s.hindsight.everything_forgotten().await;
    }
    Ok(Json(cleared.into()))
}

pub async fn reload(State(s): St) -> Response {
    use crate::reload::ReloadError;
    match s.reloader.reload().await {
        Ok(r) => {
            let previous_backend = Some(r.previous);
            Json(Reloaded {
                backend: r.backend,
                changed: r.changed,
                previous_backend,
                restart_needed: r.restart_needed,
                not_read: r.not_read,
            })
            .into_response()
        }
        Err(ReloadError::Invalid(e)) => {
            let errors = e
                .errors
                .iter()
                .map(|x| ConfigProblem { key: x.key.clone(), line: x.line, message: x.message.clone() })
                .collect();
            let detail = InvalidConfigDetail { code: "invalid_config".into(), message: e.to_string(), errors };
            (StatusCode::UNPROCESSABLE_ENTITY, Json(InvalidConfigAnswer { error: detail })).into_response()
        }
        Err(e @ ReloadError::Backend { .. }) => {
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "backend_unavailable", e.to_string()).into_response()
        }
        Err(e @ ReloadError::Stopped) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "shutting_down", e.to_string())
            .retry_after(5)
            .into_response(),
    }
}

pub async fn export(
    State(s): St,
    q: Result<Query<ExportQuery>, axum::extract::rejection::QueryRejection>,
) -> AppResult<Json<ExportAnswer>> {
    let Query(q) = q?;
    let bank = super::memories::bank_or_default(&s, q.bank)?;
    // A cursor names the store it was read from: read on from another (a reload switched the
    // backend or `local.path` between two pages), an export went on in the new store, and a
    // backup mixed two stores (review115 #1).
    let current = s.queue.current();
    let mark = current.store_mark();
    let cursor = match q.cursor.as_deref().filter(|c| !c.is_empty()) {
        Some(cursor) => Some(cursor_of_store(cursor, &mark)?),
        None => None,
    };
    let page = current.backend.export(bank.as_deref(), cursor, q.limit.unwrap_or(500).clamp(1, 1000)).await?;
    let next = page.next.map(|next| format!("{mark}.{next}"));
    Ok(Json(ExportAnswer { memories: page.memories, next, store: Some(mark) }))
}

/// The backend's own cursor in `cursor` (`{store mark}.{cursor}`), refused when it was read from
/// another store than `mark`'s. (A cursor without a mark, from an earlier mneme, is the
/// backend's as it is.)
fn cursor_of_store<'c>(cursor: &'c str, mark: &str) -> Result<&'c str, ApiError> {
    let Some((of, rest)) =
        cursor.split_once('.').filter(|(of, _)| of.len() == 16 && of.bytes().all(|b| b.is_ascii_hexdigit()))
    else {
        return Ok(cursor);
    };
    if of != mark {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "store_changed",
            "the backend's store changed since this export began (a reload switched the backend or its store): begin the export again",
        ));
    }
    Ok(rest)
}

pub async fn import(State(s): St, Body(b): Body<ImportBody>) -> AppResult<Json<Imported>> {
    for (i, m) in b.memories.iter().enumerate() {
        if let Some(problem) = import_problem(m) {
            return Err(ApiError::invalid(problem.in_request(i)));
        }
    }
    if let Some((first, again)) = reused_id(&b.memories, |m| m) {
        return Err(ApiError::invalid(format!(
            "memories[{again}].id is memories[{first}]'s, in the same bank, with another memory: an id names one memory (the second was taken for the first already there); nothing was imported"
        )));
    }
    let received = b.memories.len();
    let settings = s.sessions.settings();
    let memories = crate::session::clean_imported_all(&settings, b.memories);
    let skipped = received - memories.len();
    let current = s.queue.current();
    let imported = current.backend.import(&memories).await?;
    Ok(Json(Imported { received, imported, skipped, store: Some(current.store_mark()) }))
}

/// The first of `items` whose memory's id, in its bank, an earlier one holds with other fields:
/// (the earlier one's index, its index). The same memory twice is fine (an export read twice);
/// another one was taken for the first already there, and lost while the import said "already
/// there" (review106 #1).
pub fn reused_id<T>(items: &[T], memory: impl Fn(&T) -> &mneme_core::StoredMemory) -> Option<(usize, usize)> {
    use std::collections::hash_map::Entry;
    let mut seen = std::collections::HashMap::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let m = memory(item);
        match seen.entry((m.bank.as_str(), m.id.as_str())) {
            Entry::Occupied(e) => {
                let first: usize = *e.get();
                if memory(&items[first]) != m {
                    return Some((first, i));
                }
            }
            Entry::Vacant(e) => {
                e.insert(i);
            }
        }
    }
    None
}

/// What makes a memory unfit to import: the field at fault, where one is, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportProblem {
    field: Option<&'static str>,
    message: String,
}

impl ImportProblem {
    /// Said of the `i`th memory of a request: `memories[2].created_at must be …`.
    fn in_request(&self, i: usize) -> String {
        match self.field {
            Some(field) => format!("memories[{i}].{field} {}", self.message),
            None => format!("memories[{i}]: {}", self.message),
        }
    }
}

/// `created_at must be …`, for a place the caller names (the CLI: a file and its line).
impl std::fmt::Display for ImportProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.field {
            Some(field) => write!(f, "{field} {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// What makes a memory unfit to import; `None` when it is fit. The CLI checks a file with it
/// before sending anything.
pub fn import_problem(m: &mneme_core::StoredMemory) -> Option<ImportProblem> {
    let problem = |field, message: String| Some(ImportProblem { field, message });
    if m.id.trim().is_empty()
        || m.bank.trim().is_empty()
        || m.bank.contains('/')
        || mneme_core::text::is_blank(&m.content)
    {
        return problem(None, "id, bank (without '/') and content must be non-empty".into());
    }
    if let Some(why) = mneme_core::too_many_tags(m.tags.len()) {
        return problem(Some("tags"), why.replacen("has ", "holds ", 1));
    }
    if mneme_core::text::has_private_tag(&m.id) || mneme_core::text::has_private_tag(&m.bank) {
        return problem(None, "id and bank may not contain <private> tags (they are stored as they are)".into());
    }
    // Cleaned, two document ids could become one, and one document replace another (the
    // memories were stored without their document, and the import said nothing of it).
    if m.document_id.as_deref().is_some_and(mneme_core::text::has_private_tag) {
        return problem(Some("document_id"), "may not contain <private> tags (it is stored as it is)".into());
    }
    let max = mneme_core::MAX_STORED_ID_CHARS;
    for (field, value) in [("id", Some(m.id.as_str())), ("document_id", m.document_id.as_deref())] {
        if value.is_some_and(|v| v.chars().count() > max) {
            return problem(Some(field), format!("is longer than {max} characters"));
        }
    }
    // A URL path reads "." and ".." as its own steps: such a memory could not be shown or
    // forgotten (`/v1/memories/{id}`).
    if matches!(m.id.as_str(), "." | "..") {
        return problem(Some("id"), "may not be \".\" or \"..\" (a URL cannot name it)".into());
    }
    // Nor its document (`DELETE /v1/documents/{id}`, the web view's "Delete document"), as it
    // is stored: without its private spans.
    let stored_document = m.document_id.as_deref().map(mneme_core::text::strip_private);
    if matches!(m.document_id.as_deref(), Some("." | "..")) || matches!(stored_document.as_deref(), Some("." | "..")) {
        return problem(Some("document_id"), "may not be \".\" or \"..\" (a URL cannot name it)".into());
    }
    // As every route that names a bank takes it (`?bank=`, the Hindsight API): stored under
    // another name, its memories could not be listed or forgotten.
    if matches!(m.bank.as_str(), "." | "..")
        || m.bank.len() > mneme_core::MAX_BANK_BYTES
        || m.bank.chars().any(char::is_control)
        || m.bank.trim() != m.bank
    {
        return problem(
            Some("bank"),
            format!(
                "must be at most {} bytes without control characters or spaces at its ends, and not \".\" or \"..\" (a URL cannot name it)",
                mneme_core::MAX_BANK_BYTES
            ),
        );
    }
    // A Hindsight server may give a memory no date (exported as ""); any other value must be a
    // date-time, or it would be stored as one.
    if !m.created_at.is_empty() && crate::hindsight_api::time::normalize(&m.created_at).is_none() {
        return problem(
            Some("created_at"),
            format!(
                "must be an ISO 8601 date-time between the years 1 and 9999 (like 2026-01-02T03:04:05Z, or with an offset), found {}",
                mneme_core::text::quoted_unless_private(&mneme_core::text::strip_private(&m.created_at))
            ),
        );
    }
    None
}

pub async fn retry(State(s): St) -> AppResult<Json<Requeued>> {
    Ok(Json(Requeued { requeued: s.queue.retry_dead().await? }))
}

fn to_wire(n: NoticeRow) -> Notice {
    Notice { id: n.id, at: n.at, level: n.level, source: n.source, session_id: n.session_id, message: n.message }
}

pub async fn notices(
    State(s): St,
    q: Result<Query<NoticesQuery>, axum::extract::rejection::QueryRejection>,
) -> AppResult<Json<NoticeList>> {
    let Query(q) = q?;
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    let rows = s.notices.after_with_unsaved(q.after.unwrap_or(0), limit).await?;
    Ok(Json(NoticeList { notices: rows.into_iter().map(to_wire).collect() }))
}

/// Server-Sent Events: history after `?after=` (or `Last-Event-ID`), then live notices.
pub async fn notice_stream(
    State(s): St,
    view: Option<axum::Extension<super::ui::auth::ViewSession>>,
    headers: HeaderMap,
    q: Result<Query<NoticesQuery>, axum::extract::rejection::QueryRejection>,
) -> AppResult<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    let Query(q) = q?;
    // A stream keeps its connection busy for as long as it is open: without a bound, streams
    // filled `server.max_connections`, and every other request (the health check, the agents'
    // retains) waited.
    let place = s.notice_streams.clone().try_acquire_owned().map_err(|_| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_streams",
            format!("{MAX_NOTICE_STREAMS} notice streams are open: close one, or try again later"),
        )
        .retry_after(NOTICE_STREAM_RETRY_SECS)
    })?;
    let after = headers.get("last-event-id").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok()).or(q.after);
    // Subscribe before reading history so nothing falls between the two.
    let receiver = s.notices.subscribe();
    let history = match after {
        Some(after) => s.notices.after_with_unsaved(after, 1000).await?,
        None => Vec::new(),
    };
    let mut last = history.iter().map(|n| n.id).max().unwrap_or(0).max(after.unwrap_or(0));
    if after.is_none() {
        last = s.notices.last_id().await;
    }
    let event = |n: NoticeRow| {
        // A notice the spool could not store (a full disk) has id 0 and no event id to resume at.
        let event = if n.id > 0 { Event::default().id(n.id.to_string()) } else { Event::default() };
        Ok::<_, Infallible>(event.event("notice").json_data(to_wire(n)).expect("notice serializes"))
    };
    let replay = stream::iter(history.into_iter().map(event));
    // The place is held by the stream, and given back when it ends or its client goes away.
    let live = live_notices(s.notices.clone(), receiver, last).map(move |n| {
        let _held = &place;
        event(n)
    });
    // The stream ends when the daemon stops, and, opened by the web view, when its session
    // ends (a logout, or its time up): it went on delivering notices until the daemon stopped.
    let state = s.clone();
    let ends = async move {
        let Some(axum::Extension(super::ui::auth::ViewSession(id))) = view else {
            return state.stopping.cancelled().await;
        };
        while state.ui.session(&id).is_some() {
            tokio::select! {
                _ = state.stopping.cancelled() => return,
                _ = tokio::time::sleep(SESSION_CHECK) => {}
            }
        }
    };
    Ok(Sse::new(replay.chain(live).take_until(ends)).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// Notice streams open at most (`mneme notices --follow`, the web view's tabs); one more is a 503.
pub(super) const MAX_NOTICE_STREAMS: usize = 64;
/// When a stream refused at [`MAX_NOTICE_STREAMS`] may try again.
const NOTICE_STREAM_RETRY_SECS: u64 = 5;

/// How often a notice stream opened by the web view checks that its session still holds.
const SESSION_CHECK: Duration = Duration::from_secs(2);

/// The notices after `last` as they are raised. A reader too slow for the live channel (it keeps
/// the newest notices only) is caught up from the spool, where every notice is stored, instead
/// of silently missing the ones it fell behind on.
fn live_notices(
    notices: crate::notices::Notices,
    receiver: tokio::sync::broadcast::Receiver<NoticeRow>,
    last: i64,
) -> impl Stream<Item = NoticeRow> {
    use tokio::sync::broadcast::error::RecvError;
    /// Notices read from the spool at a time while catching up.
    const PAGE: usize = 1000;
    struct Reader {
        receiver: tokio::sync::broadcast::Receiver<NoticeRow>,
        last: i64,
        stored: std::collections::VecDeque<NoticeRow>,
        catching_up: bool,
    }
    let reader = Reader { receiver, last, stored: Default::default(), catching_up: false };
    stream::unfold(reader, move |mut r| {
        let notices = notices.clone();
        async move {
            loop {
                if let Some(n) = r.stored.pop_front() {
                    r.last = r.last.max(n.id);
                    return Some((n, r));
                }
                if r.catching_up {
                    // Unreadable: end the stream, and the client resumes with Last-Event-ID.
                    let rows = notices.after(r.last, PAGE).await.ok()?;
                    r.catching_up = rows.len() == PAGE;
                    r.stored.extend(rows);
                    continue;
                }
                match r.receiver.recv().await {
                    Ok(n) if n.id == 0 => return Some((n, r)),
                    Ok(n) if n.id > r.last => {
                        r.last = n.id;
                        return Some((n, r));
                    }
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => r.catching_up = true,
                    Err(RecvError::Closed) => return None,
                }
            }
        }
    })
}

pub async fn metrics(State(s): St) -> Response {
    let depths = s.queue.depths().await;
    let mut gauges = vec![
        ("mneme_queue_pending", "Spooled items waiting for delivery.", depths.pending as f64),
        ("mneme_queue_in_flight", "Items being delivered.", depths.in_flight as f64),
        ("mneme_queue_dead", "Dead letters.", depths.dead as f64),
        ("mneme_sessions", "Known sessions.", s.sessions.count() as f64),
        ("mneme_uptime_seconds", "Seconds since the daemon started.", s.started.elapsed().as_secs_f64()),
    ];
    // Only the local store has embedding figures: another backend's status is a round trip to
    // its server (two requests a scrape, waiting behind the deliveries' rate limit).
    let embedding = match s.queue.backend().id() {
        mneme_core::BackendId::Local => s.sessions_backend_status().await.embedding,
        _ => None,
    };
    if let Some(e) = embedding {
        gauges.extend([
            ("mneme_embedding_passages", "Passages in the local store (what recall ranks).", e.passages as f64),
            ("mneme_embedding_embedded", "Passages with a vector of the current model.", e.embedded as f64),
            (
                "mneme_embedding_banks_measuring",
                "Banks whose neighbourhoods are due to be measured (their dense scores settle at 0).",
                e.banks_measuring as f64,
            ),
            (
                "mneme_embedding_ready",
                "1 when semantic recall is in use (model and vectors loaded, embedder answering).",
                f64::from(u8::from(e.state == "ready")),
            ),
        ]);
    }
    let commits = s.queue.spool_commits();
    let counters = [
        (
            "mneme_spool_commits_total",
            "Spool transactions committed (one fsync each with queue.sync = full).",
            commits.commits,
        ),
        ("mneme_spool_jobs_committed_total", "Jobs those commits carried (an accepted retain is one).", commits.jobs),
    ];
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], s.metrics.render(&counters, &gauges)).into_response()
}

pub async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route; see the API table in the README")
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;

    #[test]
    fn an_import_names_its_bank_as_every_route_takes_one() {
        let memory = |bank: &str| mneme_core::StoredMemory {
            id: "m1".into(),
            bank: bank.into(),
            content: "a fact".into(),
            context: None,
            tags: Vec::new(),
            metadata: Default::default(),
            document_id: None,
            kind: mneme_core::MemoryType::World,
            created_at: String::new(),
        };
        assert!(super::import_problem(&memory("work")).is_none());
        for bank in [".", "..", "a\u{7}b", &"b".repeat(201)] {
            let problem = super::import_problem(&memory(bank)).expect(bank);
            assert_eq!(problem.field, Some("bank"), "{bank:?}");
        }
        // Nor a document no URL can name (the web view's "Delete document" would miss it).
        for document in [".", ".."] {
            let m = mneme_core::StoredMemory { document_id: Some(document.into()), ..memory("work") };
            assert_eq!(super::import_problem(&m).expect(document).field, Some("document_id"));
        }
    }

    use super::live_notices;
    use crate::notices::{Level, Notices};
    use crate::spool::Spool;

    #[tokio::test]
    async fn a_reader_that_falls_behind_the_live_channel_is_caught_up_from_the_spool() {
        let dir = tempfile::tempdir().unwrap();
        let notices = Notices::new(Spool::open(&dir.path().join("spool.db")).unwrap());
        let receiver = notices.subscribe();
        // More than the live channel keeps (256), none read meanwhile.
        for i in 0..900 {
            notices.emit(Level::Info, "test", None, format!("notice {i}")).await;
        }
        let read = live_notices(notices.clone(), receiver, 0).take(900).map(|n| n.id).collect::<Vec<i64>>();
        let ids = tokio::time::timeout(std::time::Duration::from_secs(10), read).await.expect("all 900 arrive");
        assert_eq!(ids, (1..=900).collect::<Vec<i64>>());
    }
}
