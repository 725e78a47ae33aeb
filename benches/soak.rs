//! `cargo bench --bench soak`: ten minutes of mixed traffic against the release daemon, to show
//! that nothing grows or slows down over time (no leaks of memory, file descriptors or time).
//!
//! Eight clients, each with its own session and keep-alive connection, send one request every
//! 25 ms (320 requests/s in all): 70% retains, 25% recalls, 5% flushes of their session. Most
//! retains repeat facts from a pool that is stored before the soak starts (the daemon does the
//! same work — spool, delivery, the store's duplicate check — without the store growing much),
//! one in a hundred is new. After a warm-up (30 s, or a tenth of a short run; caches fill, the reader pool
//! opens its connections), the report compares the first and the last minute: RSS, open file
//! descriptors, retain and recall p99, and the store's size.
//!
//! Not a test: it reports numbers and asserts nothing. `MNEME_SOAK_SECS` sets the length
//! (default 600; the windows are a tenth of it, at most a minute).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod support;
use support::*;

const CLIENTS: usize = 8;
const PERIOD: Duration = Duration::from_millis(25);
const POOL: usize = 20_000;

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Retain,
    Recall,
    Flush,
}

/// What one request took, and when it started (seconds into the soak).
struct Sample {
    at: f64,
    kind: Kind,
    took: Duration,
}

/// Process numbers at a moment of the soak.
struct Probe {
    at: f64,
    rss_kib: u64,
    fds: usize,
    memories: u64,
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` probes with --list
    }
    let secs: u64 = std::env::var("MNEME_SOAK_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(600);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(soak(Duration::from_secs(secs)));
}

fn pool_fact(rng: &mut Rng, vocab: &[String], i: usize) -> String {
    format!("fact {i}: {}", sentence(rng, vocab, 14))
}

async fn soak(length: Duration) {
    let dir = tempfile::tempdir().unwrap();
    // MNEME_SOAK_EMBEDDER=off|builtin (default: the shipped default, builtin); `unset` writes no
    // [local] section, for A/B runs against builds older than `local.embedder` (MNEME_BENCH_BIN).
    let config = dir.path().join("soak.toml");
    let embedder = std::env::var("MNEME_SOAK_EMBEDDER").unwrap_or_else(|_| "builtin".into());
    let section = if embedder == "unset" { String::new() } else { format!("[local]\nembedder = \"{embedder}\"\n") };
    std::fs::write(&config, section).unwrap();
    let (p, _) = spawn_daemon(dir.path(), Some(&config));
    let pid = p.child.id();
    let base = format!("http://{}", p.addr);
    let http = reqwest::Client::builder().no_proxy().pool_max_idle_per_host(CLIENTS + 2).build().unwrap();
    let vocab = vocabulary();
    let mut rng = Rng(0x5eed);
    let pool: Arc<Vec<String>> = Arc::new((0..POOL).map(|i| pool_fact(&mut rng, &vocab, i)).collect());
    for c in 0..CLIENTS {
        http.post(format!("{base}/v1/sessions"))
            .bearer_auth(&p.token)
            .json(&json!({"session_id": format!("soak-{c}"), "cwd": "/soak/project"}))
            .send()
            .await
            .unwrap();
    }
    // Store the pool first (through the API, 100 items a request).
    for chunk in pool.chunks(100) {
        let items: Vec<Value> = chunk.iter().map(|c| json!({"content": c})).collect();
        let r = http
            .post(format!("{base}/v1/sessions/soak-0/retain"))
            .bearer_auth(&p.token)
            .json(&json!({"items": items}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202);
    }
    http.post(format!("{base}/v1/flush")).bearer_auth(&p.token).send().await.unwrap();
    // The pool's vectors first: the soak measures steady state, not the backfill.
    let started = Instant::now();
    loop {
        let st: Value =
            http.get(format!("{base}/v1/status")).bearer_auth(&p.token).send().await.unwrap().json().await.unwrap();
        let e = &st["backend"]["embedding"];
        if e.is_null() || (e["state"] == "ready" && e["embedded"] == e["passages"]) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!("embedder {embedder}: the pool embedded in {:.0} s", started.elapsed().as_secs_f64());
    let memories = |http: reqwest::Client, base: String, token: String| async move {
        let st: Value =
            http.get(format!("{base}/v1/status")).bearer_auth(&token).send().await.unwrap().json().await.unwrap();
        st["backend"]["memories"].as_u64().unwrap_or(0)
    };
    println!(
        "soak: {} s, {CLIENTS} clients, one request each every {PERIOD:?}; pool of {POOL} facts stored ({} memories)",
        length.as_secs(),
        memories(http.clone(), base.clone(), p.token.clone()).await
    );

    let samples = Arc::new(Mutex::new(Vec::<Sample>::new()));
    let warmup = Duration::from_secs(30).min(length / 10);
    // Sample times count from the end of the warm-up (negative during it).
    let start = Instant::now() + warmup;
    let end = start + length;
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let (http, base, token, pool, samples, vocab) =
            (http.clone(), base.clone(), p.token.clone(), pool.clone(), samples.clone(), vocab.clone());
        clients.push(tokio::spawn(async move {
            let mut rng = Rng(0xc0ffee + c as u64);
            let mut tick = tokio::time::interval(PERIOD);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut n = 0usize;
            while Instant::now() < end {
                tick.tick().await;
                n += 1;
                let roll = rng.next() % 100;
                let (kind, req) = if roll < 70 {
                    let content = if rng.next().is_multiple_of(100) {
                        format!("new fact from client {c} number {n}: {}", sentence(&mut rng, &vocab, 12))
                    } else {
                        pool[(rng.next() % POOL as u64) as usize].clone()
                    };
                    let body = json!({"items": [{"content": content}]});
                    (Kind::Retain, http.post(format!("{base}/v1/sessions/soak-{c}/retain")).json(&body))
                } else if roll < 95 {
                    let query = format!("{} {} {}", rng.word(&vocab), rng.word(&vocab), rng.word(&vocab));
                    (
                        Kind::Recall,
                        http.post(format!("{base}/v1/sessions/soak-{c}/recall")).json(&json!({"query": query})),
                    )
                } else {
                    (
                        Kind::Flush,
                        http.post(format!("{base}/v1/flush")).json(&json!({"session_id": format!("soak-{c}")})),
                    )
                };
                let at = secs_since(start);
                let t = Instant::now();
                let r = req.bearer_auth(&token).send().await.unwrap();
                let ok = r.status().is_success();
                let _ = r.bytes().await;
                assert!(ok, "request failed");
                samples.lock().unwrap().push(Sample { at, kind, took: t.elapsed() });
            }
        }));
    }
    let mut probes = Vec::new();
    while Instant::now() < end {
        probes.push(Probe {
            at: secs_since(start),
            rss_kib: rss_kib(pid),
            fds: open_fds(pid),
            memories: memories(http.clone(), base.clone(), p.token.clone()).await,
        });
        tokio::time::sleep(Duration::from_secs(5).min(length / 20)).await;
    }
    for c in clients {
        c.await.unwrap();
    }
    probes.push(Probe {
        at: secs_since(start),
        rss_kib: rss_kib(pid),
        fds: open_fds(pid),
        memories: memories(http.clone(), base.clone(), p.token.clone()).await,
    });

    let total = length.as_secs_f64();
    let window = (total / 10.0).min(60.0);
    let samples = samples.lock().unwrap();
    let p99 = |from: f64, to: f64, kind: Kind| {
        let mut v: Vec<Duration> =
            samples.iter().filter(|s| s.kind == kind && s.at >= from && s.at < to).map(|s| s.took).collect();
        v.sort();
        (pct(&v, 0.99), v.len())
    };
    let probe_avg = |from: f64, to: f64| {
        let ps: Vec<&Probe> = probes.iter().filter(|p| p.at >= from && p.at <= to).collect();
        let n = ps.len().max(1) as f64;
        (
            ps.iter().map(|p| p.rss_kib as f64).sum::<f64>() / n / 1024.0,
            ps.iter().map(|p| p.fds as f64).sum::<f64>() / n,
            ps.last().map_or(0, |p| p.memories),
        )
    };
    let (first, last) = ((0.0, window), (total - window, total + 1.0));
    let (rss0, fds0, mem0) = probe_avg(first.0, first.1);
    let (rss1, fds1, mem1) = probe_avg(last.0, last.1);
    let (r0, rn0) = p99(first.0, first.1, Kind::Retain);
    let (r1, rn1) = p99(last.0, last.1, Kind::Retain);
    let (q0, qn0) = p99(first.0, first.1, Kind::Recall);
    let (q1, qn1) = p99(last.0, last.1, Kind::Recall);
    let change = |a: f64, b: f64| if a > 0.0 { format!("{:+.1}%", (b - a) / a * 100.0) } else { "-".into() };
    let measured = samples.iter().filter(|s| s.at >= 0.0).count();
    println!(
        "after a {} s warm-up: {measured} requests in {total:.0} s ({:.0}/s)",
        warmup.as_secs(),
        measured as f64 / total
    );
    println!("| | first {window:.0} s | last {window:.0} s | change |");
    println!("|---|---|---|---|");
    println!("| RSS | {rss0:.1} MiB | {rss1:.1} MiB | {} |", change(rss0, rss1));
    println!("| open fds | {fds0:.1} | {fds1:.1} | {} |", change(fds0, fds1));
    println!(
        "| retain p99 | {} ({rn0}) | {} ({rn1}) | {} |",
        ms(r0),
        ms(r1),
        change(r0.as_secs_f64(), r1.as_secs_f64())
    );
    println!(
        "| recall p99 | {} ({qn0}) | {} ({qn1}) | {} |",
        ms(q0),
        ms(q1),
        change(q0.as_secs_f64(), q1.as_secs_f64())
    );
    println!("| memories stored | {mem0} | {mem1} | {} |", change(mem0 as f64, mem1 as f64));
    // The trend, a point a minute (a leak climbs; caches level off).
    let mut trend = Vec::new();
    let mut next = 0.0;
    for p in probes.iter().filter(|p| p.at >= 0.0) {
        if p.at >= next {
            trend.push(format!("{:.0}s {:.1}MiB", p.at, p.rss_kib as f64 / 1024.0));
            next += (total / 10.0).max(1.0);
        }
    }
    println!("RSS over the soak: {}", trend.join(", "));
    let peak = probes.iter().map(|p| p.rss_kib).max().unwrap_or(0);
    println!(
        "peak RSS {:.1} MiB; fds min/max {}/{}",
        peak as f64 / 1024.0,
        probes.iter().map(|p| p.fds).min().unwrap_or(0),
        probes.iter().map(|p| p.fds).max().unwrap_or(0)
    );
}

/// Seconds from `t` to now; negative before `t`.
fn secs_since(t: Instant) -> f64 {
    let now = Instant::now();
    if now >= t {
        (now - t).as_secs_f64()
    } else {
        -(t - now).as_secs_f64()
    }
}
