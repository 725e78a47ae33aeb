//! Hindsight's asynchronous operations: waiting until a retain the server accepted is stored,
//! and cancelling those still queued before a clear or a forget deletes what they would store.

use std::time::{Duration, Instant};

use mneme_core::BackendError;
use reqwest::{Method, Url};
use serde::Deserialize;

use crate::backend::HindsightBackend;
use crate::wire::OperationStatus;

/// The first look at an asynchronous retain's operation after the server accepted it, and the
/// longest pause between looks (the pause doubles).
const OPERATION_FIRST_LOOK: Duration = Duration::from_millis(50);
const OPERATION_LOOK_MAX: Duration = Duration::from_secs(2);

/// An operation still `processing` after this many `retain_timeout`s (an hour by default) is
/// taken for stuck: each look then uses up an attempt, so that its batch reaches the dead
/// letters instead of blocking its session for ever.
const STUCK_AFTER_TIMEOUTS: u32 = 60;

/// Imports of one chunk deleted and imported again, looked through before a new id is taken.
const MAX_IMPORT_GENERATIONS: usize = 64;

/// Pages of queued operations looked through before a clear or forget (100 each).
const MAX_OPERATION_PAGES: usize = 20;

/// What a cancel came to.
enum Cancel {
    /// Cancelled.
    Done,
    /// No longer queued (finished, or gone): it left the list.
    Gone,
    /// Refused otherwise, or not answered: it may still be queued.
    Failed,
}

/// What a cancel pass found: the queued retains it cancelled (and their documents), and those
/// the server was already running (operation ids and documents), left to finish.
#[derive(Debug, Default)]
pub(crate) struct PendingRetains {
    pub cancelled: usize,
    pub cancelled_documents: Vec<String>,
    pub running: Vec<(String, Option<String>)>,
}

impl PendingRetains {
    /// What the answer to a forget or clear says of the running retains ("" when none).
    pub fn running_note(&self) -> String {
        match self.running.len() {
            0 => String::new(),
            n => format!(
                " The server was already storing {n} retain(s) there: they are left to finish, and what they store deleted again once they have."
            ),
        }
    }

    /// The deletes owed (see `redelete`): the documents of the running retains once they have
    /// finished, and those of the cancelled ones after `retain_timeout` (a worker may have taken
    /// one just before its cancel arrived, and runs it on with nothing to say so). `only`: the
    /// document forgotten, when one was.
    pub fn owed(&self, only: Option<&str>, retain_timeout: Duration) -> crate::redelete::Owed {
        let mut documents: Vec<String> = self.running.iter().filter_map(|(_, d)| d.clone()).collect();
        documents.extend(self.cancelled_documents.iter().cloned());
        if let Some(only) = only {
            documents = if documents.is_empty() { Vec::new() } else { vec![only.to_owned()] };
        }
        documents.sort();
        documents.dedup();
        crate::redelete::Owed {
            documents,
            running: self.running.iter().map(|(id, _)| id.clone()).collect(),
            at_least: if self.cancelled > 0 { retain_timeout } else { Duration::ZERO },
        }
    }
}

/// One operation as `GET …/operations` lists it.
#[derive(Debug, Deserialize)]
struct ListedOperation {
    id: String,
    #[serde(default)]
    task_type: String,
    #[serde(default)]
    document_id: Option<String>,
}

/// `GET …/operations`.
#[derive(Debug, Deserialize)]
struct OperationList {
    #[serde(default)]
    operations: Vec<ListedOperation>,
}

impl HindsightBackend {
    /// Waits until the server has done an asynchronous retain it accepted. Accepted is only
    /// queued: the server's worker may still fail it (its LLM key refused, its embedder down past
    /// its own retries), and a resend under the same operation id is answered "success" from
    /// the failed operation without storing anything. So a failed operation is re-queued on the
    /// server and the delivery fails (an attempt: once they run out the batch is a dead letter,
    /// with the server's reason); one still running after `retain_timeout` fails the delivery
    /// as an outage (no attempt used), and the resend looks again. Gone (404, pruned long after
    /// it finished, or a server without the route) and cancelled (a clear of the bank) count as
    /// done.
    pub(crate) async fn wait_for_operation(&self, bank: &str, operation_id: &str) -> Result<(), BackendError> {
        let url = self.bank_url(bank, &["operations", operation_id])?;
        let deadline = Instant::now() + self.retain_timeout();
        let mut pause = OPERATION_FIRST_LOOK;
        loop {
            let answer: Option<OperationStatus> =
                self.send("retain status", Method::GET, url.clone(), None::<&()>, self.timeout()).await?;
            let Some(op) = answer else {
                self.finished(operation_id);
                return Ok(());
            };
            let unfinished_since = match op.status.as_str() {
                "completed" | "not_found" | "cancelled" | "failed" => {
                    self.finished(operation_id);
                    None
                }
                _ => Some(self.unfinished_since(operation_id)),
            };
            match op.status.as_str() {
                "completed" | "not_found" => return Ok(()),
                "cancelled" => {
                    tracing::info!(bank, operation_id, "Hindsight cancelled a retain (a clear of the bank)");
                    return Ok(());
                }
                "failed" => {
                    let why = op.error_message.as_deref().map(mneme_core::text::strip_private);
                    let why = why.filter(|w| !w.trim().is_empty()).unwrap_or_else(|| "no reason given".into());
                    let retry = self.bank_url(bank, &["operations", operation_id, "retry"])?;
                    let timeout = self.timeout();
                    let requeued =
                        self.send::<serde_json::Value>("retain retry", Method::POST, retry, None::<&()>, timeout).await;
                    let then = match requeued {
                        Ok(Some(_)) => "re-queued there; checked again on the next attempt",
                        _ => "it could not be re-queued there yet; tried again on the next attempt",
                    };
                    return Err(BackendError::transient(format!(
                        "retain: Hindsight accepted the items but could not store them ({why}); {then}"
                    )));
                }
                // pending, processing, or a state this client does not know yet. A server behind
                // on its work is an outage, not the batch's fault: it uses up no attempt. Unless
                // it has stood so for far longer than any backlog takes: a worker that died
                // leaves its operation `processing` for good (Hindsight issue #4131), and as an
                // outage it held the session's queue for ever, with one notice.
                _ if Instant::now() + pause > deadline => {
                    // Only `processing`: one still `pending` waits behind the server's backlog,
                    // which may be hours long after a large import, and is an outage.
                    let stuck_for = unfinished_since.map(|t| t.elapsed()).unwrap_or_default();
                    if op.status == "processing" && stuck_for > self.retain_timeout() * STUCK_AFTER_TIMEOUTS {
                        return Err(BackendError::transient(format!(
                            "retain: Hindsight's operation {operation_id} has been {} for {} minutes: its worker may have died (restart the server; once the batch is a dead letter, `mneme retry` sends it again); counted as a failed attempt",
                            op.status,
                            stuck_for.as_secs() / 60
                        )));
                    }
                    return Err(BackendError::Unavailable {
                        reason: format!(
                            "retain: Hindsight has not finished storing the items after {:?} (operation {operation_id} is {}); looked at again later",
                            self.retain_timeout(),
                            op.status
                        ),
                        retry_after: None,
                    });
                }
                _ => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(OPERATION_LOOK_MAX);
                }
            }
        }
    }

    /// The id an import chunk goes under: `chunk_id` itself, unless a document a previous import
    /// of it stored was deleted since (a clear of the bank, a forget): the server answers an
    /// operation id it has seen from what it did then, so that import stored nothing and said
    /// it had. Then the next generation (`{chunk_id}/again-{k}`) that is new, or whose import
    /// still stands. `documents` are the chunk's, looked up to tell: every one of them (only the
    /// first was, and a backup restored after some of its documents were forgotten restored
    /// none of them).
    pub(crate) async fn import_generation(
        &self,
        bank: &str,
        chunk_id: &str,
        documents: &[&str],
    ) -> Result<String, BackendError> {
        let mut id = chunk_id.to_owned();
        for k in 1..=MAX_IMPORT_GENERATIONS {
            let op = crate::parts::part_operation_id(&id, 0);
            let url = self.bank_url(bank, &["operations", &op])?;
            let seen: Option<OperationStatus> =
                self.send("import status", Method::GET, url, None::<&()>, self.timeout()).await?;
            // Failed (its LLM key refused): a resend would be answered from it, storing nothing,
            // so it is re-queued on the server, and this import stands on it.
            if seen.as_ref().is_some_and(|s| s.status == "failed") {
                let retry = self.bank_url(bank, &["operations", &op, "retry"])?;
                let timeout = self.timeout();
                self.send::<serde_json::Value>("import retry", Method::POST, retry, None::<&()>, timeout).await?;
                return Ok(id);
            }
            // New, or still to be done (pending, processing): this one.
            let done = seen.is_some_and(|s| matches!(s.status.as_str(), "completed" | "cancelled"));
            if !done || documents.is_empty() {
                return Ok(id);
            }
            if self.all_there(bank, documents).await? {
                return Ok(id); // imported and still there: answered from the first, nothing twice
            }
            id = format!("{chunk_id}/again-{k}");
        }
        Ok(id)
    }

    /// Whether the server holds every one of `documents` in `bank`.
    async fn all_there(&self, bank: &str, documents: &[&str]) -> Result<bool, BackendError> {
        for document in documents {
            let url = self.bank_url(bank, &["documents", document])?;
            let found: Option<serde_json::Value> =
                self.send("import document", Method::GET, url, None::<&()>, self.timeout()).await?;
            if found.is_none() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Cancels the bank's retains still queued on the server (those of `document` only, when
    /// given): run after a clear or a forget, they would store again what it deleted. Those the
    /// server is already running are left to finish, and listed: a cancel would stop one only
    /// after the document it is on, with nothing to say when (see `redelete`), so the caller
    /// deletes again once they have. Best effort: what cannot be listed or cancelled is logged,
    /// and the clear goes on.
    pub(crate) async fn cancel_pending_retains(&self, bank: &str, document: Option<&str>) -> PendingRetains {
        let mut found = PendingRetains::default();
        for status in ["pending", "processing"] {
            let mut kept = 0usize; // listed and left alone: the next page starts after them
            for _ in 0..MAX_OPERATION_PAGES {
                let Ok(mut url) = self.bank_url(bank, &["operations"]) else { return found };
                url.query_pairs_mut()
                    .append_pair("status", status)
                    .append_pair("limit", "100")
                    .append_pair("offset", &kept.to_string());
                let page = match self
                    .send::<OperationList>("list operations", Method::GET, url, None::<&()>, self.timeout())
                    .await
                {
                    Ok(Some(page)) => page.operations,
                    Ok(None) => return found, // no such bank, or a server without the route
                    Err(e) => {
                        tracing::warn!(bank, "cannot list the bank's queued retains to cancel them: {e}");
                        return found;
                    }
                };
                if page.is_empty() {
                    break;
                }
                for op in page {
                    let ours = op.task_type.contains("retain")
                        && document.is_none_or(|d| op.document_id.as_deref() == Some(d));
                    if !ours {
                        kept += 1;
                        continue;
                    }
                    if status == "processing" {
                        kept += 1;
                        if !found.running.iter().any(|(id, _)| *id == op.id) {
                            found.running.push((op.id, op.document_id));
                        }
                        continue;
                    }
                    // A cancel refused (409: it finished meanwhile, or went with its parent)
                    // left the list as a cancelled one did: counted as kept, the next page would
                    // start past a retain still queued. One that failed otherwise stays listed.
                    match self.cancel(bank, &op.id).await {
                        Cancel::Done => {
                            found.cancelled += 1;
                            found.cancelled_documents.extend(op.document_id);
                        }
                        Cancel::Gone => {}
                        Cancel::Failed => kept += 1,
                    }
                }
            }
        }
        if found.cancelled > 0 || !found.running.is_empty() {
            tracing::info!(
                bank,
                cancelled = found.cancelled,
                running = found.running.len(),
                "cancelled the retains still queued on the server before deleting"
            );
        }
        found
    }

    /// Cancels one operation.
    async fn cancel(&self, bank: &str, id: &str) -> Cancel {
        let Ok(url): Result<Url, _> = self.bank_url(bank, &["operations", id]) else { return Cancel::Failed };
        let timeout = self.timeout();
        match self.send::<serde_json::Value>("cancel operation", Method::DELETE, url, None::<&()>, timeout).await {
            Ok(Some(_)) => Cancel::Done,
            Ok(None) => Cancel::Gone,
            // 409: it finished meanwhile (or went with its parent). Read from the status, not
            // from anywhere in the reason: the server's detail names the operation, whose id may
            // hold "409".
            Err(e) if e.to_string().starts_with("cancel operation: Hindsight answered 409") => Cancel::Gone,
            Err(e) => {
                tracing::warn!(bank, id, "a retain queued on the server could not be cancelled: {e}");
                Cancel::Failed
            }
        }
    }
}
