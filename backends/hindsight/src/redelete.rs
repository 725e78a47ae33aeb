//! Deleting again what a retain the server was already running stores after a forget or a clear.
//!
//! Hindsight stops a running retain only between documents (its worker looks at the operation's
//! status at each), and once an operation is marked cancelled its status no longer says when the
//! worker stopped. A forget that cancelled a running retain and deleted at once found the
//! document the worker was on stored again after the delete: the forgotten text was back. So a
//! forget or a clear cancels only the retains still queued, leaves the running ones to finish
//! (their status then says when), and deletes once more after they have. Unless mneme itself
//! retained to that document (or, after a clear, to that bank) in between: the second delete
//! would take that too.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::Method;
use tokio_util::sync::CancellationToken;

use crate::backend::HindsightBackend;
use crate::wire::OperationStatus;

/// The first look at a running retain, and the longest pause between looks (the pause doubles).
const FIRST_LOOK: Duration = Duration::from_secs(1);
const LONGEST_PAUSE: Duration = Duration::from_secs(30);
/// How long a running retain is waited for: an operation the server leaves running past this
/// (a worker that died) is not waited for any longer, and nothing is deleted again.
const WAITED_AT_MOST: Duration = Duration::from_secs(60 * 60);

/// The deletes owed once running retains finish; stopped when the backend goes (a switch, a
/// shutdown).
#[derive(Debug, Default)]
pub(crate) struct Redeletes {
    stop: CancellationToken,
    watches: Mutex<Vec<Watch>>,
}

/// A delete owed: of `document` in `bank`, or of the whole bank's memories.
#[derive(Debug)]
struct Watch {
    bank: String,
    document: Option<String>,
    /// mneme retained to what the delete would take, after the delete it follows.
    spoiled: Arc<AtomicBool>,
}

impl Redeletes {
    /// mneme is sending a retain of `documents` (an item without one: `None`) to `bank`: a delete
    /// owed there would take it too, so it is not made.
    pub(crate) fn retaining<'a>(&self, bank: &str, documents: impl Iterator<Item = Option<&'a str>>) {
        let watches = self.watches.lock().unwrap_or_else(|e| e.into_inner());
        if watches.is_empty() {
            return;
        }
        let documents: Vec<Option<&str>> = documents.collect();
        for w in watches.iter().filter(|w| w.bank == bank) {
            let taken = match &w.document {
                None => true,
                Some(d) => documents.contains(&Some(d.as_str())),
            };
            if taken {
                w.spoiled.store(true, Ordering::SeqCst);
            }
        }
    }

    /// How many deletes are owed now.
    pub(crate) fn owed(&self) -> usize {
        let mut watches = self.watches.lock().unwrap_or_else(|e| e.into_inner());
        watches.retain(|w| Arc::strong_count(&w.spoiled) > 1);
        watches.len()
    }

    fn watch(&self, bank: &str, document: Option<&str>) -> Arc<AtomicBool> {
        let spoiled = Arc::new(AtomicBool::new(false));
        let mut watches = self.watches.lock().unwrap_or_else(|e| e.into_inner());
        // Those whose task ended hold the only reference.
        watches.retain(|w| Arc::strong_count(&w.spoiled) > 1);
        watches.push(Watch { bank: bank.to_owned(), document: document.map(str::to_owned), spoiled: spoiled.clone() });
        spoiled
    }
}

impl Drop for Redeletes {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl HindsightBackend {
    /// Deletes `document` of `bank` (the bank's memories when `None`) again once the retains
    /// `running` (operation ids the server was running when it was deleted) have finished, in the
    /// background. Not when mneme retained there in between, nor once the backend is gone.
    pub(crate) fn delete_again_after(&self, bank: &str, document: Option<&str>, running: Vec<String>) {
        if running.is_empty() {
            return;
        }
        // A client of its own: the task outlives the request, not the backend (see `stop`).
        let detached = match HindsightBackend::new(self.config().clone()) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(bank, "cannot watch the retains the server is running: {e}");
                return;
            }
        };
        let spoiled = self.redeletes().watch(bank, document);
        let stop = self.redeletes().stop.child_token();
        let (bank, document) = (bank.to_owned(), document.map(str::to_owned));
        tokio::spawn(async move {
            if stop.run_until_cancelled(detached.wait_until_finished(&bank, &running)).await.is_none() {
                return;
            }
            if spoiled.load(Ordering::SeqCst) {
                tracing::info!(bank, "not deleted again: mneme retained there since");
                return;
            }
            let deleted = match &document {
                Some(id) => detached.delete_again(&bank, &["documents", id]).await,
                None => detached.delete_again(&bank, &["memories"]).await,
            };
            match (deleted, &document) {
                (Ok(true), Some(id)) => tracing::info!(
                    bank,
                    "deleted document {id:?} again: a retain the server was running when it was forgotten stored it after"
                ),
                (Ok(true), None) => {
                    tracing::info!(bank, "deleted the bank's memories again, after the retains the server was running")
                }
                (Ok(false), _) => {}
                (Err(e), _) => tracing::warn!(
                    bank,
                    "a retain the server was running when it was deleted may have stored again, and deleting it again failed: {e}"
                ),
            }
        });
    }

    /// Waits until none of `running` is queued or running on the server (or it is gone), up to
    /// [`WAITED_AT_MOST`]; an unreachable server is looked at again until then.
    async fn wait_until_finished(&self, bank: &str, running: &[String]) {
        let deadline = Instant::now() + WAITED_AT_MOST;
        for id in running {
            let Ok(url) = self.bank_url(bank, &["operations", id]) else { continue };
            let mut pause = FIRST_LOOK;
            while Instant::now() < deadline {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(LONGEST_PAUSE);
                let look = self.send::<OperationStatus>(
                    "retain status",
                    Method::GET,
                    url.clone(),
                    None::<&()>,
                    self.timeout(),
                );
                match look.await {
                    Ok(Some(op)) if matches!(op.status.as_str(), "pending" | "processing") => {}
                    Ok(_) => break,
                    Err(e) => tracing::debug!(bank, id, "cannot see whether a running retain finished: {e}"),
                }
            }
        }
    }

    /// One delete; whether there was something to delete.
    async fn delete_again(&self, bank: &str, tail: &[&str]) -> Result<bool, mneme_core::BackendError> {
        let url = self.bank_url(bank, tail)?;
        let answer: Option<serde_json::Value> = self.send_delete("delete again", url, self.timeout()).await?;
        Ok(answer.is_some())
    }
}
