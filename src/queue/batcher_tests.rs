//! The batching rules with no runtime, disk or backend: time is a number the test moves.

use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;

const RULES: Rules =
    Rules { batch_size: 4, flush_interval: Duration::from_secs(5), retry_max: Duration::from_secs(300) };

impl Batcher {
    /// A session's state (a default one if it has none yet).
    fn session(&self, id: &str) -> SessionState {
        self.sessions.get(id).cloned().unwrap_or_default()
    }
}

fn at(start: Instant, ms: u64) -> Instant {
    start + Duration::from_millis(ms)
}

#[test]
fn a_full_batch_flushes_at_once_and_asks_only_once() {
    let t0 = Instant::now();
    let mut b = Batcher::default();
    assert_eq!(b.arrived("s", 3, t0, RULES), Arrival { size_flush: false, timer_armed: true });
    assert_eq!(b.arrived("s", 1, t0, RULES), Arrival { size_flush: true, timer_armed: false });
    // More arrive before the size flush starts: it will take them; no second one.
    assert!(!b.arrived("s", 4, t0, RULES).size_flush);
    assert!(b.size_flush_starting("s", RULES));
    b.taken("s", 4);
    assert_eq!(b.session("s").pending, 4);
    assert_eq!(b.session("s").in_flight, 4);
}

/// After a reload, armed timers fire at the time they were armed plus the new interval, and a
/// smaller batch size flushes a session holding a batch of it, once, and not one backing off.
/// A lowered `queue.retry_max` reaches a backoff already armed: it fires no later than the new
/// longest wait from the reload (review73 #2); a raised one leaves it as it is.
#[test]
fn a_lowered_retry_max_cuts_a_backoff_already_armed() {
    let t0 = Instant::now();
    let mut b = Batcher::default();
    b.arrived("failing", 2, t0, RULES);
    b.retry_later("failing", 0, t0, Duration::from_secs(40));
    let raised = Rules { retry_max: Duration::from_secs(600), ..RULES };
    b.rules_changed(RULES, raised, at(t0, 1_000));
    assert_eq!(b.backoff_left("failing", at(t0, 2_000)), Some(Duration::from_secs(38)));
    let lowered = Rules { retry_max: Duration::from_secs(1), ..raised };
    b.rules_changed(raised, lowered, at(t0, 2_000));
    assert_eq!(b.backoff_left("failing", at(t0, 2_000)), Some(Duration::from_secs(1)));
    let due: Vec<String> = b.due(at(t0, 3_000)).into_iter().map(|(id, _)| id).collect();
    assert!(due.contains(&"failing".to_owned()), "its retry fires at the new longest wait: {due:?}");
}

#[test]
fn new_rules_reach_armed_timers_and_full_batches() {
    let t0 = Instant::now();
    let mut b = Batcher::default();
    let hour = Rules { batch_size: 100, flush_interval: Duration::from_secs(3600), ..RULES };
    b.arrived("s", 3, t0, hour);
    b.arrived("late", 1, at(t0, 9_000), hour);
    b.arrived("failing", 5, t0, hour);
    b.retry_later("failing", 0, t0, Duration::from_secs(60));
    let longer = Rules { flush_interval: Duration::from_secs(7200), ..hour };
    assert!(b.rules_changed(hour, longer, at(t0, 10_000)).is_empty());
    assert_eq!(b.session("s").flush_at, Some(at(t0, 7_200_000)), "counted from its first item");
    let cut = Rules { batch_size: 3, flush_interval: Duration::from_secs(5), ..hour };
    let full = b.rules_changed(longer, cut, at(t0, 10_000));
    assert_eq!(full, vec!["s".to_owned()], "failing backs off; late holds one");
    assert!(b.rules_changed(longer, cut, at(t0, 10_000)).is_empty(), "asked once");
    let due: Vec<String> = b.due(at(t0, 10_000)).into_iter().map(|(id, _)| id).collect();
    assert!(due.contains(&"s".to_owned()) && due.contains(&"failing".to_owned()), "{due:?}");
    assert!(!due.contains(&"late".to_owned()), "{due:?}");
    assert_eq!(b.next_deadline(), Some(at(t0, 14_000)), "late: armed at 9 s, plus the new 5 s");
}

#[test]
fn the_timer_counts_from_the_first_item_and_later_ones_do_not_reset_it() {
    let t0 = Instant::now();
    let mut b = Batcher::default();
    b.arrived("s", 1, t0, RULES);
    b.arrived("s", 1, at(t0, 3000), RULES);
    assert_eq!(b.next_deadline(), Some(at(t0, 5000)));
    assert!(b.due(at(t0, 4999)).is_empty());
    assert_eq!(b.due(at(t0, 5000)), vec![("s".to_owned(), Trigger::Timer)]);
    assert!(b.due(at(t0, 9000)).is_empty(), "a timer fires once");
    assert_eq!(b.next_deadline(), None);
}

#[test]
fn a_failure_backs_off_and_its_retry_replaces_the_timer() {
    let t0 = Instant::now();
    let mut b = Batcher::default();
    b.arrived("s", 2, t0, RULES);
    b.due(at(t0, 5000));
    b.taken("s", 2);
    b.answered("s", 2);
    b.retry_later("s", 2, at(t0, 5000), Duration::from_secs(1));
    assert!(b.holds_back("s", Trigger::Timer, at(t0, 5500)));
    assert!(b.holds_back("s", Trigger::Size, at(t0, 5500)));
    assert!(!b.holds_back("s", Trigger::Explicit, at(t0, 5500)), "explicit flushes do not wait");
    // A recall does not wait on a session backing off (see `Queue::deliverable`).
    assert!(!b.deliverable("s", at(t0, 5500)));
    assert!(b.deliverable("s", at(t0, 6000)), "pending, its backoff over");
    assert!(!b.deliverable("idle", at(t0, 6000)));
    // While backing off, a full batch asks for no size flush and arms no timer: the retry will send it.
    assert_eq!(b.arrived("s", 4, at(t0, 5500), RULES), Arrival { size_flush: false, timer_armed: false });
    assert_eq!(b.due(at(t0, 6000)), vec![("s".to_owned(), Trigger::Retry)]);
    b.succeeded("s");
    assert!(!b.holds_back("s", Trigger::Timer, at(t0, 6000)));
}

#[test]
fn the_end_of_an_outage_ends_the_other_sessions_backoffs() {
    let t0 = Instant::now();
    let mut b = Batcher::default();
    for s in ["a", "b", "c"] {
        b.arrived(s, 1, t0, RULES);
        b.taken(s, 1);
        b.answered(s, 1);
        b.retry_later(s, 1, t0, Duration::from_secs(30));
    }
    b.discarded(Some("c"));
    let mut woken = b.end_backoffs("a", |_| false);
    woken.sort();
    assert_eq!(woken, vec!["b"], "a recovered itself; c has nothing pending");
}

#[test]
fn what_a_flush_leaves_gets_a_timer_unless_one_is_due_or_a_size_flush_is_queued() {
    let t0 = Instant::now();
    let mut b = Batcher::default();
    b.arrived("s", 2, t0, RULES);
    assert!(!b.flush_ended("s", t0, RULES), "its timer is still armed");
    b.due(at(t0, 5000));
    assert!(b.flush_ended("s", at(t0, 5000), RULES));
    assert_eq!(b.next_deadline(), Some(at(t0, 10_000)));
    b.due(at(t0, 10_000));
    b.taken("s", 2);
    assert!(!b.flush_ended("s", at(t0, 10_000), RULES), "nothing is pending");
}

/// A retry left armed by an outage that a flush of another kind ended kept the next items
/// from arming a timer: they waited for the retry (up to `queue.retry_max`, or an hour of
/// Retry-After) instead of the flush interval.
#[test]
fn a_success_disarms_the_retry_so_the_next_items_get_a_timer() {
    let t0 = Instant::now();
    let mut b = Batcher::default();
    b.arrived("s", 1, t0, RULES);
    b.taken("s", 1);
    b.answered("s", 1);
    b.retry_later("s", 1, t0, Duration::from_secs(300));
    // An explicit flush (an agent's turn end) delivers it.
    b.taken("s", 1);
    b.answered("s", 1);
    b.succeeded("s");
    b.flush_ended("s", at(t0, 1000), RULES);
    assert!(b.arrived("s", 1, at(t0, 2000), RULES).timer_armed);
    assert_eq!(b.next_deadline(), Some(at(t0, 7000)));
    // Woken at the end of an outage another session's success ended: the same.
    let mut b = Batcher::default();
    b.arrived("s", 1, t0, RULES);
    b.taken("s", 1);
    b.answered("s", 1);
    b.retry_later("s", 1, t0, Duration::from_secs(300));
    assert_eq!(b.end_backoffs("other", |_| false), ["s"]);
    assert_eq!(b.session("s").retry_at, None);
}

/// The timer is armed by the first item of a queue that was empty: one left from items a size
/// or explicit flush took sent the next item early, alone.
#[test]
fn a_queue_taken_empty_disarms_its_timer() {
    let t0 = Instant::now();
    let mut b = Batcher::default();
    assert!(b.arrived("s", 4, t0, RULES).size_flush);
    assert!(b.size_flush_starting("s", RULES));
    b.taken("s", 4);
    b.answered("s", 4);
    b.succeeded("s");
    b.flush_ended("s", at(t0, 100), RULES);
    assert_eq!(b.next_deadline(), None);
    assert!(b.arrived("s", 1, at(t0, 4000), RULES).timer_armed);
    assert_eq!(b.next_deadline(), Some(at(t0, 9000)));
}

/// A delivery that read items from the spool before their arrival was counted (a flush and a
/// retain sharing one spool commit) leaves the count right: counted after, they stayed pending
/// for good, and every later size flush went out that many items short.
#[test]
fn items_taken_before_their_arrival_was_counted_are_not_pending_after_it() {
    let t0 = Instant::now();
    let mut b = Batcher::default();
    b.know("s");
    b.taken("s", 1);
    b.answered("s", 1);
    b.succeeded("s");
    assert!(!b.arrived("s", 1, t0, RULES).timer_armed, "nothing is pending");
    assert_eq!(b.session("s").pending, 0);
    assert!(!b.arrived("s", 3, t0, RULES).size_flush);
    assert!(b.arrived("s", 1, t0, RULES).size_flush, "the fourth item fills the batch");
}

/// The items pending when the timer fired are owed by its flush: a batch cut short (at a second
/// version of one document) does not stop it, and once they are out, it stops as before.
#[test]
fn a_timer_flush_goes_on_until_what_was_due_is_out() {
    let t0 = Instant::now();
    let mut b = Batcher::default();
    b.arrived("s", 3, t0, RULES);
    assert_eq!(b.due(at(t0, 5000)), [("s".to_owned(), Trigger::Timer)]);
    b.arrived("s", 1, at(t0, 5001), RULES); // after the timer fired: not owed
    let deliver_one = |b: &mut Batcher| {
        b.taken("s", 1);
        b.answered("s", 1);
        b.succeeded("s");
    };
    deliver_one(&mut b);
    assert!(!b.stops_after_delivery("s", Trigger::Timer, RULES), "two owed items are left");
    deliver_one(&mut b);
    assert!(!b.stops_after_delivery("s", Trigger::Timer, RULES), "one owed item is left");
    deliver_one(&mut b);
    assert!(b.stops_after_delivery("s", Trigger::Timer, RULES), "the late item waits for its own timer");
    assert_eq!(b.session("s").pending, 1);
    b.flush_ended("s", at(t0, 5002), RULES);
    assert_eq!(b.next_deadline(), Some(at(t0, 10001)), "its timer counts from its arrival");
}

#[derive(Debug, Clone)]
enum Event {
    Arrive(usize, u64),
    Advance(u64),
    /// The session's flush delivers (or fails) what is pending, up to `max` items.
    Flush {
        session: usize,
        fail: bool,
    },
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => (0..3usize, 1..6u64).prop_map(|(s, n)| Event::Arrive(s, n)),
        3 => (0..7000u64).prop_map(Event::Advance),
        2 => (0..3usize, any::<bool>()).prop_map(|(session, fail)| Event::Flush { session, fail }),
    ]
}

/// Runs one flush the way the shell does (one delivery of at most `max` items, then the end).
fn flush(b: &mut Batcher, id: &str, trigger: Trigger, now: Instant, fail: bool) {
    if trigger == Trigger::Size && !b.size_flush_starting(id, RULES) {
        b.flush_ended(id, now, RULES);
        return;
    }
    if !b.holds_back(id, trigger, now) {
        let n = b.session(id).pending.min(8);
        if n > 0 {
            b.taken(id, n);
            b.answered(id, n);
            if fail {
                b.retry_later(id, n, now, Duration::from_secs(2));
            } else {
                b.succeeded(id);
            }
        }
    }
    b.flush_ended(id, now, RULES);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// The counts add up, and no pending item is ever left without a way out: a timer, a
    /// retry or a queued size flush.
    #[test]
    fn counts_add_up_and_nothing_pending_is_stranded(events in prop::collection::vec(event(), 1..60)) {
        let t0 = Instant::now();
        let mut now = t0;
        let mut b = Batcher::default();
        let mut arrived = [0u64; 3];
        for e in events {
            match e {
                Event::Arrive(s, n) => {
                    let id = format!("s{s}");
                    arrived[s] += n;
                    if b.arrived(&id, n, now, RULES).size_flush {
                        flush(&mut b, &id, Trigger::Size, now, false);
                    }
                }
                Event::Advance(ms) => {
                    let target = now + Duration::from_millis(ms);
                    // Timers fire at their deadlines, in order.
                    while let Some(deadline) = b.next_deadline().filter(|d| *d <= target) {
                        now = deadline;
                        for (id, trigger) in b.due(now) {
                            flush(&mut b, &id, trigger, now, false);
                        }
                    }
                    now = target;
                }
                Event::Flush { session, fail } => {
                    flush(&mut b, &format!("s{session}"), Trigger::Explicit, now, fail);
                }
            }
            for (s, arrived) in arrived.iter().enumerate() {
                let q = b.session(&format!("s{s}"));
                prop_assert_eq!(q.in_flight, 0, "a finished flush leaves nothing in flight");
                prop_assert!(q.pending <= *arrived);
                let way_out = q.flush_at.is_some() || q.retry_at.is_some() || q.size_flush_queued;
                prop_assert!(q.pending == 0 || way_out, "s{}: {} pending with no timer: {:?}", s, q.pending, q);
                if let Some(t) = q.flush_at {
                    prop_assert!(t > now && t <= now + RULES.flush_interval, "timer out of range");
                }
            }
        }
        // Left alone, every session drains by itself.
        now += Duration::from_secs(60);
        while let Some(deadline) = b.next_deadline().filter(|d| *d <= now) {
            for (id, trigger) in b.due(deadline) {
                flush(&mut b, &id, trigger, deadline, false);
            }
        }
        for s in 0..3 {
            prop_assert_eq!(b.session(&format!("s{s}")).pending, 0, "s{} kept items", s);
        }
    }
}

#[test]
fn only_a_session_with_nothing_to_do_is_forgotten() {
    let t0 = Instant::now();
    let mut b = Batcher::default();
    b.arrived("s", 1, t0, RULES);
    assert!(!b.forget_if_idle("s", t0), "pending and armed");
    b.taken("s", 1);
    assert!(!b.forget_if_idle("s", t0), "in flight");
    b.answered("s", 1);
    b.retry_later("s", 1, t0, Duration::from_secs(2));
    assert!(!b.forget_if_idle("s", t0), "backing off with a retry armed");
    b.due(at(t0, 2_000));
    b.taken("s", 1);
    b.answered("s", 1);
    b.succeeded("s");
    assert!(b.forget_if_idle("s", at(t0, 2_000)));
    assert!(!b.knows("s"));
    // A delivery took an item whose arrival is not counted yet: forgotten, the arrival would
    // count it pending for good.
    b.taken("t", 1);
    b.answered("t", 1);
    b.succeeded("t");
    assert!(!b.forget_if_idle("t", t0));
    b.arrived("t", 1, t0, RULES);
    assert_eq!(b.session("t").pending, 0);
    assert!(b.forget_if_idle("t", t0));
}
