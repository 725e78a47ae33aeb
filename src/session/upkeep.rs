//! The sessions' upkeep: those expired or past the most forgotten, the least recently seen
//! ended by a trim that keeps up with a flood of starts, and idle sessions' turns retained.

use super::*;

impl Sessions {
    /// Forgets the sessions idle past [`SESSION_TTL`] (their pending tail queued first) and the
    /// records of sessions ended that long ago, as a start does; returns how many sessions. Run
    /// periodically: a daemon that ran for months kept every session it had seen.
    pub async fn forget_expired(&self) -> usize {
        self.seen_no_later_than(unix_now());
        let cutoff = unix_now().saturating_sub(SESSION_TTL.as_secs());
        let expired = |s: &Session| s.last_seen != 0 && s.last_seen < cutoff;
        let ids: Vec<String> = self.inner.map.locked().values().filter(|s| expired(s)).map(|s| s.id.clone()).collect();
        // Ended, not forgotten: one that comes back goes on where it stopped, as after an end.
        // Forgotten whole, it began again at its first part, and a history compacted since
        // replaced that document (review63 #4).
        let n = self.end_each(ids, expired, "a session idle past the TTL").await;
        forget_long_ended(&self.inner.spool).await;
        n
    }

    /// Past `max` live sessions, ends the least recently seen down to nine tenths of it, as
    /// [`Self::end`] does; returns how many.
    pub async fn forget_least_recent(&self, max: usize) -> usize {
        let (ids, seen_by) = {
            let map = self.inner.map.locked();
            if map.len() <= max {
                return 0;
            }
            let mut by_age: Vec<(u64, &String)> = map.values().map(|s| (s.last_seen, &s.id)).collect();
            by_age.sort_unstable();
            by_age.truncate(map.len() - max * 9 / 10);
            let seen_by = by_age.last().map_or(0, |(seen, _)| *seen);
            (by_age.into_iter().map(|(_, id)| id.clone()).collect::<Vec<_>>(), seen_by)
        };
        // Ended, not forgotten: one that comes back (a session used only through its tools is
        // saved, and so seen, only at its starts) goes on where it stopped, as after an end.
        let n = self.end_each(ids, |s| s.last_seen <= seen_by, "a least recently seen session").await;
        if n > 0 {
            tracing::info!("ended the {n} least recently seen sessions: more than {max} were live");
        }
        n
    }

    /// After a start: forgets the least recently seen sessions in the background once there are
    /// more than the most kept (one pass at a time).
    pub(super) fn trim_in_background(&self) {
        if self.inner.map.locked().len() <= self.inner.max_sessions {
            return;
        }
        let sessions = self.clone();
        tokio::spawn(async move {
            let max = sessions.inner.max_sessions;
            // A pass under way (or a start's, see `keep_up_with_the_trim`) finds these too.
            let Ok(gate) = sessions.inner.trim_gate.try_lock() else { return };
            // Pass after pass while past the most: the starts made during a pass (ends are
            // slower than starts) were left, and nothing trimmed them after the last start
            // (review112 #3: 40,000 starts left 15,944 live sessions).
            let mut ended_some = true;
            while ended_some && sessions.inner.map.locked().len() > max {
                ended_some = sessions.forget_least_recent(max).await > 0;
            }
            drop(gate);
            // A start between the last look and the gate let go did not begin a pass. (None
            // again after a pass that ended nothing: a full disk, say, until the next start.)
            if ended_some {
                sessions.trim_in_background();
            }
        });
    }

    /// A start made while the live sessions are past the most by a tenth waits for a pass
    /// that brings them down to the most (one at a time: the others wait for it, and find it
    /// done). A client starting sessions faster than a pass ends them (each end writes the
    /// spool) grew the daemon past the most for as long as it went on (review112 #3); now it
    /// goes at the pace of the ends.
    pub(super) async fn keep_up_with_the_trim(&self) {
        let max = self.inner.max_sessions;
        let past = || self.inner.map.locked().len() > max + (max / 10).max(1);
        if !past() {
            return;
        }
        let _gate = self.inner.trim_gate.lock().await;
        if past() {
            self.forget_least_recent(max).await;
        }
    }

    /// Ends each of the sessions `ids` that is still `due` (one may have been seen since it was
    /// picked), as [`Self::end`] does, its failure logged as `what`'s; returns how many.
    pub(super) async fn end_each(&self, ids: Vec<String>, due: impl Fn(&Session) -> bool, what: &str) -> usize {
        let mut n = 0;
        for id in ids {
            if self.get(&id).is_ok_and(|s| !due(&s)) {
                continue;
            }
            match self.end(&id, Delivery::Background).await {
                Ok(_) => n += 1,
                Err(e) => tracing::warn!(session = id, "cannot end {what}: {e}"),
            }
        }
        n
    }

    /// Queues the pending tail of every session idle for `idle` or longer; returns how many.
    /// Run periodically and at shutdown: an agent that stops without saying so (closed, crashed)
    /// still has its last turns retained.
    pub async fn retain_idle(&self, idle: Duration) -> usize {
        self.seen_no_later_than(unix_now());
        let cutoff = unix_now().saturating_sub(idle.as_secs());
        let is_idle = |s: &Session| s.pending.is_some() && s.last_seen <= cutoff;
        let idle_sessions: Vec<String> =
            self.inner.map.locked().values().filter(|s| is_idle(s)).map(|s| s.id.clone()).collect();
        let mut n = 0;
        for id in idle_sessions {
            // Under the session's turn lock, looked at again: a turn that ended meanwhile has
            // queued or replaced the tail, which this would queue a second time or wipe.
            let _turn = self.inner.turns.lock(&id).await;
            let Some(s) = self.get(&id).ok().filter(is_idle) else { continue };
            let Some(pending) = &s.pending else { continue };
            match self.queue_pending(&s, pending).await {
                Ok(()) => {
                    n += 1;
                    // Nothing more is coming from an idle session: deliver now, not on a timer.
                    self.flush(s.queue_id(), Delivery::Background).await;
                }
                Err(e) => tracing::warn!(session = s.id, "cannot retain the idle session's last turns: {e}"),
            }
        }
        n
    }

    /// Sessions last seen after `now` (the wall clock was set back since) count as seen now: they
    /// were idle, or expired, only once the clock came back to where it had been, and their
    /// pending turns waited that long, a day for a clock set back a day (review63 #2).
    fn seen_no_later_than(&self, now: u64) {
        for s in self.inner.map.locked().values_mut().filter(|s| s.last_seen > now) {
            s.last_seen = now;
        }
    }

    /// Tells the idle sweep that `retain.idle_after` changed (a reload).
    pub fn idle_after_changed(&self) {
        self.inner.idle_after_changed.notify_one();
    }

    /// Resolves once `retain.idle_after` has changed since the last call; a change made while no
    /// one was waiting is kept for the next.
    pub async fn idle_after_change(&self) {
        self.inner.idle_after_changed.notified().await;
    }
}
