//! The request rate limit every session shares (`hindsight.requests_per_second`, `burst`),
//! served first to the requests someone waits on.
//!
//! A backlog of deliveries (hundreds of sessions ended at a start, or queued through an outage)
//! fills the limit for minutes: an agent's recall, waiting its turn among them, ran out its
//! `recall.timeout` and got nothing, and `mneme status` took a minute (review68 #3). Requests
//! made inside [`in_background`] (deliveries, imports) take a cell only while no other request
//! waits for one, for [`BACKGROUND_WAITS_AT_MOST`] at most (then in turn with them); every other
//! request (recall, reflect, status, the web view, clear) waits as before.

use std::future::Future;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};

use governor::clock::Clock;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use tokio::sync::Notify;

tokio::task_local! {
    static BACKGROUND: ();
}

/// Runs `work` with its requests second to any that someone waits on.
pub(crate) async fn in_background<F: Future>(work: F) -> F::Output {
    BACKGROUND.scope((), work).await
}

/// The longest a background request gives way to requests waited on; then it waits in turn with
/// them.
const BACKGROUND_WAITS_AT_MOST: std::time::Duration = std::time::Duration::from_secs(5);

/// A rate limit with two classes of request: waited on, and background.
pub(crate) struct Limiter {
    quota: DefaultDirectRateLimiter,
    /// Requests waited on that wait for a cell.
    waiting: AtomicUsize,
    /// Told when none is left waiting.
    none_waiting: Notify,
}

impl Limiter {
    /// `per_second` requests a second, `burst` at once.
    pub(crate) fn new(per_second: NonZeroU32, burst: NonZeroU32) -> Self {
        Self {
            quota: RateLimiter::direct(Quota::per_second(per_second).allow_burst(burst)),
            waiting: AtomicUsize::new(0),
            none_waiting: Notify::new(),
        }
    }

    /// Waits until a request may be sent: in turn for one waited on, after every such one for
    /// one in the background.
    pub(crate) async fn until_ready(&self) {
        match BACKGROUND.try_with(|_| ()).is_ok() {
            true => self.background().await,
            false => self.waited_on().await,
        }
    }

    async fn waited_on(&self) {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        // Counted out however the wait ends (a recall's timeout drops it).
        let _counted = Counted(self);
        self.quota.until_ready().await;
    }

    async fn background(&self) {
        let asked = tokio::time::Instant::now();
        loop {
            // Not starved: a steady demand above the rate (the web view's status every 2 s at
            // `requests_per_second = 1`) held every delivery for as long as it lasted (review74
            // #1). Past a wait this long, a background request waits in turn with the others.
            let Some(left) = BACKGROUND_WAITS_AT_MOST.checked_sub(asked.elapsed()) else {
                return self.waited_on().await;
            };
            let none_waiting = self.none_waiting.notified();
            tokio::pin!(none_waiting);
            // Registered before the count is read: a last one leaving in between still wakes it.
            none_waiting.as_mut().enable();
            if self.waiting.load(Ordering::SeqCst) > 0 {
                let _ = tokio::time::timeout(left, none_waiting).await;
                continue;
            }
            match self.quota.check() {
                Ok(()) => return,
                Err(not_until) => tokio::time::sleep(not_until.wait_time_from(self.quota.clock().now())).await,
            }
        }
    }
}

/// One request waited on, counted while it waits.
struct Counted<'a>(&'a Limiter);

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        if self.0.waiting.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.none_waiting.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        demand.iter().for_each(|task| task.abort());
        assert!(went.is_ok(), "starved for {:?}", started.elapsed());
        assert!(started.elapsed() >= BACKGROUND_WAITS_AT_MOST - Duration::from_millis(100), "it gave way first");
    }

    /// A request waited on whose wait is dropped (a recall's timeout) is counted out: the
    /// background goes on.
    #[tokio::test]
    async fn a_dropped_wait_lets_the_background_go_on() {
        let limiter = Arc::new(Limiter::new(NonZeroU32::new(1).unwrap(), NonZeroU32::new(1).unwrap()));
        limiter.until_ready().await; // the one cell of this second
        let _ = tokio::time::timeout(Duration::from_millis(50), limiter.until_ready()).await;
        assert_eq!(limiter.waiting.load(Ordering::SeqCst), 0);
        let started = Instant::now();
        in_background(limiter.until_ready()).await;
        assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    }
}
