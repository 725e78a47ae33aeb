//! Queue timing on a hand-moved clock ([`super::manual_clock`]), faults from a backend that fails,
//! hangs and recovers on cue.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use async_trait::async_trait;
use mneme_core::*;

use super::manual_clock::ManualClock;
use super::*;
use crate::state::Current;

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Mode {
    Ok,
    Transient,
    /// Nothing answers (connection refused).
    Unreachable,
    /// The server answers that it cannot serve now (a 503 while its database restarts).
    Unavailable,
    Permanent,
    /// Fails transiently after storing (a lost reply): the resend must not store twice.
    StoreThenFail,
    Hang,
    /// Stores after 200 ms of real time.
    Slow,
    /// Hangs until released, then fails transiently.
    HangTransient,
    /// Hangs until released, then fails for good.
    HangPermanent,
}

/// A backend that stores, fails or hangs on cue (also for the session layer's tests).
pub(crate) struct TestBackend {
    modes: Mutex<Vec<Mode>>, // consumed front to back; the last one sticks
    batches: Mutex<Vec<RetainBatch>>,
    running: AtomicUsize,
    max_running: AtomicUsize,
    pub(crate) release: tokio::sync::Notify,
    /// Batches whose first item starts with this are answered 429 (`Unavailable`), whatever the
    /// modes say; counted in `throttled`.
    throttled_prefix: Mutex<Option<String>>,
    throttled: AtomicUsize,
    /// When set, `instructions` counts the call, waits for `release`, then answers this.
    pub(crate) guide: Mutex<Option<String>>,
    pub(crate) guide_asked: AtomicUsize,
    /// What each `import` was given (contents).
    pub(crate) imports: Mutex<Vec<Vec<String>>>,
    /// The query of each `recall`.
    pub(crate) queries: Mutex<Vec<String>>,
}

impl TestBackend {
    pub(crate) fn new(modes: &[Mode]) -> Arc<Self> {
        Arc::new(Self {
            modes: Mutex::new(modes.to_vec()),
            batches: Mutex::new(Vec::new()),
            running: AtomicUsize::new(0),
            max_running: AtomicUsize::new(0),
            release: tokio::sync::Notify::new(),
            throttled_prefix: Mutex::new(None),
            throttled: AtomicUsize::new(0),
            guide: Mutex::new(None),
            guide_asked: AtomicUsize::new(0),
            imports: Mutex::new(Vec::new()),
            queries: Mutex::new(Vec::new()),
        })
    }
    fn next_mode(&self) -> Mode {
        let mut m = self.modes.lock().unwrap();
        if m.len() > 1 {
            m.remove(0)
        } else {
            m[0]
        }
    }
    fn set(&self, mode: Mode) {
        *self.modes.lock().unwrap() = vec![mode];
    }
    pub(crate) fn delivered(&self) -> Vec<String> {
        self.batches.lock().unwrap().iter().flat_map(|b| b.items.iter().map(|i| i.content.clone())).collect()
    }
    fn batch_sizes(&self) -> Vec<usize> {
        self.batches.lock().unwrap().iter().map(|b| b.items.len()).collect()
    }
}

#[async_trait]
impl MemoryBackend for TestBackend {
    fn id(&self) -> BackendId {
        BackendId::Local
    }
    async fn start(&self, _: &Scope) -> Result<(), BackendError> {
        Ok(())
    }
    async fn retain(&self, _: &Scope, batch: &RetainBatch) -> Result<(), BackendError> {
        let prefix = self.throttled_prefix.lock().unwrap().clone();
        if prefix.is_some_and(|p| batch.items[0].content.starts_with(&p)) {
            self.throttled.fetch_add(1, Ordering::SeqCst);
            return Err(BackendError::Unavailable { reason: "429".into(), retry_after: None });
        }
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        let mode = self.next_mode();
        if matches!(mode, Mode::Hang | Mode::HangTransient | Mode::HangPermanent) {
            self.release.notified().await;
        }
        if mode == Mode::Slow {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.running.fetch_sub(1, Ordering::SeqCst);
        match mode {
            Mode::Ok | Mode::Hang | Mode::Slow => {
                self.batches.lock().unwrap().push(batch.clone());
                Ok(())
            }
            Mode::StoreThenFail => {
                let mut b = self.batches.lock().unwrap();
                if !b.iter().any(|x| x.id == batch.id) {
                    b.push(batch.clone());
                }
                Err(BackendError::transient("reply lost"))
            }
            Mode::Transient | Mode::HangTransient => Err(BackendError::transient("connection refused")),
            Mode::Permanent | Mode::HangPermanent => Err(BackendError::permanent("400 bad request")),
            Mode::Unreachable => Err(BackendError::Unreachable { reason: "connection refused".into() }),
            Mode::Unavailable => Err(BackendError::Unavailable { reason: "503".into(), retry_after: None }),
        }
    }
    async fn recall(&self, _: &Scope, q: &RecallQuery) -> Result<Vec<Recalled>, BackendError> {
        self.queries.lock().unwrap().push(q.query.clone());
        Ok(vec![])
    }
    async fn reflect(&self, _: &Scope, _: &ReflectQuery) -> Result<String, BackendError> {
        Err(BackendError::Unsupported("no".into()))
    }
    async fn instructions(&self, _: &Scope) -> Result<Option<String>, BackendError> {
        let Some(text) = self.guide.lock().unwrap().clone() else { return Ok(None) };
        self.guide_asked.fetch_add(1, Ordering::SeqCst);
        self.release.notified().await;
        Ok(Some(text))
    }
    async fn clear(&self, _: &Scope, _: ClearWhat) -> Result<ClearReport, BackendError> {
        Ok(ClearReport { deleted: None, message: String::new() })
    }
    async fn status(&self) -> BackendStatus {
        BackendStatus::healthy(BackendId::Local)
    }
    async fn import(&self, memories: &[StoredMemory]) -> Result<Option<u64>, BackendError> {
        self.imports.lock().unwrap().push(memories.iter().map(|m| m.content.clone()).collect());
        Ok(None)
    }
}

fn settings() -> QueueSettings {
    crate::config::Settings::default().queue
}

struct Rig {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    queue: Queue,
    notices: Notices,
    state: DaemonState,
    clock: Arc<ManualClock>,
}

impl Rig {
    /// Moves the queue's clock on by `ms` and lets it settle.
    async fn advance(&self, ms: u64) {
        self.clock.advance(&self.queue, Duration::from_millis(ms)).await;
    }
}

/// Default settings but the queue's, and `backend`.
fn state(backend: Arc<dyn MemoryBackend>, s: QueueSettings) -> DaemonState {
    DaemonState::new(Arc::new(crate::config::Settings { queue: s, ..crate::config::Settings::default() }), backend)
}

fn rig(backend: Arc<dyn MemoryBackend>, s: QueueSettings) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spool.db");
    let spool = Spool::open(&path).unwrap();
    let notices = Notices::new(spool.clone());
    let state = state(backend, s);
    let clock = ManualClock::new();
    let queue = Queue::with_clock(spool, state.clone(), notices.clone(), Arc::new(Metrics::default()), clock.clone());
    Rig { _dir: dir, path, queue, notices, state, clock }
}

/// Queues `n` items on session "s" and starts its flush, whose first delivery is under way (a
/// backend whose first mode hangs holds it there); the flush's handle.
async fn flush_under_way(r: &Rig, n: usize) -> tokio::task::JoinHandle<FlushReport> {
    r.queue.enqueue("s", &scope(), items("a", n)).await.unwrap();
    let q = r.queue.clone();
    let flush = tokio::spawn(async move { q.flush("s").await });
    r.advance(10).await;
    flush
}

/// An item of `document`, replacing it or (`append`) adding to it.
fn doc(content: &str, document: &str, append: bool) -> NewItem {
    NewItem { content: content.into(), document_id: Some(document.into()), append, ..NewItem::default() }
}

fn scope() -> Scope {
    Scope { bank: "b".into(), tags: vec!["project:x".into()] }
}

fn items(prefix: &str, n: usize) -> Vec<NewItem> {
    (0..n)
        .map(|i| NewItem {
            content: format!("{prefix}{i}"),
            context: None,
            kind: MemoryType::World,
            ..NewItem::default()
        })
        .collect()
}

/// The real local store, lexical only, in `dir` (a document is replaced by what one batch holds).
fn local_store(dir: &std::path::Path) -> mneme_local::LocalBackend {
    mneme_local::LocalBackend::open(&mneme_local::LocalConfig::lexical(dir.join("m.db"))).unwrap()
}

/// What `local` holds of `document` (or of every document, for `None`), sorted.
async fn stored_of(local: &mneme_local::LocalBackend, document: Option<&str>) -> Vec<String> {
    let page = local.export(None, None, 100).await.unwrap();
    let mut kept: Vec<String> = page
        .memories
        .into_iter()
        .filter(|m| document.is_none() || m.document_id.as_deref() == document)
        .map(|m| m.content)
        .collect();
    kept.sort();
    kept
}

/// Waits (for at most 10 s) until `done` holds: for work on another thread the queue's
/// settling cannot see, such as the local store's writer.
async fn until<F: std::future::Future<Output = bool>>(mut done: impl FnMut() -> F) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !done().await {
        assert!(std::time::Instant::now() < deadline, "not done within 10 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn flushes_at_batch_size() {
    let b = TestBackend::new(&[Mode::Ok]);
    let r = rig(b.clone(), settings());
    r.queue.enqueue("s", &scope(), items("a", 15)).await.unwrap();
    r.advance(100).await;
    assert!(b.delivered().is_empty());
    r.queue.enqueue("s", &scope(), items("b", 1)).await.unwrap();
    r.advance(100).await;
    assert_eq!(b.batch_sizes(), vec![16]);
    assert_eq!(r.queue.depths().await.spooled, 0);
}

/// A client that hangs up while its retain is being written (hyper drops the handler's future)
/// leaves the items spooled *and* scheduled: they go out on the session's timer, not only at
/// the next restart or at some later flush of the session.
#[tokio::test]
async fn a_retain_dropped_while_it_is_written_is_still_delivered_on_time() {
    let b = TestBackend::new(&[Mode::Ok]);
    let r = rig(b.clone(), settings());
    // The spool's writer is kept busy a while, so the retain's write is certain to wait.
    let spool = r.queue.inner.spool.clone();
    let busy = tokio::spawn(async move {
        spool
            .call(|_| {
                std::thread::sleep(Duration::from_millis(300));
                Ok(())
            })
            .await
            .unwrap();
    });
    let scope = scope();
    let mut retain = Box::pin(r.queue.enqueue("s", &scope, items("a", 1)));
    // Polled once (the write is under way), then given up once it is committed.
    assert!(tokio::time::timeout(Duration::ZERO, &mut retain).await.is_err());
    busy.await.unwrap();
    until(|| async { r.queue.depths().await.spooled == 1 }).await;
    drop(retain);
    r.advance(5100).await;
    until(|| async { b.delivered() == ["a0"] }).await;
    assert_eq!(r.queue.depths().await, Depths::default());
}

/// A clear waits for a delivery under way before the backend deletes: finishing after the
/// deletion, it brought back memories the user had just cleared.
#[tokio::test]
async fn a_clear_deletes_after_the_delivery_under_way() {
    let b = TestBackend::new(&[Mode::Hang]);
    let r = rig(b.clone(), settings());
    let flush = flush_under_way(&r, 1).await;
    assert_eq!(b.running.load(Ordering::SeqCst), 1);
    let (q, seen) = (r.queue.clone(), b.clone());
    let clear = tokio::spawn(async move { q.discard_then(Some("s"), async move { seen.delivered() }).await });
    r.advance(50).await;
    assert!(!clear.is_finished(), "the deletion did not wait for the delivery");
    b.release.notify_one();
    let (discarded, stored_before_the_deletion) = clear.await.unwrap().unwrap();
    assert_eq!(flush.await.unwrap().delivered, 1);
    assert_eq!((discarded, stored_before_the_deletion), (0, vec!["a0".to_owned()]));
    assert_eq!(r.queue.depths().await, Depths::default());
}

/// A flush through a backlog stops after the batch it is delivering when a clear waits: each
/// delivery to Hindsight lasts until the server has stored it, and the clear (and every flush
/// after it) waited out the whole backlog.
#[tokio::test]
async fn a_clear_waits_for_one_delivery_not_for_the_whole_backlog() {
    let b = TestBackend::new(&[Mode::Hang, Mode::Ok]);
    let r = rig(b.clone(), QueueSettings { max_batch: 1, ..settings() });
    let flush = flush_under_way(&r, 3).await;
    assert_eq!(b.running.load(Ordering::SeqCst), 1);
    let (q, seen) = (r.queue.clone(), b.clone());
    let clear = tokio::spawn(async move { q.discard_then(None, async move { seen.delivered() }).await });
    r.advance(10).await;
    b.release.notify_one();
    let (discarded, stored_before_the_deletion) = clear.await.unwrap().unwrap();
    assert_eq!(stored_before_the_deletion, ["a0"], "the flush went on through the backlog first");
    assert_eq!(discarded, 2);
    assert_eq!(flush.await.unwrap().delivered, 1);
    assert_eq!(r.queue.depths().await, Depths::default());
}

/// A clear given up while it waits (its client hung up) leaves no mark: counted as waiting for
/// good, it stopped every flush after it before it delivered anything.
#[tokio::test]
async fn a_clear_given_up_while_it_waits_stops_no_flush_after_it() {
    let b = TestBackend::new(&[Mode::Hang, Mode::Ok]);
    let r = rig(b.clone(), settings());
    let flush = flush_under_way(&r, 1).await;
    let q = r.queue.clone();
    let clear = tokio::spawn(async move { q.discard_then(None, async {}).await });
    r.advance(10).await;
    clear.abort();
    let _ = clear.await;
    b.release.notify_one();
    assert_eq!(flush.await.unwrap().delivered, 1);
    r.queue.enqueue("s", &scope(), items("b", 1)).await.unwrap();
    assert_eq!(r.queue.flush("s").await.delivered, 1);
}

/// A session's first flush, started while a clear waits for another session's delivery, does
/// not deliver beside the deletion: finishing after it, it brought back what was just cleared.
#[tokio::test]
async fn a_clear_holds_back_the_first_flush_of_a_session_new_since_it_began() {
    let b = TestBackend::new(&[Mode::Hang, Mode::Hang, Mode::Ok]);
    let r = rig(b.clone(), settings());
    let flush = flush_under_way(&r, 1).await;
    let q = r.queue.clone();
    let clear = tokio::spawn(async move { q.discard_then(None, async {}).await });
    r.advance(10).await;
    // A session that never flushed before the clear began.
    r.queue.enqueue("t", &scope(), items("b", 1)).await.unwrap();
    let q = r.queue.clone();
    let late = tokio::spawn(async move { q.flush("t").await });
    r.advance(10).await;
    b.release.notify_one(); // the delivery under way ends; the clear goes on
    clear.await.unwrap().unwrap();
    b.release.notify_one(); // a delivery that started beside the clear would end now
    flush.await.unwrap();
    late.await.unwrap();
    assert!(!b.delivered().contains(&"b0".to_owned()), "delivered beside the clear: {:?}", b.delivered());
    assert_eq!(r.queue.depths().await, Depths::default());
}

/// A batch the spool cannot move to the dead letters (its disk full) is tried again later; the
/// flush ends. It was fetched and sent again at once, in a loop, and the flush never returned.
#[tokio::test]
async fn a_dead_letter_the_spool_cannot_write_is_tried_later_not_in_a_loop() {
    let b = TestBackend::new(&[Mode::Permanent]);
    let r = rig(b.clone(), settings());
    let refuse = "CREATE TEMP TRIGGER refuse BEFORE INSERT ON dead_letters BEGIN SELECT RAISE(ABORT, 'disk full'); END";
    r.queue.inner.spool.call(move |t| t.execute_batch(refuse)).await.unwrap();
    r.queue.enqueue("s", &scope(), items("a", 1)).await.unwrap();
    let flushed = tokio::time::timeout(Duration::from_secs(5), r.queue.flush("s")).await;
    assert_eq!(flushed.expect("the flush ended"), FlushReport { delivered: 0, failed: 1, spool_fault: None });
    assert_eq!(r.queue.depths().await.dead, 0);
    r.queue.inner.spool.call(|t| t.execute_batch("DROP TRIGGER refuse")).await.unwrap();
    r.advance(1100).await;
    until(|| async { r.queue.depths().await == Depths { dead: 1, ..Depths::default() } }).await;
}

/// A spooled row this mneme cannot read (a kind it does not know, metadata that is not JSON) is
/// moved to the dead letters with why, and a notice: it held up every later item of its session
/// for good, silently.
#[tokio::test]
async fn a_row_this_mneme_cannot_read_is_set_aside_and_the_rest_delivered() {
    let b = TestBackend::new(&[Mode::Ok]);
    let r = rig(b.clone(), settings());
    r.queue.enqueue("s", &scope(), items("a", 4)).await.unwrap();
    let spoil = "UPDATE items SET kind = 'from-the-future' WHERE content = 'a1';
                 UPDATE items SET metadata = 'not json' WHERE content = 'a2';";
    r.queue.inner.spool.call(move |t| t.execute_batch(spoil)).await.unwrap();
    assert_eq!(r.queue.flush("s").await, FlushReport { delivered: 2, failed: 0, spool_fault: None });
    assert_eq!(b.delivered(), vec!["a0", "a3"]);
    assert_eq!(r.queue.depths().await, Depths { pending: 0, in_flight: 0, spooled: 0, dead: 2 });
    let notices = r.notices.after(0, 10).await.unwrap();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(
        notices[0].message.starts_with("2 spooled memories moved to the dead letters: this mneme cannot read it ("),
        "{}",
        notices[0].message
    );
    let why: Vec<String> = r
        .queue
        .inner
        .spool
        .call(|t| t.prepare("SELECT last_error FROM dead_letters ORDER BY seq")?.query_map([], |r| r.get(0))?.collect())
        .await
        .unwrap();
    assert!(why[0].contains("from-the-future") && why[1].contains("set aside"), "{why:?}");
    // Later items of the session go out as ever.
    r.queue.enqueue("s", &scope(), items("b", 1)).await.unwrap();
    assert_eq!(r.queue.flush("s").await, FlushReport { delivered: 1, failed: 0, spool_fault: None });
}

/// Flushing everything (a shutdown, a reload) touches the sessions with something left, not
/// every session delivered since the start.
#[tokio::test]
async fn flushing_all_skips_the_sessions_with_nothing_left() {
    let b = TestBackend::new(&[Mode::Ok]);
    let r = rig(b.clone(), settings());
    for i in 0..40 {
        r.queue.enqueue(&format!("s{i}"), &scope(), items("a", 1)).await.unwrap();
    }
    assert_eq!(r.queue.flush_all().await.delivered, 40);
    r.queue.enqueue("late", &scope(), items("b", 1)).await.unwrap();
    let before = r.queue.spool_commits().jobs;
    assert_eq!(r.queue.flush_all().await.delivered, 1);
    until(|| async { r.queue.inner.spool.idle() }).await;
    let spent = r.queue.spool_commits().jobs - before;
    assert!(spent < 15, "{spent} spool jobs to flush one session");
}

#[tokio::test]
async fn a_delivery_holds_one_requests_version_of_a_document() {
    // Spooled while nothing was delivered (an outage, say): two transcripts of one session, then
    // a request whose two items form one document, then an append to it.
    let b = TestBackend::new(&[Mode::Ok]);
    let r = rig(b.clone(), settings());
    r.queue.enqueue("s", &scope(), vec![doc("transcript v1", "t", false)]).await.unwrap();
    r.queue.enqueue("s", &scope(), vec![doc("transcript v2", "t", false)]).await.unwrap();
    r.queue.enqueue("s", &scope(), vec![doc("part 1", "d", false), doc("part 2", "d", false)]).await.unwrap();
    r.queue.enqueue("s", &scope(), vec![doc("part 3", "d", true)]).await.unwrap();
    assert_eq!(r.queue.flush("s").await, FlushReport { delivered: 5, failed: 0, spool_fault: None });
    let batches: Vec<Vec<String>> =
        b.batches.lock().unwrap().iter().map(|b| b.items.iter().map(|i| i.content.clone()).collect()).collect();
    assert_eq!(batches, [vec!["transcript v1"], vec!["transcript v2", "part 1", "part 2", "part 3"]]);
}

/// Versions of one document that a client sent one after another (a session's transcript
/// re-sent) all go out when their timer fires, one batch a version: the timer's flush stopped
/// after the first and armed a fresh interval for each version left, so 8 versions took 40 s.
#[tokio::test]
async fn a_timer_delivers_every_version_of_a_document_it_found_due() {
    let b = TestBackend::new(&[Mode::Ok]);
    let r = rig(b.clone(), settings());
    for v in 1..=8 {
        r.queue.enqueue("s", &scope(), vec![doc(&format!("transcript v{v}"), "t", false)]).await.unwrap();
    }
    r.advance(4900).await;
    assert!(b.batch_sizes().is_empty(), "nothing is due before the interval");
    r.advance(200).await;
    assert_eq!(b.batch_sizes(), vec![1; 8], "every version went when the timer fired");
    assert_eq!(r.queue.depths().await, Depths::default());
    // What arrives after the timer fired waits for its own.
    r.queue.enqueue("s", &scope(), items("late", 2)).await.unwrap();
    r.advance(100).await;
    assert_eq!(b.batch_sizes().len(), 8);
    r.advance(5000).await;
    assert_eq!(b.batch_sizes(), [vec![1; 8], vec![2]].concat());
}

#[tokio::test]
async fn a_steady_stream_goes_out_in_full_batches() {
    // While a size flush delivers, a few more items arrive: they wait for their own trigger
    // instead of following at once in a batch of their own.
    let b = TestBackend::new(&[Mode::Hang, Mode::Ok]);
    let r = rig(b.clone(), settings());
    r.queue.enqueue("s", &scope(), items("a", 16)).await.unwrap();
    r.advance(10).await;
    assert_eq!(b.running.load(Ordering::SeqCst), 1);
    r.queue.enqueue("s", &scope(), items("b", 3)).await.unwrap();
    b.release.notify_one();
    r.advance(100).await;
    assert_eq!(b.batch_sizes(), vec![16], "the 3 late items went out on their own");
    r.queue.enqueue("s", &scope(), items("c", 13)).await.unwrap();
    r.advance(100).await;
    assert_eq!(b.batch_sizes(), vec![16, 16]);
    // A remainder still goes out on its timer.
    r.queue.enqueue("s", &scope(), items("d", 2)).await.unwrap();
    r.advance(5100).await;
    assert_eq!(b.batch_sizes(), vec![16, 16, 2]);
    assert_eq!(r.queue.depths().await, Depths::default());
}

#[tokio::test]
async fn flush_interval_counts_from_the_first_item_and_is_not_reset() {
    let b = TestBackend::new(&[Mode::Ok]);
    let r = rig(b.clone(), settings());
    r.queue.enqueue("s", &scope(), items("a", 1)).await.unwrap();
    r.advance(3000).await;
    r.queue.enqueue("s", &scope(), items("b", 1)).await.unwrap();
    r.advance(1900).await; // t = 4.9 s
    assert!(b.delivered().is_empty(), "flushed early");
    r.advance(200).await; // t = 5.1 s
    assert_eq!(b.delivered(), vec!["a0", "b0"]);
    // The next item starts a new interval.
    r.queue.enqueue("s", &scope(), items("c", 1)).await.unwrap();
    r.advance(4900).await;
    assert_eq!(b.delivered().len(), 2);
    r.advance(200).await;
    assert_eq!(b.delivered().len(), 3);
}

/// A reload that cuts `flush_interval` reaches a timer armed under the old one, and a smaller
/// `batch_size` flushes a session already holding that many.
#[tokio::test]
async fn a_reload_shortens_armed_timers_and_batches() {
    let b = TestBackend::new(&[Mode::Ok]);
    let slow = QueueSettings { flush_interval: Duration::from_secs(3600), ..settings() };
    let r = rig(b.clone(), slow.clone());
    r.queue.enqueue("s", &scope(), items("a", 2)).await.unwrap();
    r.advance(2000).await;
    let cut = QueueSettings { flush_interval: Duration::from_secs(5), ..slow.clone() };
    r.state.replace(Current {
        settings: Arc::new(crate::config::Settings { queue: cut.clone(), ..(*r.state.settings()).clone() }),
        backend: b.clone(),
    });
    r.queue.settings_changed(&slow, &cut);
    r.advance(2900).await; // t = 4.9 s
    assert!(b.delivered().is_empty(), "flushed early");
    r.advance(200).await; // 5 s after the first item, not an hour
    assert_eq!(b.delivered(), vec!["a0", "a1"]);
    r.queue.enqueue("s", &scope(), items("b", 3)).await.unwrap();
    let small = QueueSettings { batch_size: 3, ..cut.clone() };
    r.state.replace(Current {
        settings: Arc::new(crate::config::Settings { queue: small.clone(), ..(*r.state.settings()).clone() }),
        backend: b.clone(),
    });
    r.queue.settings_changed(&cut, &small);
    r.advance(10).await;
    assert_eq!(b.batch_sizes(), vec![2, 3], "a batch of the new size went at once");
    assert_eq!(r.queue.depths().await, Depths::default());
}

/// A flush whose delivery cannot start, the spool refusing the write that fixes the batch's id
/// (a full disk, here a read-only connection), says so instead of "0 delivered, 0 failed", and
/// what waits is delivered once the spool takes writes again.
#[tokio::test]
async fn a_flush_the_spool_stops_says_so() {
    let b = TestBackend::new(&[Mode::Ok]);
    let r = rig(b.clone(), settings());
    r.queue.enqueue("s", &scope(), items("a", 2)).await.unwrap();
    let read_only = |on: bool| {
        r.queue.inner.spool.call(move |t| {
            t.pragma_update(None, "query_only", on)?;
            Ok(())
        })
    };
    read_only(true).await.unwrap();
    let report = r.queue.flush("s").await;
    assert_eq!(report, FlushReport { delivered: 0, failed: 0, spool_fault: Some(SpoolFault::Failed) });
    assert!(b.delivered().is_empty());
    read_only(false).await.unwrap();
    assert_eq!(r.queue.flush("s").await, FlushReport { delivered: 2, failed: 0, spool_fault: None });
    assert_eq!(b.delivered(), vec!["a0", "a1"]);
}

#[tokio::test]
async fn flushes_never_overlap_and_strand_nothing() {
    let b = TestBackend::new(&[Mode::Hang, Mode::Ok]);
    let r = rig(b.clone(), settings());
    r.queue.enqueue("s", &scope(), items("a", 2)).await.unwrap();
    let q = r.queue.clone();
    let first = tokio::spawn(async move { q.flush("s").await });
    r.advance(10).await;
    assert_eq!(b.running.load(Ordering::SeqCst), 1);
    r.queue.enqueue("s", &scope(), items("b", 3)).await.unwrap();
    let q = r.queue.clone();
    let second = tokio::spawn(async move { q.flush("s").await });
    r.advance(10).await;
    assert_eq!(r.queue.depths().await.in_flight, 2);
    b.release.notify_one();
    let (r1, r2) = (first.await.unwrap(), second.await.unwrap());
    // The first delivered all five; the second, which waited for it, says what was delivered
    // meanwhile instead of "0 delivered" for a queue it found emptied.
    assert_eq!((r1.delivered, r2.delivered), (5, 5));
    assert_eq!(b.max_running.load(Ordering::SeqCst), 1, "two deliveries of one session overlapped");
    assert_eq!(b.delivered(), vec!["a0", "a1", "b0", "b1", "b2"]);
    assert_eq!(r.queue.depths().await, Depths::default());
}

/// A caller that stops waiting for a flush (a backend switch's drain past its grace) does not
/// cut its delivery short: the backend's answer is recorded, so the batch is neither resent to
/// the next backend nor counted in flight for good.
#[tokio::test]
async fn a_flush_its_caller_stops_waiting_for_still_records_its_delivery() {
    let old = TestBackend::new(&[Mode::Hang]);
    let r = rig(old.clone(), settings());
    r.queue.enqueue("s", &scope(), items("a", 1)).await.unwrap();
    let gave_up = tokio::time::timeout(Duration::from_millis(50), r.queue.flush_all()).await;
    assert!(gave_up.is_err(), "the delivery hangs");
    let new = TestBackend::new(&[Mode::Ok]);
    r.state.replace(crate::state::Current { settings: r.state.settings(), backend: new.clone() });
    old.release.notify_one(); // the old backend answers: stored
    until(|| async { r.queue.depths().await == Depths::default() }).await;
    r.queue.flush_all().await;
    assert_eq!(old.delivered(), vec!["a0"]);
    assert!(new.delivered().is_empty(), "stored twice: {:?}", new.delivered());
}

#[tokio::test]
async fn max_batch_splits_a_flush() {
    let b = TestBackend::new(&[Mode::Ok]);
    let mut s = settings();
    s.batch_size = 100;
    s.max_batch = 16;
    let r = rig(b.clone(), s);
    r.queue.enqueue("s", &scope(), items("a", 40)).await.unwrap();
    let report = r.queue.flush("s").await;
    assert_eq!(report, FlushReport { delivered: 40, failed: 0, spool_fault: None });
    assert_eq!(b.batch_sizes(), vec![16, 16, 8]);
}

#[tokio::test]
async fn transient_failures_retry_with_backoff_under_the_same_batch_id() {
    let b = TestBackend::new(&[Mode::Transient, Mode::Transient, Mode::Ok]);
    let r = rig(b.clone(), settings());
    r.queue.enqueue("s", &scope(), items("a", 1)).await.unwrap();
    let report = r.queue.flush("s").await;
    assert_eq!(report, FlushReport { delivered: 0, failed: 1, spool_fault: None });
    // First retry after retry_initial (1 s), second after 2 s more.
    r.advance(900).await;
    assert!(b.delivered().is_empty());
    r.advance(200).await; // 1.1 s: second attempt fails
    assert!(b.delivered().is_empty());
    r.advance(1800).await; // 2.9 s
    assert!(b.delivered().is_empty());
    r.advance(300).await; // 3.2 s: third attempt succeeds
    assert_eq!(b.delivered(), vec!["a0"]);
    let notices = r.notices.after(0, 10).await.unwrap();
    assert_eq!(notices.len(), 2, "one warning per outage, not per attempt, then one recovery: {notices:?}");
    assert!(notices[0].message.starts_with("Memory retention failed for 1 memory: connection refused"));
    assert_eq!(notices[0].level, "warning");
    assert_eq!(notices[0].source, "local");
    assert_eq!(notices[1].level, "info");
    assert!(notices[1].message.contains("reachable again"));
    assert_eq!(r.queue.depths().await.spooled, 0);
}

#[tokio::test]
async fn a_lost_reply_is_resent_with_the_same_batch_id() {
    let b = TestBackend::new(&[Mode::StoreThenFail, Mode::Ok]);
    let r = rig(b.clone(), settings());
    r.queue.enqueue("s", &scope(), items("a", 3)).await.unwrap();
    r.queue.flush("s").await;
    r.advance(1500).await;
    let batches = b.batches.lock().unwrap().clone();
    assert_eq!(batches.len(), 2);
    assert_eq!(batches[0].id, batches[1].id, "a resend must reuse its batch id");
    assert_eq!(batches[0].items, batches[1].items);
}

#[tokio::test]
async fn an_outage_across_sessions_is_one_notice_and_nothing_is_duplicated() {
    let b = TestBackend::new(&[Mode::Transient]);
    let r = rig(b.clone(), settings());
    for s in ["s1", "s2", "s3"] {
        r.queue.enqueue(s, &scope(), items(s, 2)).await.unwrap();
        r.queue.flush(s).await;
    }
    r.advance(3000).await; // retries keep failing
    b.set(Mode::Ok);
    r.advance(10_000).await;
    let mut got = b.delivered();
    got.sort();
    assert_eq!(got, vec!["s10", "s11", "s20", "s21", "s30", "s31"]);
    let notices = r.notices.after(0, 10).await.unwrap();
    let levels: Vec<&str> = notices.iter().map(|n| n.level.as_str()).collect();
    assert_eq!(levels, vec!["warning", "info"], "{notices:?}");
}

#[tokio::test]
async fn permanent_failures_dead_letter_and_retry_brings_them_back() {
    let b = TestBackend::new(&[Mode::Permanent]);
    let r = rig(b.clone(), settings());
    let mut two = items("a", 2);
    // An append keeps its mode through the spool, the dead letters and back.
    two[1] = NewItem { document_id: Some("d".into()), append: true, ..two[1].clone() };
    r.queue.enqueue("s", &scope(), two).await.unwrap();
    let report = r.queue.flush("s").await;
    assert_eq!(report, FlushReport { delivered: 0, failed: 2, spool_fault: None });
    assert_eq!(r.queue.depths().await, Depths { pending: 0, in_flight: 0, spooled: 0, dead: 2 });
    let notices = r.notices.after(0, 10).await.unwrap();
    assert_eq!(
        notices[0].message,
        "Memory retention failed for 2 memories: 400 bad request (retrying will not help; once it is fixed, `mneme retry` re-queues it)"
    );
    b.set(Mode::Ok);
    assert_eq!(r.queue.retry_dead().await.unwrap(), 2);
    r.advance(100).await;
    assert_eq!(b.delivered(), vec!["a0", "a1"]);
    let last = b.batches.lock().unwrap().last().cloned().unwrap();
    assert_eq!(last.items.iter().map(|i| i.append).collect::<Vec<_>>(), [false, true]);
    assert_eq!(r.queue.depths().await.dead, 0);
}

/// A dead letter whose document a later delivery has replaced is not brought back by a retry:
/// an older transcript of a session would replace the newer one. Its appends go with it (the
/// replace wiped them in order too); a dead letter of another document or bank stays.
#[tokio::test]
async fn a_retry_does_not_bring_back_a_document_replaced_since() {
    let b = TestBackend::new(&[Mode::Permanent]);
    let r = rig(b.clone(), settings());
    let dead = vec![doc("v1", "d", false), doc("v1 more", "d", true), doc("other", "e", false)];
    r.queue.enqueue("s", &scope(), dead).await.unwrap();
    r.queue.enqueue("t", &Scope { bank: "elsewhere".into(), ..scope() }, vec![doc("v1", "d", false)]).await.unwrap();
    assert_eq!(r.queue.flush("s").await.failed, 3);
    assert_eq!(r.queue.flush("t").await.failed, 1);
    b.set(Mode::Ok);
    r.queue.enqueue("s", &scope(), vec![doc("v2", "d", false)]).await.unwrap();
    assert_eq!(r.queue.flush("s").await.delivered, 1);
    r.queue.flush_all().await; // the removal rides on a later transaction
    until(|| async { r.queue.depths().await.dead == 2 }).await;
    assert_eq!(r.queue.retry_dead().await.unwrap(), 2);
    r.advance(100).await;
    r.queue.flush_all().await;
    let mut delivered = b.delivered();
    delivered.sort();
    assert_eq!(delivered, vec!["other", "v1", "v2"], "v1 only in the other bank");
}

/// A dead replace of a document that a later delivery added to is put back by a retry as an
/// append: as a replace it wiped the delivered append (of another request, or the rest of its
/// own request, which a batch bound cut into appends).
#[tokio::test]
async fn a_retried_replace_does_not_wipe_an_append_delivered_since() {
    let dir = tempfile::tempdir().unwrap();
    let local = local_store(dir.path());
    let b = TestBackend::new(&[Mode::Permanent]);
    let r = rig(b.clone(), settings());
    r.queue.enqueue("s", &scope(), vec![doc("v1", "d", false)]).await.unwrap();
    assert_eq!(r.queue.flush("s").await.failed, 1);
    b.set(Mode::Ok);
    r.queue.enqueue("s", &scope(), vec![doc("more", "d", true)]).await.unwrap();
    assert_eq!(r.queue.flush("s").await.delivered, 1);
    r.queue.flush_all().await; // the removal rides on a later transaction
    assert_eq!(r.queue.retry_dead().await.unwrap(), 1);
    r.advance(100).await;
    r.queue.flush_all().await;
    let batches = b.batches.lock().unwrap().clone();
    let retried = &batches.last().unwrap().items[0];
    assert_eq!((retried.content.as_str(), retried.append), ("v1", true));
    // Into the real store in that order: the document keeps both.
    for batch in &batches[batches.len() - 2..] {
        local.retain(&scope(), batch).await.unwrap();
    }
    assert_eq!(stored_of(&local, Some("d")).await, ["more", "v1"]);
}

/// Flushes asked for during a backoff (an agent's turns) use up no attempts: the batch goes to
/// the dead letters after `max_attempts` tries on the backoff's schedule, not after as many turns.
#[tokio::test]
async fn flushes_during_a_backoff_use_up_no_attempts() {
    let b = TestBackend::new(&[Mode::Transient]);
    let r = rig(b.clone(), QueueSettings { max_attempts: 3, ..settings() });
    r.queue.enqueue("s", &scope(), items("a", 1)).await.unwrap();
    for _ in 0..5 {
        assert_eq!(r.queue.flush("s").await.failed, 1);
    }
    assert_eq!(r.queue.depths().await.dead, 0, "dead-lettered within one backoff");
    r.advance(60_000).await;
    assert_eq!(r.queue.depths().await.dead, 1, "the backoff's own retries still give up");
}

/// A retry that comes due while an early delivery (an agent's flush during the backoff) runs
/// waits out the backoff that delivery's failure set again; it went out early too, and re-armed
/// the same backoff, retrying back to back for as long as each delivery took longer than the
/// backoff: no pause, no attempt counted, never a dead letter (review82 #1).
#[tokio::test]
async fn a_retry_due_during_an_early_delivery_waits_out_the_backoff() {
    let b = TestBackend::new(&[Mode::Transient, Mode::HangTransient]);
    let r = rig(b.clone(), QueueSettings { max_attempts: 3, ..settings() });
    r.queue.enqueue("s", &scope(), items("a", 1)).await.unwrap();
    assert_eq!(r.queue.flush("s").await.failed, 1);
    // An explicit flush during the backoff: its delivery hangs (a slow server).
    let q = r.queue.clone();
    let early = tokio::spawn(async move { q.flush("s").await });
    r.advance(10).await;
    assert_eq!(b.running.load(Ordering::SeqCst), 1);
    // The backoff's retry comes due meanwhile, and waits for the session's delivery to end.
    r.advance(5_000).await;
    b.release.notify_one();
    assert_eq!(early.await.unwrap().failed, 1);
    r.advance(10).await;
    let running = b.running.load(Ordering::SeqCst);
    b.set(Mode::Transient);
    b.release.notify_waiters();
    assert_eq!(running, 0, "the retry went out during the backoff again");
    // The backoff's own retries go on, and give up after the attempts.
    r.advance(60_000).await;
    assert_eq!(r.queue.depths().await.dead, 1);
}

/// An outage whose items the user dropped (a clear) is over as far as the queue can tell: the
/// next failure has a notice of its own (review82 #3: none, for good).
#[tokio::test]
async fn an_outage_whose_items_were_cleared_lets_the_next_one_be_told() {
    let b = TestBackend::new(&[Mode::Unreachable]);
    let r = rig(b.clone(), settings());
    r.queue.enqueue("s", &scope(), items("a", 1)).await.unwrap();
    r.queue.flush("s").await;
    assert_eq!(r.notices.after(0, 10).await.unwrap().len(), 1);
    r.queue.discard(Some("s")).await.unwrap();
    r.queue.enqueue("t", &scope(), items("b", 1)).await.unwrap();
    r.queue.flush("t").await;
    let notices = r.notices.after(0, 10).await.unwrap();
    assert_eq!(notices.len(), 2, "{notices:?}");
}

/// An explicit flush that waited for the session's delivery under way, which then failed, does
/// not send the batch again at once: against a hung server it waited two timeouts, past the
/// CLI's two minutes, for the answer it had (review82 #5).
#[tokio::test]
async fn a_flush_that_waited_for_a_delivery_that_failed_sends_nothing_again() {
    let b = TestBackend::new(&[Mode::HangTransient]);
    let r = rig(b.clone(), settings());
    let first = flush_under_way(&r, 1).await;
    let q = r.queue.clone();
    let second = tokio::spawn(async move { q.flush("s").await });
    r.advance(10).await;
    b.release.notify_one();
    assert_eq!(first.await.unwrap().failed, 1);
    let second = tokio::time::timeout(Duration::from_secs(5), second).await;
    let second = second.expect("answered without a second attempt").unwrap();
    assert_eq!(second.failed, 1);
    assert_eq!(b.running.load(Ordering::SeqCst), 0);
}

/// ... nor one that failed for good: its items, dead letters, are held no longer, and the flush
/// that waited answered "0 failed" (a success to the CLI) for the delivery it waited for.
#[tokio::test]
async fn a_flush_that_waited_for_a_delivery_that_failed_for_good_says_so() {
    let b = TestBackend::new(&[Mode::HangPermanent]);
    let r = rig(b.clone(), settings());
    let first = flush_under_way(&r, 2).await;
    let q = r.queue.clone();
    let second = tokio::spawn(async move { q.flush("s").await });
    r.advance(10).await;
    b.release.notify_one();
    assert_eq!(first.await.unwrap().failed, 2);
    let second = tokio::time::timeout(Duration::from_secs(5), second).await.unwrap().unwrap();
    assert_eq!((second.delivered, second.failed), (0, 2));
    assert_eq!(r.queue.depths().await.dead, 2);
}

/// ... and one that waited for a delivery that succeeded says it was delivered (review84 #3: the
/// failure count, kept with the batcher's state of the session, went with it once the first
/// flush left the session idle, and the count's change was taken for a failure).
#[tokio::test]
async fn a_flush_that_waited_for_a_delivery_that_succeeded_counts_it() {
    let b = TestBackend::new(&[Mode::Transient, Mode::Hang]);
    let r = rig(b.clone(), settings());
    r.queue.enqueue("s", &scope(), items("a", 1)).await.unwrap();
    assert_eq!(r.queue.flush("s").await.failed, 1);
    let q = r.queue.clone();
    let first = tokio::spawn(async move { q.flush("s").await });
    r.advance(10).await;
    let q = r.queue.clone();
    let second = tokio::spawn(async move { q.flush("s").await });
    r.advance(10).await;
    b.release.notify_one();
    assert_eq!(first.await.unwrap().delivered, 1);
    let second = second.await.unwrap();
    assert_eq!((second.delivered, second.failed), (1, 0));
}

#[tokio::test]
async fn running_out_of_attempts_dead_letters() {
    let b = TestBackend::new(&[Mode::Transient]);
    let mut s = settings();
    s.max_attempts = 3;
    let r = rig(b.clone(), s);
    r.queue.enqueue("s", &scope(), items("a", 1)).await.unwrap();
    r.queue.flush("s").await;
    r.advance(10_000).await;
    assert_eq!(r.queue.depths().await.dead, 1);
    let notices = r.notices.after(0, 10).await.unwrap();
    assert_eq!(notices.len(), 2);
    assert!(notices[1].message.contains("gave up after 3 attempts"), "{}", notices[1].message);
}

/// Three attempts a batch, and backoffs that grow up to a minute.
fn outage_settings() -> QueueSettings {
    QueueSettings { max_attempts: 3, retry_max: Duration::from_secs(60), ..settings() }
}

#[tokio::test]
async fn an_outage_longer_than_the_attempts_dead_letters_nothing() {
    // Nothing answering, and a server answering that it cannot serve now (503 while its
    // database restarts: every batch was dead-lettered within two minutes).
    for mode in [Mode::Unreachable, Mode::Unavailable] {
        an_outage_of(mode).await;
    }
}

async fn an_outage_of(mode: Mode) {
    let b = TestBackend::new(&[mode]);
    let r = rig(b.clone(), outage_settings());
    for session in ["s1", "s2"] {
        r.queue.enqueue(session, &scope(), items(session, 2)).await.unwrap();
        r.queue.flush(session).await;
    }
    // Far more tries than max_attempts (1 s doubling to 60 s over 10 minutes).
    for _ in 0..20 {
        r.advance(30_000).await;
    }
    assert_eq!(r.queue.depths().await.dead, 0, "an outage is not the batches' fault");
    assert_eq!(r.queue.depths().await.spooled, 4);
    b.set(Mode::Ok);
    r.advance(61_000).await;
    let mut got = b.delivered();
    got.sort();
    assert_eq!(got, vec!["s10", "s11", "s20", "s21"]);
    let notices = r.notices.after(0, 10).await.unwrap();
    let levels: Vec<&str> = notices.iter().map(|n| n.level.as_str()).collect();
    assert_eq!(levels, vec!["warning", "info"], "one notice for the outage, one for its end: {notices:?}");
}

/// After an outage the batch still has all its attempts: a server that answers 503 while it
/// warms up does not dead-letter what waited out the outage.
#[tokio::test]
async fn an_outage_uses_up_no_attempts_of_the_answers_after_it() {
    let b = TestBackend::new(&[Mode::Unreachable]);
    let r = rig(b.clone(), outage_settings());
    r.queue.enqueue("s", &scope(), items("a", 1)).await.unwrap();
    r.queue.flush("s").await;
    for _ in 0..10 {
        r.advance(30_000).await;
    }
    // Back, but failing twice before it stores: within the 3 attempts.
    *b.modes.lock().unwrap() = vec![Mode::Transient, Mode::Transient, Mode::Ok];
    for _ in 0..10 {
        r.advance(61_000).await;
    }
    assert_eq!(r.queue.depths().await.dead, 0, "the outage's tries were counted as attempts");
    assert_eq!(b.delivered(), vec!["a0"]);
}

#[tokio::test]
async fn spooled_items_are_delivered_after_a_restart() {
    let b = TestBackend::new(&[Mode::Transient]);
    let r = rig(b.clone(), settings());
    r.queue.enqueue("s", &scope(), items("a", 2)).await.unwrap();
    r.queue.shutdown(Duration::from_millis(100)).await;
    // The spool is locked while open: let go of it, as a process that stops does.
    let Rig { _dir, path, queue, notices, clock, .. } = r;
    drop((queue, notices));
    let b2 = TestBackend::new(&[Mode::Ok]);
    let spool = Spool::open(&path).unwrap();
    let notices = Notices::new(spool.clone());
    let metrics = Arc::new(Metrics::default());
    let q2 = Queue::with_clock(spool, state(b2.clone(), settings()), notices, metrics, clock.clone());
    assert_eq!(q2.recover().await.unwrap(), 2);
    clock.advance(&q2, Duration::from_millis(100)).await;
    assert_eq!(b2.delivered(), vec!["a0", "a1"]);
}

#[tokio::test]
async fn off_holds_items_for_the_next_storing_backend() {
    let r = rig(Arc::new(OffBackend), settings());
    r.queue.enqueue("s", &scope(), items("a", 1)).await.unwrap();
    assert_eq!(r.queue.flush("s").await, FlushReport::default());
    assert_eq!(r.queue.depths().await.spooled, 1);
    let b = TestBackend::new(&[Mode::Ok]);
    r.state.replace(Current { settings: r.state.settings(), backend: b.clone() });
    r.queue.backend_switched().await;
    r.queue.flush("s").await;
    assert_eq!(b.delivered(), vec!["a0"]);
}

/// A delivery to the old backend that fails after a switch (a drain past its grace) raises no
/// outage of the new one: its notice, and then "reachable again" at the new backend's first
/// success, were false. The batch goes to the new backend soon after.
#[tokio::test]
async fn a_failure_of_the_backend_switched_away_from_is_no_outage_of_the_new_one() {
    // Nor, failing for good, a dead letter: the new backend has not been tried.
    for failure in [Mode::HangTransient, Mode::HangPermanent] {
        a_failure_after_a_switch(failure).await;
    }
}

async fn a_failure_after_a_switch(failure: Mode) {
    let old = TestBackend::new(&[failure]);
    let r = rig(old.clone(), settings());
    let flush = flush_under_way(&r, 1).await;
    assert_eq!(old.running.load(Ordering::SeqCst), 1);
    let new = TestBackend::new(&[Mode::Ok]);
    r.state.replace(Current { settings: r.state.settings(), backend: new.clone() });
    r.queue.backend_switched().await;
    old.release.notify_one();
    flush.await.unwrap();
    r.advance(1100).await;
    until(|| async { new.delivered() == ["a0"] }).await;
    let notices = r.notices.after(0, 10).await.unwrap();
    assert!(notices.is_empty(), "{notices:?}");
    // What the session retains next goes out on its timer (review82 #2: the moved batch's count
    // swallowed it, and it waited for an explicit flush).
    r.queue.enqueue("s", &scope(), items("later", 1)).await.unwrap();
    r.advance(settings().flush_interval.as_millis() as u64 + 100).await;
    until(|| async { new.delivered() == ["a0", "later0"] }).await;
}

#[tokio::test]
async fn exactly_once_into_the_local_store_despite_a_lost_reply() {
    struct LoseFirstReply(mneme_local::LocalBackend, AtomicUsize);
    #[async_trait]
    impl MemoryBackend for LoseFirstReply {
        fn id(&self) -> BackendId {
            BackendId::Local
        }
        async fn start(&self, s: &Scope) -> Result<(), BackendError> {
            self.0.start(s).await
        }
        async fn retain(&self, s: &Scope, b: &RetainBatch) -> Result<(), BackendError> {
            self.0.retain(s, b).await?;
            if self.1.fetch_add(1, Ordering::SeqCst) == 0 {
                return Err(BackendError::transient("timeout"));
            }
            Ok(())
        }
        async fn recall(&self, s: &Scope, q: &RecallQuery) -> Result<Vec<Recalled>, BackendError> {
            self.0.recall(s, q).await
        }
        async fn reflect(&self, s: &Scope, q: &ReflectQuery) -> Result<String, BackendError> {
            self.0.reflect(s, q).await
        }
        async fn instructions(&self, s: &Scope) -> Result<Option<String>, BackendError> {
            self.0.instructions(s).await
        }
        async fn clear(&self, s: &Scope, w: ClearWhat) -> Result<ClearReport, BackendError> {
            self.0.clear(s, w).await
        }
        async fn status(&self) -> BackendStatus {
            self.0.status().await
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let local = local_store(dir.path());
    let r = rig(Arc::new(LoseFirstReply(local.clone(), AtomicUsize::new(0))), settings());
    r.queue.enqueue("s", &scope(), items("distinct memory ", 5)).await.unwrap();
    r.queue.flush("s").await;
    r.advance(1500).await;
    until(|| async { r.queue.depths().await.spooled == 0 }).await;
    assert_eq!(local.status().await.memories, Some(5));
}

/// A server throttling one session (429/503) while it serves another: that session's retries
/// back off as its own failures grow. On the outage counter all sessions share, every delivery
/// of the other session reset it, and the throttled one was retried every `retry_initial`.
#[tokio::test]
async fn a_session_throttled_alone_backs_off_while_others_are_served() {
    let b = TestBackend::new(&[Mode::Ok]);
    *b.throttled_prefix.lock().unwrap() = Some("s1".into());
    let r = rig(b.clone(), outage_settings());
    r.queue.enqueue("s1", &scope(), items("s1-", 1)).await.unwrap();
    r.queue.flush("s1").await;
    // 16 s in which the other session is served every half second.
    for i in 0..32 {
        r.queue.enqueue("s2", &scope(), items(&format!("s2-{i}-"), 1)).await.unwrap();
        r.queue.flush("s2").await;
        r.advance(500).await;
    }
    // Doubling from 1 s: tries at about 0, 1, 3, 7 and 15 s; every second without it.
    let tries = b.throttled.load(Ordering::SeqCst);
    assert!(tries <= 6, "{tries} tries in 16 s");
    // One notice for the outage, none for its end while s1 still waits: the other session's
    // deliveries ended it, and s1's next retry began a new one, a pair at every retry
    // (review111 #2).
    let levels =
        |notices: Vec<crate::spool::NoticeRow>| notices.iter().map(|n| n.level.as_str().to_owned()).collect::<Vec<_>>();
    assert_eq!(levels(r.notices.after(0, 100).await.unwrap()), ["warning"]);
    *b.throttled_prefix.lock().unwrap() = None;
    r.advance(20_000).await;
    until(|| async { r.queue.depths().await.spooled == 0 }).await;
    let notices = r.notices.after(0, 100).await.unwrap();
    assert_eq!(levels(notices.clone()), ["warning", "info"], "{notices:?}");
    assert!(notices[1].message.contains("reachable again"), "{notices:?}");
}

#[tokio::test]
async fn a_spool_from_a_newer_mneme_is_refused_by_open_and_check() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spool.db");
    drop(Spool::open(&path).unwrap());
    // The writer thread lets go of the file's lock as it winds down.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let conn = rusqlite::Connection::open(&path).unwrap();
    let known: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
    conn.pragma_update(None, "user_version", known + 1).unwrap();
    drop(conn);
    for e in [Spool::open(&path).err().unwrap(), Spool::check(&path).unwrap_err()] {
        assert!(matches!(e, SpoolError::NewerSchema { found, .. } if found == known + 1), "{e:?}");
        assert!(e.to_string().contains("was written by a newer mneme"), "{e}");
    }
}

#[tokio::test]
async fn a_delivered_batch_is_gone_for_every_later_call_and_after_a_stop() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spool.db");
    let spool = Spool::open(&path).unwrap();
    let item = |id: &str| MemoryItem::new(id, id, "2026-01-01T00:00:00.000Z");
    spool.append("s", "b", vec![item("a"), item("b")]).await.unwrap();
    let batch = spool.next_batch("s", 1).await.unwrap().items;
    assert_eq!(batch.len(), 1);
    // The removal rides on the next transaction, which runs before this call's job.
    spool.delivered("s", batch[0].batch_id.as_deref().unwrap(), batch[0].seq..=batch[0].seq).await;
    let next = spool.next_batch("s", 1).await.unwrap().items;
    assert_eq!(next[0].item.id, "b", "the delivered batch came back");
    // With no transaction to ride on, it is committed when the writer stops.
    spool.delivered("s", next[0].batch_id.as_deref().unwrap(), next[0].seq..=next[0].seq).await;
    drop(spool);
    let spool = Spool::open(&path).unwrap();
    assert_eq!(spool.counts().await.unwrap().spooled, 0);
}

#[tokio::test]
async fn a_failure_after_a_clear_removed_the_batch_retries_nothing() {
    // The batch's rows are gone when its delivery fails: its attempt count reads 0, which must
    // not underflow into a retry of nothing.
    let b = TestBackend::new(&[Mode::HangTransient, Mode::Ok]);
    let r = rig(b.clone(), settings());
    let flush = flush_under_way(&r, 2).await;
    assert_eq!(b.running.load(Ordering::SeqCst), 1);
    assert_eq!(r.queue.discard(Some("s")).await.unwrap(), 2);
    b.release.notify_one();
    assert_eq!(flush.await.unwrap(), FlushReport { delivered: 0, failed: 2, spool_fault: None });
    r.advance(10_000).await;
    assert_eq!(b.batch_sizes(), Vec::<usize>::new(), "nothing was retried");
    assert_eq!(r.queue.depths().await, Depths::default());
}

#[test]
fn a_shutdown_waits_for_the_running_delivery_and_lets_go_of_the_spool() {
    // On one thread, as the queue's property test restarts it: a delivery left running after
    // the shutdown kept the spool (and its lock) open, and the next open, blocking that thread,
    // kept it from ever ending ("database is locked" after the busy timeout).
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let b = TestBackend::new(&[Mode::Slow]);
        let r = rig(b.clone(), QueueSettings { batch_size: 2, ..settings() });
        r.queue.enqueue("s", &scope(), items("a", 2)).await.unwrap();
        while b.running.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        r.queue.shutdown(Duration::ZERO).await;
        assert_eq!(b.delivered().len(), 2, "the running delivery ended before the shutdown did");
        let Rig { _dir, path, queue, notices, .. } = r;
        drop((queue, notices));
        let spool = Spool::open(&path).expect("the previous queue let go of the spool");
        assert_eq!(spool.counts().await.unwrap().spooled, 0, "its delivery was recorded");
    });
}

/// A batch cut at `max_batch` inside a request whose items make up one document: the items left
/// for the next batch add to the document instead of replacing it (with the real local store,
/// which replaces a document with what one batch holds of it).
#[tokio::test]
async fn a_request_cut_by_max_batch_keeps_every_item_of_its_document() {
    let dir = tempfile::tempdir().unwrap();
    let local = local_store(dir.path());
    let mut s = settings();
    s.batch_size = 1000;
    s.max_batch = 16;
    let r = rig(Arc::new(local.clone()), s);
    r.queue.enqueue("s", &scope(), items("loose", 12)).await.unwrap();
    // 10 items of one document: 4 go in the first batch, 6 in the second.
    let design: Vec<NewItem> =
        (0..10).map(|i| doc(&format!("part {i} of the design notes"), "design", false)).collect();
    r.queue.enqueue("s", &scope(), design).await.unwrap();
    let report = r.queue.flush("s").await;
    assert_eq!(report, FlushReport { delivered: 22, failed: 0, spool_fault: None });
    let parts = stored_of(&local, Some("design")).await;
    assert_eq!(parts.len(), 10, "{parts:?}");
    // A later request still replaces the document whole.
    r.queue.enqueue("s", &scope(), vec![doc("the design, rewritten", "design", false)]).await.unwrap();
    r.queue.flush("s").await;
    assert_eq!(stored_of(&local, Some("design")).await, vec!["the design, rewritten"]);
}

/// A retry whose caller hangs up (the client timed out) as soon as it began still counts and
/// delivers what it put back, instead of leaving it in the queue until some later flush.
#[tokio::test]
async fn a_retry_its_caller_stops_waiting_for_still_delivers() {
    let b = TestBackend::new(&[Mode::Permanent]);
    let r = rig(b.clone(), settings());
    r.queue.enqueue("s", &scope(), items("a", 2)).await.unwrap();
    assert_eq!(r.queue.flush("s").await.failed, 2);
    b.set(Mode::Ok);
    // Polled once, then dropped (on the old code the dead letters were back in the queue, and
    // nothing counted or flushed them).
    let _ = tokio::time::timeout(Duration::ZERO, r.queue.retry_dead()).await;
    until(|| async { b.delivered().len() == 2 }).await;
    until(|| async { r.queue.depths().await == Depths::default() }).await;
}

/// A batch cut before a request's item that replaces a document an earlier request in the batch
/// has: the request's other document, begun in that batch, is continued in the next one.
#[tokio::test]
async fn a_request_cut_before_its_replace_keeps_every_item_of_its_other_document() {
    let dir = tempfile::tempdir().unwrap();
    let local = local_store(dir.path());
    let mut s = settings();
    s.batch_size = 1000;
    let r = rig(Arc::new(local.clone()), s);
    r.queue.enqueue("s", &scope(), vec![doc("d, first version", "d", false)]).await.unwrap();
    let second =
        vec![doc("e, part one", "e", false), doc("d, second version", "d", false), doc("e, part two", "e", false)];
    r.queue.enqueue("s", &scope(), second).await.unwrap();
    assert_eq!(r.queue.flush("s").await, FlushReport { delivered: 4, failed: 0, spool_fault: None });
    assert_eq!(stored_of(&local, None).await, ["d, second version", "e, part one", "e, part two"]);
}

/// A clear of one project keeps what is queued for another too, without the cleared tag, as
/// the local store keeps a stored memory both hold: the spool dropped it, so the outcome
/// depended on whether the clear came before its delivery or after.
#[tokio::test]
async fn a_clear_keeps_queued_items_another_project_holds_too() {
    // Its first delivery's reply is lost (the server has it): its batch id is fixed then.
    let b = TestBackend::new(&[Mode::StoreThenFail, Mode::Ok]);
    let r = rig(b.clone(), settings());
    let tagged = |content: &str, tags: &[&str]| NewItem {
        content: content.into(),
        tags: Some(tags.iter().map(|t| t.to_string()).collect()),
        ..NewItem::default()
    };
    let bank = Scope { bank: "b".into(), tags: vec![] };
    let queued = vec![tagged("shared", &["project:a", "project:b", "ops"]), tagged("only a", &["project:a"])];
    r.queue.enqueue("h", &bank, queued).await.unwrap();
    assert_eq!(r.queue.flush("h").await.failed, 2);
    let cleared = Scope { bank: "b".into(), tags: vec!["project:a".into()] };
    let (n, ()) = r.queue.discard_scope_then(&cleared, async {}).await.unwrap();
    assert_eq!(n, 1);
    r.advance(60_000).await;
    r.queue.flush("h").await;
    let batches = b.batches.lock().unwrap().clone();
    let last = batches.last().unwrap();
    assert_eq!(last.items.iter().map(|i| i.content.as_str()).collect::<Vec<_>>(), ["shared"]);
    assert_eq!(last.items[0].tags, ["project:b", "ops"]);
    // Its body changed: a new batch id (Hindsight answers 409 to an operation id sent again
    // with another body).
    assert_ne!(last.id, batches[0].id);
}

/// A daemon sees a session a conversation: once delivered, a session's counts are dropped at
/// once, and past `IDLE_SESSIONS_KEPT` idle sessions the least recently flushed lose their
/// last delivery too; nothing spooled or recent is lost on the way.
#[tokio::test]
async fn sessions_done_with_are_not_kept_for_good() {
    use crate::lock::MutexExt;
    let b = TestBackend::new(&[Mode::Ok]);
    let r = rig(b.clone(), settings());
    let n = 3 * IDLE_SESSIONS_KEPT;
    for i in 0..n {
        let session = format!("s{i}");
        r.queue.enqueue(&session, &scope(), items(&session, 1)).await.unwrap();
        r.queue.flush(&session).await;
    }
    r.queue.enqueue("waiting", &scope(), items("w", 1)).await.unwrap();
    assert_eq!(b.delivered().len(), n);
    let known: Vec<String> = r.queue.inner.batcher.locked().sessions().map(|(id, _)| id.clone()).collect();
    assert_eq!(known, ["waiting"], "only the session with an item pending keeps its counts");
    let shells = r.queue.inner.sessions.locked().len();
    assert!(shells <= 2 * IDLE_SESSIONS_KEPT, "{shells} session shells kept");
    let listed = r.queue.overview().await.sessions;
    let names: Vec<&str> = listed.iter().map(|s| s.session_id.as_str()).collect();
    assert!(names.contains(&"waiting"));
    let last = format!("s{}", n - 1);
    assert!(names.contains(&last.as_str()), "the latest delivery is still listed");
    assert!(!names.contains(&"s0"), "the oldest idle session is dropped");
    r.advance(6_000).await;
    assert_eq!(b.delivered().len(), n + 1, "the waiting session's timer still fires");
    assert_eq!(r.queue.depths().await.spooled, 0);
}
