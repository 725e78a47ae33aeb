//! `POST …/memories` as Hindsight takes it: the items checked and cleaned, each document's
//! appends kept in order (its open parts held while it is retained), the items spooled for
//! delivery, and what a forget leaves of a document.

use super::*;

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

impl HindsightApi {
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
}
