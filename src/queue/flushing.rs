//! When the queue flushes: the timer task that runs the batcher's due flushes, each flush on a
//! tracked task of its own, and a session's shell let go once it is idle.

use super::*;

impl Inner {
    /// The timer task: sleeps until the batcher's earliest deadline (or until a timer is armed),
    /// then runs the flushes that came due. Stops at shutdown.
    pub(super) async fn run_timers(self: Arc<Self>) {
        loop {
            let next = self.batcher.locked().next_deadline();
            let sleep = match next {
                Some(deadline) => self.clock.sleep_until(deadline),
                None => Box::pin(std::future::pending()),
            };
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                // A permit is kept when nobody waits, so an arming between the read above
                // and this wait is not missed.
                _ = self.timers_changed.notified() => continue,
                _ = sleep => {}
            }
            let due = self.batcher.locked().due(self.clock.now());
            for (session, trigger) in due {
                self.spawn_flush(session, trigger);
            }
        }
    }

    /// Runs a flush on the task tracker (cancelled at shutdown).
    pub(super) fn spawn_flush(self: &Arc<Self>, session: String, trigger: Trigger) {
        let inner = self.clone();
        let cancel = self.cancel.clone();
        self.tasks.spawn(async move {
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = inner.flush_session(session, trigger) => {}
            }
        });
    }

    /// Boxed because a flush may start another flush's task.
    /// Runs on a task of its own, so a caller that stops waiting (a backend switch's drain past
    /// its grace, a client that hung up on `/v1/flush`) never cuts a delivery between the
    /// backend's answer and the spool's record of it: cut there, the batch stayed spooled and
    /// went to the next backend too, and the in-flight count stayed up for good. The task is
    /// tracked, so that a shutdown waits for the delivery to be recorded (and the spool to be let
    /// go) as it does for the timers' flushes.
    pub(super) fn flush_session(self: Arc<Self>, session: String, trigger: Trigger) -> BoxFuture<FlushReport> {
        let tasks = self.tasks.clone();
        let task = tasks.spawn(async move {
            let report = self.run_flush(&session, trigger).await;
            self.release_if_idle(&session);
            report
        });
        Box::pin(async move { task.await.unwrap_or_default() })
    }

    async fn run_flush(self: &Arc<Self>, session: &str, trigger: Trigger) -> FlushReport {
        let _not_clearing = self.clearing.read().await;
        let (lock, delivered_before, failed_before) =
            self.with_shell(session, |q| (q.lock.clone(), q.delivered, q.failed_items));
        let _serial = lock.lock().await;
        let settings = self.settings();
        let rules = Rules::from(&settings);
        let (delivered_meanwhile, failed_meanwhile) = self.with_shell(session, |q| {
            (q.delivered.saturating_sub(delivered_before), q.failed_items.saturating_sub(failed_before))
        });
        // An explicit flush that waited for the session's delivery under way, which failed
        // meanwhile, sends nothing again at once: that answer is the one it would get, and a
        // hung server made the flush wait two of its timeouts, past the CLI's (review82 #5).
        // (The shell is kept while this flush holds its lock: the count is the session's.)
        // Failed: what is held for a retry, or what failed for good (dead letters, which are held
        // no longer: counted as none, the flush read as a success).
        if trigger == Trigger::Explicit && failed_meanwhile > 0 {
            let held = self.batcher.locked().held(session);
            self.flush_ended(session, rules);
            let failed = held.max(failed_meanwhile);
            return FlushReport { delivered: delivered_meanwhile, failed, ..FlushReport::default() };
        }
        if trigger == Trigger::Size {
            // Cleared only now, so that while this flush waits for the one running, arrivals do
            // not queue more size flushes that would find a partial batch.
            let full = self.batcher.locked().size_flush_starting(session, rules);
            if !full {
                self.flush_ended(session, rules);
                return FlushReport::default();
            }
        }
        let mut report = FlushReport::default();
        loop {
            if self.batcher.locked().holds_back(session, trigger, self.clock.now()) {
                break;
            }
            // A clear waits: it goes first, and what it leaves is delivered after it.
            if self.clears_waiting.load(Ordering::SeqCst) > 0 {
                break;
            }
            match self.deliver_next(session, &settings).await {
                Step::Nothing => break,
                Step::SpoolFailed(fault) => {
                    report.spool_fault.get_or_insert(fault);
                    break;
                }
                Step::Delivered(n) => {
                    report.delivered += n;
                    if self.batcher.locked().stops_after_delivery(session, trigger, rules) {
                        break;
                    }
                }
                Step::Failed { items, delivered, go_on } => {
                    report.failed += items;
                    report.delivered += delivered;
                    if !go_on {
                        break;
                    }
                }
                Step::Moved => {}
            }
        }
        self.flush_ended(session, rules);
        self.with_shell(session, |q| q.delivered += report.delivered);
        if trigger == Trigger::Explicit {
            report.delivered += delivered_meanwhile;
        }
        report
    }

    /// After a flush (its lock let go): a session left with nothing to do loses its batcher
    /// state, and past [`IDLE_SESSIONS_KEPT`] the least recently flushed idle sessions lose
    /// their shell too (their last delivery leaves `/v1/queue`). A shell whose lock another
    /// flush holds or waits for is kept: dropped, the next flush made a second lock and ran
    /// beside it. Clones of the lock are only taken under the map's mutex, held here.
    fn release_if_idle(&self, session: &str) {
        let mut shells = self.sessions.locked();
        let mut batcher = self.batcher.locked();
        batcher.forget_if_idle(session, self.clock.now());
        let seq = self.flushes_ended.fetch_add(1, Ordering::Relaxed);
        if let Some(shell) = shells.get_mut(session) {
            shell.last_flush = seq;
        }
        if shells.len() <= 2 * IDLE_SESSIONS_KEPT {
            return;
        }
        let mut idle: Vec<(u64, String)> = shells
            .iter()
            // A throttled session's count of 429/503s goes with it: its next delivery, if ever,
            // starts over at the first backoff.
            .filter(|(id, q)| Arc::strong_count(&q.lock) == 1 && !batcher.knows(id))
            .map(|(id, q)| (q.last_flush, id.clone()))
            .collect();
        let excess = idle.len().saturating_sub(IDLE_SESSIONS_KEPT);
        if excess == 0 {
            return;
        }
        idle.select_nth_unstable(excess - 1);
        for (_, id) in &idle[..excess] {
            shells.remove(id);
        }
    }

    /// Items that arrived during a flush but did not fill a batch still get their timer.
    fn flush_ended(&self, session: &str, rules: Rules) {
        if self.batcher.locked().flush_ended(session, self.clock.now(), rules) {
            self.timers_changed.notify_one();
        }
    }
}
