//! `cargo bench --bench daemon`: measures the release daemon and the local store.
//!
//! - time from process start to a healthy `/v1/health`, idle RSS;
//! - retain throughput and latency through the HTTP API (4 concurrent keep-alive clients, or
//!   `MNEME_BENCH_CLIENTS`), RSS after;
//! - local recall p50/p99 at 10k and 100k memories beside a bare SQLite FTS5 query on the same
//!   data and queries, and the same recall through the HTTP API.
//!
//! Not a test: it reports numbers and asserts nothing. `MNEME_BENCH_QUICK=1` shrinks it;
//! `MNEME_BENCH_ONLY=daemon` or `=recall` runs one half.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mneme_core::*;

mod support;
use mneme_local::store::{RecallFilter, Store};
use mneme_local::{LocalBackend, LocalConfig};
use serde_json::json;
use support::*;

/// Concurrent retain clients unless `MNEME_BENCH_CLIENTS` says otherwise.
const CLIENTS: usize = 4;

/// How many retain clients to run: concurrent retains share a group commit, so the rate
/// depends on it as much as on the disk's sync.
fn clients() -> usize {
    std::env::var("MNEME_BENCH_CLIENTS").ok().and_then(|v| v.parse().ok()).filter(|n| *n > 0).unwrap_or(CLIENTS)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` probes with --list
    }
    let quick = std::env::var_os("MNEME_BENCH_QUICK").is_some();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    // `MNEME_BENCH_ONLY=daemon|recall` runs one half (for profiling one of them).
    let only = std::env::var("MNEME_BENCH_ONLY").unwrap_or_default();
    rt.block_on(async {
        if only != "recall" {
            daemon_bench(quick).await;
        }
        if only != "daemon" {
            // `MNEME_BENCH_SIZES=100000` (comma-separated) picks the store sizes.
            let sizes: Vec<usize> = match std::env::var("MNEME_BENCH_SIZES") {
                Ok(v) => v.split(',').filter_map(|n| n.trim().parse().ok()).collect(),
                Err(_) if quick => vec![10_000],
                Err(_) => vec![10_000, 100_000],
            };
            for n in sizes {
                recall_bench(n, if quick { 200 } else { 1000 }).await;
            }
        }
    });
}

async fn daemon_bench(quick: bool) {
    // Start-to-healthy: median of 5 fresh starts.
    let mut starts = Vec::new();
    for _ in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let (p, took) = spawn_daemon(dir.path(), None);
        starts.push(took);
        drop(p);
    }
    starts.sort();
    let dir = tempfile::tempdir().unwrap();
    let (p, _) = spawn_daemon(dir.path(), None);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle = rss_kib(p.child.id());
    println!("start to healthy: median {} (min {}, max {})", ms(starts[2]), ms(starts[0]), ms(starts[4]));
    println!("idle RSS: {:.1} MiB", idle as f64 / 1024.0);

    let clients = clients();
    let http = reqwest::Client::builder().no_proxy().pool_max_idle_per_host(clients).build().unwrap();
    let base = format!("http://{}", p.addr);
    for c in 0..clients {
        http.post(format!("{base}/v1/sessions"))
            .bearer_auth(&p.token)
            .json(&json!({"session_id": format!("bench-{c}"), "cwd": "/bench/project"}))
            .send()
            .await
            .unwrap();
    }
    let per_client = if quick { 2_000 } else { 10_000 };
    let cpu_before = cpu_ticks(p.child.id());
    let started = Instant::now();
    // The load generator: 4 (or `MNEME_BENCH_CLIENTS`) keep-alive connections driven from one
    // thread (like `wrk -t1 -c4`), each sending its next retain as soon as the previous one is
    // answered. One thread keeps its CPU use and wake-ups small on a 2-core machine, so the
    // daemon is what gets measured.
    let (addr, token) = (p.addr.clone(), p.token.clone());
    let me_before = cpu_ticks(std::process::id());
    let mut lat = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let clients = (0..clients).map(|c| {
                let (addr, token) = (&addr, &token);
                async move {
                    let mut conn = RawClient::connect(addr).await;
                    let path = format!("/v1/sessions/bench-{c}/retain");
                    let mut lat = Vec::with_capacity(per_client);
                    for i in 0..per_client {
                        let body = format!(
                            "{{\"items\":[{{\"content\":\"bench client {c} remembers fact number {i} about the build\"}}]}}"
                        );
                        let t = Instant::now();
                        let status = conn.post(&path, token, &body).await;
                        assert_eq!(status, 202);
                        lat.push(t.elapsed());
                    }
                    lat
                }
            });
            futures_util::future::join_all(clients).await.concat()
        })
    })
    .join()
    .unwrap();
    let generator_ticks = cpu_ticks(std::process::id()) - me_before;
    let took = started.elapsed();
    lat.sort();
    println!(
        "retain over HTTP, {clients} keep-alive clients: {:.0} retains/s ({} in {:.2} s), p50 {}, p99 {}, max {}",
        lat.len() as f64 / took.as_secs_f64(),
        lat.len(),
        took.as_secs_f64(),
        ms(pct(&lat, 0.5)),
        ms(pct(&lat, 0.99)),
        ms(*lat.last().unwrap())
    );
    let ticks = cpu_ticks(p.child.id()) - cpu_before;
    println!(
        "daemon CPU during the run: {:.2} s ({:.0} µs per retain, {:.0}% of one core); load generator: {:.0} µs per retain",
        ticks as f64 / 100.0,
        ticks as f64 * 10_000.0 / lat.len() as f64,
        ticks as f64 / took.as_secs_f64(),
        generator_ticks as f64 * 10_000.0 / lat.len() as f64,
    );
    let r = http.post(format!("{base}/v1/flush")).bearer_auth(&p.token).json(&json!({})).send().await.unwrap();
    println!("flush after the run: {}", r.text().await.unwrap());
    let metrics = http.get(format!("{base}/metrics")).bearer_auth(&p.token).send().await.unwrap().text().await.unwrap();
    let metric =
        |name: &str| metrics.lines().find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok()).unwrap_or(0.0);
    let (items, batches) = (metric("mneme_items_delivered_total "), metric("mneme_delivery_seconds_count "));
    let handled = metric("mneme_http_request_seconds_count ");
    println!(
        "inside the daemon (request parsed to answer ready): mean {:.3} ms over {handled} requests",
        metric("mneme_http_request_seconds_sum ") * 1e3 / handled.max(1.0)
    );
    println!(
        "deliveries to the local store: {batches} batches, {:.1} items each, {:.0} µs each",
        items / batches.max(1.0),
        metric("mneme_delivery_seconds_sum ") * 1e6 / batches.max(1.0)
    );
    let (commits, jobs) = (metric("mneme_spool_commits_total "), metric("mneme_spool_jobs_committed_total "));
    println!("spool: {commits} commits, {:.2} jobs each", jobs / commits.max(1.0));
    println!("RSS after the run: {:.1} MiB", rss_kib(p.child.id()) as f64 / 1024.0);
}

/// One keep-alive connection speaking just enough HTTP/1.1.
struct RawClient {
    stream: tokio::io::BufReader<tokio::net::TcpStream>,
}

impl RawClient {
    async fn connect(addr: &str) -> Self {
        let s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.set_nodelay(true).unwrap();
        RawClient { stream: tokio::io::BufReader::new(s) }
    }

    /// Sends a POST and reads the whole answer; returns the status.
    async fn post(&mut self, path: &str, token: &str, body: &str) -> u16 {
        use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        self.stream.get_mut().write_all(req.as_bytes()).await.unwrap();
        let mut line = String::new();
        self.stream.read_line(&mut line).await.unwrap();
        let status: u16 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        let mut len = 0;
        loop {
            line.clear();
            self.stream.read_line(&mut line).await.unwrap();
            if line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().unwrap();
            }
        }
        let mut buf = vec![0; len];
        self.stream.read_exact(&mut buf).await.unwrap();
        status
    }
}

async fn recall_bench(n: usize, queries: usize) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("memories.db");
    let vocab = vocabulary();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ n as u64);
    let tags = vec!["project:bench".to_string()];
    {
        let mut store = Store::open(&db).unwrap();
        let mut batch = Vec::with_capacity(1000);
        for i in 0..n {
            let len = 6 + (rng.next() % 20) as usize;
            let content = format!("{} #{i}", sentence(&mut rng, &vocab, len));
            batch.push(MemoryItem {
                tags: if i % 4 == 0 { vec![] } else { tags.clone() },
                kind: if i % 3 == 0 { MemoryType::Experience } else { MemoryType::World },
                ..MemoryItem::new(format!("m{i}"), content, "2026-01-01T00:00:00Z")
            });
            if batch.len() == 1000 {
                store.retain("mneme", &batch).unwrap();
                batch.clear();
            }
        }
        store.retain("mneme", &batch).unwrap();
    }
    let qs: Vec<String> = (0..queries)
        .map(|_| {
            let n = 2 + (rng.next() % 4) as usize;
            format!("how do {}?", sentence(&mut rng, &vocab, n))
        })
        .collect();
    let backend = Arc::new(LocalBackend::open(&LocalConfig::lexical(db.clone())).unwrap());
    let scope = Scope { bank: "mneme".into(), tags: tags.clone() };
    let query = |q: &str| RecallQuery {
        query: q.to_owned(),
        budget: Budget::Mid,
        max_tokens: 1024,
        types: vec![MemoryType::World, MemoryType::Experience],
        tags: tags.clone(),
        tags_match: TagsMatch::Any,
        deadline: None,
    };
    // Each method runs over every query in a pass of its own, after a warm-up pass: run
    // interleaved, whatever follows the all-terms query (which scans megabytes of postings at
    // 100k) would start with cold CPU caches and pay for it.
    let bare = Store::open(&db).unwrap();
    let mut stmt = bare
        .connection()
        .prepare("SELECT rowid, rank FROM passages_fts WHERE passages_fts MATCH ?1 ORDER BY rank LIMIT 100")
        .unwrap();
    let mut bare_query = |expr: &str| -> Duration {
        let t = Instant::now();
        let rows: Vec<(i64, f64)> =
            stmt.query_map([expr], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(Result::unwrap).collect();
        let took = t.elapsed();
        std::hint::black_box(rows);
        took
    };
    let all_terms: Vec<String> = qs.iter().filter_map(|q| mneme_local::fts::match_expression(q)).collect();
    let same_terms: Vec<String> = qs.iter().filter_map(|q| bare.ranking_expression(q).unwrap()).collect();
    let mut bare_lat = Vec::new();
    let mut same_lat = Vec::new();
    for (exprs, lat) in [(&all_terms, &mut bare_lat), (&same_terms, &mut same_lat)] {
        for e in exprs {
            bare_query(e);
        }
        lat.extend(exprs.iter().map(|e| bare_query(e)));
    }
    for q in &qs {
        backend.recall(&scope, &query(q)).await.unwrap();
    }
    let mut ours = Vec::new();
    let mut answers = Vec::new();
    for q in &qs {
        let t = Instant::now();
        let r = backend.recall(&scope, &query(q)).await.unwrap();
        ours.push(t.elapsed());
        answers.push(r);
    }
    let hits: usize = answers.iter().map(Vec::len).sum();
    // Ranking quality: how much of the full BM25 top 10 (every term, every match, same
    // filters) is in ours.
    let (mut agree, mut judged) = (0.0, 0usize);
    let types = ["world", "experience"];
    let filter =
        RecallFilter { bank: "mneme", tags: &tags, tags_match: TagsMatch::Any, types: &types, max_chars: usize::MAX };
    for (q, r) in qs.iter().zip(&answers) {
        let reference: Vec<String> =
            bare.recall_exhaustive(q, &filter).unwrap().into_iter().take(10).map(|r| r.text).collect();
        if !reference.is_empty() {
            let mine: Vec<&String> = r.iter().take(10).map(|r| &r.text).collect();
            agree += reference.iter().filter(|t| mine.contains(t)).count() as f64 / reference.len() as f64;
            judged += 1;
        }
    }
    same_lat.sort();
    bare_lat.sort();
    ours.sort();
    println!(
        "recall at {n} memories ({queries} queries, {:.1} results each): mneme-local p50 {} p99 {} | bare FTS5, all query terms: p50 {} p99 {} | bare FTS5, the terms mneme ranks on: p50 {} p99 {} | mneme p50 / bare all-terms p50 = {:.2}x, / bare same-terms p50 = {:.2}x",
        hits as f64 / queries as f64,
        ms(pct(&ours, 0.5)),
        ms(pct(&ours, 0.99)),
        ms(pct(&bare_lat, 0.5)),
        ms(pct(&bare_lat, 0.99)),
        ms(pct(&same_lat, 0.5)),
        ms(pct(&same_lat, 0.99)),
        pct(&ours, 0.5).as_secs_f64() / pct(&bare_lat, 0.5).as_secs_f64(),
        pct(&ours, 0.5).as_secs_f64() / pct(&same_lat, 0.5).as_secs_f64(),
    );
    println!(
        "  ranking: {:.0}% of the full BM25 top 10 (every query term, every match) is in mneme's top 10",
        agree * 100.0 / judged.max(1) as f64
    );
}
