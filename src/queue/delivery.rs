//! Delivering one batch: read it from the spool, hand it to the backend, and record what
//! happened — removed from the spool, retried after a backoff ([`super::retry`]), or moved to the
//! dead letters — with the notices and metrics that go with it.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use mneme_core::{BackendError, BackendId, RetainBatch, Scope};

use super::{retry, Inner, LastDelivery, SpoolFault, Trigger};
use crate::config::QueueSettings;
use crate::lock::MutexExt;
use crate::notices::Level;

/// What one delivery attempt came to.
pub(super) enum Step {
    /// Nothing to send: the session's queue is empty, or the backend stores nothing (`off`:
    /// held for the next one).
    Nothing,
    /// The spool could not be read, or the batch's id not written into it.
    SpoolFailed(SpoolFault),
    /// The backend stored this many items.
    Delivered(u64),
    /// The backend did not take `items`, and stored `delivered` before it failed (see
    /// `BackendError::PartlyStored`: counted once they leave the spool); `go_on` says whether
    /// the flush may try the next batch.
    Failed { items: u64, delivered: u64, go_on: bool },
    /// The backend was replaced while it ran (a switch's drain past its grace): the batch, not
    /// taken, goes to the new one, and the flush goes on there. Counted as failed, a `mneme
    /// flush` under way said they could not be delivered, and exited 1, as they were.
    Moved,
}

/// A delivery the backend did not take, as [`Inner::delivery_failed`] handles it.
struct FailedDelivery<'a> {
    session: &'a str,
    batch_id: &'a str,
    /// Items in the batch.
    items: u64,
    /// Attempts made before this one.
    attempts_before: u32,
    /// What was left of the session's backoff when this one was sent (an explicit flush does not
    /// wait it out).
    early_by: Option<std::time::Duration>,
    error: &'a BackendError,
    backend: BackendId,
}

impl Inner {
    /// Delivers the session's next batch (a resend keeps its batch id).
    pub(super) async fn deliver_next(self: &Arc<Self>, session: &str, settings: &QueueSettings) -> Step {
        let backend = self.backend();
        if !backend.capabilities().stores {
            return Step::Nothing; // held for the next storing backend
        }
        let batch = match self.spool.next_batch(session, settings.max_batch).await {
            Ok(next) => {
                self.set_aside(session, &next.set_aside, backend.id()).await;
                next.items
            }
            Err(e) => {
                tracing::error!(session, "cannot read the spool: {e}");
                return Step::SpoolFailed(if e.is_full() { SpoolFault::Full } else { SpoolFault::Failed });
            }
        };
        if batch.is_empty() {
            return Step::Nothing;
        }
        let n = batch.len() as u64;
        self.batcher.locked().taken(session, n);
        let batch_id = batch[0].batch_id.clone().expect("next_batch assigns a batch id");
        let scope = Scope { bank: batch[0].bank.clone(), tags: batch[0].item.tags.clone() };
        let attempts_before = batch[0].attempts;
        let seqs = batch[0].seq..=batch[batch.len() - 1].seq;
        let early_by = self.batcher.locked().backoff_left(session, self.clock.now());
        let delivery = RetainBatch { id: batch_id.clone(), items: batch.into_iter().map(|s| s.item).collect() };
        let started = Instant::now();
        // A delivery still running on a backend that was replaced (the switch's drain ran out of
        // its grace) stops, and the batch goes to the new one: a Hindsight server behind on its
        // work held it, and every flush of its queue, for minutes. The old backend may still
        // store it (a server finishing a retain it was running): the docs say so. One that
        // finishes what it began (the local store) is awaited: stopped, it stored the batch
        // all the same, and the new backend stored it too (review106 #2).
        let replaced = self.backend_replaced.notified();
        tokio::pin!(replaced);
        replaced.as_mut().enable();
        let stoppable = !backend.capabilities().finishes_retains;
        let result = match Arc::ptr_eq(&backend, &self.backend()) {
            false => Err(replaced_meanwhile(&backend)),
            true => tokio::select! {
                result = backend.retain(&scope, &delivery) => result,
                () = &mut replaced, if stoppable => Err(replaced_meanwhile(&backend)),
            },
        };
        self.metrics.delivery_seconds.observe(started.elapsed());
        let last = LastDelivery::new(n, started.elapsed(), result.as_ref().err());
        self.batcher.locked().answered(session, n);
        // Replaced while this delivery ran (a backend switch's drain past its grace): what the
        // old backend answered says nothing of the new one's outages.
        let switched = !Arc::ptr_eq(&backend, &self.backend());
        if !switched && !result.as_ref().is_err_and(BackendError::is_outage) {
            self.unreachable_tries.store(0, Ordering::Relaxed); // it served: the outage is over
        }
        let unavailable = result.as_ref().is_err_and(|e| matches!(e.cause(), BackendError::Unavailable { .. }));
        self.with_shell(session, |q| {
            q.failed_items += if result.is_err() && !switched { n } else { 0 };
            q.last_delivery = Some(last);
            q.unavailable_tries = if unavailable { q.unavailable_tries.saturating_add(1) } else { 0 };
        });
        match result {
            Ok(()) => {
                self.spool.delivered(session, &batch_id, seqs).await;
                self.metrics.items_delivered.fetch_add(n, Ordering::Relaxed);
                self.batcher.locked().succeeded(session);
                let (was_down, outage_over) = match switched {
                    true => (false, false),
                    false => {
                        let mut down = self.sessions_down.locked();
                        let was_down = down.remove(session);
                        (was_down, was_down && down.is_empty())
                    }
                };
                if outage_over {
                    let message =
                        format!("The {} backend is reachable again; delivering spooled memories.", backend.id());
                    self.notices.emit(Level::Info, backend.id().as_str(), None, message).await;
                }
                if was_down {
                    // Served again after failing: the others backing off need not wait out
                    // their delay (those the server throttled on their own do).
                    self.wake_waiting_sessions(session);
                }
                Step::Delivered(n)
            }
            Err(e) if switched => {
                // The backend it failed on is no longer the one in force: no attempt, no dead
                // letter (the new one has not been tried), no outage of the new one.
                let backend = backend.id();
                tracing::warn!(session, "delivery to the {backend} backend, replaced meanwhile, failed: {e}");
                self.batcher.locked().put_back(session, n);
                Step::Moved
            }
            Err(e) => {
                self.metrics.delivery_failures.fetch_add(1, Ordering::Relaxed);
                let failed = FailedDelivery {
                    session,
                    batch_id: &batch_id,
                    items: n,
                    attempts_before,
                    early_by,
                    error: &e,
                    backend: backend.id(),
                };
                let (go_on, delivered) = self.delivery_failed(failed, settings).await;
                Step::Failed { items: n - delivered, delivered, go_on }
            }
        }
    }

    /// Handles a failed delivery: a transient failure backs off and retries (one notice per
    /// outage), a permanent one or the last attempt makes a dead letter. Returns whether the
    /// flush may go on with the next batch.
    async fn delivery_failed(self: &Arc<Self>, f: FailedDelivery<'_>, settings: &QueueSettings) -> (bool, u64) {
        let FailedDelivery { session, batch_id, items: n, attempts_before, early_by, error, backend } = f;
        let reason = error.to_string();
        let noun = if n == 1 { "memory" } else { "memories" };
        // What the backend stored before it failed is noted with the items: a later attempt that
        // fails before it reaches them (a timeout, a proxy's 502) says nothing of them, and
        // dead-lettered, they were sent again under other names.
        if !error.stored_before().is_empty() {
            if let Err(e) = self.spool.mark_stored(session, batch_id, error.stored_before()).await {
                tracing::warn!(session, "cannot note the items a failed delivery stored: {e}");
            }
        }
        if !error.is_transient() {
            let reason = format!("{reason} (retrying will not help; once it is fixed, `mneme retry` re-queues it)");
            if let Some(delivered) = self.dead_letter(session, batch_id, error.stored_before(), &reason, backend).await
            {
                return (true, delivered);
            }
            return (self.set_aside_later(session, n, retry::backoff(settings, attempts_before + 1, error)), 0);
        }
        if let Some(left) = early_by {
            // Sent before its backoff ran out (an agent's turn ended, a flush was asked for): it
            // uses up no attempt, and the backoff stands. Counted, a busy agent sent a batch to
            // the dead letters within seconds of an outage, in as many turns as it had attempts.
            tracing::warn!(session, "delivery failed again during its backoff: {reason}");
            return (self.set_aside_later(session, n, left), 0);
        }
        // A full disk does not use up attempts: waiting for room is not the batch's fault; nor
        // does an outage (nothing answers, or the server answers it cannot serve now: 429,
        // 503): it is retried as long as it lasts, and the batch still has all its attempts for
        // the answers after it.
        let unreachable = error.is_outage();
        let attempts = if error.is_storage_full() || unreachable {
            attempts_before
        } else {
            match self.spool.failed(session, batch_id, &reason).await {
                // Gone meanwhile (a clear dropped it): nothing is left to retry.
                Ok(0) => return (true, 0),
                Ok(attempts) => attempts,
                Err(_) => attempts_before + 1,
            }
        };
        // An unreachable backend (nothing answers) retries for as long as the outage lasts:
        // everything is delivered once it is back, nothing dead-lettered meanwhile.
        if attempts >= settings.max_attempts && !unreachable {
            let reason = format!("{reason} (gave up after {attempts} attempts; `mneme retry` re-queues it)");
            if let Some(delivered) = self.dead_letter(session, batch_id, error.stored_before(), &reason, backend).await
            {
                return (true, delivered);
            }
            return (self.set_aside_later(session, n, retry::backoff(settings, attempts, error)), 0);
        }
        let delay = if matches!(error.cause(), BackendError::Unavailable { .. }) {
            // This session's own count (see `SessionShell::unavailable_tries`).
            let tries = self.with_shell(session, |q| q.unavailable_tries);
            retry::backoff(settings, tries, error)
        } else if unreachable {
            let tries = self.unreachable_tries.fetch_add(1, Ordering::Relaxed).saturating_add(1);
            retry::backoff(settings, tries, error)
        } else {
            retry::backoff(settings, attempts, error)
        };
        self.batcher.locked().retry_later(session, n, self.clock.now(), delay);
        self.timers_changed.notify_one();
        let outage_begins = {
            let mut down = self.sessions_down.locked();
            let first = down.is_empty();
            down.insert(session.to_owned());
            first
        };
        if outage_begins {
            let message = format!("Memory retention failed for {n} {noun}: {reason} (kept in the spool; retrying)");
            self.notices.emit(Level::Warning, backend.as_str(), Some(session), message).await;
        } else {
            tracing::warn!(session, attempts, "delivery retry failed: {reason}; next try in {delay:?}");
        }
        (false, 0)
    }

    /// An outage whose items the user dropped (a clear, a forget) is over as far as the queue
    /// can tell, for each session with nothing left waiting: once none is left, the next failure
    /// is told as a new one. (Only a delivery ended it, and the next
    /// outage raised no notice: review82 #3.) Not a dead letter: the server still fails, and
    /// its notice says so (each batch had a second notice under a steady 500: review84's note).
    pub(super) async fn outage_over_if_nothing_waits(&self) {
        if self.sessions_down.locked().is_empty() {
            return;
        }
        // A session whose items are gone no longer waits on the outage.
        if let Ok(waiting) = self.spool.waiting().await {
            self.sessions_down.locked().retain(|session| waiting.contains_key(session));
        }
    }

    /// After an outage, sessions backing off need not wait out their delay: retry them now.
    fn wake_waiting_sessions(self: &Arc<Self>, except: &str) {
        // A session the server itself throttled (429, 503 to it) waits out its own backoff: another
        // session served says nothing of it (woken, it was retried every `retry_initial`).
        let throttled: std::collections::HashSet<String> =
            self.sessions.locked().iter().filter(|(_, q)| q.unavailable_tries > 0).map(|(id, _)| id.clone()).collect();
        let waiting = self.batcher.locked().end_backoffs(except, |id| throttled.contains(id));
        for s in waiting {
            self.spawn_flush(s, Trigger::Explicit);
        }
    }

    /// Moves a batch to the dead letters, with its notice, but for the items the backend stored
    /// before it failed (`stored`, and those noted in an earlier attempt: see
    /// `BackendError::PartlyStored`), which are delivered. How many were, or `None` when the
    /// spool could not be written.
    async fn dead_letter(
        &self,
        session: &str,
        batch_id: &str,
        stored: &[String],
        reason: &str,
        backend: BackendId,
    ) -> Option<u64> {
        let moved = match self.spool.dead_letter(session, batch_id, reason, stored).await {
            Ok(moved) => moved,
            Err(e) => {
                tracing::error!(session, "cannot move batch {batch_id} to the dead letters: {e}");
                return None;
            }
        };
        let n = moved.dead;
        self.metrics.items_delivered.fetch_add(moved.delivered, Ordering::Relaxed);
        self.metrics.items_dead.fetch_add(n, Ordering::Relaxed);
        let noun = if n == 1 { "memory" } else { "memories" };
        if n > 0 {
            let message = format!("Memory retention failed for {n} {noun}: {reason}");
            self.notices.emit(Level::Warning, backend.as_str(), Some(session), message).await;
        }
        Some(moved.delivered)
    }

    /// Spooled rows this mneme could not read were moved to the dead letters (`why` each): they
    /// leave the session's count, with a notice.
    async fn set_aside(&self, session: &str, why: &[String], backend: BackendId) {
        let Some(first) = why.first() else { return };
        let n = why.len() as u64;
        {
            let mut batcher = self.batcher.locked();
            batcher.taken(session, n);
            batcher.answered(session, n);
        }
        self.metrics.items_dead.fetch_add(n, Ordering::Relaxed);
        let noun = if n == 1 { "memory" } else { "memories" };
        let message = format!(
            "{n} spooled {noun} moved to the dead letters: {first} (`mneme retry` re-queues them once a mneme that reads them runs)"
        );
        self.notices.emit(Level::Warning, backend.as_str(), Some(session), message).await;
    }

    /// A batch that could not be moved to the dead letters (the spool failed: a full disk) stays
    /// pending and is tried again after `delay`; the flush stops. Going on, it fetched the same
    /// batch at once and sent it again, in a loop as fast as the backend answered, for as long
    /// as the spool failed (and an explicit flush never returned).
    fn set_aside_later(&self, session: &str, n: u64, delay: std::time::Duration) -> bool {
        self.batcher.locked().retry_later(session, n, self.clock.now(), delay);
        self.timers_changed.notify_one();
        false
    }
}

/// The error a delivery stopped by a backend switch ends with (no attempt: see `switched`).
fn replaced_meanwhile(backend: &Arc<dyn mneme_core::MemoryBackend>) -> BackendError {
    BackendError::Unavailable {
        reason: format!(
            "the {} backend was replaced while this delivery ran; the batch goes to the new one",
            backend.id()
        ),
        retry_after: None,
    }
}
