//! The semantic side of the store: the embedder, the vectors in memory, and the thread that
//! computes missing vectors in the background.
//!
//! Retains never wait for a vector: a new passage is found by BM25 at once and by meaning once
//! the embedding thread (lowest CPU priority, batches of up to 32) has caught up. The same
//! thread backfills a store written before vectors existed, and re-embeds everything when the
//! model changes (vectors are stored with their model's id; others count as missing). Vectors
//! reach SQLite through the store's writer, which applies them to the in-memory index in the
//! same order as the deletes, so the index never keeps a deleted passage.
//!
//! An embedder that fails or is slow never fails anything: recall answers with BM25 while it is
//! unavailable, the thread retries with a growing pause, and the user hears once per outage.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

use mneme_core::{BackendEvent, EmbeddingStatus};
use mneme_embed::vector::quantize;
use mneme_embed::{EmbedError, Embedder, MiniLm, OpenAi, OpenAiConfig};
use tokio::sync::mpsc::UnboundedSender;

use crate::store::{Changes, NewStoredVector, Store, Unembedded};
use crate::vectors::{DenseFilter, DenseScan, DenseScores, Label, NewVector, VectorIndex};
use crate::writer::Writer;

use crate::embedding_batches::{check_dims, one_by_one, Embedded, Sizing};
use crate::recent_vectors::{RecentVectors, RECENT_VECTOR_BYTES};

/// Stored vectors loaded per page at start.
mod outages;
mod thread;

pub use outages::OutageNotices;

const LOAD_PAGE: usize = 2048;
/// Rows copied under the index's read lock at a time while measuring neighbourhoods (a copy
/// takes microseconds; the measuring runs without the lock).
const MEASURE_ROWS: usize = 256;
/// Measured crowding stored a transaction of this many rows at a time, so deliveries interleave.
const STORE_CROWDING_ROWS: usize = 4096;
/// Pauses between attempts while the embedder fails: from the first to the last, doubling.
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(60);
/// An idle embedding thread looks for passages to embed at least this often.
const LOOK_AGAIN: Duration = Duration::from_secs(10);
/// A batch waits until retains have paused this long (their deliveries and the daemon's request
/// path get the CPU first; on 2 cores, embedding beside a burst of retains doubled their p99) ...
const QUIET: Duration = Duration::from_millis(100);
/// ... but no longer than this, so a steady stream of retains never stops the embedding.
const MAX_DEFER: Duration = Duration::from_secs(2);

/// Which embedder computes the vectors (`local.embedder`).
#[derive(Debug, Clone, PartialEq, Default)]
pub enum EmbedderChoice {
    /// The built-in all-MiniLM-L6-v2 (the default).
    #[default]
    Builtin,
    /// An OpenAI-compatible `/v1/embeddings` endpoint.
    OpenAi(OpenAiConfig),
    /// None: recall is BM25 only.
    Off,
}

impl EmbedderChoice {
    /// The id its vectors are stored under.
    pub(crate) fn model_id(&self) -> Option<String> {
        match self {
            EmbedderChoice::Builtin => Some(MiniLm::MODEL_ID.to_owned()),
            EmbedderChoice::OpenAi(c) => Some(OpenAi::model_id_for(c)),
            EmbedderChoice::Off => None,
        }
    }
}

/// State shared by the backend (queries, status), the writer (changes) and the embedding thread.
pub(crate) struct Semantic {
    model: String,
    embedder: RwLock<Option<Arc<dyn Embedder>>>,
    index: RwLock<VectorIndex>,
    /// The model and the stored vectors are loaded.
    ready: AtomicBool,
    health: Mutex<Health>,
    /// What was told of outages, shared with the stores opened before and after this one.
    outages: OutageNotices,
    wake: Mutex<Wake>,
    woken: Condvar,
    events: Mutex<Option<UnboundedSender<BackendEvent>>>,
    /// When the writer last stored new passages.
    last_write: Mutex<Option<Instant>>,
    /// The latest question recall wanted a vector for (asked or not): what the idle thread times
    /// once one took longer than recall waits (a word took far less than a question from an
    /// endpoint whose time grows with the text, and every recall waited again).
    last_question: Mutex<Option<String>>,
    /// While the stored vectors load: memories retagged meanwhile, applied to the loaded index
    /// when it is swapped in (its pages may have been read before the change).
    retagged_in_load: Mutex<Option<HashMap<i64, String>>>,
    /// Whether the embedding thread has ended (and closed its reading connection); told on
    /// `thread_ended`.
    ended: Mutex<bool>,
    thread_ended: Condvar,
}

#[derive(Default)]
struct Health {
    /// Why the embedder is unavailable, while it is.
    error: Option<String>,
    /// Why queries are answered without vectors although the backfill goes on: the embedder
    /// took longer than recall waits for a question (every recall waited for it in vain).
    slow_queries: Option<String>,
    /// How long recall waits for a question's vector (known once a wait ran out).
    query_wait: Option<Duration>,
    /// Questions that took too long so far: one during the idle thread's timing makes that
    /// timing's clearance moot.
    slow_count: u64,
}

#[derive(Default)]
struct Wake {
    /// New passages from this pid on.
    from: Option<i64>,
    /// The embedder failed a query: the idle thread looks whether it answers again.
    probe: bool,
    /// The embedder refused a question: the idle thread looks whether it refuses everything
    /// (a revoked key, a model removed), which is an outage.
    refused_question: bool,
    stop: bool,
}

impl Semantic {
    /// The shared state for `choice`, or `None` when it is off.
    pub(crate) fn new(
        choice: &EmbedderChoice,
        outages: OutageNotices,
        events: UnboundedSender<BackendEvent>,
    ) -> Option<Arc<Self>> {
        Some(Arc::new(Self {
            model: choice.model_id()?,
            outages,
            embedder: RwLock::new(None),
            index: RwLock::new(VectorIndex::new(0)),
            ready: AtomicBool::new(false),
            health: Mutex::new(Health::default()),
            wake: Mutex::new(Wake::default()),
            woken: Condvar::new(),
            events: Mutex::new(Some(events)),
            last_write: Mutex::new(None),
            last_question: Mutex::new(None),
            retagged_in_load: Mutex::new(None),
            ended: Mutex::new(true),
            thread_ended: Condvar::new(),
        }))
    }

    /// Starts the embedding thread: it loads the model and the stored vectors, then embeds.
    pub(crate) fn start(self: &Arc<Self>, choice: EmbedderChoice, path: std::path::PathBuf, writer: Writer) {
        let me = self.clone();
        *lock(&self.ended) = false;
        let spawned = std::thread::Builder::new().name("mneme-embedder".into()).spawn(move || {
            // An endpoint's client is built first: its HTTP thread, started with it, keeps the
            // normal priority (at idle priority, a busy machine held a question's vector past the
            // second recall waits, and the backfill's requests for as long as the load lasted).
            let client = match &choice {
                EmbedderChoice::OpenAi(config) => Some(OpenAi::new(config.clone())),
                _ => None,
            };
            crate::writer::lower_priority();
            thread::idle_priority();
            if let Err(e) = me.run(choice, client, &path, &writer) {
                me.unavailable(format!("the embedding thread stopped: {e}"));
            }
            drop(writer);
            *lock(&me.ended) = true;
            me.thread_ended.notify_all();
        });
        if let Err(e) = spawned {
            *lock(&self.ended) = true;
            self.unavailable(format!("cannot start the embedding thread: {e}"));
        }
    }

    /// Asks the thread to stop (the backend is going away).
    pub(crate) fn stop(&self) {
        lock(&self.wake).stop = true;
        self.woken.notify_all();
    }

    /// [`Semantic::stop`], then waits at most `wait` for the thread to end (it stops between two
    /// batches), so that its reading connection is closed before the writer's: the last to close
    /// checkpoints the log, and a stop during a backfill left it behind (review70 #2).
    pub(crate) fn stop_and_wait(&self, wait: Duration) {
        self.stop();
        let ended = lock(&self.ended);
        let _ = self.thread_ended.wait_timeout_while(ended, wait, |ended| !*ended);
    }

    /// Applies a write's changes: deleted passages leave the index, new ones wake the thread.
    pub(crate) fn apply(&self, changes: Changes) {
        if changes.removed_all {
            write(&self.index).clear();
        } else if !changes.removed.is_empty() {
            write(&self.index).remove(&changes.removed);
        }
        if !changes.retagged.is_empty() {
            if let Some(pending) = lock(&self.retagged_in_load).as_mut() {
                pending.extend(changes.retagged.iter().map(|(seq, tags)| (*seq, tags.clone())));
            }
            write(&self.index).retag(&changes.retagged);
        }
        if let Some(first) = changes.first_added {
            *lock(&self.last_write) = Some(Instant::now());
            let mut wake = lock(&self.wake);
            wake.from = Some(wake.from.map_or(first, |f| f.min(first)));
            self.woken.notify_all();
        }
    }

    /// The query's vector, when the embedder is loaded and answering. Blocks (run it on a
    /// blocking thread).
    fn query_vector(&self, query: &str) -> Option<Vec<f32>> {
        if !self.ready.load(Ordering::Acquire) {
            return None;
        }
        {
            let h = lock(&self.health);
            if h.error.is_some() || h.slow_queries.is_some() {
                return None;
            }
        }
        let embedder = read(&self.embedder).clone()?;
        match embedder.embed(&[query]) {
            // No direction (the built-in model cannot read the question): answered by its words.
            Ok(v) if v.first().is_some_and(|v| v.iter().all(|x| *x == 0.0)) => None,
            Ok(mut v) => v.pop(),
            // This question refused (too long for the endpoint, say): it is answered by its
            // words. Taken for an outage, one such question left every later one without vectors
            // until the embedding thread found the endpoint answering.
            Err(EmbedError::Invalid(why)) => {
                tracing::debug!("the embedder refuses a question, answered by its words only: {why}");
                let mut wake = lock(&self.wake);
                wake.refused_question = true;
                self.woken.notify_all();
                None
            }
            // An answer of the other length an unsettled endpoint gives: this question is
            // answered by its words, the next is asked again (no outage).
            Err(EmbedError::Unsettled(why)) => {
                tracing::debug!("a question answered by its words only: {why}");
                None
            }
            Err(e) => {
                self.unavailable(e.to_string());
                None
            }
        }
    }

    /// The query wait ran out: recall answered without vectors, and does so until the embedder
    /// answers the embedding thread again.
    pub(crate) fn query_timed_out(&self, waited: Duration) {
        let reason = format!("the embedder took longer than {} ms to embed a query", waited.as_millis());
        {
            let mut h = lock(&self.health);
            h.slow_queries = Some(reason.clone());
            h.query_wait = Some(waited);
            h.slow_count += 1;
        }
        self.unavailable(reason);
    }

    /// The query's vector scored against the bank's passages (the `k` best), when the embedder
    /// is loaded and answering. Blocks.
    pub(crate) fn scan(&self, bank: &str, query: &str, k: usize, filter: &DenseFilter) -> Option<DenseScan> {
        *lock(&self.last_question) = Some(query.to_owned());
        let vector = self.query_vector(query)?;
        let index = read(&self.index);
        if index.dim() != 0 && vector.len() != index.dim() {
            // The embedder's vectors changed length: the embedding thread starts over.
            drop(index);
            lock(&self.wake).probe = true;
            self.woken.notify_all();
            return None;
        }
        index.scan(bank, &vector, k, filter)
    }

    /// A scan completed with the scores of the lexical pool's passages.
    pub(crate) fn finish(&self, scan: DenseScan, wanted: &[i64]) -> DenseScores {
        read(&self.index).finish(scan, wanted)
    }

    /// For status and metrics (`passages` from the store).
    pub(crate) fn status(&self, passages: u64) -> EmbeddingStatus {
        let error = {
            let h = lock(&self.health);
            h.error.clone().or_else(|| h.slow_queries.clone())
        };
        let state = if error.is_some() {
            "unavailable"
        } else if self.ready.load(Ordering::Acquire) {
            "ready"
        } else {
            "loading"
        };
        // One guard: a second read lock taken while a writer waits would wait behind it.
        let (embedded, banks_measuring) = {
            let index = read(&self.index);
            (index.len() as u64, index.unmeasured_banks().len() as u64)
        };
        EmbeddingStatus { model: self.model.clone(), state: state.into(), embedded, banks_measuring, passages, error }
    }

    fn unavailable(&self, reason: String) {
        let mut h = lock(&self.health);
        let first = h.error.is_none();
        h.error = Some(reason.clone());
        if self.outages.tell_now(&self.model, Instant::now()) {
            drop(h);
            self.event(true, unavailable_notice(&reason));
        } else if first {
            drop(h);
            tracing::warn!("embedder unavailable again: {reason}");
        } else {
            drop(h);
        }
        // An idle embedding thread finds out when it answers again (it pings while the error
        // stands). Left asleep, a failed query kept recall without vectors until the next retain.
        let mut wake = lock(&self.wake);
        wake.probe = true;
        self.woken.notify_all();
    }

    fn available(&self) {
        if lock(&self.wake).stop {
            // Replaced (a reopen, a switch): the outage is the next embedder's to end.
            return;
        }
        let mut h = lock(&self.health);
        let cleared = h.error.take().is_some();
        if h.slow_queries.is_some() {
            // The backfill goes on; queries still go without vectors: not back yet.
            return;
        }
        let told = self.outages.ended();
        drop(h);
        if told {
            self.event(false, "the embedder answers again: semantic recall is back".into());
        } else if cleared {
            tracing::info!("the embedder answers again");
        }
    }

    fn event(&self, problem: bool, message: String) {
        if lock(&self.wake).stop {
            // This embedder was replaced (a switch) or the backend is closing: what it says
            // now is about an embedder no longer in use.
            tracing::debug!("{message} (an embedder no longer in use)");
            return;
        }
        if let Some(tx) = lock(&self.events).as_ref() {
            if tx.send(BackendEvent { problem, message: message.clone() }).is_ok() {
                return;
            }
        }
        tracing::warn!("{message}");
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

/// What the user is told of an outage.
fn unavailable_notice(reason: &str) -> String {
    format!("semantic recall is unavailable ({reason}); recall uses BM25 until the embedder answers, and the passages stored meanwhile are embedded then")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The writer marks every write in `last_write`; the embedding thread, deferring to those
    /// writes, must not hold that lock while it sleeps (it once did, for 100 ms at a time,
    /// stalling every delivery behind it).
    #[test]
    fn deferring_to_retains_holds_no_lock_the_writer_needs() {
        let (events, _rx) = tokio::sync::mpsc::unbounded_channel();
        let s = Semantic::new(&EmbedderChoice::Builtin, OutageNotices::default(), events).unwrap();
        s.apply(Changes { first_added: Some(1), ..Changes::default() });
        let deferring = {
            let s = s.clone();
            std::thread::spawn(move || s.defer_to_retains())
        };
        // This thread is the writer: it marks a write every 2 ms, so the embedding thread keeps
        // deferring (up to MAX_DEFER) through the whole window, however late it started.
        let (mut held, mut tries) = (0, 0);
        let until = Instant::now() + Duration::from_millis(300);
        while Instant::now() < until {
            tries += 1;
            match s.last_write.try_lock() {
                Ok(mut last) => *last = Some(Instant::now()),
                Err(_) => held += 1,
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(!deferring.is_finished(), "it deferred through the window (else the test showed nothing)");
        s.stop();
        deferring.join().unwrap();
        assert_eq!(held, 0, "the lock was held at {held} of {tries} tries");
    }
}
