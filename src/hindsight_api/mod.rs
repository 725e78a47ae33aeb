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

mod models;
mod recall;
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

    /// Retains items into `bank`: spooled (durable) before this answers; with `async: false`
    /// also delivered (or left spooled for a retry when the backend is down).
    pub async fn retain(&self, bank: &str, req: RetainRequest) -> Result<RetainResponse, CompatError> {
        check_bank(bank)?;
        let operation_id = match req.operation_id.as_deref() {
            Some(id) => Some(canonical_uuid(id).ok_or_else(|| {
                let id = mneme_core::text::quoted_unless_private(id);
                CompatError::Invalid(format!("operation_id {id} is not a UUID; nothing was stored"))
            })?),
            None => None,
        };
        let settings = self.settings();
        let mut contents = Vec::with_capacity(req.items.len());
        for (i, item) in req.items.iter().enumerate() {
            let content = item.content.text().map_err(|(b, kind)| {
                CompatError::Refused(format!(
                    "items[{i}].content[{b}] is {kind:?} content: mneme keeps text only (as Hindsight with a text-only model, it refuses rather than drop it); nothing was stored"
                ))
            })?;
            if text::is_blank(&content) {
                return Err(CompatError::Invalid(format!("items[{i}].content is blank; nothing was stored")));
            }
            // Cleaned, two ids could become one, and one document silently replace another.
            if item.document_id.as_deref().is_some_and(text::has_private_tag) {
                return Err(CompatError::Invalid(format!(
                    "items[{i}].document_id may not contain <private> tags: ids are stored as they are; nothing was stored"
                )));
            }
            let max = mneme_core::MAX_STORED_ID_CHARS;
            if item.document_id.as_deref().is_some_and(|d| d.chars().count() > max) {
                return Err(CompatError::Invalid(format!(
                    "items[{i}].document_id is longer than {max} characters; nothing was stored"
                )));
            }
            // A URL reads "." and ".." as its own steps: the document could not be deleted. As
            // it is stored: trimmed (" .. ").
            let document = item.document_id.as_deref().and_then(|d| crate::session::clean_text(&settings, d));
            if matches!(item.document_id.as_deref(), Some("." | ".."))
                || matches!(document.as_deref(), Some("." | ".."))
            {
                return Err(CompatError::Invalid(format!(
                    "items[{i}].document_id may not be \".\" or \"..\" (a URL cannot name it); nothing was stored"
                )));
            }
            let tags = item.tags.as_ref().map_or(0, Vec::len) + req.document_tags.as_ref().map_or(0, Vec::len);
            if let Some(why) = mneme_core::too_many_tags(tags) {
                return Err(CompatError::Invalid(format!("items[{i}] (with document_tags) {why}; nothing was stored")));
            }
            contents.push(content);
        }
        let modes = document_modes(&req.items);
        let appends = |i: &MemoryItemIn| item_appends(i, &modes);
        let named_append = |i: &MemoryItemIn| i.update_mode == Some(UpdateMode::Append);
        if let Some(i) =
            req.items.iter().position(|i| named_append(i) && i.document_id.as_deref().is_none_or(str::is_empty))
        {
            return Err(CompatError::Refused(format!(
                "items[{i}].update_mode \"append\" adds to a document: it needs a document_id; nothing was stored"
            )));
        }
        let mut timestamps = Vec::with_capacity(req.items.len());
        for (i, item) in req.items.iter().enumerate() {
            timestamps.push(match item.timestamp.as_deref().map(|t| (t, t.trim())) {
                // `unset` (any case, as the server reads it): Hindsight's "no date"; every mneme
                // memory is dated, at its retain. So is an empty one, as the server takes it.
                None | Some(("", _)) => None,
                // As the server answers one of spaces only (it took it for no date, and dated it
                // now: review59 #5).
                Some((_, "")) => {
                    return Err(CompatError::Invalid(format!(
                        "items[{i}].timestamp is blank: send an ISO 8601 date-time, or 'unset' for none"
                    )))
                }
                Some((_, t)) if t.eq_ignore_ascii_case("unset") => None,
                Some((_, t)) => {
                    let normalized = time::normalize(t).ok_or_else(|| {
                        let t = mneme_core::text::quoted_unless_private(t);
                        CompatError::Invalid(format!(
                            "items[{i}].timestamp {t} is not an ISO 8601 date-time (e.g. 2026-01-02T03:04:05Z)"
                        ))
                    })?;
                    // As Hindsight answers: year 1 and year 9999 mean "no date" to it.
                    if let Some(year) = ["0001", "9999"].into_iter().find(|y| normalized.starts_with(&format!("{y}-"))) {
                        return Err(CompatError::Invalid(format!(
                            "items[{i}].timestamp year {} is a placeholder, not a date; send a real date or 'unset' to store without one",
                            year.trim_start_matches('0')
                        )));
                    }
                    Some(normalized)
                }
            });
        }
        // The client's id names an asynchronous retain; a synchronous one ignores it.
        let client_operation = operation_id.filter(|_| req.is_async);
        let operation_id = client_operation.clone().unwrap_or_else(new_operation_id);
        let answer = |count: usize| RetainResponse {
            success: true,
            bank_id: bank.to_owned(),
            items_count: count,
            is_async: req.is_async,
            operation_id: req.is_async.then(|| operation_id.clone()),
            operation_ids: None,
            usage: None,
        };
        // With memory off nothing is stored, but the spans a document is left open in still are:
        // the append after a switch to a store goes on inside them (it was stored in the clear).
        let stores = self.queue.takes_retains();
        let document_tags = clean_list(&settings, req.document_tags.as_deref().unwrap_or_default());
        let mut session = None;
        // The items of one document are read in order, as a transcript's messages: an item that
        // opens a private span and a later one that closes it hide the items between; an append
        // goes on inside the spans the document's version before left open.
        let _documents = self.hold_documents(bank, &req.items).await;
        // A client's operation sent again stores nothing, and leaves the spans as they are.
        let resent = match &client_operation {
            Some(id) => self.spool.record(OPERATION, id).await?.is_some(),
            None => false,
        };
        let open_before = self.documents_open(bank, &req.items).await?;
        let (contents, mut open_after) = clean_by_document(&settings, &req.items, &contents, &open_before, &modes);
        if resent {
            open_after = open_before.clone();
        }
        if !stores {
            self.keep_documents_open(bank, &open_before, &open_after, Keep::All).await?;
            return Ok(answer(0));
        }
        // Spans left open are kept before the items are spooled, and the rest after (a crash
        // between the two leaves more spans open than there are: the next append hides more,
        // never less).
        self.keep_documents_open(bank, &open_before, &open_after, Keep::Opened).await?;
        let document_of =
            |item: &MemoryItemIn| item.document_id.as_deref().and_then(|d| crate::session::clean_text(&settings, d));
        // A new version of a document with nothing left of it (all private) replaces the old
        // version with nothing, as the server does: it is forgotten. It was kept, and recalled.
        let mut emptied: Vec<String> = req
            .items
            .iter()
            .zip(&contents)
            .filter(|(item, content)| content.is_none() && !appends(item))
            .filter_map(|(item, _)| document_of(item))
            .collect();
        emptied.retain(|d| {
            !req.items.iter().zip(&contents).any(|(i, c)| c.is_some() && document_of(i).as_ref() == Some(d))
        });
        emptied.sort();
        emptied.dedup();
        let items: Vec<NewItem> = req
            .items
            .iter()
            .zip(contents)
            .zip(timestamps)
            .filter_map(|((item, content), timestamp)| {
                let content = content?;
                let mut metadata = item.metadata.clone().unwrap_or_default();
                if settings.retain.strip_private {
                    text::strip_private_map(&mut metadata);
                }
                session = session.take().or_else(|| metadata.get("session_id").cloned());
                // A document of a client that names no session is a conversation of its own: under
                // the bank's one session they were all one, and lent each other their words.
                if let Some(document) = document_of(item).filter(|_| !metadata.contains_key("session_id")) {
                    let own = format!("hindsight:{bank}:#{:016x}", crate::session::fingerprint(&document));
                    metadata.insert("session_id".into(), own);
                }
                let mut tags = clean_list(&settings, item.tags.as_deref().unwrap_or_default());
                for t in &document_tags {
                    if !tags.contains(t) {
                        tags.push(t.clone());
                    }
                }
                let document_id = item.document_id.as_deref().and_then(|d| crate::session::clean_text(&settings, d));
                let kind = kind_of(&metadata, document_id.as_deref());
                // A mneme's mark, read: not the client's metadata.
                metadata.remove(mneme_core::transfer::OWN_DOCUMENT_KEY);
                Some(NewItem {
                    content,
                    context: item.context.as_deref().and_then(|c| crate::session::clean_text(&settings, c)),
                    kind,
                    append: appends(item) && document_id.is_some(),
                    document_id,
                    tags: Some(tags),
                    metadata,
                    timestamp,
                })
            })
            .collect();
        if items.is_empty() && client_operation.is_none() {
            self.forget_emptied_documents(bank, &emptied).await?;
            self.keep_documents_open(bank, &open_before, &open_after, Keep::All).await?;
            return Ok(answer(0));
        }
        // One queue per client session (batched and debounced like a mneme session's), or per
        // bank for items that name none, and for documents: two clients' versions of a document,
        // each in its own client's queue, were stored in the order the queues were delivered, so
        // an older version queued by one replaced a newer one another had stored.
        let queue_id = match &session {
            _ if items.iter().any(|i| i.document_id.is_some()) => format!("hindsight:{bank}"),
            // A client's id is metadata, of any length: a long one is kept by its fingerprint
            // (a queue's id is held in memory while it is busy, and listed by /v1/queue).
            Some(s) if s.len() > MAX_QUEUE_SESSION_LEN || s.chars().any(char::is_control) => {
                format!("hindsight:{bank}:#{:016x}", crate::session::fingerprint(s))
            }
            Some(s) => format!("hindsight:{bank}:{s}"),
            None => format!("hindsight:{bank}"),
        };
        let scope = Scope { bank: bank.to_owned(), tags: Vec::new() };
        let n = items.len();
        if let Some(id) = client_operation {
            // An all-private new version forgets its document at the id's first use only: sent
            // again (answered as the first time), or refused (another bank's id), it forgets
            // nothing. Before the id is kept: a forget that failed fails the retain, and the
            // client's retry forgets again.
            if self.spool.record(OPERATION, &id).await?.is_none() {
                self.forget_emptied_documents(bank, &emptied).await?;
            }
            // Kept with the items, in one transaction: a retry after a lost answer finds it,
            // and stores nothing again.
            let record = serde_json::json!({"bank": bank, "items_count": n, "at": mneme_core::time::unix_seconds(SystemTime::now())}).to_string();
            let once = OnceRecord { kind: OPERATION, key: id.clone(), record };
            if let Some(kept) = self.queue.enqueue_once(&queue_id, &scope, items, once).await? {
                let kept: serde_json::Value = serde_json::from_str(&kept).unwrap_or_default();
                // Sent again, with the same items or others, it is answered as the first time, as
                // the Hindsight 1.1.0 server answers (its 409 is for an id of another bank or
                // another kind of operation; SPEC §7's "a different body answers 409" is not
                // what the server does, and the compatibility test holds mneme to the server).
                if kept["bank"].as_str() != Some(bank) {
                    return Err(CompatError::Conflict(format!("operation_id {id} is already in use")));
                }
                return Ok(answer(kept["items_count"].as_u64().unwrap_or_default() as usize));
            }
            self.keep_documents_open(bank, &open_before, &open_after, Keep::All).await?;
            self.forget_old_operations();
            return Ok(answer(n));
        }
        self.forget_emptied_documents(bank, &emptied).await?;
        self.queue.enqueue(&queue_id, &scope, items).await?;
        self.keep_documents_open(bank, &open_before, &open_after, Keep::All).await?;
        if !req.is_async {
            // Hindsight answers a synchronous retain once it is stored. What fails here stays
            // spooled and is retried; the answer is still success: it is on disk.
            self.queue.flush(&queue_id).await;
        }
        Ok(answer(n))
    }

    /// Holds the documents of `items` (in order: two requests never wait for each other) until
    /// the guards are dropped.
    async fn hold_documents(&self, bank: &str, items: &[MemoryItemIn]) -> Vec<tokio::sync::OwnedMutexGuard<()>> {
        let keys = items.iter().filter_map(|i| i.document_id.as_deref()).map(|d| document_key(bank, d.trim()));
        self.documents.lock_all(keys.collect()).await
    }

    /// The `<private>` spans each document of `items` left open at the end of its version so far
    /// (kept by [`Self::keep_documents_open`]), for those the request appends to first; a new
    /// version starts outside any.
    async fn documents_open(&self, bank: &str, items: &[MemoryItemIn]) -> Result<HashMap<String, usize>, CompatError> {
        let mut open = HashMap::new();
        for item in items {
            let Some(document) = item.document_id.as_deref().map(str::trim) else { continue };
            if open.contains_key(document) {
                continue;
            }
            let kept = self.spool.record(DOCUMENT_OPEN, &document_key(bank, document)).await?;
            open.insert(document.to_owned(), kept.and_then(|k| k.parse().ok()).unwrap_or(0));
        }
        Ok(open)
    }

    /// Keeps the spans each document was left open in (`after`) where they differ from what was
    /// kept (`before`): with [`Keep::Opened`], only where more are open now.
    async fn keep_documents_open(
        &self,
        bank: &str,
        before: &HashMap<String, usize>,
        after: &HashMap<String, usize>,
        keep: Keep,
    ) -> Result<(), CompatError> {
        for (document, &open) in after {
            let kept = before.get(document).copied().unwrap_or(0);
            if open == kept || (keep == Keep::Opened && open < kept) {
                continue;
            }
            let key = document_key(bank, document);
            match open {
                0 => self.spool.delete_record(DOCUMENT_OPEN, &key).await.map(drop)?,
                n => self.spool.save_record(DOCUMENT_OPEN, &key, n.to_string()).await?,
            }
        }
        Ok(())
    }

    /// Document `id` of `bank` was forgotten: an append that makes it again starts outside any
    /// span (the spans its old version left open were kept, and hid the new one's text).
    pub async fn document_forgotten(&self, bank: &str, id: &str) {
        let key = document_key(bank, id.trim());
        if let Err(e) = self.spool.delete_record(DOCUMENT_OPEN, &key).await {
            tracing::warn!("cannot forget the spans a forgotten document left open: {e}");
        }
    }

    /// Everything was cleared: no document's spans are open any more. (A clear of one scope
    /// keeps them: which documents it took is not known, and a document of another project
    /// left open must stay so.)
    pub async fn everything_forgotten(&self) {
        if let Err(e) = self.spool.delete_records(DOCUMENT_OPEN).await {
            tracing::warn!("cannot forget the spans cleared documents left open: {e}");
        }
    }

    /// Forgets the `documents` of `bank` whose new version held nothing to keep, as a forget of a
    /// document does: their versions still queued, the stored ones, what the bank's mental models
    /// and the sessions' recalled blocks drew from them.
    async fn forget_emptied_documents(&self, bank: &str, documents: &[String]) -> Result<(), CompatError> {
        for document in documents {
            let what = mneme_core::Forget::Document { id: document.to_owned(), bank: bank.to_owned() };
            let backend = self.queue.backend();
            // As a forget does: a session's turn in between would store the forgotten turns again.
            let _turns = self.sessions.hold_conversations(bank, document).await;
            let (queued, done) = self.queue.discard_document_then(bank, document, backend.forget(&what)).await?;
            if queued > 0 {
                self.queue.erase_traces().await;
            }
            match done {
                Ok(_) | Err(BackendError::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
            self.sessions.forgotten(Some(bank), Some(document)).await;
        }
        if !documents.is_empty() {
            self.recompute_after_forget(Some(bank)).await;
        }
        Ok(())
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

    /// Creates or updates a bank's profile (`PUT` and `PATCH`).
    pub async fn update_bank(
        &self,
        bank: &str,
        update: BankUpdate,
        write: BankWrite,
    ) -> Result<BankProfile, CompatError> {
        check_bank(bank)?;
        let mut profile = self.bank(bank).await?;
        let settings = self.settings();
        let keep = |v: Option<String>| v.and_then(|v| crate::session::clean_text(&settings, &v));
        let mission_given = update.mission.is_some() || update.background.is_some();
        let disposition_given = update.disposition.is_some()
            || update.disposition_skepticism.is_some()
            || update.disposition_literalism.is_some()
            || update.disposition_empathy.is_some();
        if let Some(name) = keep(update.name) {
            profile.name = name;
        }
        // Hindsight 1.1 keeps one text under both names: setting either sets both, and given
        // both, `mission` wins, as on the server (the last given won: review111 #1).
        if let Some(text) = keep(update.mission).or_else(|| keep(update.background)) {
            profile.mission = text.clone();
            profile.background = Some(text);
        }
        if let Some(d) = update.disposition {
            if [d.skepticism, d.literalism, d.empathy].iter().any(|v| !(1..=5).contains(v)) {
                return Err(CompatError::Invalid("disposition traits must be between 1 and 5".into()));
            }
            profile.disposition = d;
        }
        // The flat form, each trait on its own, as Hindsight 1.1 still takes it.
        let d = &mut profile.disposition;
        for (name, value, slot) in [
            ("disposition_skepticism", update.disposition_skepticism, &mut d.skepticism),
            ("disposition_literalism", update.disposition_literalism, &mut d.literalism),
            ("disposition_empathy", update.disposition_empathy, &mut d.empathy),
        ] {
            let Some(value) = value else { continue };
            *slot = u8::try_from(value)
                .ok()
                .filter(|v| (1..=5).contains(v))
                .ok_or_else(|| CompatError::Invalid(format!("{name} must be between 1 and 5")))?;
        }
        let reflect_mission = keep(update.reflect_mission);
        if let Some(m) = &reflect_mission {
            // Hindsight 1.1 keeps the reflect mission as the bank's mission (and background).
            // The retain mission steers its LLM's fact extraction, which mneme does not do.
            profile.mission = m.clone();
            profile.background = Some(m.clone());
        }
        // Checked once the body is read, as the server reads it before it looks for the bank.
        if write == BankWrite::Change && !self.bank_exists(bank).await? {
            return Err(CompatError::NotFound(format!("Bank '{bank}' not found")));
        }
        // A server that reflects is given what steers it (kept only here, its reflect went on
        // without the mission and disposition the client set: review59 #9).
        let mission_set = mission_given || reflect_mission.is_some();
        let disposition_set = disposition_given;
        let d = &profile.disposition;
        let forwarded = mneme_core::BankProfileUpdate {
            mission: mission_set.then(|| profile.mission.clone()),
            disposition: disposition_set.then_some([d.skepticism, d.literalism, d.empathy]),
        };
        self.queue.backend().set_bank_profile(bank, &forwarded).await?;
        self.spool.save_record(BANK_RECORD, bank, serde_json::to_string(&profile).expect("plain data")).await?;
        Ok(profile)
    }

    /// Delivers what clients retained into `bank` and is still queued, waiting a moment at most
    /// (as a session's recall does for its own): an asynchronous retain was not recalled until
    /// the queue's interval had passed, 5 s, where the server takes well under one (review59 #3).
    async fn deliver_bank_retains(&self, bank: &str) {
        let queues = self.bank_queues(bank);
        if queues.is_empty() {
            return;
        }
        let wait = Duration::from_secs(1).min(self.settings().recall.timeout / 4);
        let flushes = queues.iter().map(|id| self.queue.flush(id));
        let _ = tokio::time::timeout(wait, futures_util::future::join_all(flushes)).await;
    }

    /// The queues of retains into `bank` (see `retain`'s queue ids) with something to deliver.
    fn bank_queues(&self, bank: &str) -> Vec<String> {
        let (whole, under) = (format!("hindsight:{bank}"), format!("hindsight:{bank}:"));
        self.queue.deliverable_among(|id| id == whole || id.starts_with(&under))
    }

    /// Whether `bank` is one there is: it has a profile, or memories (as the server makes a
    /// bank by writing to it). Said to be when the backend cannot tell.
    pub async fn bank_exists(&self, bank: &str) -> Result<bool, CompatError> {
        check_bank(bank)?;
        if self.spool.record(BANK_RECORD, bank).await?.is_some() {
            return Ok(true);
        }
        // Written to, and still queued: the server has it once that arrives (review61 #4). Asked
        // of the spool, which keeps each item's bank: a queue's id cannot tell bank `a` with
        // session `b:s` from bank `a:b` with session `s` (review62 #5).
        if self.spool.holds_bank(bank).await? {
            return Ok(true);
        }
        Ok(match self.queue.backend().banks().await {
            Ok(banks) => banks.iter().any(|b| b.bank == bank),
            Err(_) => true,
        })
    }

    /// A bank's profile (the defaults for a bank never configured: Hindsight creates banks on use).
    pub async fn bank(&self, bank: &str) -> Result<BankProfile, CompatError> {
        check_bank(bank)?;
        let stored = self.spool.record(BANK_RECORD, bank).await?;
        Ok(stored.and_then(|v| serde_json::from_str(&v).ok()).unwrap_or_else(|| BankProfile {
            bank_id: bank.to_owned(),
            name: bank.to_owned(),
            disposition: Disposition::default(),
            mission: String::new(),
            background: None,
        }))
    }

    /// One page of the banks with a profile whose id or name holds `q` (any case), by id.
    pub async fn banks(&self, q: Option<&str>, limit: usize, offset: usize) -> Result<BankList, CompatError> {
        let stored = self.spool.records(BANK_RECORD, "").await?;
        let wanted = q.map(str::to_lowercase).filter(|q| !q.is_empty());
        let mut profiles: Vec<BankProfile> = stored
            .into_iter()
            .filter_map(|(_, v)| serde_json::from_str::<BankProfile>(&v).ok())
            .filter(|p| {
                wanted
                    .as_ref()
                    .is_none_or(|q| p.bank_id.to_lowercase().contains(q) || p.name.to_lowercase().contains(q))
            })
            .collect();
        profiles.sort_by(|a, b| a.bank_id.cmp(&b.bank_id));
        let total = profiles.len();
        let banks = profiles
            .into_iter()
            .skip(offset)
            .take(limit)
            .map(|p| BankListItem {
                bank_id: p.bank_id,
                name: Some(p.name),
                disposition: p.disposition,
                mission: Some(p.mission),
                created_at: None,
                updated_at: None,
            })
            .collect();
        Ok(BankList { banks, total, limit, offset })
    }
}

const BANK_RECORD: &str = "hindsight_bank";

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

/// The longest `metadata.session_id` a /hindsight retain's queue is named by as it is.
const MAX_QUEUE_SESSION_LEN: usize = 128;

/// Spans a document was left open in, by `{bank}/{document}` (a bank holds no `/`).
const DOCUMENT_OPEN: &str = "hindsight_document_open";

fn document_key(bank: &str, document: &str) -> String {
    format!("{bank}/{document}")
}

/// What [`HindsightApi::keep_documents_open`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// Only the documents left in more spans than were kept.
    Opened,
    /// Every change.
    All,
}

/// Whether each document a retain names (its id as stored: trimmed) is appended to: as the
/// Hindsight server reads a request, by the first of its items that names a mode (`append`, or
/// `replace`), else replaced. Read item by item, a request of an appending item and one that
/// named no mode replaced the document's earlier version, which the server keeps.
fn document_modes(items: &[MemoryItemIn]) -> HashMap<String, bool> {
    let mut modes = HashMap::new();
    for item in items {
        if let (Some(document), Some(mode)) = (item.document_id.as_deref(), item.update_mode) {
            modes.entry(document.trim().to_owned()).or_insert(mode == UpdateMode::Append);
        }
    }
    modes
}

/// Whether `item` adds to its document ([`document_modes`]); an item of no document appends
/// when it says so (refused: an append needs a document).
fn item_appends(item: &MemoryItemIn, modes: &HashMap<String, bool>) -> bool {
    match item.document_id.as_deref() {
        Some(document) => modes.get(document.trim()).copied().unwrap_or(false),
        None => item.update_mode == Some(UpdateMode::Append),
    }
}

/// Each item's content cleaned, the items of one document in order with the private spans each
/// leaves open carried into the next, from those its version before left open (`open_before`)
/// when the document's first item appends, else from none; the items without a document are
/// read in order too (a span split across two items left the item between in the clear).
/// Returns the contents and the spans each document is left open in.
fn clean_by_document<C: AsRef<str>>(
    settings: &Settings,
    items: &[MemoryItemIn],
    contents: &[C],
    open_before: &HashMap<String, usize>,
    modes: &HashMap<String, bool>,
) -> (Vec<Option<String>>, HashMap<String, usize>) {
    let mut open: HashMap<Option<&str>, usize> = HashMap::new();
    let cleaned = items
        .iter()
        .zip(contents)
        .map(|(item, content)| {
            // Keyed as the ids are stored: trimmed ("t" and "t " are one document).
            let document = item.document_id.as_deref().map(str::trim);
            let before = open.entry(document).or_insert_with(|| match document {
                Some(d) if item_appends(item, modes) => open_before.get(d).copied().unwrap_or(0),
                _ => 0,
            });
            let (cleaned, after) = crate::session::clean_within(settings, content.as_ref(), *before);
            *before = after;
            cleaned
        })
        .collect();
    let open_after = open.into_iter().filter_map(|(d, n)| Some((d?.to_owned(), n))).collect();
    (cleaned, open_after)
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
