//! A clock the queue's tests move by hand.
//!
//! Time stands still until [`ManualClock::advance`] moves it, deadline by deadline, letting the
//! queue settle at each: every task it woke has run, and the spool's writer has nothing left to
//! do. So a timer never fires while the disk is busy (as tokio's paused clock would let it),
//! and what a test asserts after `advance` is what the queue did by then.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::{Clock, Queue, Sleep};

/// See the module's documentation.
pub(super) struct ManualClock {
    state: Mutex<State>,
}

struct State {
    now: Instant,
    /// Sleeps not yet over, with their deadlines (a dropped sleep's sender is closed).
    sleepers: Vec<(Instant, oneshot::Sender<()>)>,
}

impl ManualClock {
    pub fn new() -> Arc<Self> {
        Arc::new(ManualClock { state: Mutex::new(State { now: Instant::now(), sleepers: Vec::new() }) })
    }

    /// Moves time on by `by`, firing each timer at its deadline in order, and returns once
    /// `queue` has settled at the end.
    pub async fn advance(&self, queue: &Queue, by: Duration) {
        let target = self.now() + by;
        loop {
            settle(queue).await;
            match self.next_deadline() {
                Some(deadline) if deadline <= target => self.set(deadline),
                _ => break,
            }
        }
        self.set(target);
        settle(queue).await;
    }

    fn next_deadline(&self) -> Option<Instant> {
        let mut s = self.state.lock().unwrap();
        s.sleepers.retain(|(_, tx)| !tx.is_closed());
        s.sleepers.iter().map(|(t, _)| *t).min()
    }

    /// Sets the time to `to` (never back) and ends the sleeps due by then.
    fn set(&self, to: Instant) {
        let mut s = self.state.lock().unwrap();
        s.now = s.now.max(to);
        let now = s.now;
        let (due, waiting): (Vec<_>, Vec<_>) = s.sleepers.drain(..).partition(|(t, _)| *t <= now);
        s.sleepers = waiting;
        drop(s);
        for (_, tx) in due {
            let _ = tx.send(());
        }
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.state.lock().unwrap().now
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        let mut s = self.state.lock().unwrap();
        if deadline <= s.now {
            return Box::pin(std::future::ready(()));
        }
        let (tx, rx) = oneshot::channel();
        s.sleepers.push((deadline, tx));
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}

/// Returns once the queue has nothing to do but wait: the tasks that could run have run (on the
/// tests' single-threaded runtime, yielding lets them), and the spool's writer is idle — three
/// times in a row, as a task that got the writer's answer may hand it its next job.
pub(super) async fn settle(queue: &Queue) {
    let mut quiet = 0;
    while quiet < 3 {
        for _ in 0..16 {
            tokio::task::yield_now().await;
        }
        if queue.inner.spool.idle() {
            quiet += 1;
        } else {
            quiet = 0;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}
