//! The queue's promise as a property: for any interleaving of enqueues, flushes, transient,
//! permanent and disk-full failures, lost replies, clears, dead-letter retries and restarts, no
//! acknowledged item is lost, none is sent under two batch ids (which would store it twice), and
//! each session's items reach the store in the order they were acknowledged — except those a
//! failure set aside in the dead letters, which come back when retried.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use async_trait::async_trait;
use mneme_core::*;
use proptest::prelude::*;

use super::manual_clock::ManualClock;
use super::*;

/// Deliveries a batch gets before it is a dead letter (`queue.max_attempts` below).
const MAX_ATTEMPTS: u32 = 3;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    None,
    Transient,
    Permanent,
    /// Stored, but the reply is lost.
    LostReply,
    DiskFull,
}

/// A store keyed by item id, like the real ones, that fails on cue and records what it saw.
/// It also follows which batches the queue must have set aside as dead letters (a permanent
/// failure, or the last of [`MAX_ATTEMPTS`] transient ones), synchronously, as it answers.
#[derive(Default)]
struct Store {
    fault: Mutex<Option<Fault>>,
    /// Contents in the order they were first stored, with their session.
    stored: Mutex<Vec<(String, String)>>,
    /// Item id → the batch ids it was sent under.
    sent_in: Mutex<HashMap<String, BTreeSet<String>>>,
    /// Failed attempts per live batch.
    attempts: Mutex<HashMap<String, u32>>,
    /// Batches now in the dead letters.
    dead: Mutex<BTreeSet<String>>,
    /// Contents that ever sat in the dead letters.
    ever_dead: Mutex<BTreeSet<String>>,
}

impl Store {
    fn store(&self, batch: &RetainBatch) {
        let mut stored = self.stored.lock().unwrap();
        for item in &batch.items {
            if !stored.iter().any(|(c, _)| *c == item.content) {
                stored.push((item.content.clone(), item.metadata["session_id"].clone()));
            }
        }
    }

    fn failed(&self, batch: &RetainBatch, permanent: bool) {
        let mut attempts = self.attempts.lock().unwrap();
        let n = attempts.entry(batch.id.clone()).or_default();
        *n += 1;
        if permanent || *n >= MAX_ATTEMPTS {
            self.dead.lock().unwrap().insert(batch.id.clone());
            self.ever_dead.lock().unwrap().extend(batch.items.iter().map(|i| i.content.clone()));
        }
    }

    /// The dead letters go back into the queue with fresh attempts.
    fn revive(&self) {
        let dead = std::mem::take(&mut *self.dead.lock().unwrap());
        let mut attempts = self.attempts.lock().unwrap();
        for batch in dead {
            attempts.remove(&batch);
        }
    }
}

#[async_trait]
impl MemoryBackend for Store {
    fn id(&self) -> BackendId {
        BackendId::Local
    }
    async fn start(&self, _: &Scope) -> Result<(), BackendError> {
        Ok(())
    }
    async fn retain(&self, _: &Scope, batch: &RetainBatch) -> Result<(), BackendError> {
        for item in &batch.items {
            self.sent_in.lock().unwrap().entry(item.id.clone()).or_default().insert(batch.id.clone());
        }
        let fault = self.fault.lock().unwrap().unwrap_or(Fault::None);
        match fault {
            Fault::None => {
                self.store(batch);
                Ok(())
            }
            Fault::LostReply => {
                self.store(batch);
                self.failed(batch, false);
                Err(BackendError::transient("reply lost"))
            }
            Fault::Transient => {
                self.failed(batch, false);
                Err(BackendError::transient("connection refused"))
            }
            Fault::Permanent => {
                self.failed(batch, true);
                Err(BackendError::permanent("400 bad request"))
            }
            Fault::DiskFull => Err(BackendError::StorageFull { reason: "disk full".into() }),
        }
    }
    async fn recall(&self, _: &Scope, _: &RecallQuery) -> Result<Vec<Recalled>, BackendError> {
        Ok(vec![])
    }
    async fn reflect(&self, _: &Scope, _: &ReflectQuery) -> Result<String, BackendError> {
        Err(BackendError::Unsupported("no".into()))
    }
    async fn instructions(&self, _: &Scope) -> Result<Option<String>, BackendError> {
        Ok(None)
    }
    async fn clear(&self, _: &Scope, _: ClearWhat) -> Result<ClearReport, BackendError> {
        Ok(ClearReport { deleted: None, message: String::new() })
    }
    async fn status(&self) -> BackendStatus {
        BackendStatus::healthy(BackendId::Local)
    }
}

#[derive(Debug, Clone)]
enum Op {
    Enqueue { session: usize, n: usize },
    Flush { session: usize },
    FlushAll,
    Fault(Fault),
    Clear { session: usize },
    RetryDead,
    Restart,
    Advance { ms: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    let fault = prop_oneof![
        3 => Just(Fault::None),
        2 => Just(Fault::Transient),
        1 => Just(Fault::Permanent),
        1 => Just(Fault::LostReply),
        1 => Just(Fault::DiskFull),
    ];
    prop_oneof![
        6 => (0..3usize, 1..6usize).prop_map(|(session, n)| Op::Enqueue { session, n }),
        2 => (0..3usize).prop_map(|session| Op::Flush { session }),
        1 => Just(Op::FlushAll),
        3 => fault.prop_map(Op::Fault),
        1 => (0..3usize).prop_map(|session| Op::Clear { session }),
        1 => Just(Op::RetryDead),
        1 => Just(Op::Restart),
        4 => (0..3000u64).prop_map(|ms| Op::Advance { ms }),
    ]
}

fn queue_settings() -> QueueSettings {
    QueueSettings {
        batch_size: 4,
        flush_interval: Duration::from_secs(1),
        max_batch: 3,
        max_attempts: MAX_ATTEMPTS,
        retry_initial: Duration::from_millis(100),
        retry_max: Duration::from_secs(1),
        ..crate::config::Settings::default().queue
    }
}

fn open(path: &std::path::Path, store: &Arc<Store>, clock: &Arc<ManualClock>) -> Queue {
    let spool = Spool::open(path).unwrap();
    let notices = Notices::new(spool.clone());
    let settings = crate::config::Settings { queue: queue_settings(), ..crate::config::Settings::default() };
    let state = crate::state::DaemonState::new(Arc::new(settings), store.clone());
    Queue::with_clock(spool, state, notices, Arc::new(Metrics::default()), clock.clone())
}

async fn run(ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spool.db");
    let store = Arc::new(Store::default());
    // One clock for every run of the queue: time goes on across restarts.
    let clock = ManualClock::new();
    let mut queue = open(&path, &store, &clock);
    let scope = Scope { bank: "b".into(), tags: vec![] };
    // Acknowledged contents per session, in order, and those a clear may have dropped.
    let mut acked: Vec<Vec<String>> = vec![Vec::new(); 3];
    let mut cleared: BTreeSet<String> = BTreeSet::new();
    let mut next = 0usize;
    for op in ops {
        match op {
            Op::Enqueue { session, n } => {
                let items: Vec<NewItem> = (0..n)
                    .map(|_| {
                        next += 1;
                        NewItem {
                            content: format!("s{session}-{next}"),
                            context: None,
                            kind: MemoryType::World,
                            ..NewItem::default()
                        }
                    })
                    .collect();
                let contents: Vec<String> = items.iter().map(|i| i.content.clone()).collect();
                queue.enqueue(&format!("s{session}"), &scope, items).await.unwrap();
                acked[session].extend(contents);
            }
            Op::Flush { session } => {
                queue.flush(&format!("s{session}")).await;
            }
            Op::FlushAll => {
                queue.flush_all().await;
            }
            Op::Fault(f) => *store.fault.lock().unwrap() = Some(f),
            Op::Clear { session } => {
                let stored: BTreeSet<String> = store.stored.lock().unwrap().iter().map(|(c, _)| c.clone()).collect();
                cleared.extend(acked[session].iter().filter(|c| !stored.contains(*c)).cloned());
                queue.discard(Some(&format!("s{session}"))).await.unwrap();
                // What was dead in that session is gone, not waiting.
                store.revive();
            }
            Op::RetryDead => {
                store.revive();
                queue.retry_dead().await.unwrap();
            }
            Op::Restart => {
                queue.shutdown(Duration::ZERO).await;
                drop(queue);
                // The old writer lets go of the spool's lock as it winds down.
                tokio::time::sleep(Duration::from_millis(50)).await;
                queue = open(&path, &store, &clock);
                queue.recover().await.unwrap();
            }
            Op::Advance { ms } => clock.advance(&queue, Duration::from_millis(ms)).await,
        }
    }
    // Heal: the store works again, dead letters come back, everything is delivered.
    *store.fault.lock().unwrap() = Some(Fault::None);
    store.revive();
    // A delivery still in flight from before the heal may dead-letter after a retry: retry
    // until nothing is left (dead letters must come back whenever they are retried).
    for _ in 0..3 {
        queue.retry_dead().await.unwrap();
        queue.flush_all().await;
        clock.advance(&queue, Duration::from_secs(5)).await;
    }
    assert_eq!(queue.depths().await, Depths::default(), "everything was delivered");

    let stored = store.stored.lock().unwrap().clone();
    let stored_set: BTreeSet<&String> = stored.iter().map(|(c, _)| c).collect();
    let ever_dead = store.ever_dead.lock().unwrap().clone();
    for (session, contents) in acked.iter().enumerate() {
        for c in contents {
            assert!(stored_set.contains(c) || cleared.contains(c), "s{session}: acknowledged {c} was lost");
        }
        let position: HashMap<&String, usize> = contents.iter().enumerate().map(|(i, c)| (c, i)).collect();
        let order: Vec<usize> = stored
            .iter()
            .filter(|(c, s)| *s == format!("s{session}") && !ever_dead.contains(c))
            .map(|(c, _)| position[c])
            .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "s{session} out of order: {order:?}");
    }
    for (item, batches) in store.sent_in.lock().unwrap().iter() {
        assert_eq!(batches.len(), 1, "item {item} was sent under several batch ids: {batches:?}");
    }
    queue.shutdown(Duration::ZERO).await;
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn nothing_acknowledged_is_lost_duplicated_or_reordered(ops in prop::collection::vec(op(), 1..40)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(run(ops));
    }
}
