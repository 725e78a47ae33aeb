//! Where the queue's time comes from.
//!
//! The queue reads the time and sleeps until its next deadline only through a [`Clock`], so
//! its tests move time by hand (a manual clock in `tests.rs`) instead of relying on tokio's
//! paused clock, which jumps ahead whenever every task waits — including while the spool's
//! writer thread is busy on the disk.

use std::future::Future;
use std::pin::Pin;
use std::time::Instant;

/// A future the clock hands out.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The queue's source of time.
pub trait Clock: Send + Sync + 'static {
    /// Now.
    fn now(&self) -> Instant;
    /// Completes at `deadline` (at once if it has passed).
    fn sleep_until(&self, deadline: Instant) -> Sleep;
}

/// The system's monotonic clock, with tokio's timers.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        Box::pin(tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)))
    }
}
