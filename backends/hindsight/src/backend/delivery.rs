//! How [`HindsightBackend`] stores: a delivery's parts, an import's chunks, and the folded
//! documents either sends (see `parts`).

use std::collections::BTreeMap;
use std::time::Duration;

use mneme_core::transfer::{chunks_of_whole_documents, ChunkLimit};
use mneme_core::*;
use reqwest::Method;

use super::requests::accepted;
use super::*;

/// Memories sent in one import request.
const IMPORT_CHUNK: usize = 100;

/// The id of an import chunk: of its bank and its memories whole. The server answers an
/// operation id it has seen with what it did then, and refuses it (409) with another body: from
/// the ids alone, importing an edited export failed, and a chunk of one memory (its id 32 hex
/// digits) had the memory's id whatever the bank, so importing it into a second bank did too.
/// (Ids of each import run were tried: a second import of a document of several memories then
/// raced the server's asynchronous work on the first, and the document kept only its first part.
/// A chunk imported again after its first document was deleted (a clear of the bank) goes under
/// ids of a new generation: see `import_generation`.)
pub(super) fn import_chunk_id(bank: &str, chunk: &[&StoredMemory]) -> String {
    let mut key = format!("import:{bank}");
    for m in chunk {
        key.push('\n');
        key.push_str(&serde_json::to_string(m).unwrap_or_else(|_| m.id.clone()));
    }
    hash128(&key)
}

/// What makes the operation ids of the retains sent after a folded document's delete this
/// attempt's own (the clock, in nanoseconds).
fn attempt_mark() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}

/// A folded document's failure, saying that its earlier version on the server is gone: the new
/// one is only in mneme until a retry stores it (review62 #2).
fn said_deleted(error: BackendError) -> BackendError {
    let note = "; the document's earlier version on the server was deleted first: the new one waits in mneme";
    match error {
        BackendError::Transient { reason, retry_after } => {
            BackendError::Transient { reason: reason + note, retry_after }
        }
        BackendError::Unavailable { reason, retry_after } => {
            BackendError::Unavailable { reason: reason + note, retry_after }
        }
        BackendError::Unreachable { reason } => BackendError::Unreachable { reason: reason + note },
        BackendError::Permanent { reason } => BackendError::Permanent { reason: reason + note },
        other => other,
    }
}

impl HindsightBackend {
    /// `error` (a transient failure of a retain) as an outage when the server does not answer
    /// its health check either (hung, stopped, a proxy with nothing behind it): a hung server's
    /// timeouts used up every batch's attempts, and its memories were dead letters, not
    /// delivered when it came back. One that answers keeps `error`, an attempt.
    async fn outage_unless_answering(&self, error: BackendError) -> BackendError {
        let quick = self.config.timeout.min(Duration::from_secs(3));
        let health = self.send::<serde_json::Value>("health", Method::GET, self.url(&["health"]), None::<&()>, quick);
        match health.await {
            Ok(_) => error,
            Err(health) => BackendError::Unreachable {
                reason: format!("{error}; the server does not answer its health check either ({health})"),
            },
        }
    }

    /// Imports `memories` (see [`MemoryBackend::import`]).
    pub(super) async fn import_memories(&self, memories: &[StoredMemory]) -> Result<Option<u64>, BackendError> {
        // Each memory is its own document (its id unless it has one), so a re-import replaces
        // instead of duplicating; each chunk's operation id derives from its bank and its
        // memories (see `import_chunk_id`).
        // A request holds one bank, and a document's memories go in one chunk: the server stores
        // a document as what one retain holds of it, replacing what it had, so one that has more
        // than one memory is sent as a replace and appends, in order (see `parts::import_parts`).
        let mut banks: Vec<(&str, Vec<&StoredMemory>)> = Vec::new();
        for m in memories {
            match banks.iter_mut().find(|(bank, _)| *bank == m.bank) {
                Some((_, of_bank)) => of_bank.push(m),
                None => banks.push((&m.bank, vec![m])),
            }
        }
        for (bank, of_bank) in banks {
            // A delete owed after a forget or clear (see `redelete`) would take what is imported.
            let documents = of_bank.iter().flat_map(|m| m.document_id.as_deref().into_iter().chain([m.id.as_str()]));
            self.redeletes.retaining(bank, documents);
            for chunk in chunks_of_whole_documents(of_bank, ChunkLimit::items(IMPORT_CHUNK)) {
                let chunk_id = import_chunk_id(bank, &chunk);
                // A memory of no document goes as a document of its own, marked (see
                // `LOOSE_MEMORY_KEY`): the one its mark names, else its id.
                let loose_document = |m: &StoredMemory| {
                    m.metadata.get(crate::wire::LOOSE_MEMORY_KEY).cloned().unwrap_or_else(|| m.id.clone())
                };
                // Its type goes along too (see `TYPE_KEY`): the server would make it its own.
                let metadata: Vec<BTreeMap<String, String>> = chunk
                    .iter()
                    .map(|m| {
                        let mut marked = m.metadata.clone();
                        // (A client's own value under the key is left as it is.)
                        marked.entry(crate::wire::TYPE_KEY.to_owned()).or_insert_with(|| m.kind.as_str().to_owned());
                        if m.document_id.is_none() {
                            marked.insert(crate::wire::LOOSE_MEMORY_KEY.to_owned(), loose_document(m));
                        }
                        marked
                    })
                    .collect();
                let items = chunk
                    .iter()
                    .zip(&metadata)
                    .map(|(m, metadata)| RetainItem {
                        content: &m.content,
                        context: m.context.as_deref(),
                        timestamp: retain_timestamp(&m.created_at),
                        metadata: crate::wire::SentMetadata::own(metadata),
                        tags: &m.tags,
                        document_id: Some(
                            m.document_id.as_deref().unwrap_or_else(|| &metadata[crate::wire::LOOSE_MEMORY_KEY]),
                        ),
                        update_mode: None,
                    })
                    .collect();
                self.ensure_bank(bank).await;
                let url = self.bank_url(bank, &["memories"])?;
                let parts = parts::import_parts(items);
                let mut documents: Vec<&str> =
                    parts.iter().flat_map(|p| &p.items).filter_map(|i| i.document_id).collect();
                documents.sort_unstable();
                documents.dedup();
                let chunk_id = self.import_generation(bank, &chunk_id, &documents).await?;
                for (n, part) in parts.into_iter().enumerate() {
                    let id = parts::part_operation_id(&chunk_id, n);
                    if !part.synchronous {
                        self.import_part(bank, &url, RetainRequest::asynchronous(part.items, id)).await?;
                        continue;
                    }
                    // Deleted first, as a delivery's fold is (a second synchronous retain of a
                    // document gives each memory every item's tags); failed, items alike go one
                    // by one, as a delivery's do.
                    let document = part.items[0].document_id.unwrap_or_default();
                    let alike = parts::alike_wire(&part.items);
                    let folded = async {
                        self.delete_before_fold(bank, document).await?;
                        self.import_part(bank, &url, RetainRequest::synchronous(part.items.clone())).await
                    };
                    match folded.await {
                        Ok(()) => {}
                        Err(_) if alike => {
                            // Ids of this run's own, after the delete (see `send_folded`).
                            let mark = attempt_mark();
                            for (k, mut item) in part.items.into_iter().enumerate() {
                                item.update_mode = (k > 0).then_some("append");
                                let id = parts::part_operation_id(&format!("{id}/one-by-one-{mark}"), k);
                                self.import_part(bank, &url, RetainRequest::asynchronous(vec![item], id)).await?;
                            }
                        }
                        Err(e) => return Err(said_deleted(e)),
                    }
                }
            }
        }
        Ok(None)
    }

    /// Delivers `batch` (see [`MemoryBackend::retain`]).
    pub(super) async fn deliver(&self, scope: &Scope, batch: &RetainBatch) -> Result<(), BackendError> {
        self.ensure_bank(&scope.bank).await;
        let url = self.bank_url(&scope.bank, &["memories"])?;
        self.redeletes.retaining(&scope.bank, batch.items.iter().filter_map(|i| i.document_id.as_deref()));
        // One request per part (see `parts`), in order: a resend after any failure sends them all
        // again, and those the server already has are answered from their operation ids.
        // Each part is done once the server has stored it, not when it has queued it: the
        // spool lets go of a batch only then, and a document's next part never overtakes it.
        // A part that fails after others were stored says which: they are delivered, and are
        // not dead-lettered with the rest (see `BackendError::PartlyStored`).
        let mut stored: Vec<String> = Vec::new();
        for part in parts::parts(&batch.id, &batch.items) {
            let ids = part.item_ids.clone();
            let sent = match part.synchronous {
                false => self.send_part(&scope.bank, &url, part).await,
                true => {
                    let items: Vec<MemoryItem> = batch.items.iter().filter(|i| ids.contains(&i.id)).cloned().collect();
                    self.send_folded(&scope.bank, &url, &batch.id, part, &items).await
                }
            };
            let error = match sent {
                Ok(()) => {
                    stored.extend(ids);
                    continue;
                }
                // A timeout or a 5xx counts as an attempt (this very batch may be choking the
                // server) only while the server answers its health check: when that fails too,
                // the server does not answer at all, and an outage dead-letters nothing.
                Err(error @ BackendError::Transient { .. }) => self.outage_unless_answering(error).await,
                Err(error) => error,
            };
            return Err(match stored.is_empty() {
                true => error,
                false => BackendError::PartlyStored { stored, error: Box::new(error) },
            });
        }
        Ok(())
    }

    /// Sends a document's items folded into one synchronous retain (see `parts`), after deleting
    /// the document: the server answers a second synchronous retain of a document (a resend, after
    /// a lost reply or a later part's failure) by giving each of its memories every item's tags
    /// and the first item's metadata, another project's tag among them (review61 #1). When it
    /// fails and its items all carry the same tags and metadata, it goes item by item, as
    /// appends, in the same attempt (a server whose LLM outlasts `retain_timeout` cancels a
    /// synchronous retain the client gave up on, on every attempt); items with their own are
    /// not, as the appends would give them the last one's (review61 #2): the error is the part's.
    async fn send_folded(
        &self,
        bank: &str,
        url: &reqwest::Url,
        batch_id: &str,
        part: parts::Part<'_>,
        items: &[MemoryItem],
    ) -> Result<(), BackendError> {
        let document = items.first().and_then(|i| i.document_id.as_deref()).unwrap_or_default();
        let sent = async {
            self.delete_before_fold(bank, document).await?;
            self.send_part(bank, url, part).await
        };
        let error = match sent.await {
            Ok(()) => return Ok(()),
            Err(error) => error,
        };
        if !parts::alike(items) {
            return Err(said_deleted(error));
        }
        tracing::warn!(
            bank,
            "a document of {} memories sent at once failed ({error}); sent one memory at a time",
            items.len()
        );
        // Under operation ids of this attempt's own: the document was deleted, and the ids of an
        // earlier attempt's would be answered from the operations that stored what the delete
        // took, and store nothing (the whole document was lost: review62 #1).
        for one in parts::item_by_item(&format!("{batch_id}/after-delete-{}", attempt_mark()), items) {
            self.send_part(bank, url, one).await?;
        }
        Ok(())
    }

    /// Deletes `document` before its items go folded into a synchronous retain (see
    /// `send_folded`), first cancelling its retains still queued on the server: left by an
    /// earlier attempt (a kill while one waited), they would store its items again after it.
    async fn delete_before_fold(&self, bank: &str, document: &str) -> Result<(), BackendError> {
        self.cancel_pending_retains(bank, Some(document)).await;
        let url = self.bank_url(bank, &["documents", document])?;
        self.send_delete::<serde_json::Value>("replace document", url, self.config.timeout).await.map(drop)
    }

    /// Sends one request of an import. Not waited for, unlike a delivery's: an import answers one
    /// request of up to 500 memories, and the server's LLM may take minutes over them.
    async fn import_part(&self, bank: &str, url: &reqwest::Url, body: RetainRequest<'_>) -> Result<(), BackendError> {
        let answer = self.send("import", Method::POST, url.clone(), Some(&body), self.config.retain_timeout).await?;
        accepted("import", answer, bank)
    }

    /// Sends one part of a delivery and waits until the server has stored it (an asynchronous
    /// one: until its operation is done).
    async fn send_part(&self, bank: &str, url: &reqwest::Url, part: parts::Part<'_>) -> Result<(), BackendError> {
        let body = match part.synchronous {
            true => RetainRequest::synchronous(part.items),
            false => RetainRequest::asynchronous(part.items, part.operation_id),
        };
        let answer = self.send("retain", Method::POST, url.clone(), Some(&body), self.config.retain_timeout).await?;
        accepted("retain", answer, bank)?;
        match &body.operation_id {
            Some(operation) => self.wait_for_operation(bank, operation).await,
            None => Ok(()), // stored once answered
        }
    }

    /// logged and tried again on the next write; it never blocks writes.
    pub(super) async fn ensure_bank(&self, bank: &str) {
        if self.config.bank_mission.trim().is_empty()
            || self.ensured.lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains(bank)
        {
            return;
        }
        let body = BankRequest {
            reflect_mission: self.config.bank_mission.trim(),
            retain_mission: Some(self.config.retain_mission.trim()).filter(|m| !m.is_empty()),
        };
        let Ok(url) = self.bank_url(bank, &[]) else { return };
        match self.send::<serde_json::Value>("ensure bank", Method::PUT, url, Some(&body), self.config.timeout).await {
            Ok(Some(_)) => {
                self.ensured.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(bank.to_owned());
            }
            // Not set: a wrong api_url (writing a bank creates it), tried again next time.
            Ok(None) => {
                tracing::warn!(bank, "could not set the bank's mission: Hindsight answered 404 (will try again)")
            }
            Err(e) => tracing::warn!(bank, "could not set the bank's mission (will try again): {e}"),
        }
    }
}
