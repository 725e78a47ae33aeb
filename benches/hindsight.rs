//! `cargo bench --bench hindsight` (needs `MNEME_HINDSIGHT_URL`, a running Hindsight peer):
//!
//! - recall: the daemon's added latency over calling the server directly, same bank and query, same run;
//! - retain: what an agent waits for through the daemon, beside what the server takes to store an item.
//!
//! Not a test: it reports numbers and asserts nothing.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod support;
use support::{ms, spawn_daemon};

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    support::pct(v, p)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let Ok(url) = std::env::var("MNEME_HINDSIGHT_URL") else {
        eprintln!("set MNEME_HINDSIGHT_URL to a running Hindsight peer (../shared/peers/hindsight/up.sh)");
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(run(url));
}

async fn run(url: String) {
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let bank =
        format!("bench-{:x}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs());
    http.put(format!("{url}/v1/default/banks/{bank}"))
        .json(&json!({"retain_extraction_mode": "chunks", "enable_observations": false}))
        .send()
        .await
        .unwrap();
    // Seed memories directly.
    let items: Vec<Value> = (0..100)
        .map(|i| json!({"content": format!("bench memory {i}: the service number {i} deploys through pipeline {}", i % 7), "tags": ["project:bench"], "document_id": format!("d{i}")}))
        .collect();
    http.post(format!("{url}/v1/default/banks/{bank}/memories")).json(&json!({"items": items})).send().await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("c.toml"), format!("[memory]\nbackend = \"hindsight\"\nbank_id = \"{bank}\"\n[hindsight]\napi_url = \"{url}\"\nrequests_per_second = 1000\nburst = 1000\n")).unwrap();
    let (daemon, _) = spawn_daemon(dir.path(), Some(&dir.path().join("c.toml")));
    let token = daemon.token.clone();
    let addr = daemon.addr.clone();
    let base = format!("http://{addr}");
    http.post(format!("{base}/v1/sessions"))
        .bearer_auth(&token)
        .json(&json!({"session_id": "b", "cwd": "/x/bench"}))
        .send()
        .await
        .unwrap();

    // Recall: direct and through the daemon, interleaved, same bank, same query, same body.
    let queries =
        ["how does service 3 deploy", "pipeline 5", "which service deploys through pipeline 2", "bench memory 42"];
    let (mut direct, mut daemon) = (Vec::new(), Vec::new());
    for round in 0..200 {
        let q = queries[round % queries.len()];
        let body = json!({"query": q, "budget": "mid", "max_tokens": 1024, "types": ["world", "experience"], "tags": ["project:bench"], "tags_match": "any"});
        let t = Instant::now();
        let r = http.post(format!("{url}/v1/default/banks/{bank}/memories/recall")).json(&body).send().await.unwrap();
        r.bytes().await.unwrap();
        direct.push(t.elapsed());
        let t = Instant::now();
        let r = http
            .post(format!("{base}/v1/sessions/b/recall"))
            .bearer_auth(&token)
            .json(&json!({"query": q}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
        r.bytes().await.unwrap();
        daemon.push(t.elapsed());
    }
    // The added latency, paired per query (through mneme minus direct, same query, back to back).
    let mut added: Vec<f64> =
        direct.iter().zip(&daemon).map(|(d, m)| (m.as_secs_f64() - d.as_secs_f64()) * 1000.0).collect();
    added.sort_by(|a, b| a.total_cmp(b));
    let (d50, d99, m50, m99) =
        (pct(&mut direct, 0.5), pct(&mut direct, 0.99), pct(&mut daemon, 0.5), pct(&mut daemon, 0.99));
    println!(
        "recall, 200 queries: server direct p50 {} p99 {} | through mneme p50 {} p99 {} | added latency, paired: median {:.3} ms",
        ms(d50),
        ms(d99),
        ms(m50),
        ms(m99),
        added[added.len() / 2],
    );

    // Retain: what the server takes to store one item synchronously, and what an agent waits for.
    let mut server = Vec::new();
    for i in 0..20 {
        let t = Instant::now();
        http.post(format!("{url}/v1/default/banks/{bank}/memories"))
            .json(&json!({"items": [{"content": format!("direct sync item {i}")}], "async": false}))
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        server.push(t.elapsed());
    }
    let mut agent = Vec::new();
    for i in 0..500 {
        let t = Instant::now();
        let r = http
            .post(format!("{base}/v1/sessions/b/retain"))
            .bearer_auth(&token)
            .json(&json!({"items": [{"content": format!("agent retain {i}")}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202);
        r.bytes().await.unwrap();
        agent.push(t.elapsed());
    }
    println!(
        "retain: server stores one item synchronously in p50 {} | an agent waits p50 {} p99 {} (500 retains through mneme)",
        ms(pct(&mut server, 0.5)),
        ms(pct(&mut agent, 0.5)),
        ms(pct(&mut agent, 0.99))
    );
    let r: Value = http
        .post(format!("{base}/v1/flush"))
        .bearer_auth(&token)
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    println!("flush after: {r}");
}
