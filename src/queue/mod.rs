//! The retain queue: per-session, debounced, durable.
//!
//! An item is appended to the [`crate::spool`] (fsynced) before the retain is answered. A session's queue
//! is flushed when it holds `batch_size` pending items, `flush_interval` after it became non-empty
//! (the timer is not restarted by later items), and on explicit events (agent-end, session end,
//! `POST /v1/flush`, compaction, shutdown). One lock per session serialises its flushes: a flush
//! asked for while another runs waits, then sends what arrived meanwhile.
//!
//! Transient failures keep the batch spooled (same batch id, so resends are idempotent) and retry
//! with exponential backoff and a little jitter ([`retry`]); permanent ones, or running out of attempts, move it to the dead
//! letters. Either way the user gets a notice.
//!
//! When to flush is decided by the pure [`batcher`]; this module is its shell: it spools, runs
//! flushes one at a time per session, and sleeps until the batcher's next deadline on a
//! [`Clock`] ([`SystemClock`] in the daemon, a hand-moved one in the tests).

mod batcher;
mod clock;
mod delivery;
mod discarding;
mod flushing;
mod overview;
mod retry;

use batcher::{Batcher, Rules};
pub use clock::{Clock, Sleep, SystemClock};
use delivery::Step;
pub use overview::{LastDelivery, QueueOverview, SessionDepths};

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use mneme_core::{MemoryBackend, MemoryItem, MemoryType, Scope};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::QueueSettings;
use crate::lock::MutexExt;
use crate::metrics::Metrics;
use crate::notices::{Level, Notices};
use crate::spool::{CommitCounts, OnceRecord, Spool, SpoolError};
use crate::state::DaemonState;

/// An item as the session layer hands it over.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NewItem {
    /// The text (already stripped of private spans).
    pub content: String,
    /// What it is about.
    pub context: Option<String>,
    /// World fact or experience.
    pub kind: MemoryType,
    /// Replaces a previous document with this id.
    pub document_id: Option<String>,
    /// Its own tags instead of the scope's (the Hindsight API sends tags per item).
    pub tags: Option<Vec<String>>,
    /// Metadata to keep with it; `session_id` is added when absent.
    pub metadata: BTreeMap<String, String>,
    /// When it happened (RFC 3339) instead of now.
    pub timestamp: Option<String>,
    /// Adds to its document instead of replacing it.
    pub append: bool,
}

/// What a flush achieved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlushReport {
    /// Items stored by the backend.
    pub delivered: u64,
    /// Items that could not be stored (still spooled for a retry, or dead-lettered).
    pub failed: u64,
    /// A delivery could not start because the spool could not be written (the first such
    /// fault): what waits stays spooled, neither delivered nor failed.
    pub spool_fault: Option<SpoolFault>,
}

/// Why the spool stopped a delivery from starting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpoolFault {
    /// Its disk is full.
    Full,
    /// Any other failure to read or write it.
    Failed,
}

impl std::ops::AddAssign for FlushReport {
    fn add_assign(&mut self, o: Self) {
        self.delivered += o.delivered;
        self.failed += o.failed;
        self.spool_fault = self.spool_fault.or(o.spool_fault);
    }
}

/// Queue sizes for status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Depths {
    /// Spooled, waiting for a delivery.
    pub pending: u64,
    /// Being delivered now.
    pub in_flight: u64,
    /// Everything in the spool (pending + in flight).
    pub spooled: u64,
    /// Dead letters (see `mneme retry`).
    pub dead: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trigger {
    /// `batch_size` reached.
    Size,
    /// `flush_interval` elapsed.
    Timer,
    /// A backoff delay elapsed.
    Retry,
    /// Someone asked (agent-end, session end, flush, compaction, shutdown, switch, startup).
    Explicit,
}

impl Trigger {
    /// The debounce triggers: they wait out a backoff and send full batches only.
    fn is_debounce(self) -> bool {
        matches!(self, Trigger::Size | Trigger::Timer)
    }
}

/// What the shell keeps per session besides the batcher's counts.
#[derive(Default)]
struct SessionShell {
    /// Serialises the session's flushes.
    lock: Arc<tokio::sync::Mutex<()>>,
    /// Items of the session whose delivery failed, counted once a try (a flush that waited for
    /// one under way tells by it whether, and how much of, that one failed meanwhile).
    failed_items: u64,
    /// How the session's last delivery went, for the web view.
    last_delivery: Option<LastDelivery>,
    /// Deliveries of this session in a row that the server answered it could not serve (429,
    /// 503): their backoff grows with it. The outage counter shared by all sessions is reset by
    /// any delivery that went through, so a server throttling one session (another still
    /// served) had it retried every `retry_initial`, without end.
    unavailable_tries: u32,
    /// When its last flush ended, in flushes since the start: the least recent idle sessions
    /// are dropped first.
    last_flush: u64,
    /// Items its flushes delivered so far: an explicit flush that waited behind another (the one
    /// a start runs on what the spool held) counts what that one delivered, instead of
    /// answering "0 delivered" for a queue it found emptied. (Not what failed: those items are
    /// tried again, and would be counted twice.)
    delivered: u64,
}

/// Idle sessions whose last delivery the queue keeps for `/v1/queue` and the web view. Past
/// twice as many, the least recently flushed are dropped: an agent opens a session a
/// conversation, and a daemon that runs for months kept every one it ever saw.
const IDLE_SESSIONS_KEPT: usize = 1024;

/// How long the daemon's stop waits for the spool's connection to close (its checkpoint).
const SPOOL_CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The retain queue. Cheap to clone.
#[derive(Clone)]
pub struct Queue {
    inner: Arc<Inner>,
}

struct Inner {
    spool: Spool,
    notices: Notices,
    metrics: Arc<Metrics>,
    /// The settings and backend in force (the queue's settings are `settings.queue`).
    state: DaemonState,
    /// Every session's counts and deadlines.
    batcher: Mutex<Batcher>,
    sessions: Mutex<HashMap<String, SessionShell>>,
    clock: Arc<dyn Clock>,
    /// Woken when a timer is armed, so the timer task sleeps until the new earliest deadline.
    timers_changed: Notify,
    /// Woken when the backend is replaced: a delivery still running on the old one past the
    /// switch's drain stops (see `deliver_next`).
    backend_replaced: Notify,
    tasks: TaskTracker,
    cancel: CancellationToken,
    /// The sessions whose last delivery failed for a passing reason (the backend down, or
    /// answering it cannot serve now): the outage begins when the first joins (one notice) and
    /// ends when the last has delivered (one notice). One flag for the whole daemon told a new
    /// outage, and its end, at every retry of a session the server could not serve yet while
    /// the others delivered: a pair of notices a second (review111 #2).
    sessions_down: std::sync::Mutex<std::collections::BTreeSet<String>>,
    /// The spool's file was found deleted or replaced (told once).
    spool_gone: AtomicBool,
    /// The spool's write-backs told (see [`Queue::tell_spool_written_back`]).
    write_backs_told: AtomicU64,
    /// Deliveries in a row that found the backend unreachable: their backoff grows with it,
    /// while the batches' attempts (which lead to the dead letters) do not count them.
    unreachable_tries: AtomicU32,
    /// Set when the spool's disk is full (retains are refused), cleared by the next append that
    /// succeeds: one notice per episode.
    spool_full: AtomicBool,
    /// Set when the spool cannot be written for another reason (an I/O error, a read-only
    /// file), cleared by the next write that succeeds: one notice per episode, naming the file.
    spool_failing: AtomicBool,
    /// Held for reading by every flush and for writing by a clear ([`Queue::discard_then`]):
    /// a clear waits for the deliveries under way, and none starts until its deletion is done,
    /// however new its session (a session's own lock exists only once it has flushed).
    clearing: tokio::sync::RwLock<()>,
    /// Clears waiting for `clearing`: a flush stops between batches for them. A delivery to
    /// Hindsight lasts until the server has stored it, so a flush through a backlog ran for
    /// minutes, and the clear (and every flush after it: the lock is fair) waited it out.
    clears_waiting: AtomicUsize,
    /// Flushes ended since the start (orders the sessions by their last flush).
    flushes_ended: AtomicU64,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Counts a clear waiting for the flushes under way, for as long as it waits: dropped with the
/// clear's future too (a client that hung up), or the count stayed up and every flush after it
/// stopped before delivering anything.
struct ClearWaiting<'a>(&'a AtomicUsize);

impl<'a> ClearWaiting<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        ClearWaiting(count)
    }
}

impl Drop for ClearWaiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Queue {
    /// A queue over `spool`, delivering to the backend `state` holds, on the system's clock.
    /// Must be called within a tokio runtime (it starts the queue's timer task).
    pub fn new(spool: Spool, state: DaemonState, notices: Notices, metrics: Arc<Metrics>) -> Self {
        Self::with_clock(spool, state, notices, metrics, Arc::new(SystemClock))
    }

    /// A queue whose timers run on `clock`.
    pub fn with_clock(
        spool: Spool,
        state: DaemonState,
        notices: Notices,
        metrics: Arc<Metrics>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let inner = Arc::new(Inner {
            spool,
            notices,
            metrics,
            state,
            batcher: Mutex::new(Batcher::default()),
            sessions: Mutex::new(HashMap::new()),
            clock,
            timers_changed: Notify::new(),
            backend_replaced: Notify::new(),
            tasks: TaskTracker::new(),
            cancel: CancellationToken::new(),
            sessions_down: std::sync::Mutex::default(),
            spool_gone: AtomicBool::new(false),
            write_backs_told: AtomicU64::new(0),
            unreachable_tries: AtomicU32::new(0),
            spool_full: AtomicBool::new(false),
            spool_failing: AtomicBool::new(false),
            clearing: tokio::sync::RwLock::new(()),
            clears_waiting: AtomicUsize::new(0),
            flushes_ended: AtomicU64::new(0),
        });
        inner.tasks.spawn(inner.clone().run_timers());
        Queue { inner }
    }

    /// Picks up what a previous run left in the spool and delivers it now.
    pub async fn recover(&self) -> Result<u64, SpoolError> {
        let waiting = self.inner.spool.waiting().await?;
        let total = waiting.values().sum();
        for (session, n) in waiting {
            self.inner.batcher.locked().recovered(&session, n);
            self.inner.spawn_flush(session, Trigger::Explicit);
        }
        Ok(total)
    }

    /// Spools items for a session under `scope`; returns once they are on disk.
    pub async fn enqueue(&self, session_id: &str, scope: &Scope, items: Vec<NewItem>) -> Result<usize, SpoolError> {
        if items.is_empty() {
            return Ok(0);
        }
        self.spool_items(session_id, scope, items, None).await
    }

    /// Spools items as [`Queue::enqueue`] does, and in the same spool transaction saves the
    /// `record` of the session `session_id` (see `Sessions::queue_pending`).
    pub async fn enqueue_with_session(
        &self,
        session_id: &str,
        scope: &Scope,
        items: Vec<NewItem>,
        record: String,
    ) -> Result<usize, SpoolError> {
        self.spool_items(session_id, scope, items, Some(record)).await
    }

    /// Spools items (with the session's `record`, when given) and counts them as arrived.
    async fn spool_items(
        &self,
        session_id: &str,
        scope: &Scope,
        items: Vec<NewItem>,
        record: Option<String>,
    ) -> Result<usize, SpoolError> {
        let n = items.len();
        let items = stamped(session_id, scope, items);
        let (queue, session, bank) = (self.clone(), session_id.to_owned(), scope.bank.clone());
        self.to_the_end(async move {
            let spooled = async {
                queue.inner.spool.still_there()?;
                match record {
                    Some(record) => queue.inner.spool.append_with_session(&session, &bank, items, record).await,
                    None => queue.inner.spool.append(&session, &bank, items).await,
                }
            };
            queue.accepted(&session, spooled.await).await?;
            queue.arrived(&session, n);
            Ok(n)
        })
        .await
    }

    /// Runs a write and the counting of what it spooled on a task of their own. A client that
    /// hangs up while its retain is being written has the handler dropped (hyper drops it), and
    /// dropped between the two, the items were on disk but never counted or timed: nothing sent
    /// them until something else flushed the session, or the daemon restarted.
    async fn to_the_end<T: Send + 'static>(
        &self,
        write: impl Future<Output = Result<T, SpoolError>> + Send + 'static,
    ) -> Result<T, SpoolError> {
        self.inner.tasks.spawn(write).await.unwrap_or(Err(SpoolError::Stopped))
    }

    /// Spools items as [`Queue::enqueue`] does, with `once` in the same transaction, unless a
    /// record of its kind and key is kept: then nothing is spooled and that record is the answer
    /// (a client's retry of a retain it has an id for).
    pub async fn enqueue_once(
        &self,
        session_id: &str,
        scope: &Scope,
        items: Vec<NewItem>,
        once: OnceRecord,
    ) -> Result<Option<String>, SpoolError> {
        let n = items.len();
        let items = stamped(session_id, scope, items);
        let (queue, session, bank) = (self.clone(), session_id.to_owned(), scope.bank.clone());
        self.to_the_end(async move {
            let spooled = async {
                queue.inner.spool.still_there()?;
                queue.inner.spool.append_once(&session, &bank, items, once).await
            };
            let kept = queue.accepted(&session, spooled.await).await?;
            if kept.is_none() && n > 0 {
                queue.arrived(&session, n);
            }
            Ok(kept)
        })
        .await
    }

    /// Passes on what the spool answered, raising (once) that the disk is full or has room again.
    /// Every write a client waits on goes through it (a session's start too: the CLI and the
    /// hooks start one before each retain, and a full disk refused them with no notice).
    pub(crate) async fn accepted<T>(&self, session_id: &str, spooled: Result<T, SpoolError>) -> Result<T, SpoolError> {
        if let Err(e @ SpoolError::Gone { .. }) = &spooled {
            if !self.inner.spool_gone.swap(true, Ordering::Relaxed) {
                let message = format!("Retains are refused: {e}.");
                self.inner.notices.emit(Level::Error, "queue", Some(session_id), message).await;
                // What was acknowledged before is in the open file only: deliver it now.
                // Tracked, so that a shutdown waits for it as for any flush.
                let queue = self.clone();
                self.inner.tasks.spawn(async move { queue.flush_all().await });
            }
            // Its write-back failed for a full disk: said as a full disk is (and its end with it).
            self.tell_if_full(session_id, e).await;
            return spooled;
        }
        if let Err(e) = &spooled {
            // Said with the file's path: the answer's "spool: disk I/O error" named none, and no
            // notice told of it (review116 #4).
            if e.is_io() && !self.inner.spool_failing.swap(true, Ordering::Relaxed) {
                let message = format!(
                    "The spool {} cannot be written ({e}): retains are refused until it can. Its disk may be failing, or the file or its folder was made read-only; `mneme doctor` checks it.",
                    self.inner.spool.path().display()
                );
                self.inner.notices.emit(Level::Error, "queue", Some(session_id), message).await;
            }
            self.tell_if_full(session_id, e).await;
            return spooled;
        }
        if ended(&self.inner.spool_full) {
            let message = "There is room on the disk again: retains are accepted.";
            self.inner.notices.emit(Level::Info, "queue", None, message).await;
        }
        if ended(&self.inner.spool_failing) {
            let message = "The spool can be written again: retains are accepted.";
            self.inner.notices.emit(Level::Info, "queue", None, message).await;
        }
        // Accepted again after the spool's file was gone: it was written back (see `spool`),
        // told here or by the daemon's look, whichever comes first.
        if self.inner.spool_gone.load(Ordering::Relaxed) {
            self.tell_spool_written_back().await;
        }
        spooled
    }

    /// Raises (once, until there is room again) that the spool's disk is full, if `e` says so.
    async fn tell_if_full(&self, session_id: &str, e: &SpoolError) {
        if e.is_full() && !self.inner.spool_full.swap(true, Ordering::Relaxed) {
            let message = format!(
                "The disk holding the spool is full: retains are refused (nothing is acknowledged that is not on disk) until there is room again. {e}"
            );
            self.inner.notices.emit(Level::Error, "queue", Some(session_id), message).await;
        }
    }

    /// Tells of the spool's write-backs not told yet, once each: the daemon's one-second look
    /// asks (a write-back the writer did by itself was a log line only: review117 #4), and so
    /// does a retain accepted after a refusal. The refusal told before, if any, ends with it
    /// (its notice stayed the last word until a retain came: review123 #7).
    pub async fn tell_spool_written_back(&self) {
        let done = self.inner.spool.write_backs();
        if self.inner.write_backs_told.fetch_max(done, Ordering::Relaxed) >= done {
            return;
        }
        let message = match self.inner.spool_gone.swap(false, Ordering::Relaxed) {
            true => {
                "The spool's file was written back to its path, with what it held: retains are accepted again.".to_owned()
            }
            false => format!(
                "The spool's file {} (or its folder, or its log) was deleted while mneme ran: written back to its path, with what it held; nothing was lost.",
                self.inner.spool.path().display()
            ),
        };
        self.inner.notices.emit(Level::Info, "queue", None, message).await;
    }

    /// Counts `n` items spooled for a session and arms its debounce (or flushes a full batch).
    fn arrived(&self, session_id: &str, n: usize) {
        self.inner.metrics.items_enqueued.fetch_add(n as u64, Ordering::Relaxed);
        let rules = self.inner.rules();
        let now = self.inner.clock.now();
        let arrival = self.inner.batcher.locked().arrived(session_id, n as u64, now, rules);
        if arrival.timer_armed {
            self.inner.timers_changed.notify_one();
        }
        if arrival.size_flush {
            self.inner.spawn_flush(session_id.to_owned(), Trigger::Size);
        }
    }

    /// Whether a flush of the session could deliver something now: it has items spooled or being
    /// delivered, and is not backing off after a failure.
    pub fn deliverable(&self, session_id: &str) -> bool {
        self.inner.batcher.locked().deliverable(session_id, self.inner.clock.now())
    }

    /// The sessions `picked` picks that a flush could deliver something of now (see
    /// [`Self::deliverable`]).
    pub fn deliverable_among(&self, picked: impl Fn(&str) -> bool) -> Vec<String> {
        let now = self.inner.clock.now();
        let batcher = self.inner.batcher.locked();
        let ids: Vec<String> = batcher.sessions().map(|(id, _)| id.clone()).filter(|id| picked(id)).collect();
        ids.into_iter().filter(|id| batcher.deliverable(id, now)).collect()
    }

    /// Delivers everything pending for a session now and waits.
    pub async fn flush(&self, session_id: &str) -> FlushReport {
        self.inner.clone().flush_session(session_id.to_owned(), Trigger::Explicit).await
    }

    /// Flushes every session with something spooled or being delivered, concurrently, and waits.
    /// (Not every session known since the start: each flush costs a spool transaction, and a
    /// long-running daemon knows thousands that have nothing left.)
    pub async fn flush_all(&self) -> FlushReport {
        let mut sessions: Vec<String> = self
            .inner
            .batcher
            .locked()
            .sessions()
            .filter(|(_, q)| q.pending > 0 || q.in_flight > 0)
            .map(|(id, _)| id.clone())
            .collect();
        if let Ok(waiting) = self.inner.spool.waiting().await {
            for s in waiting.into_keys() {
                if !sessions.contains(&s) {
                    self.inner.batcher.locked().know(&s);
                    sessions.push(s);
                }
            }
        }
        let flushes = sessions.into_iter().map(|s| self.inner.clone().flush_session(s, Trigger::Explicit));
        let mut total = FlushReport::default();
        for r in futures_util::future::join_all(flushes).await {
            total += r;
        }
        total
    }

    /// Call after a reload replaced the queue's settings (`old` were in force before): armed
    /// timers and full batches follow a shorter `flush_interval` or a smaller `batch_size` now,
    /// not at the deadline the old settings set.
    pub fn settings_changed(&self, old: &QueueSettings, new: &QueueSettings) {
        let (old, new) = (Rules::from(old), Rules::from(new));
        if old == new {
            return;
        }
        let full = self.inner.batcher.locked().rules_changed(old, new, self.inner.clock.now());
        self.inner.timers_changed.notify_one();
        for session in full {
            self.inner.spawn_flush(session, Trigger::Size);
        }
    }

    /// Call after the state's backend was replaced: an outage of the old one is not the new
    /// one's (its first failure gets a notice of its own), nor are the items it stored of a
    /// batch that failed (dead-lettered on the new one, they were taken for delivered).
    pub async fn backend_switched(&self) {
        self.inner.backend_replaced.notify_waiters();
        self.inner.sessions_down.locked().clear();
        self.inner.unreachable_tries.store(0, Ordering::Relaxed);
        if let Err(e) = self.inner.spool.forget_stored().await {
            tracing::warn!("cannot forget what the old backend stored of failed batches: {e}");
        }
    }

    /// The backend deliveries go to.
    pub fn backend(&self) -> Arc<dyn MemoryBackend> {
        self.inner.backend()
    }

    /// The settings and backend in force, together (see [`DaemonState::current`]).
    pub fn current(&self) -> Arc<crate::state::Current> {
        self.inner.state.current()
    }

    /// See [`DaemonState::takes_retains`].
    pub fn takes_retains(&self) -> bool {
        self.inner.state.takes_retains()
    }

    /// Leaves no text of delivered or discarded items readable in the spool's files (after a
    /// forget or a clear). A failure is logged: what was asked for is done already.
    pub async fn erase_traces(&self) {
        if let Err(e) = self.inner.spool.erase_traces().await {
            tracing::warn!("cannot empty the spool's log after a deletion: {e}");
        }
    }

    /// What a flush leaves spooled because the backend in force stores nothing (memory `off`):
    /// the items of `session`'s queue, or of every queue. 0 while the backend stores.
    pub async fn held(&self, session: Option<&str>) -> u64 {
        if self.backend().capabilities().stores {
            return 0;
        }
        let waiting = self.inner.spool.waiting().await.unwrap_or_default();
        match session {
            Some(s) => waiting.get(s).copied().unwrap_or_default(),
            None => waiting.values().sum(),
        }
    }

    /// The spool's group commit so far (see [`CommitCounts`]).
    /// Closes the spool (see [`crate::spool::Spool::close`]): after [`Queue::shutdown`], as the
    /// daemon stops.
    pub async fn close_spool(&self) {
        self.inner.spool.close(SPOOL_CLOSE_WAIT).await;
    }

    pub fn spool_commits(&self) -> CommitCounts {
        self.inner.spool.commit_counts()
    }

    /// Queue sizes.
    pub async fn depths(&self) -> Depths {
        let counts = self.inner.spool.counts().await.unwrap_or_default();
        let in_flight = self.inner.batcher.locked().in_flight();
        Depths {
            pending: counts.spooled.saturating_sub(in_flight),
            in_flight,
            spooled: counts.spooled,
            dead: counts.dead,
        }
    }

    /// Flushes for at most `grace`, then stops every timer and waits for running deliveries to
    /// wind down. What is left stays spooled for the next start.
    pub async fn shutdown(&self, grace: Duration) -> FlushReport {
        let report = match tokio::time::timeout(grace, self.flush_all()).await {
            Ok(r) => r,
            Err(_) => {
                tracing::warn!(
                    "shutdown grace of {grace:?} ran out; undelivered items stay spooled for the next start"
                );
                FlushReport::default()
            }
        };
        self.inner.cancel.cancel();
        self.inner.tasks.close();
        let _ = tokio::time::timeout(Duration::from_secs(1), self.inner.tasks.wait()).await;
        report
    }
}

impl Inner {
    fn settings(&self) -> QueueSettings {
        self.state.settings().queue.clone()
    }

    fn rules(&self) -> Rules {
        Rules::from(&self.state.settings().queue)
    }

    fn backend(&self) -> Arc<dyn MemoryBackend> {
        self.state.backend()
    }

    fn with_shell<T>(&self, id: &str, f: impl FnOnce(&mut SessionShell) -> T) -> T {
        let mut sessions = self.sessions.locked();
        f(sessions.entry(id.to_owned()).or_default())
    }
}

/// Whether an episode `flag` marks is over, clearing it: read first, so that the path of every
/// retain writes to the shared flag only when one ends.
fn ended(flag: &AtomicBool) -> bool {
    flag.load(Ordering::Relaxed) && flag.swap(false, Ordering::Relaxed)
}

/// A request's items as the spool keeps them: each with its id, its date (now when it has
/// none), its session in its metadata and the scope's tags when it names none.
fn stamped(session_id: &str, scope: &Scope, items: Vec<NewItem>) -> Vec<MemoryItem> {
    let now = SystemTime::now();
    items
        .into_iter()
        .map(|i| {
            let mut metadata = i.metadata;
            metadata.entry("session_id".to_owned()).or_insert_with(|| session_id.to_owned());
            MemoryItem {
                id: crate::ids::new_id(),
                content: i.content,
                context: i.context,
                timestamp: i.timestamp.unwrap_or_else(|| mneme_core::time::rfc3339_millis(now)),
                metadata,
                tags: i.tags.unwrap_or_else(|| scope.tags.clone()),
                document_id: i.document_id,
                kind: i.kind,
                append: i.append,
            }
        })
        .collect()
}

#[cfg(test)]
mod manual_clock;
#[cfg(test)]
mod prop_tests;
#[cfg(test)]
pub(crate) mod tests;
