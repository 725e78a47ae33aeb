//! The request rate limit every session shares (`hindsight.requests_per_second`, `burst`),
//! served first to the requests someone waits on.
//!
//! A backlog of deliveries (hundreds of sessions ended at a start, or queued through an outage)
//! fills the limit for minutes: an agent's recall, waiting its turn among them, ran out its
//! `recall.timeout` and got nothing, and `mneme status` took a minute (review68 #3). Requests
//! made inside [`in_background`] (deliveries, imports) take a cell only while no other request
//! waits for one, for [`BACKGROUND_WAITS_AT_MOST`] at most (then in turn, in a line of their
//! own); every other request (recall, reflect, status, the web view, clear) waits in turn, first
//! come first served. While both lines wait, they take the cells in turn: one of the background
//! line's behind every one waited on would not starve it, but thousands of deliveries that gave
//! way through an outage, in one line with them, held `mneme status` for minutes (review112 #1).

use std::cell::Cell;
use std::collections::BTreeSet;
use std::future::Future;
use std::num::NonZeroU32;
use std::sync::Mutex;

use governor::clock::Clock;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use tokio::sync::Notify;

tokio::task_local! {
    /// Set in background work; true once one of its requests gave way as long as it may: the
    /// work's next requests then wait in turn at once (a delivery is several requests, and each
    /// giving way again made one delivery wait 20 s at a low rate).
    static BACKGROUND: Cell<bool>;
}

/// Runs `work` with its requests second to any that someone waits on.
pub(crate) async fn in_background<F: Future>(work: F) -> F::Output {
    BACKGROUND.scope(Cell::new(false), work).await
}

/// The longest a background request gives way to requests waited on; then it waits in turn with
/// them.
const BACKGROUND_WAITS_AT_MOST: std::time::Duration = std::time::Duration::from_secs(5);

/// A rate limit with two classes of request: waited on, and background.
pub(crate) struct Limiter {
    quota: DefaultDirectRateLimiter,
    /// The requests waiting in turn for a cell (those waited on, and background ones that gave
    /// way long enough), first come first served.
    turns: Mutex<Turns>,
    /// Told when a request leaves the turns (served, or given up).
    turns_changed: Notify,
}

/// The tickets of the requests waiting in turn, in two lines.
#[derive(Default)]
struct Turns {
    next: u64,
    /// Requests someone waits on.
    waited_on: BTreeSet<u64>,
    /// Background requests that gave way as long as they may.
    background: BTreeSet<u64>,
    /// The last cell went to the background line.
    background_went_last: bool,
}

impl Turns {
    /// Whether any request waits in turn.
    fn any(&self) -> bool {
        !self.waited_on.is_empty() || !self.background.is_empty()
    }

    /// The ticket whose turn it is: each line's first, the lines taking turns while both wait.
    fn first(&self) -> Option<u64> {
        match (self.waited_on.first(), self.background.first()) {
            (Some(&w), Some(&b)) => Some(if self.background_went_last { w } else { b }),
            (w, b) => w.or(b).copied(),
        }
    }

    fn line(&mut self, background: bool) -> &mut BTreeSet<u64> {
        if background {
            &mut self.background
        } else {
            &mut self.waited_on
        }
    }
}

impl Limiter {
    /// `per_second` requests a second, `burst` at once.
    pub(crate) fn new(per_second: NonZeroU32, burst: NonZeroU32) -> Self {
        Self {
            quota: RateLimiter::direct(Quota::per_second(per_second).allow_burst(burst)),
            turns: Mutex::new(Turns::default()),
            turns_changed: Notify::new(),
        }
    }

    /// Waits until a request may be sent: in turn for one waited on, after every such one for
    /// one in the background (for [`BACKGROUND_WAITS_AT_MOST`] at most).
    pub(crate) async fn until_ready(&self) {
        match BACKGROUND.try_with(Cell::get) {
            Ok(false) => self.background().await,
            Ok(true) => self.in_turn(Line::Background).await,
            Err(_) => self.in_turn(Line::WaitedOn).await,
        }
    }

    fn turns(&self) -> std::sync::MutexGuard<'_, Turns> {
        self.turns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for a cell, first come first served: governor's own wait is no queue (every waiter
    /// wakes for the next cell, and whichever runs first takes it), and a background request
    /// that joined it lost to a growing backlog of status requests for good (review75 #1).
    async fn in_turn(&self, line: Line) {
        let background = line == Line::Background;
        let ticket = {
            let mut turns = self.turns();
            let ticket = turns.next;
            turns.next += 1;
            turns.line(background).insert(ticket);
            ticket
        };
        // Out of the turns however the wait ends (a recall's timeout drops it).
        let _waiting = Waiting { limiter: self, ticket, background };
        loop {
            let changed = self.turns_changed.notified();
            tokio::pin!(changed);
            // Registered before the turns are read: one leaving in between still wakes it.
            changed.as_mut().enable();
            if self.turns().first() != Some(ticket) {
                changed.await;
                continue;
            }
            match self.quota.check() {
                Ok(()) => {
                    self.turns().background_went_last = background;
                    return;
                }
                Err(not_until) => tokio::time::sleep(not_until.wait_time_from(self.quota.clock().now())).await,
            }
        }
    }

    async fn background(&self) {
        let asked = tokio::time::Instant::now();
        loop {
            // Not starved: a steady demand above the rate (the web view's status every 2 s at
            // `requests_per_second = 1`) held every delivery for as long as it lasted (review74
            // #1). Past a wait this long, a background request waits in turn with the others.
            let Some(left) = BACKGROUND_WAITS_AT_MOST.checked_sub(asked.elapsed()) else {
                let _ = BACKGROUND.try_with(|gave_way| gave_way.set(true));
                return self.in_turn(Line::Background).await;
            };
            let changed = self.turns_changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.turns().any() {
                let _ = tokio::time::timeout(left, changed).await;
                continue;
            }
            match self.quota.check() {
                Ok(()) => return,
                Err(not_until) => tokio::time::sleep(not_until.wait_time_from(self.quota.clock().now())).await,
            }
        }
    }
}

/// Which line a request waits in turn in.
#[derive(Clone, Copy, PartialEq)]
enum Line {
    WaitedOn,
    Background,
}

/// A request waiting in turn, taken out of the turns when it is served or given up.
struct Waiting<'a> {
    limiter: &'a Limiter,
    ticket: u64,
    background: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.limiter.turns().line(self.background).remove(&self.ticket);
        self.limiter.turns_changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// At 20 a second, 100 deliveries asking again as each request ends (at their own times, as
    /// real ones do) would make a fair share wait ~5 s; a request waited on goes next (within
    /// about a cell), and the backlog goes on between.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_waited_on_goes_before_a_background_backlog() {
        let limiter = Arc::new(Limiter::new(NonZeroU32::new(20).unwrap(), NonZeroU32::new(1).unwrap()));
        let sent = Arc::new(AtomicUsize::new(0));
        let mut backlog = Vec::new();
        for task in 0..100u64 {
            let (limiter, sent) = (limiter.clone(), sent.clone());
            backlog.push(tokio::spawn(in_background(async move {
                for round in 0u64.. {
                    limiter.until_ready().await;
                    sent.fetch_add(1, Ordering::SeqCst);
                    // The request itself: 1–37 ms, a different length each time.
                    tokio::time::sleep(Duration::from_millis(1 + (task * 7 + round * 13) % 37)).await;
                }
            })));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let before = sent.load(Ordering::SeqCst);
        // A task of its own, as a request's handler is (the test's own body is polled apart
        // from the workers, and would win every race).
        let waited_on = limiter.clone();
        let waits = tokio::spawn(async move {
            let mut waits = Vec::new();
            for _ in 0..5 {
                let started = Instant::now();
                waited_on.until_ready().await;
                waits.push(started.elapsed());
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            waits
        });
        let waits = waits.await.unwrap();
        assert!(waits.iter().all(|w| *w < Duration::from_millis(400)), "waited {waits:?}");
        assert!(sent.load(Ordering::SeqCst) > before, "the backlog stopped");
        backlog.iter().for_each(|task| task.abort());
    }

    /// A steady demand above the rate from requests waited on (the web view's status every 2 s
    /// at one request a second) does not hold a delivery for ever: it goes within
    /// [`BACKGROUND_WAITS_AT_MOST`] and a fair share (review74 #1: none in 40 s).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_background_request_is_not_starved() {
        let limiter = Arc::new(Limiter::new(NonZeroU32::new(4).unwrap(), NonZeroU32::new(1).unwrap()));
        // Two asking again at once: more than the rate, always one waiting.
        let mut demand = Vec::new();
        for _ in 0..2 {
            let limiter = limiter.clone();
            demand.push(tokio::spawn(async move {
                loop {
                    limiter.until_ready().await;
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let started = Instant::now();
        let delivery = tokio::spawn(in_background({
            let limiter = limiter.clone();
            async move { limiter.until_ready().await }
        }));
        let went = tokio::time::timeout(BACKGROUND_WAITS_AT_MOST + Duration::from_secs(5), delivery).await;
        assert!(went.is_ok(), "starved for {:?}", started.elapsed());
        assert!(started.elapsed() >= BACKGROUND_WAITS_AT_MOST - Duration::from_millis(100), "it gave way first");
        // A delivery of several requests gives way once: the next ones wait in turn at once.
        let started = Instant::now();
        let delivery = tokio::spawn(in_background({
            let limiter = limiter.clone();
            async move {
                for _ in 0..3 {
                    limiter.until_ready().await;
                }
            }
        }));
        let went = tokio::time::timeout(BACKGROUND_WAITS_AT_MOST + Duration::from_secs(5), delivery).await;
        demand.iter().for_each(|task| task.abort());
        assert!(went.is_ok(), "three requests took {:?}", started.elapsed());
    }

    /// Requests wait in turn, first come first served, and a background request that gave way
    /// long enough takes its turn among them (review75 #1: governor's wait is a race every
    /// waiter runs for each cell, and a delivery lost it to a growing backlog for good).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_are_served_in_the_order_they_came() {
        let limiter = Arc::new(Limiter::new(NonZeroU32::new(10).unwrap(), NonZeroU32::new(1).unwrap()));
        limiter.until_ready().await; // this second's burst
        let served = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for n in 0..12 {
            let (limiter, served) = (limiter.clone(), served.clone());
            tasks.push(tokio::spawn(async move {
                limiter.until_ready().await;
                served.lock().unwrap().push(n);
            }));
            tokio::time::sleep(Duration::from_millis(5)).await; // each queued before the next
        }
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(*served.lock().unwrap(), (0..12).collect::<Vec<_>>());
    }

    /// Thousands of deliveries that gave way through an outage wait in turn in a line of their
    /// own: a request waited on (a status) goes within a couple of cells, not behind them all
    /// (review112 #1: minutes), and the deliveries go on, a cell in two.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_waited_on_goes_before_background_requests_waiting_in_turn() {
        let limiter = Arc::new(Limiter::new(NonZeroU32::new(20).unwrap(), NonZeroU32::new(1).unwrap()));
        let sent = Arc::new(AtomicUsize::new(0));
        let mut backlog = Vec::new();
        for _ in 0..2000 {
            let (limiter, sent) = (limiter.clone(), sent.clone());
            backlog.push(tokio::spawn(async move {
                // As a delivery that gave way as long as it may.
                BACKGROUND
                    .scope(Cell::new(true), async {
                        limiter.until_ready().await;
                    })
                    .await;
                sent.fetch_add(1, Ordering::SeqCst);
            }));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(limiter.turns().background.len() > 1000, "the backlog waits in turn");
        let before = sent.load(Ordering::SeqCst);
        let waited_on = limiter.clone();
        let waits = tokio::spawn(async move {
            let mut waits = Vec::new();
            for _ in 0..3 {
                let started = Instant::now();
                waited_on.until_ready().await;
                waits.push(started.elapsed());
            }
            waits
        });
        let waits = waits.await.unwrap();
        // A cell is 50 ms: at most one of the backlog's between two.
        assert!(waits.iter().all(|w| *w < Duration::from_millis(400)), "waited {waits:?}");
        assert!(sent.load(Ordering::SeqCst) > before, "the backlog stopped");
        backlog.iter().for_each(|task| task.abort());
    }

    /// A request waited on whose wait is dropped (a recall's timeout) is counted out: the
    /// background goes on.
    #[tokio::test]
    async fn a_dropped_wait_lets_the_background_go_on() {
        let limiter = Arc::new(Limiter::new(NonZeroU32::new(1).unwrap(), NonZeroU32::new(1).unwrap()));
        limiter.until_ready().await; // the one cell of this second
        let _ = tokio::time::timeout(Duration::from_millis(50), limiter.until_ready()).await;
        assert!(!limiter.turns().any());
        let started = Instant::now();
        in_background(limiter.until_ready()).await;
        assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    }
}
