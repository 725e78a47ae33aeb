//! Routes that look at single memories: list, show, forget, search without a session, and the
//! queue per session. The web view and `mneme forget` use them.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::Json;
use mneme_core::{BrowsePage, BrowseQuery, Forget, Forgotten, MemoryDetail, RecallQuery, Scope, TagsMatch};

use super::api::{BankList, BankParam, BrowseParams, Search, SearchAnswer};
use super::error::ApiError;
use super::routes::Body;
use super::AppState;
use crate::notices::Level;
use crate::queue::QueueOverview;

type AppResult<T> = Result<T, ApiError>;
type St = State<Arc<AppState>>;

/// The bank a request names, or where the backend lists one bank at a time (Hindsight) the
/// configured one. An empty `?bank=` names no bank, as in `POST /v1/search`; one holding a
/// `<private>` tag names none that can exist (banks are stored as they are) and is refused
/// without being repeated.
pub(super) fn bank_or_default(s: &AppState, bank: Option<String>) -> AppResult<Option<String>> {
    let bank = named_bank(bank)?;
    Ok(bank.or_else(|| (!s.queue.backend().capabilities().lists_every_bank).then(|| s.sessions.settings().base_bank())))
}

/// The bank a request names: trimmed, none when empty, refused when it holds a `<private>` tag.
fn named_bank(bank: Option<String>) -> AppResult<Option<String>> {
    let bank = bank.map(|b| b.trim().to_owned()).filter(|b| !b.is_empty());
    if let Some(bank) = &bank {
        no_private_tag("bank", bank)?;
        if matches!(bank.as_str(), "." | "..") {
            // A URL takes it for a step in its path: on Hindsight it would name another bank.
            return Err(ApiError::invalid(format!(
                "bank {bank:?} is not a bank name: in a URL it is a step in the path"
            )));
        }
    }
    Ok(bank)
}

/// Refuses an id or bank holding a `<private>` tag (400), without repeating it: nothing is
/// stored under such a name, and an error naming it would carry the private text to the logs.
fn no_private_tag(what: &str, name: &str) -> AppResult<()> {
    if mneme_core::text::has_private_tag(name) {
        return Err(ApiError::invalid(format!(
            "the {what} holds a <private> tag: nothing is stored under such a name (names are kept as they are)"
        )));
    }
    Ok(())
}

/// The tags of a list's `tags=`: comma-separated, trimmed, where `\,` is a comma inside a tag
/// (a project in a folder named `web,app` is tagged `project:web,app`) and `\\` a backslash; a
/// backslash before anything else is itself.
fn listed_tags(text: &str) -> Vec<String> {
    let mut tags = Vec::new();
    let mut tag = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            ',' => tags.push(std::mem::take(&mut tag)),
            '\\' => match chars.clone().next() {
                Some(next @ (',' | '\\')) => {
                    tag.push(next);
                    chars.next();
                }
                _ => tag.push(c),
            },
            _ => tag.push(c),
        }
    }
    tags.push(tag);
    tags.into_iter().map(|t| t.trim().to_owned()).filter(|t| !t.is_empty()).collect()
}

pub async fn banks(State(s): St) -> AppResult<Json<BankList>> {
    let backend = s.queue.backend();
    let banks = backend.banks().await?;
    let of_configuration = match backend.capabilities().lists_every_bank {
        true => Vec::new(),
        false => crate::session::banks_of_configuration(&s.sessions.settings(), banks.iter().map(|b| b.bank.clone())),
    };
    Ok(Json(BankList { banks, of_configuration }))
}

pub async fn browse(State(s): St, q: Result<Query<BrowseParams>, QueryRejection>) -> AppResult<Json<BrowsePage>> {
    let Query(q) = q?;
    let tags = listed_tags(q.tags.as_deref().unwrap_or(""));
    crate::session::filter_tags(&tags).map_err(ApiError::invalid)?;
    let query = BrowseQuery {
        bank: bank_or_default(&s, q.bank)?,
        tags,
        cursor: q.cursor.filter(|c| !c.is_empty()),
        limit: q.limit.unwrap_or(50).clamp(1, 1000),
    };
    let mut page = s.queue.backend().browse(&query).await?;
    if let Some(max) = q.preview.filter(|&n| n > 0) {
        for m in &mut page.memories {
            cut(&mut m.content, max);
        }
    }
    Ok(Json(page))
}

/// Cuts `text` to at most `max` characters, ending it in `…`.
fn cut(text: &mut String, max: usize) {
    let kept = mneme_core::text::take_chars(text, max).len();
    let kept = mneme_core::text::shown_char_boundary(text, kept);
    if kept < text.len() {
        text.truncate(kept);
        text.push('…');
    }
}

pub async fn memory(
    State(s): St,
    Path(id): Path<String>,
    q: Result<Query<BankParam>, QueryRejection>,
) -> AppResult<Json<MemoryDetail>> {
    let Query(q) = q?;
    no_private_tag("memory id", &id)?;
    let bank = bank_or_default(&s, q.bank)?;
    Ok(Json(s.queue.backend().memory(&id, bank.as_deref()).await?))
}

pub async fn forget_memory(
    State(s): St,
    Path(id): Path<String>,
    q: Result<Query<BankParam>, QueryRejection>,
) -> AppResult<Json<Forgotten>> {
    let Query(q) = q?;
    no_private_tag("memory id", &id)?;
    let what = Forget::Memory { id, bank: bank_or_default(&s, q.bank)? };
    forget(&s, what).await
}

pub async fn forget_document(
    State(s): St,
    Path(id): Path<String>,
    q: Result<Query<BankParam>, QueryRejection>,
) -> AppResult<Json<Forgotten>> {
    let Query(q) = q?;
    no_private_tag("document id", &id)?;
    let bank = bank_or_default(&s, q.bank)?.ok_or_else(|| {
        ApiError::invalid(
            "forgetting a document needs its bank: add ?bank=<bank> (mneme forget --document: --bank <bank>)",
        )
    })?;
    forget(&s, Forget::Document { id, bank }).await
}

/// How long a forget of a memory looks for the document it belongs to.
const DOCUMENT_LOOKUP: std::time::Duration = std::time::Duration::from_secs(5);

/// Deletes, and says so as a notice: a memory the user removes is something every viewer of the
/// notices should see.
async fn forget(s: &AppState, what: Forget) -> AppResult<Json<Forgotten>> {
    let backend = s.queue.backend();
    // The document forgotten, or the one the forgotten memory belongs to: if automatic retain
    // wrote it for a session, that session's conversation so far is forgotten with it (its next
    // full-session retain would store it whole again), and its turns wait meanwhile (one would
    // queue the forgotten turns between the discard below and `forgotten`).
    let document = match &what {
        Forget::Document { id, bank } => Some((bank.clone(), id.clone())),
        Forget::Memory { id, bank } => {
            // Not worth more than a moment of a server that hangs: the forget is what was asked.
            let detail = tokio::time::timeout(DOCUMENT_LOOKUP, backend.memory(id, bank.as_deref())).await;
            detail.ok().and_then(Result::ok).and_then(|d| Some((d.memory.bank, d.memory.document_id?)))
        }
    };
    let _turns = match &document {
        Some((bank, id)) => Some(s.sessions.hold_conversations(bank, id).await),
        None => None,
    };
    // The spool first: a version still queued would be stored once delivered, and a delivered
    // batch whose removal was not committed yet would be delivered again after a restart.
    let (queued, done) = match &what {
        Forget::Document { id, bank } => s.queue.discard_document_then(bank, id, backend.forget(&what)).await?,
        Forget::Memory { id, bank } => s.queue.discard_memory_then(bank.as_deref(), id, backend.forget(&what)).await?,
    };
    if queued > 0 && done.is_err() {
        // What was dropped from the spool is gone whatever the backend answered: its text is not
        // left in the spool's log.
        s.queue.erase_traces().await;
    }
    let done = match done {
        // Only queued (or no store open, memory `off`): forgotten all the same.
        Err(mneme_core::BackendError::NotFound(_) | mneme_core::BackendError::Unsupported(_)) if queued > 0 => {
            let message = match &what {
                Forget::Document { .. } => format!("{queued} queued version(s) dropped before they were stored"),
                Forget::Memory { .. } => "it was still queued: dropped before it was stored".into(),
            };
            mneme_core::Forgotten { deleted: Some(0), message }
        }
        Ok(mut done) if queued > 0 && matches!(what, Forget::Document { .. }) => {
            done.message = format!("{} ({queued} queued version(s) dropped too)", done.message);
            done
        }
        // The backend could not be asked (an outage): what was queued is gone all the same, and
        // the answer says so (a bare 503 read as if nothing had been forgotten).
        Err(e) if queued > 0 => {
            // The copies dropped may be a session's conversation: it is forgotten as after a
            // forget the backend did (its next retain stored the forgotten turns again).
            let bank = match &what {
                Forget::Memory { bank, .. } => bank.as_deref(),
                Forget::Document { bank, .. } => Some(bank.as_str()),
            };
            sessions_forgot(s, document.as_ref(), bank).await;
            let mut refused = ApiError::from(e);
            refused.message = format!(
                "{} — {queued} queued {} dropped before {} stored; forget it again once the backend answers, for what it already stores",
                refused.message,
                if queued == 1 { "copy was" } else { "copies were" },
                if queued == 1 { "it was" } else { "they were" },
            );
            return Err(refused);
        }
        done => done?,
    };
    let (noun, id, bank) = match &what {
        Forget::Memory { id, bank } => ("memory", id, bank.as_deref()),
        Forget::Document { id, bank } => ("document", id, Some(bank.as_str())),
    };
    s.hindsight.recompute_after_forget(bank).await;
    if let Forget::Document { id, bank } = &what {
        s.hindsight.document_forgotten(bank, id).await;
    }
    sessions_forgot(s, document.as_ref(), bank).await;
    s.queue.erase_traces().await;
    let message = format!("Forgot {noun} {id}: {}", done.message);
    s.notices.emit(Level::Info, "forget", None, message).await;
    Ok(Json(done))
}

/// Tells the sessions what was forgotten (`document` of its bank, or a memory of `bank`).
async fn sessions_forgot(s: &AppState, document: Option<&(String, String)>, bank: Option<&str>) {
    match document {
        Some((bank, id)) => s.sessions.forgotten(Some(bank), Some(id)).await,
        None => s.sessions.forgotten(bank, None).await,
    }
}

/// The largest `max_tokens` a search may ask for.
const MAX_SEARCH_TOKENS: usize = 100_000;

pub async fn search(State(s): St, Body(b): Body<Search>) -> AppResult<Json<SearchAnswer>> {
    let settings = s.sessions.settings();
    let query = crate::session::recall_text(&settings, &b.query).map_err(ApiError::invalid)?;
    crate::session::filter_tags(&b.tags).map_err(ApiError::invalid)?;
    let bank = named_bank(b.bank)?.unwrap_or_else(|| settings.base_bank());
    if bank.contains('/') {
        return Err(ApiError::invalid("bank must not contain '/'"));
    }
    if b.max_tokens.is_some_and(|n| n == 0 || n > MAX_SEARCH_TOKENS) {
        // A bound of nothing would still be answered with something: say so instead.
        return Err(ApiError::invalid(format!(
            "max_tokens must be from 1 to {MAX_SEARCH_TOKENS} (a token is about 4 characters)"
        )));
    }
    let query = RecallQuery {
        query,
        budget: settings.recall.budget,
        max_tokens: b.max_tokens.unwrap_or(settings.recall.max_tokens).min(MAX_SEARCH_TOKENS),
        types: settings.recall.types.clone(),
        tags: b.tags.clone(),
        tags_match: TagsMatch::Any,
        // Bounded as the recall tools are (what an agent would get, within its wait).
        deadline: Some(std::time::Instant::now() + settings.recall.timeout),
    };
    let scope = Scope { bank: bank.clone(), tags: b.tags };
    let started = Instant::now();
    let timeout = settings.recall.timeout;
    let results = match tokio::time::timeout(timeout, s.queue.backend().recall(&scope, &query)).await {
        Ok(results) => results?,
        Err(_) => Err(mneme_core::BackendError::transient(crate::session::recall_timed_out(timeout)))?,
    };
    let took_ms = (started.elapsed().as_secs_f64() * 1e6).round() / 1e3;
    let results = crate::session::shown_once(results);
    Ok(Json(SearchAnswer { bank, results, took_ms }))
}

pub async fn queue(State(s): St) -> Json<QueueOverview> {
    Json(s.queue.overview().await)
}

#[cfg(test)]
mod tests {
    use super::listed_tags;

    /// A comma inside a tag is written `\,` (review58 #2); other backslashes are themselves.
    #[test]
    fn a_listed_tag_may_hold_an_escaped_comma() {
        assert_eq!(listed_tags("project:api, x ,,"), vec!["project:api", "x"]);
        assert_eq!(listed_tags(r"project:web\,app,team:red"), vec!["project:web,app", "team:red"]);
        assert_eq!(listed_tags(r"a\b,c\\,d\"), vec![r"a\b", r"c\", r"d\"]);
        assert!(listed_tags("").is_empty());
    }
}
