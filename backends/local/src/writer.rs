//! The store's writer: one thread owning the writing connection, at a lower CPU priority.
//!
//! Writes are background work (the retain queue's deliveries, clears, imports): on a busy
//! machine the daemon's request path should get the CPU first, so the thread runs at the lowest
//! priority, nice 19 (Linux; elsewhere `setpriority` would apply to the whole process). Deliveries
//! that queue up while one is being written go out together in one transaction
//! ([`Store::retain_batches`]): one commit instead of one each.

use std::path::Path;
use std::sync::Arc;
use std::thread;

use mneme_core::{BackendError, MemoryItem};
use tokio::sync::{mpsc, oneshot};

use crate::embedding::Semantic;
use crate::error::OpenError;
use crate::store::Store;

/// Deliveries written in one transaction at most.
const GROUP_MAX: usize = 64;
/// Jobs waiting for the writer at most; senders wait for a place (async callers without
/// holding a thread).
const MAX_WAITING: usize = 4 * GROUP_MAX;

/// The writer thread's nice value: the lowest. Deliveries use spare CPU; on a machine busy with
/// other work they still get a small share (unlike SCHED_IDLE, which could starve them), and
/// what waits meanwhile is safe in the spool. Nice 19 measured ~5% more retains/s than nice 10.
#[cfg(target_os = "linux")]
const WRITER_NICE: libc::c_int = 19;

type Reply<T> = oneshot::Sender<Result<T, BackendError>>;

enum Job {
    /// A delivery: may share a transaction with others.
    Retain { bank: String, items: Vec<MemoryItem>, done: Reply<usize> },
    /// Anything else, alone.
    Run(Box<dyn FnOnce(&mut Store) + Send>),
    /// Close the connection and end the thread, then say so.
    Close(std::sync::mpsc::Sender<()>),
}

/// Handle to the writer thread; the thread (and its connection) ends with the last handle.
#[derive(Clone)]
pub(crate) struct Writer {
    jobs: mpsc::Sender<Job>,
}

impl Writer {
    /// Opens the writing connection and starts the thread. Each write's changes to the passages
    /// go to `semantic` (the vector index), in order.
    pub(crate) fn start(
        path: &Path,
        upgrade: crate::Upgrade,
        semantic: Option<Arc<Semantic>>,
    ) -> Result<Self, OpenError> {
        let store = Store::open_with(path, upgrade)?;
        let (jobs, rx) = mpsc::channel(MAX_WAITING);
        thread::Builder::new()
            .name("mneme-local-writer".into())
            .spawn(move || run(store, rx, semantic))
            .map_err(|source| OpenError::Thread { what: "writer", source })?;
        Ok(Writer { jobs })
    }

    /// Stores a batch; answers once it is committed.
    pub(crate) async fn retain(&self, bank: String, items: Vec<MemoryItem>) -> Result<usize, BackendError> {
        let (done, answer) = oneshot::channel();
        self.jobs.send(Job::Retain { bank, items, done }).await.map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }

    /// Runs `f` on the writing connection; answers once it is done.
    pub(crate) async fn run_async<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Store) -> Result<T, BackendError> + Send + 'static,
    ) -> Result<T, BackendError> {
        let (job, answer) = run_job(f);
        self.jobs.send(job).await.map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }

    /// Runs `f` on the writing connection; blocks the calling thread (not an async worker: the
    /// embedding thread) until it is done.
    pub(crate) fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Store) -> Result<T, BackendError> + Send + 'static,
    ) -> Result<T, BackendError> {
        let (job, answer) = run_job(f);
        self.jobs.blocking_send(job).map_err(|_| stopped())?;
        answer.blocking_recv().map_err(|_| stopped())?
    }
}

impl Writer {
    /// Closes the writing connection (its close checkpoints the log when it is the last) and ends
    /// the thread, waiting for both at most `wait`. The thread used to end on its own once the
    /// last handle went, and the process could end first: a close cut short left the main file
    /// half checkpointed, which the log repairs at the next start, unless it was lost (deleted
    /// under the daemon), and then the store was malformed.
    pub(crate) fn close(&self, wait: std::time::Duration) {
        let (closed, done) = std::sync::mpsc::channel();
        if self.jobs.try_send(Job::Close(closed)).is_ok() {
            let _ = done.recv_timeout(wait);
        }
    }
}

/// `f` as a job, and where its answer will come.
fn run_job<T: Send + 'static>(
    f: impl FnOnce(&mut Store) -> Result<T, BackendError> + Send + 'static,
) -> (Job, oneshot::Receiver<Result<T, BackendError>>) {
    let (done, answer) = oneshot::channel();
    let job = move |store: &mut Store| drop(done.send(store.still_there().and_then(|()| f(store))));
    (Job::Run(Box::new(job)), answer)
}

/// How often the writer, idle, tries again to truncate a log a reader kept after a forget.
const ERASURE_RETRY: std::time::Duration = std::time::Duration::from_secs(1);
/// The longest wait between two tries of an erasure that failed.
const ERASURE_RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(300);

fn stopped() -> BackendError {
    BackendError::transient("the local store writer stopped".to_owned())
}

fn run(mut store: Store, mut rx: mpsc::Receiver<Job>, semantic: Option<Arc<Semantic>>) {
    lower_priority();
    let mut next = None;
    let mut erasure_tried = std::time::Instant::now();
    let mut erasure_wait = ERASURE_RETRY;
    loop {
        // A forget's erasure a reader held off is tried again about once a second, busy or idle,
        // until it goes through (left to the next forget, the text stayed on disk however long
        // that took). One that failed (a full disk) waits twice as long each time, up to
        // ERASURE_RETRY_MAX (each try may write the whole index), and is said once.
        if !store.traces_left() {
            erasure_wait = ERASURE_RETRY;
        } else if erasure_tried.elapsed() >= erasure_wait {
            erasure_tried = std::time::Instant::now();
            match store.retry_erasure() {
                Err(e) => {
                    if erasure_wait == ERASURE_RETRY {
                        tracing::warn!("cannot erase a forget's traces on disk yet (tried again later): {e}");
                    }
                    erasure_wait = (erasure_wait * 2).min(ERASURE_RETRY_MAX);
                }
                Ok(()) => erasure_wait = ERASURE_RETRY,
            }
        }
        let job = match next.take() {
            Some(job) => job,
            None if store.traces_left() => match rx.try_recv() {
                Ok(job) => job,
                Err(mpsc::error::TryRecvError::Empty) => {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    continue;
                }
                Err(mpsc::error::TryRecvError::Disconnected) => return,
            },
            None => match rx.blocking_recv() {
                Some(job) => job,
                None => return,
            },
        };
        match job {
            Job::Close(closed) => {
                drop(store);
                let _ = closed.send(());
                return;
            }
            Job::Run(f) => f(&mut store),
            Job::Retain { bank, items, done } => {
                let mut group = vec![(bank, items, done)];
                while group.len() < GROUP_MAX {
                    match rx.try_recv() {
                        Ok(Job::Retain { bank, items, done }) => group.push((bank, items, done)),
                        Ok(other) => {
                            next = Some(other); // after this group, in order
                            break;
                        }
                        Err(_) => break,
                    }
                }
                retain_group(&mut store, group);
            }
        }
        let changes = store.take_changes();
        if let Some(s) = &semantic {
            s.apply(changes);
        }
    }
}

fn retain_group(store: &mut Store, group: Vec<(String, Vec<MemoryItem>, Reply<usize>)>) {
    if let Err(e) = store.still_there() {
        for (_, _, done) in group {
            let _ = done.send(Err(e.clone()));
        }
        return;
    }
    let batches: Vec<(&str, &[MemoryItem])> =
        group.iter().map(|(bank, items, _)| (bank.as_str(), items.as_slice())).collect();
    let results = store.retain_batches(&batches);
    drop(batches);
    match results {
        Ok(results) => {
            for ((_, _, done), result) in group.into_iter().zip(results) {
                let _ = done.send(result.map_err(crate::error::sql_error));
            }
        }
        Err(e) => {
            let e = crate::error::sql_error(e);
            for (_, _, done) in group {
                let _ = done.send(Err(e.clone()));
            }
        }
    }
}

/// Lowers the calling thread's CPU priority for good (the writer, the embedding thread).
pub(crate) fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: plain syscalls on the calling thread; a tid is a valid PRIO_PROCESS `who`.
    unsafe {
        let tid = libc::gettid() as libc::id_t;
        if libc::setpriority(libc::PRIO_PROCESS, tid, WRITER_NICE) != 0 {
            tracing::debug!("cannot lower the local store writer's priority: {}", std::io::Error::last_os_error());
        }
    }
}
