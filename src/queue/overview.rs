//! What the queue holds per session and how its last delivery went (`GET /v1/queue`, the web view).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use mneme_core::BackendError;
use serde::{Deserialize, Serialize};

use super::{Depths, Queue};
use crate::lock::MutexExt;

/// How one delivery went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LastDelivery {
    /// When it finished (RFC 3339 UTC).
    pub at: String,
    /// Items in the batch.
    pub items: u64,
    /// How long the backend took, in milliseconds.
    pub took_ms: f64,
    /// Whether the backend stored it.
    pub ok: bool,
    /// Why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl LastDelivery {
    pub(super) fn new(items: u64, took: Duration, error: Option<&BackendError>) -> Self {
        Self {
            at: mneme_core::time::rfc3339(SystemTime::now()),
            items,
            took_ms: (took.as_secs_f64() * 1e6).round() / 1e3,
            ok: error.is_none(),
            error: error.map(ToString::to_string),
        }
    }
}

/// One session's queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionDepths {
    /// The queue's id (the session id; `hindsight:{bank}:{session}` for the Hindsight API).
    pub session_id: String,
    /// Spooled, waiting for a delivery.
    pub pending: u64,
    /// Being delivered now.
    pub in_flight: u64,
    /// Everything in the spool (pending + in flight).
    pub spooled: u64,
    /// Dead letters.
    pub dead: u64,
    /// Its last delivery since the daemon started.
    pub last_delivery: Option<LastDelivery>,
}

/// Every session with something spooled, dead or delivered since the start, and the totals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueOverview {
    /// The totals, as `/v1/status` reports them.
    pub totals: Depths,
    /// Per session, by id.
    pub sessions: Vec<SessionDepths>,
    /// The most recent delivery of any session.
    pub last_delivery: Option<LastDelivery>,
}

impl Queue {
    /// Per-session depths and last deliveries. A session missing from the spool's counts but
    /// known in memory (delivered since the start) is listed with zeros.
    pub async fn overview(&self) -> QueueOverview {
        let counts = self.inner.spool.counts_by_session().await.unwrap_or_default();
        let totals = self.depths().await;
        let mut rows: BTreeMap<String, SessionDepths> = counts
            .into_iter()
            .map(|(id, c)| {
                let row = SessionDepths {
                    session_id: id.clone(),
                    pending: c.spooled,
                    in_flight: 0,
                    spooled: c.spooled,
                    dead: c.dead,
                    last_delivery: None,
                };
                (id, row)
            })
            .collect();
        let in_flight: BTreeMap<String, u64> =
            self.inner.batcher.locked().sessions().map(|(id, q)| (id.clone(), q.in_flight)).collect();
        let sessions = self.inner.sessions.locked();
        let ids: std::collections::BTreeSet<&String> = in_flight.keys().chain(sessions.keys()).collect();
        for id in ids {
            let in_flight = in_flight.get(id).copied().unwrap_or(0);
            let last = sessions.get(id).and_then(|q| q.last_delivery.as_ref());
            if in_flight == 0 && last.is_none() && !rows.contains_key(id) {
                continue;
            }
            let row = rows.entry(id.clone()).or_insert_with(|| SessionDepths {
                session_id: id.clone(),
                pending: 0,
                in_flight: 0,
                spooled: 0,
                dead: 0,
                last_delivery: None,
            });
            row.in_flight = in_flight.min(row.spooled);
            row.pending = row.spooled - row.in_flight;
            row.last_delivery = last.cloned();
        }
        drop(sessions);
        let last_delivery =
            rows.values().filter_map(|r| r.last_delivery.as_ref()).max_by(|a, b| a.at.cmp(&b.at)).cloned();
        QueueOverview { totals, sessions: rows.into_values().collect(), last_delivery }
    }
}
