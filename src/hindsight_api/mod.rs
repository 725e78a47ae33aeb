//! mneme speaks Hindsight: the part of Hindsight's HTTP API v1 (server 1.1.0) that its clients
//! (oh-my-pi's `hindsight` memory backend, Hindsight's own integrations) call, served from
//! mneme's durable queue and its active backend. Pointing such a client's `HINDSIGHT_API_URL` at
//! `http://127.0.0.1:6366/hindsight` gives it a local memory with no server to run.
//!
//! A bank is a bank and tags are tags, exactly as on mneme's own routes, so what a Hindsight
//! client retains is what the hooks and MCP recall, and the other way round. Retains go through
//! the spool like every other retain (answered once on disk), with `<private>` spans removed from
//! every field first. Bank profiles and mental models are kept in the spool's database; a mental
//! model's content is what recall answers for its source query (mneme has no LLM to summarise),
//! computed when it is created or refreshed and again, in the background, when a client reads it
//! after it has gone stale.

mod banks;
mod models;
mod recall;
mod retain;
pub(crate) mod time;
pub mod wire;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use mneme_core::{text, BackendError, Budget, MemoryType, RecallQuery, ReflectQuery, Scope, TagsMatch};

use crate::config::Settings;
use crate::queue::{NewItem, Queue};
use crate::session::Sessions;
use crate::spool::{OnceRecord, Spool, SpoolError};
use wire::*;

pub use models::MODEL_STALE_AFTER;

/// Why a Hindsight API request failed.
#[derive(Debug, thiserror::Error)]
pub enum CompatError {
    /// A field is invalid (422).
    #[error("{0}")]
    Invalid(String),
    /// The fields are valid but do not go together (400, as Hindsight answers its own checks).
    #[error("{0}")]
    Refused(String),
    /// No such bank object (404).
    #[error("{0}")]
    NotFound(String),
    /// The id is taken (409).
    #[error("{0}")]
    Conflict(String),
    /// The backend failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The spool failed: nothing was accepted.
    #[error(transparent)]
    Spool(#[from] SpoolError),
}

/// The Hindsight API over mneme's queue and backend. Cheap to clone.
#[derive(Clone)]
pub struct HindsightApi {
    sessions: Sessions,
    queue: Queue,
    spool: Spool,
    /// Banks whose stale mental models are being recomputed (one task a bank at a time).
    refreshing: Arc<Mutex<HashSet<String>>>,
    /// Client operation ids kept since the last sweep of old ones.
    operations_kept: Arc<AtomicU64>,
    /// Mental models are written one at a time, each write looking at the model as it stands
    /// (a recompute that took a recall's time lands only on a model still there and unchanged).
    model_writes: Arc<tokio::sync::Mutex<()>>,
    /// Forgets and clears so far: a model computed across one is not saved (its recall may
    /// have found what was forgotten), as the recompute after the forget saves its own.
    forgets: Arc<Mutex<models::ForgetCounts>>,
    /// A document's retains are read and spooled one at a time: the spans a request leaves it
    /// open in are what the next one reads.
    documents: Arc<crate::lock::KeyedLocks>,
}

/// The spool's record kind of a client's operation id.
const OPERATION: &str = "hindsight_operation";
/// How long a client's operation id is remembered (a retry comes within minutes).
pub const OPERATION_KEPT_FOR: Duration = Duration::from_secs(7 * 24 * 3600);
/// Old operation ids are swept after this many new ones.
const SWEEP_OPERATIONS_EVERY: u64 = 256;

/// What a bank's `PUT` or `PATCH` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BankWrite {
    /// `PUT`: makes the bank, or changes the one there is.
    Make,
    /// `PATCH`: changes a bank there is (404 for one never made, as the server answers).
    Change,
}

impl HindsightApi {
    /// Serves through `queue` (and its active backend) with the settings `sessions` holds.
    pub fn new(sessions: Sessions, queue: Queue, spool: Spool) -> Self {
        HindsightApi {
            sessions,
            queue,
            spool,
            refreshing: Arc::default(),
            operations_kept: Arc::default(),
            model_writes: Arc::default(),
            forgets: Arc::default(),
            documents: Arc::default(),
        }
    }

    fn settings(&self) -> Arc<Settings> {
        self.sessions.settings()
    }

    /// Now and then, forgets operation ids older than [`OPERATION_KEPT_FOR`] (in the background),
    /// but not while their bank has retains queued.
    fn forget_old_operations(&self) {
        if !self.operations_kept.fetch_add(1, Ordering::Relaxed).is_multiple_of(SWEEP_OPERATIONS_EVERY) {
            return;
        }
        let spool = self.spool.clone();
        let before = mneme_core::time::unix_seconds(SystemTime::now()).saturating_sub(OPERATION_KEPT_FOR.as_secs());
        tokio::spawn(async move {
            if let Err(e) = spool.forget_records_older_than(OPERATION, before).await {
                tracing::warn!("forgetting old Hindsight operation ids: {e}");
            }
        });
    }

    /// Recalls from `bank` through the active backend.
    pub async fn recall(&self, bank: &str, req: RecallRequest) -> Result<RecallResponse, CompatError> {
        check_bank(bank)?;
        let query = crate::session::recall_text(&self.settings(), &req.query).map_err(CompatError::Invalid)?;
        crate::session::filter_tags(req.tags.as_deref().unwrap_or_default()).map_err(CompatError::Invalid)?;
        let groups = req.tag_groups.unwrap_or_default();
        // As the server answers (both were taken, AND-ed: review59 #7).
        recall::one_filter(req.tags.as_deref(), &groups).map_err(CompatError::Invalid)?;
        let named = recall::named_tags(&groups);
        crate::session::filter_tags(&named).map_err(CompatError::Invalid)?;
        // Every result is checked against the whole tree: bounded as a filter's tags are.
        if named.len() > mneme_core::MAX_FILTER_TAGS {
            return Err(CompatError::Invalid(format!(
                "tag_groups name {} tags; at most {} are accepted",
                named.len(),
                mneme_core::MAX_FILTER_TAGS
            )));
        }
        if req.max_tokens == Some(0) {
            // As the server answers: no room is nothing.
            return Ok(RecallResponse::default());
        }
        self.deliver_bank_retains(bank).await;
        let (tags, tags_match) = recall::backend_filter(req.tags, req.tags_match, &groups);
        let q = RecallQuery {
            query,
            budget: req.budget.unwrap_or_default(),
            max_tokens: req.max_tokens.unwrap_or(4096).max(1),
            types: req.types.unwrap_or_default(),
            tags,
            tags_match,
            deadline: None,
        };
        let mut results = self.recall_query(bank, &q).await?;
        // Ignored, they let every project's memories through to a client that scoped by them.
        results.retain(|r| recall::passes(&groups, r.tags.as_deref().unwrap_or_default()));
        // Once filtered: a result the filter leaves out takes nothing another was cut for.
        let results = mneme_core::repeats::without_repeats(results, |r| &mut r.text);
        Ok(RecallResponse {
            results,
            trace: None,
            entities: None,
            chunks: None,
            source_facts: None,
            source_facts_truncated: None,
        })
    }

    async fn recall_query(&self, bank: &str, q: &RecallQuery) -> Result<Vec<RecallResult>, CompatError> {
        let backend = self.queue.backend();
        if !backend.capabilities().stores {
            return Ok(Vec::new());
        }
        let scope = Scope { bank: bank.to_owned(), tags: Vec::new() };
        let found = backend.recall(&scope, q).await?;
        // A backend that gives no id: a stable one from what was recalled.
        Ok(recall::results(found, stable_id, q.max_tokens.saturating_mul(4)))
    }

    /// Reflects through the active backend (the local backend has no LLM: an error clients handle).
    pub async fn reflect(&self, bank: &str, req: ReflectRequest) -> Result<ReflectResponse, CompatError> {
        check_bank(bank)?;
        let settings = self.settings();
        let query = crate::session::recall_text(&settings, &req.query).map_err(CompatError::Invalid)?;
        crate::session::filter_tags(req.tags.as_deref().unwrap_or_default()).map_err(CompatError::Invalid)?;
        let backend = self.queue.backend();
        if !backend.capabilities().stores {
            return Err(BackendError::Unsupported("memory.backend is \"off\": nothing is remembered".into()).into());
        }
        // What would widen or reshape the answer is passed on or refused, never dropped: without
        // its `tag_groups` a project's question was answered from every project's memories.
        if req.response_schema.as_ref().is_some_and(|s| !s.is_null()) {
            return Err(CompatError::Invalid(
                "response_schema: mneme passes on a reflect's text only, not a structured answer; ask without it"
                    .into(),
            ));
        }
        let asks_more = |v: &serde_json::Value| v.as_object().is_some_and(|o| o.values().any(|v| !v.is_null()));
        if req.include.as_ref().is_some_and(asks_more) {
            return Err(CompatError::Invalid(
                "include: mneme passes on a reflect's text only, not the facts or tool calls behind it; ask without it"
                    .into(),
            ));
        }
        let groups = req.tag_groups.unwrap_or_default();
        recall::one_filter(req.tags.as_deref(), &groups).map_err(CompatError::Invalid)?;
        crate::session::filter_tags(&recall::named_tags(&groups)).map_err(CompatError::Invalid)?;
        let q = ReflectQuery {
            query,
            context: req.context.and_then(|c| crate::session::clean_text(&settings, &c)),
            budget: req.budget.unwrap_or(Budget::Low),
            tags: req.tags.unwrap_or_default(),
            tags_match: req.tags_match.unwrap_or(TagsMatch::Any),
            tag_groups: (!groups.is_empty()).then(|| serde_json::to_value(&groups).expect("tag groups serialize")),
            types: req.fact_types.unwrap_or_default(),
            max_tokens: req.max_tokens,
        };
        let text = backend.reflect(&Scope { bank: bank.to_owned(), tags: Vec::new() }, &q).await?;
        Ok(ReflectResponse {
            text,
            based_on: None,
            structured_output: None,
            structured_output_error: None,
            usage: None,
            trace: None,
        })
    }
}

/// A bank id must be usable as a path segment and as mneme's bank name.
/// An operation id of mneme's own, written as Hindsight writes its ids (a UUID's form).
fn new_operation_id() -> String {
    let id = crate::ids::new_id();
    canonical_uuid(&id).unwrap_or(id)
}

/// A UUID as Hindsight reads one (Python's `uuid.UUID`: 32 hex digits, with or without hyphens,
/// braces or a `urn:uuid:` prefix, any case), in its canonical form; `None` if it is not one.
fn canonical_uuid(s: &str) -> Option<String> {
    let s = s.trim();
    let s = s.strip_prefix("urn:").unwrap_or(s);
    let s = s.strip_prefix("uuid:").unwrap_or(s);
    let s = s.trim_start_matches('{').trim_end_matches('}');
    let hex: String = s.chars().filter(|&c| c != '-').collect();
    if hex.len() != 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let hex = hex.to_ascii_lowercase();
    Some(format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..]))
}

fn check_bank(bank: &str) -> Result<(), CompatError> {
    // First: the `/` of `</private>` made the message below blame a slash (review105 #4).
    if mneme_core::text::has_private_tag(bank) {
        return Err(CompatError::Invalid(
            "bank_id may not contain <private> tags: bank names are stored as they are".into(),
        ));
    }
    // Every route that names a bank by `?bank=` trims it: " b" could not be named again.
    if bank.trim().is_empty()
        || bank.trim() != bank
        || bank.contains('/')
        || matches!(bank, "." | "..")
        || bank.len() > mneme_core::MAX_BANK_BYTES
        || bank.chars().any(char::is_control)
    {
        return Err(CompatError::Invalid(format!(
            "bank_id must be 1 to {} bytes without '/', control characters or spaces at its ends, and not . or ..",
            mneme_core::MAX_BANK_BYTES
        )));
    }
    Ok(())
}

/// Strings with private spans removed, blanks dropped, order kept, duplicates dropped.
fn clean_list(settings: &Settings, list: &[String]) -> Vec<String> {
    let mut seen = std::collections::HashSet::with_capacity(list.len());
    list.iter()
        .filter_map(|item| crate::session::clean_text(settings, item))
        .filter(|t| seen.insert(t.clone()))
        .collect()
}

/// A stable id for a recalled memory a backend gave without one.
fn stable_id(text: &str, at: &str) -> String {
    // FNV-1a over the text and time: the same memory gets the same id on every recall.
    let bytes: Vec<u8> = text.bytes().chain([0]).chain(at.bytes()).collect();
    format!("{:016x}", mneme_core::text::fnv1a(&bytes))
}

#[cfg(test)]
mod tests;

/// The type of a memory a Hindsight client sent: the one a mneme's import kept (see
/// [`mneme_core::transfer::TYPE_KEY`]); a document is a transcript (oh-my-pi's and mneme's own
/// automatic retains), an experience, but for a memory of no document a mneme sent as a
/// document of its own (marked so, see [`mneme_core::transfer::OWN_DOCUMENT_KEY`], or by the
/// loose-memory mark of its import: review111 #3, a mneme's tool retains were all
/// experiences); a bare item is a fact about the world.
fn kind_of(metadata: &std::collections::BTreeMap<String, String>, document_id: Option<&str>) -> MemoryType {
    use mneme_core::transfer::{LOOSE_MEMORY_KEY, OWN_DOCUMENT_KEY, TYPE_KEY};
    if let Some(kept) = metadata.get(TYPE_KEY).and_then(|t| t.parse().ok()) {
        return kept;
    }
    let loose = metadata.contains_key(OWN_DOCUMENT_KEY)
        || document_id.is_some_and(|d| metadata.get(LOOSE_MEMORY_KEY).is_some_and(|mark| mark == d));
    if document_id.is_some() && !loose {
        MemoryType::Experience
    } else {
        MemoryType::World
    }
}
