//! Counters and latency histograms, rendered in the Prometheus text format for `GET /metrics`.
//! Hand-written: a dozen atomics do not justify a metrics framework.

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::lock::MutexExt;

/// The route label of every request that matched no route (or a route label past [`MAX_SERIES`]).
pub const OTHER_ROUTE: &str = "other";
/// Request-count series kept at most. Labels come from the router's own patterns and a status,
/// so real traffic stays far below; the bound only guards against a bug.
const MAX_SERIES: usize = 512;

/// Histogram bucket upper bounds, in seconds.
const BUCKETS: [f64; 12] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0];

/// A latency histogram.
#[derive(Default)]
pub struct Histogram {
    counts: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        for (i, bound) in BUCKETS.iter().enumerate() {
            if secs <= *bound {
                self.counts[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, bound) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {}",
                self.counts[i].load(Ordering::Relaxed)
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
        let braces = if labels.is_empty() { String::new() } else { format!("{{{labels}}}") };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6);
        let _ = writeln!(out, "{name}_count{braces} {count}");
    }
}

/// Everything the daemon counts.
#[derive(Default)]
pub struct Metrics {
    /// Items accepted into the spool.
    pub items_enqueued: AtomicU64,
    /// Items delivered to a backend.
    pub items_delivered: AtomicU64,
    /// Items moved to the dead letters.
    pub items_dead: AtomicU64,
    /// Items dropped from the spool by a clear or a forget, queued or dead.
    pub items_discarded: AtomicU64,
    /// Deliveries that failed (transient or permanent).
    pub delivery_failures: AtomicU64,
    /// Backend delivery latency.
    pub delivery_seconds: Histogram,
    /// Recall latency (tool and automatic).
    pub recall_seconds: Histogram,
    /// HTTP requests by status, then route pattern (bounded: see [`MAX_SERIES`]).
    requests: Mutex<Requests>,
    /// HTTP latency.
    pub http_seconds: Histogram,
}

impl Metrics {
    /// Counts one HTTP request. `route` must be a route pattern (or [`OTHER_ROUTE`]), never a
    /// raw path: anyone who can connect chooses the path.
    pub fn request(&self, route: &str, status: u16, took: Duration) {
        self.http_seconds.observe(took);
        self.requests.locked().count(route, status);
    }

    /// Renders the text exposition, with counters others keep and the given gauges appended.
    pub fn render(&self, more_counters: &[(&str, &str, u64)], gauges: &[(&str, &str, f64)]) -> String {
        let mut out = String::new();
        let counters = [
            ("mneme_items_enqueued_total", "Retain items accepted into the spool.", &self.items_enqueued),
            ("mneme_items_delivered_total", "Items delivered to the memory backend.", &self.items_delivered),
            ("mneme_items_dead_total", "Items moved to the dead letters.", &self.items_dead),
            (
                "mneme_items_discarded_total",
                "Items dropped from the spool by a clear or a forget (queued, or dead letters).",
                &self.items_discarded,
            ),
            ("mneme_delivery_failures_total", "Failed deliveries to the memory backend.", &self.delivery_failures),
        ];
        let counters = counters.iter().map(|(name, help, c)| (*name, *help, c.load(Ordering::Relaxed)));
        for (name, help, n) in counters.chain(more_counters.iter().copied()) {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {n}");
        }
        let _ = writeln!(out, "# HELP mneme_http_requests_total HTTP requests by route and status.\n# TYPE mneme_http_requests_total counter");
        for (route, status, n) in self.requests.locked().sorted() {
            let _ = writeln!(out, "mneme_http_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}");
        }
        for (name, help, h) in [
            ("mneme_http_request_seconds", "HTTP request latency.", &self.http_seconds),
            ("mneme_delivery_seconds", "Backend delivery latency.", &self.delivery_seconds),
            ("mneme_recall_seconds", "Recall latency.", &self.recall_seconds),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
            h.render(&mut out, name, "");
        }
        for (name, help, v) in gauges {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        }
        out
    }
}

/// Request counts by (route, status), at most [`MAX_SERIES`] of them.
#[derive(Default)]
struct Requests {
    by_status: HashMap<u16, HashMap<String, u64>>,
    series: usize,
}

impl Requests {
    fn count(&mut self, route: &str, status: u16) {
        let routes = self.by_status.entry(status).or_default();
        if let Some(n) = routes.get_mut(route) {
            *n += 1;
            return;
        }
        let route = if self.series < MAX_SERIES { route } else { OTHER_ROUTE };
        if !routes.contains_key(route) {
            self.series += 1;
        }
        *routes.entry(route.to_owned()).or_default() += 1;
    }

    fn sorted(&self) -> Vec<(&str, u16, u64)> {
        let mut all: Vec<(&str, u16, u64)> = self
            .by_status
            .iter()
            .flat_map(|(status, routes)| routes.iter().map(move |(r, n)| (r.as_str(), *status, *n)))
            .collect();
        all.sort_unstable();
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_series_are_bounded() {
        let m = Metrics::default();
        for i in 0..2000 {
            m.request(&format!("/route/{i}"), 200 + (i % 3) as u16, Duration::ZERO);
        }
        let r = m.requests.locked();
        assert!(r.series <= MAX_SERIES + 3, "{}", r.series);
        assert!(r.by_status.values().any(|routes| routes.get(OTHER_ROUTE).is_some_and(|n| *n > 0)));
    }
}
