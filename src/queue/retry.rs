//! How long a session waits before its next delivery attempt.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use mneme_core::BackendError;

use crate::config::QueueSettings;

/// How often a delivery is retried while the store's disk is full.
const STORAGE_FULL_RETRY: Duration = Duration::from_secs(5);

/// The largest share added at random to a backoff, so sessions that failed together (one outage)
/// do not retry in lockstep. Small on purpose: a retry is never much later than the schedule
/// says (`retry_initial`, doubling, up to `retry_max`).
const JITTER: f64 = 0.05;

/// The delay before attempt `attempts + 1` after `error`: doubling from `retry_initial` up to
/// `retry_max`, never shorter than a server's `Retry-After`, plus up to 5% jitter; a full disk is
/// retried every 5 s (within the same bounds).
pub(super) fn backoff(settings: &QueueSettings, attempts: u32, error: &BackendError) -> Duration {
    if error.is_storage_full() {
        return STORAGE_FULL_RETRY.max(settings.retry_initial).min(settings.retry_max);
    }
    let exp = settings.retry_initial.saturating_mul(1u32 << attempts.saturating_sub(1).min(20));
    let base = exp.min(settings.retry_max);
    with_jitter(base, unit_random()).max(error.retry_after().unwrap_or_default())
}

/// `base` plus `u` × 5% of it (`u` in [0, 1)).
fn with_jitter(base: Duration, u: f64) -> Duration {
    base + base.mul_f64(JITTER * u.clamp(0.0, 1.0))
}

/// A number in [0, 1) that differs per call (std's per-instance hasher seed; not a secret).
fn unit_random() -> f64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> QueueSettings {
        QueueSettings {
            retry_initial: Duration::from_secs(1),
            retry_max: Duration::from_secs(60),
            ..crate::config::Settings::default().queue
        }
    }

    #[test]
    fn backoff_doubles_within_its_bounds_with_a_little_jitter() {
        let s = settings();
        let e = BackendError::transient("down");
        for (attempts, base) in [(1, 1.0), (2, 2.0), (3, 4.0), (7, 60.0), (40, 60.0)] {
            for _ in 0..100 {
                let d = backoff(&s, attempts, &e).as_secs_f64();
                assert!(d >= base && d < base * 1.05 + 1e-9, "attempt {attempts}: {d}");
            }
        }
        let delays: std::collections::HashSet<u128> = (0..50).map(|_| backoff(&s, 3, &e).as_nanos()).collect();
        assert!(delays.len() > 40, "jittered: {} distinct delays of 50", delays.len());
    }

    #[test]
    fn a_servers_retry_after_and_a_full_disk_set_the_delay() {
        let s = settings();
        let e = BackendError::Transient { reason: "429".into(), retry_after: Some(Duration::from_secs(30)) };
        assert_eq!(backoff(&s, 1, &e), Duration::from_secs(30));
        let full = BackendError::StorageFull { reason: "full".into() };
        assert_eq!(backoff(&s, 9, &full), Duration::from_secs(5));
        assert_eq!(
            with_jitter(Duration::from_secs(10), 0.999_999),
            Duration::from_secs(10).mul_f64(1.0 + 0.05 * 0.999_999)
        );
        assert_eq!(with_jitter(Duration::from_secs(10), 0.0), Duration::from_secs(10));
    }
}
