//! Deleting again what a retain the server was already running stores after a forget or a clear.
//!
//! Hindsight stops a running retain only between documents (its worker looks at the operation's
//! status at each), and once an operation is marked cancelled its status no longer says when the
//! worker stopped. A forget that cancelled a running retain and deleted at once found the
//! document the worker was on stored again after the delete: the forgotten text was back. So a
//! forget or a clear cancels only the retains still queued, leaves the running ones to finish
//! (their status then says when), and deletes their documents once more after they have. A
//! queued retain a worker took just before its cancel arrived runs on the same way, with
//! nothing to say so: its document is deleted once more after `hindsight.retain_timeout`.
//! Never when mneme itself retained or imported to that document in between (the second delete
//! would take that too), and only documents: a clear of a bank does not delete the whole bank
//! again (what other clients wrote since would go with it).

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

/// A delete owed: of `document` in `bank`.
#[derive(Debug)]
struct Watch {
    bank: String,
    document: String,
    /// mneme retained to the document after the delete it follows.
    spoiled: Arc<AtomicBool>,
}

/// What a forget or a clear owes: the documents to delete once more, after the retains
/// `running` (operation ids) have finished and at least `at_least` has passed.
#[derive(Debug, Default)]
pub(crate) struct Owed {
    pub documents: Vec<String>,
    pub running: Vec<String>,
    pub at_least: Duration,
}

impl Redeletes {
    /// mneme is sending a retain or an import of `documents` to `bank`: a delete owed there
    /// would take it too, so it is not made.
    pub(crate) fn retaining<'a>(&self, bank: &str, documents: impl Iterator<Item = &'a str>) {
        let watches = self.watches.lock().unwrap_or_else(|e| e.into_inner());
        if watches.is_empty() {
            return;
        }
        for document in documents {
            for w in watches.iter().filter(|w| w.bank == bank && w.document == document) {
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

    fn watch(&self, bank: &str, document: &str) -> Arc<AtomicBool> {
        let spoiled = Arc::new(AtomicBool::new(false));
        let mut watches = self.watches.lock().unwrap_or_else(|e| e.into_inner());
        // Those whose task ended hold the only reference.
        watches.retain(|w| Arc::strong_count(&w.spoiled) > 1);
        watches.push(Watch { bank: bank.to_owned(), document: document.to_owned(), spoiled: spoiled.clone() });
        spoiled
    }
}

impl Drop for Redeletes {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl HindsightBackend {
    /// Deletes `owed.documents` of `bank` again once the retains `owed.running` have finished
    /// and `owed.at_least` has passed, in the background. Not a document mneme retained to in
    /// between, nor once the backend is gone, nor after a running retain outlasted
    /// [`WAITED_AT_MOST`].
    pub(crate) fn delete_again_after(&self, bank: &str, owed: Owed) {
        if owed.documents.is_empty() {
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
        let watched: Vec<(String, Arc<AtomicBool>)> =
            owed.documents.iter().map(|d| (d.clone(), self.redeletes().watch(bank, d))).collect();
        let stop = self.redeletes().stop.child_token();
        let bank = bank.to_owned();
        tokio::spawn(async move {
            let waited = async {
                let started = Instant::now();
                let finished = detached.wait_until_finished(&bank, &owed.running).await;
                tokio::time::sleep(owed.at_least.saturating_sub(started.elapsed())).await;
                finished
            };
            match stop.run_until_cancelled(waited).await {
                None => return,
                Some(false) => {
                    tracing::warn!(
                        bank,
                        "a retain the server was running when its documents were deleted is still running after {} minutes: not deleted again",
                        WAITED_AT_MOST.as_secs() / 60
                    );
                    return;
                }
                Some(true) => {}
            }
            for (document, spoiled) in watched {
                if spoiled.load(Ordering::SeqCst) {
                    tracing::info!(bank, "document {document:?} not deleted again: mneme retained to it since");
                    continue;
                }
                match detached.delete_again(&bank, &document).await {
                    Ok(true) => tracing::info!(
                        bank,
                        "deleted document {document:?} again: a retain the server was running when it was deleted stored it after"
                    ),
                    Ok(false) => {}
                    Err(e) => tracing::warn!(
                        bank,
                        "a retain the server was running when document {document:?} was deleted may have stored it again, and deleting it again failed: {e}"
                    ),
                }
            }
        });
    }

    /// Waits until none of `running` is queued or running on the server (or it is gone), up to
    /// [`WAITED_AT_MOST`]; an unreachable server is looked at again until then. Whether they
    /// finished.
    async fn wait_until_finished(&self, bank: &str, running: &[String]) -> bool {
        let deadline = Instant::now() + WAITED_AT_MOST;
        'ops: for id in running {
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
                    Ok(_) => continue 'ops,
                    Err(e) => tracing::debug!(bank, id, "cannot see whether a running retain finished: {e}"),
                }
            }
            return false;
        }
        true
    }

    /// One delete of a document; whether there was something to delete.
    async fn delete_again(&self, bank: &str, document: &str) -> Result<bool, mneme_core::BackendError> {
        let url = self.bank_url(bank, &["documents", document])?;
        let answer: Option<serde_json::Value> = self.send_delete("delete again", url, self.timeout()).await?;
        Ok(answer.is_some())
    }
}
