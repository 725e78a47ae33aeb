//! What was told of the embedder's outages, kept by whoever opens the store again (the daemon,
//! across a reload): a store reopened with other settings (a thesaurus edit, a timeout) during
//! one outage told it again at once, and an outage of an embedder switched away from was never
//! closed, its last notice a warning while recall had its vectors back (review121 #1).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// An outage notice at most this often (an endpoint that comes and goes is one problem).
pub(super) const NOTICE_EVERY: Duration = Duration::from_secs(600);

/// The outages told of a store's embedder; one for the life of the process that opens it.
#[derive(Debug, Clone, Default)]
pub struct OutageNotices(Arc<Mutex<Told>>);

#[derive(Debug, Default)]
struct Told {
    /// The model the told outage is of, while its end is not told.
    outage_of: Option<String>,
    last_notice: Option<Instant>,
}

impl OutageNotices {
    /// A store opens with `model` (`None`: the embedder off). An outage told of another model
    /// is over for this store's recall: its model, to be told so; the quiet time between
    /// notices is then that of the new model's (another problem, told at its first failure).
    pub(crate) fn adopt(&self, model: Option<&str>) -> Option<String> {
        let mut told = self.locked();
        match &told.outage_of {
            Some(of) if Some(of.as_str()) != model => {
                told.last_notice = None;
                told.outage_of.take()
            }
            _ => None,
        }
    }

    /// Whether the outage under way of `model` is to be told now (and, if so, it counts as
    /// told): at its first failure, unless an outage was told within [`NOTICE_EVERY`] (an
    /// endpoint that comes and goes is one problem); and at a later failure of one that began
    /// within that time and outlasted it, which was never told while the last notice said
    /// recall was back (review104 #3).
    pub(super) fn tell_now(&self, model: &str, now: Instant) -> bool {
        let mut told = self.locked();
        let due = told.last_notice.is_none_or(|t| now.saturating_duration_since(t) >= NOTICE_EVERY);
        if told.outage_of.is_some() || !due {
            return false;
        }
        told.last_notice = Some(now);
        told.outage_of = Some(model.to_owned());
        true
    }

    /// The embedder answers again: whether an outage was told (its end is to be told).
    pub(super) fn ended(&self) -> bool {
        self.locked().outage_of.take().is_some()
    }

    fn locked(&self) -> std::sync::MutexGuard<'_, Told> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One notice an outage, at most one in [`NOTICE_EVERY`]; an outage that began within that
    /// time of the last notice is told once it has lasted past it.
    #[test]
    fn an_outage_outlasting_the_quiet_time_is_told_then() {
        let start = Instant::now();
        let h = OutageNotices::default();
        assert!(h.tell_now("m", start), "the first outage");
        assert!(!h.tell_now("m", start + Duration::from_secs(30)), "told already");
        assert!(h.ended(), "it ended (`available`)");
        let again = start + Duration::from_secs(120);
        assert!(!h.tell_now("m", again), "a second outage within the quiet time: logged only");
        assert!(!h.tell_now("m", again + Duration::from_secs(60)));
        let past = start + NOTICE_EVERY + Duration::from_secs(1);
        assert!(h.tell_now("m", past), "still down past the quiet time: told");
        assert!(!h.tell_now("m", past + Duration::from_secs(60)), "once");
    }

    /// Reopened with the same model, an outage told is not told again, and its end is told
    /// once; with another model (or none), the outage told is over, and the other model's
    /// first failure is told.
    #[test]
    fn an_outage_is_kept_across_a_reopen_and_closed_by_another_model() {
        let start = Instant::now();
        let h = OutageNotices::default();
        assert!(h.tell_now("a", start));
        assert_eq!(h.adopt(Some("a")), None, "the same model reopened");
        assert!(!h.tell_now("a", start + Duration::from_secs(5)), "not told again");
        assert_eq!(h.adopt(Some("b")), Some("a".to_owned()), "another model: a's outage is over");
        assert!(!h.ended(), "nothing left to end");
        assert!(h.tell_now("b", start + Duration::from_secs(6)), "b's own outage is told");
        assert_eq!(h.adopt(None), Some("b".to_owned()), "the embedder off");
    }
}
