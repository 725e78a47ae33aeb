//! What mneme's Hindsight API costs a client: `cargo bench --bench hindsight_api`.
//!
//! A release daemon on the local store (BM25 and the built-in embedder, as shipped) with 5,000
//! memories in one project. Recall: the same query through `/hindsight/.../memories/recall` and
//! through mneme's own `/v1/sessions/{id}/recall`, alternating, so each pair sees the same
//! machine state; the added latency is the median of the pairs' differences. Retain: what a
//! client waits for `POST /hindsight/.../memories` (`async: true`, as oh-my-pi sends it) from one
//! keep-alive connection: answered once the item is fsynced into the spool; then the same for
//! appends to four documents.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::Daemon;
use serde_json::json;

const MEMORIES: usize = 5_000;
const PAIRS: usize = 2_000;
const RETAINS: usize = 5_000;

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

const WORDS: [&str; 16] = [
    "cargo", "release", "sqlite", "tokio", "deploy", "linter", "database", "cache", "staging", "docker", "branch",
    "review", "tests", "schema", "queue", "metrics",
];

#[tokio::main]
async fn main() {
    let d = Daemon::start("");
    d.start_session("bench", "/tmp/mneme-bench/shop").await;
    for chunk in 0..MEMORIES / 100 {
        let items: Vec<_> = (0..100)
            .map(|i| {
                let n = chunk * 100 + i;
                let text = format!(
                    "Fact {n}: the {} step uses {} with {} and {}.",
                    WORDS[n % 16],
                    WORDS[(n / 16) % 16],
                    WORDS[(n / 256) % 16],
                    n * 7919 % 10007
                );
                json!({"content": text})
            })
            .collect();
        let (status, v) = d.post("/v1/sessions/bench/retain", json!({"items": items})).await;
        assert_eq!(status, 202, "{v}");
    }
    d.post("/v1/flush", json!({})).await;
    // Let the background embedder catch up, so both routes run the same hybrid recall.
    for _ in 0..600 {
        let (_, s) = d.get("/v1/status").await;
        let e = &s["backend"]["embedding"];
        if e["state"] == "ready" && e["embedded"] == e["passages"] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let (mut own, mut compat, mut diff) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..PAIRS + 100 {
        let q = format!("which {} uses {}?", WORDS[i % 16], WORDS[(i * 5 + 3) % 16]);
        let t = Instant::now();
        let (s1, _) = d.post("/v1/sessions/bench/recall", json!({"query": q})).await;
        let a = t.elapsed();
        let t = Instant::now();
        let (s2, _) = d
            .post(
                "/hindsight/v1/default/banks/mneme/memories/recall",
                json!({"query": q, "tags": ["project:shop"], "tags_match": "any", "max_tokens": 1024, "budget": "mid"}),
            )
            .await;
        let b = t.elapsed();
        assert_eq!((s1, s2), (200, 200));
        if i >= 100 {
            own.push(a);
            compat.push(b);
            diff.push(b.as_secs_f64() - a.as_secs_f64());
        }
    }
    diff.sort_by(f64::total_cmp);
    println!(
        "recall at {MEMORIES} memories ({PAIRS} pairs): mneme's route p50 {} p99 {}; Hindsight API p50 {} p99 {}; added (paired median) {:.3} ms",
        ms(pct(&mut own, 0.5)),
        ms(pct(&mut own, 0.99)),
        ms(pct(&mut compat, 0.5)),
        ms(pct(&mut compat, 0.99)),
        diff[diff.len() / 2] * 1000.0
    );

    let mut waits = Vec::with_capacity(RETAINS);
    for i in 0..RETAINS {
        let body = json!({"items": [{"content": format!("Retained through the Hindsight API, number {i}."),
                          "tags": ["project:shop"], "metadata": {"session_id": format!("omp-{}", i % 4)},
                          "timestamp": "2026-12-01T10:00:00+01:00"}], "async": true});
        let t = Instant::now();
        let (status, _) = d.post("/hindsight/v1/default/banks/mneme/memories", body).await;
        waits.push(t.elapsed());
        assert_eq!(status, 200);
    }
    println!(
        "retain through the Hindsight API ({RETAINS}, one connection, queue.sync = full): p50 {} p99 {} max {}",
        ms(pct(&mut waits, 0.5)),
        ms(pct(&mut waits, 0.99)),
        ms(pct(&mut waits, 1.0))
    );

    // Appends to documents, as oh-my-pi sends a session's turns: each request also reads and
    // keeps the private spans its document is left open in, under the document's lock.
    let mut waits = Vec::with_capacity(RETAINS);
    for i in 0..RETAINS {
        let body = json!({"items": [{"content": format!("Turn {i} of a session retained through the Hindsight API."),
                          "document_id": format!("omp-session-{}", i % 4), "update_mode": "append",
                          "tags": ["project:shop"], "timestamp": "2026-12-01T10:00:00+01:00"}], "async": true});
        let t = Instant::now();
        let (status, _) = d.post("/hindsight/v1/default/banks/mneme/memories", body).await;
        waits.push(t.elapsed());
        assert_eq!(status, 200);
    }
    println!(
        "appends to 4 documents through the Hindsight API ({RETAINS}, one connection): p50 {} p99 {} max {}",
        ms(pct(&mut waits, 0.5)),
        ms(pct(&mut waits, 0.99)),
        ms(pct(&mut waits, 1.0))
    );
}
