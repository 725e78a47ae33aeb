//! When each session's queue is flushed: a pure state machine.
//!
//! The batcher counts each session's pending and in-flight items and keeps its deadlines (the
//! debounce timer, a retry's backoff). It does no I/O, spawns nothing and never reads a clock:
//! every call is given the time it happens at, and [`Batcher::due`] says which timers have come
//! due by a given time. The queue ([`super::Queue`]) is the shell that spools, delivers, sleeps
//! until [`Batcher::next_deadline`] on its injected [`super::Clock`], and tells the batcher what
//! happened. So the batching rules are tested without a runtime or a disk (see the tests below),
//! and the queue's own tests drive time by hand.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::Trigger;

/// The batching rules' parameters (from `queue.*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Rules {
    /// A session with this many pending items is flushed at once.
    pub batch_size: u64,
    /// ... and at the latest this long after its first pending item arrived.
    pub flush_interval: Duration,
    /// The longest wait before a failed delivery is tried again (`queue.retry_max`).
    pub retry_max: Duration,
}

impl From<&crate::config::QueueSettings> for Rules {
    fn from(s: &crate::config::QueueSettings) -> Self {
        Rules { batch_size: s.batch_size as u64, flush_interval: s.flush_interval, retry_max: s.retry_max }
    }
}

/// What an arrival asks of the shell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Arrival {
    /// Start a size flush now.
    pub size_flush: bool,
    /// A timer was armed: the timer task must look at the earliest deadline again.
    pub timer_armed: bool,
}

/// One session's counts and deadlines.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct SessionState {
    /// Spooled and not being delivered.
    pub pending: u64,
    /// Being delivered now.
    pub in_flight: u64,
    /// When the debounce timer fires (armed by the first pending item; later ones do not reset it).
    flush_at: Option<Instant>,
    /// When that timer was armed (so that a reload's new interval counts from there).
    armed_at: Option<Instant>,
    /// When the retry after a failed delivery fires.
    retry_at: Option<Instant>,
    /// A size flush was asked for and has not started yet: more arrivals ask for no other.
    size_flush_queued: bool,
    /// Until when debounce flushes hold back after a failure (cleared by a success).
    backoff_until: Option<Instant>,
    /// Items a delivery read from the spool before their arrival was counted (a flush and a
    /// retain of the session in one spool commit): their arrival is not counted as pending.
    taken_early: u64,
    /// Items that were pending when the debounce timer fired: the timer's flush delivers them
    /// all, even when a batch is cut short (at a second version of one document), instead of
    /// leaving the rest another full interval per cut.
    owed: u64,
}

impl SessionState {
    fn backing_off(&self, now: Instant) -> bool {
        self.backoff_until.is_some_and(|t| t > now)
    }

    /// Arms the debounce timer at `now`.
    fn arm(&mut self, now: Instant, rules: Rules) {
        self.armed_at = Some(now);
        self.flush_at = Some(now + rules.flush_interval);
    }

    /// Counts `n` spooled items as pending, but for those a delivery took already.
    fn add_pending(&mut self, n: u64) {
        let taken = n.min(self.taken_early);
        self.taken_early -= taken;
        self.pending += n - taken;
    }
}

/// Every session's state. See the module's documentation.
#[derive(Debug, Default)]
pub(super) struct Batcher {
    sessions: HashMap<String, SessionState>,
}

impl Batcher {
    /// Every session the batcher knows, with its state.
    pub fn sessions(&self) -> impl Iterator<Item = (&String, &SessionState)> {
        self.sessions.iter()
    }

    /// Makes sure a session is known (it is then flushed by `flush_all`).
    pub fn know(&mut self, id: &str) {
        self.entry(id);
    }

    /// `n` items were spooled for a session at `now`: arms its timer if none is armed, and
    /// asks for a size flush when the batch is full (unless backing off or one is queued).
    pub fn arrived(&mut self, id: &str, n: u64, now: Instant, rules: Rules) -> Arrival {
        let q = self.entry(id);
        q.add_pending(n);
        let size_flush = q.pending >= rules.batch_size && !q.size_flush_queued && !q.backing_off(now);
        q.size_flush_queued |= size_flush;
        let timer_armed = q.pending > 0 && q.flush_at.is_none() && q.retry_at.is_none();
        if timer_armed {
            q.arm(now, rules);
        }
        Arrival { size_flush, timer_armed }
    }

    /// The rules changed at `now` (a reload): an armed debounce timer counts from when it was
    /// armed under the new interval (one armed for an hour would otherwise hold its items an
    /// hour after the interval was cut to a second), a backoff waits no longer than a lowered
    /// `retry_max` from now, and a session already holding a batch of
    /// the new size is flushed. Returns the sessions whose size flush to start.
    pub fn rules_changed(&mut self, old: Rules, new: Rules, now: Instant) -> Vec<String> {
        let mut full = Vec::new();
        for (id, q) in &mut self.sessions {
            if let (Some(_), Some(armed)) = (q.flush_at, q.armed_at) {
                q.flush_at = Some(armed + new.flush_interval);
            }
            // A backoff already armed waits no longer than the new longest one (review73 #2:
            // a 40 s wait cut to 1 s in the file was waited out, the server back meanwhile).
            if new.retry_max < old.retry_max {
                let cap = now + new.retry_max;
                q.retry_at = q.retry_at.map(|t| t.min(cap));
                q.backoff_until = q.backoff_until.map(|t| t.min(cap));
            }
            if new.batch_size < old.batch_size
                && q.pending >= new.batch_size
                && !q.size_flush_queued
                && !q.backing_off(now)
            {
                q.size_flush_queued = true;
                full.push(id.clone());
            }
        }
        full
    }

    /// A previous run left `n` items spooled for a session.
    pub fn recovered(&mut self, id: &str, n: u64) {
        self.entry(id).add_pending(n);
    }

    /// The timers due by `now`, disarmed: each is a flush to run, in no particular order.
    pub fn due(&mut self, now: Instant) -> Vec<(String, Trigger)> {
        let mut due = Vec::new();
        for (id, q) in &mut self.sessions {
            if q.flush_at.is_some_and(|t| t <= now) {
                q.flush_at = None;
                q.owed = q.pending;
                due.push((id.clone(), Trigger::Timer));
            }
            if q.retry_at.is_some_and(|t| t <= now) {
                q.retry_at = None;
                due.push((id.clone(), Trigger::Retry));
            }
        }
        due
    }

    /// The earliest armed timer.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.sessions.values().flat_map(|q| [q.flush_at, q.retry_at]).flatten().min()
    }

    /// A size flush got the session's turn. Returns whether the batch is still full: another
    /// flush may have taken the items meanwhile, and then the rest waits for its timer.
    pub fn size_flush_starting(&mut self, id: &str, rules: Rules) -> bool {
        let q = self.entry(id);
        q.size_flush_queued = false;
        q.pending >= rules.batch_size
    }

    /// How much of the session's backoff is left at `now` (none when it is not backing off).
    pub fn backoff_left(&self, id: &str, now: Instant) -> Option<Duration> {
        self.sessions
            .get(id)
            .and_then(|q| q.backoff_until)
            .and_then(|t| t.checked_duration_since(now))
            .filter(|d| !d.is_zero())
    }

    /// Whether the session has items spooled or being delivered and is not backing off after a
    /// failure: what a flush could deliver now.
    pub fn deliverable(&self, id: &str, now: Instant) -> bool {
        self.sessions.get(id).is_some_and(|q| (q.pending > 0 || q.in_flight > 0) && !q.backing_off(now))
    }

    /// Whether a flush of `trigger` must stop before sending (more): debounce flushes wait out
    /// a backoff, and so does a retry that finds one set again since it came due (an early
    /// delivery failed meanwhile: it went out early too, and set the backoff again, back to back
    /// for as long as the backend took longer than the backoff to fail: review82 #1).
    pub fn holds_back(&self, id: &str, trigger: Trigger, now: Instant) -> bool {
        (trigger.is_debounce() || trigger == Trigger::Retry)
            && self.sessions.get(id).is_some_and(|q| q.backing_off(now))
    }

    /// Whether a flush of `trigger` stops after a delivered batch: debounce flushes send full
    /// batches only after what their timer found due, so what trickles in meanwhile waits for
    /// its own size or timer trigger instead of going out in tiny batches under a steady stream.
    pub fn stops_after_delivery(&self, id: &str, trigger: Trigger, rules: Rules) -> bool {
        trigger.is_debounce() && self.sessions.get(id).is_none_or(|q| q.pending < rules.batch_size && q.owed == 0)
    }

    /// `n` items were read from the spool for a delivery. Those beyond the pending count had
    /// not been counted yet: their arrival, when it is, adds nothing (counted then, they stayed
    /// pending for good, and every later size flush went out that many items short). A queue
    /// taken empty disarms its timer: the next item starts its own.
    pub fn taken(&mut self, id: &str, n: u64) {
        let q = self.entry(id);
        let counted = n.min(q.pending);
        q.pending -= counted;
        q.taken_early += n - counted;
        q.in_flight += n;
        q.owed = q.owed.saturating_sub(n).min(q.pending);
        if q.pending == 0 {
            q.flush_at = None;
        }
    }

    /// The backend answered a delivery of `n` items (either way).
    pub fn answered(&mut self, id: &str, n: u64) {
        let q = self.entry(id);
        q.in_flight = q.in_flight.saturating_sub(n);
    }

    /// What the session holds, pending and in flight.
    pub fn held(&self, id: &str) -> u64 {
        self.sessions.get(id).map_or(0, |q| q.pending + q.in_flight)
    }

    /// A delivery of `n` items stopped before it was answered (its backend was replaced): they
    /// are pending again, for the flush to send to the new one. (Left taken, the flush read them
    /// again as not yet counted, and their count swallowed as many later arrivals, which then
    /// armed no timer: review82 #2.)
    pub fn put_back(&mut self, id: &str, n: u64) {
        self.entry(id).pending += n;
    }

    /// A delivery succeeded: the session stops backing off, and its retry is disarmed (left
    /// armed, it kept what arrived next from arming a timer until the retry fired, up to
    /// `queue.retry_max` or a server's Retry-After later).
    pub fn succeeded(&mut self, id: &str) {
        let q = self.entry(id);
        q.backoff_until = None;
        q.retry_at = None;
    }

    /// A delivery of `n` items failed for now: they are pending again, and the session backs
    /// off until `now + delay`, when its retry fires.
    pub fn retry_later(&mut self, id: &str, n: u64, now: Instant, delay: Duration) {
        let q = self.entry(id);
        q.pending += n;
        q.backoff_until = Some(now + delay);
        q.retry_at = Some(now + delay);
    }

    /// After an outage ends, the other sessions backing off with items pending stop waiting
    /// (but those `left_alone` says): returns them, to be flushed now.
    pub fn end_backoffs(&mut self, except: &str, left_alone: impl Fn(&str) -> bool) -> Vec<String> {
        self.sessions
            .iter_mut()
            .filter(|(id, q)| id.as_str() != except && q.backoff_until.is_some() && q.pending > 0)
            .filter(|(id, _)| !left_alone(id))
            .map(|(id, q)| {
                q.backoff_until = None;
                q.retry_at = None;
                id.clone()
            })
            .collect()
    }

    /// Dead letters were put back: a session's spool now holds `spooled` items and it need not
    /// wait out a backoff.
    pub fn requeued(&mut self, id: &str, spooled: u64) {
        let q = self.entry(id);
        q.pending = spooled.saturating_sub(q.in_flight);
        q.owed = q.owed.min(q.pending);
        q.taken_early = 0;
        q.backoff_until = None;
    }

    /// A session's spooled items were dropped (all sessions' for `None`).
    pub fn discarded(&mut self, id: Option<&str>) {
        for (s, q) in &mut self.sessions {
            if id.is_none_or(|id| id == s) {
                q.pending = 0;
                q.owed = 0;
            }
        }
    }

    /// A flush ended at `now`: what it left pending gets a timer, unless one is armed or a size
    /// flush is queued. Returns whether a timer was armed.
    pub fn flush_ended(&mut self, id: &str, now: Instant, rules: Rules) -> bool {
        let q = self.entry(id);
        let arm = q.pending > 0 && q.flush_at.is_none() && q.retry_at.is_none() && !q.size_flush_queued;
        if arm {
            q.arm(now, rules);
        }
        arm
    }

    /// Forgets a session with nothing pending, in flight, armed or held back at `now`: its state
    /// is then the one [`Self::entry`] makes again when the session is next heard of, so a
    /// daemon that sees a session a conversation does not keep one for good.
    pub fn forget_if_idle(&mut self, id: &str, now: Instant) -> bool {
        let idle = self.sessions.get(id).is_some_and(|q| {
            q.pending == 0
                && q.in_flight == 0
                && q.taken_early == 0
                && q.flush_at.is_none()
                && q.retry_at.is_none()
                && !q.size_flush_queued
                && !q.backing_off(now)
        });
        if idle {
            self.sessions.remove(id);
        }
        idle
    }

    /// Whether the batcher holds state for a session.
    pub fn knows(&self, id: &str) -> bool {
        self.sessions.contains_key(id)
    }

    /// Items being delivered, over all sessions.
    pub fn in_flight(&self) -> u64 {
        self.sessions.values().map(|q| q.in_flight).sum()
    }

    fn entry(&mut self, id: &str) -> &mut SessionState {
        self.sessions.entry(id.to_owned()).or_default()
    }
}

#[cfg(test)]
#[path = "batcher_tests.rs"]
mod tests;
