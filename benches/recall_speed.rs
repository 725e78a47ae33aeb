//! `cargo bench --bench recall_speed`: the local store's semantic recall at 100k passages on this
//! machine — background embedding rate, recall latency (hybrid, including the query's
//! embedding, beside BM25 alone), the time to load 100k vectors, and the release daemon's start
//! time and idle RSS with the built-in model and with the embedder off.
//!
//! Texts are the coding-memory set's facts and distractors (real English, ~25 tokens), numbered
//! to make 100,000 distinct memories; the rate for transcript-sized passages (~700 characters)
//! is measured too. Embedding 100k passages takes this machine about a quarter of an hour, so
//! the rate is measured on the first few thousand and the other vectors are written directly
//! (random unit vectors under the built-in model's id: the scan costs the same whatever they
//! hold). Not a test: it reports numbers. `MNEME_BENCH_QUICK=1` uses 20k passages.

use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use mneme_core::*;
use mneme_local::store::Store;
use mneme_local::{LocalBackend, LocalConfig};

mod support;
use support::*;

const QUERIES: usize = 400;
/// Transcript-sized passages stored to measure their rate (more than 20 s of work).
const LONG_PASSAGES: usize = 2000;
/// Passages embedded for real to measure the rate.
const EMBED_SAMPLE: Duration = Duration::from_secs(40);

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let quick = std::env::var_os("MNEME_BENCH_QUICK").is_some();
    let n = if quick { 20_000 } else { 100_000 };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let set: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("benches/coding-set/coding-set.json")).unwrap())
            .unwrap();
    let mut texts: Vec<String> =
        set["facts"].as_array().unwrap().iter().map(|f| f["text"].as_str().unwrap().to_owned()).collect();
    texts.extend(set["distractors"].as_array().unwrap().iter().map(|d| d.as_str().unwrap().to_owned()));
    let questions: Vec<String> =
        set["questions"].as_array().unwrap().iter().map(|q| q["q"].as_str().unwrap().to_owned()).collect();

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let db = data.join("memories.db");
    fill(&db, &texts, n);
    println!("store: {n} memories, one passage each");

    rt.block_on(async {
        embedding_rate(&db, dir.path(), &texts).await;
        write_remaining_vectors(&db);
        latency(&db, &questions).await;
    });
    daemon_numbers(dir.path());
}

fn item(i: usize, content: String, session: &str) -> MemoryItem {
    MemoryItem::new(format!("m{i}"), content, "2026-01-01T00:00:00Z").in_session(session)
}

/// The store's memories belong to this many projects (a session's to one), as in a bank under
/// `per-project-tagged` scoping.
const PROJECTS: usize = 10;

fn fill(db: &Path, texts: &[String], n: usize) {
    let mut store = Store::open(db).unwrap();
    let mut batch = Vec::new();
    for i in 0..n {
        let t = &texts[i % texts.len()];
        let content = if i < texts.len() { t.clone() } else { format!("{t} (note {i})") };
        let mut memory = item(i, content, &format!("s{}", i / 50));
        memory.tags = vec![format!("project:p{}", i / 50 % PROJECTS)];
        batch.push(memory);
        if batch.len() == 1000 {
            store.retain("mneme", &batch).unwrap();
            batch.clear();
        }
    }
    store.retain("mneme", &batch).unwrap();
}

async fn wait_ready(backend: &LocalBackend) -> EmbeddingStatus {
    loop {
        let e = backend.embedding_status().await.unwrap();
        if e.state != "loading" {
            return e;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn embedding_rate(db: &Path, dir: &Path, texts: &[String]) {
    let backend = LocalBackend::open(&LocalConfig::new(db)).unwrap();
    let t = Instant::now();
    let e = wait_ready(&backend).await;
    println!("built-in model and {} stored vectors loaded in {} ms", e.embedded, t.elapsed().as_millis());
    let (t0, n0) = (Instant::now(), e.embedded);
    tokio::time::sleep(EMBED_SAMPLE).await;
    let e = backend.embedding_status().await.unwrap();
    let short = (e.embedded - n0) as f64 / t0.elapsed().as_secs_f64();
    drop(backend);
    // Transcript-sized passages: about 700 characters each, in their own store.
    let long_db = dir.join("long.db");
    let mut store = Store::open(&long_db).unwrap();
    let mut batch = Vec::new();
    let mut chunk = String::new();
    for (i, t) in texts.iter().enumerate() {
        chunk.push_str(t);
        chunk.push(' ');
        if chunk.len() >= 700 {
            batch.push(item(i, std::mem::take(&mut chunk), "long"));
        }
        if batch.len() == LONG_PASSAGES {
            break;
        }
    }
    store.retain("mneme", &batch).unwrap();
    drop(store);
    let backend = LocalBackend::open(&LocalConfig::new(&long_db)).unwrap();
    wait_ready(&backend).await;
    // Measured over 20 s, or until every passage has its vector: a rate is never capped by
    // running out of passages.
    let t0 = Instant::now();
    let long = loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let e = backend.embedding_status().await.unwrap();
        if e.embedded >= e.passages || t0.elapsed() >= Duration::from_secs(20) {
            break e.embedded as f64 / t0.elapsed().as_secs_f64();
        }
    };
    println!(
        "background embedding (built-in model, 2 cores, lowest priority): {short:.0} passages/s of ~25 tokens, {long:.0} passages/s of ~700 characters (~160 tokens)"
    );
}

/// Gives every passage without one a random unit vector under the built-in model's id.
fn write_remaining_vectors(db: &Path) {
    let store = Store::open(db).unwrap();
    let conn = store.connection();
    let model = mneme_embed::MiniLm::MODEL_ID;
    let pids: Vec<i64> = conn
        .prepare("SELECT pid FROM passages WHERE pid NOT IN (SELECT pid FROM passage_vectors)")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut rng = Rng(0x5eed);
    conn.execute_batch("BEGIN").unwrap();
    {
        let mut put = conn
            .prepare("INSERT INTO passage_vectors (pid, model, dim, scale, data) VALUES (?, ?, 384, ?, ?)")
            .unwrap();
        for pid in &pids {
            let mut v: Vec<f32> =
                (0..mneme_embed::MiniLm::DIM).map(|_| (rng.next() % 2001) as f32 / 1000.0 - 1.0).collect();
            mneme_embed::vector::normalize(&mut v);
            let q = mneme_embed::vector::quantize(&v);
            let bytes: Vec<u8> = q.q.iter().map(|x| *x as u8).collect();
            put.execute(rusqlite::params![pid, model, f64::from(q.scale), bytes]).unwrap();
        }
    }
    conn.execute_batch("COMMIT").unwrap();
    println!("{} more vectors written directly", pids.len());
}

async fn latency(db: &Path, questions: &[String]) {
    let scope = Scope { bank: "mneme".into(), tags: vec![] };
    let query = |q: &str, tags: &[String]| RecallQuery {
        query: q.to_owned(),
        budget: Budget::Mid,
        max_tokens: 1024,
        types: vec![],
        tags: tags.to_vec(),
        tags_match: TagsMatch::Any,
        deadline: None,
    };
    let one_project = ["project:p3".to_owned()];
    let qs: Vec<&String> = questions.iter().cycle().take(QUERIES).collect();
    for (name, config) in
        [("hybrid (built-in model)", LocalConfig::new(db)), ("BM25 only (embedder off)", LocalConfig::lexical(db))]
    {
        let backend = LocalBackend::open(&config).unwrap();
        if backend.embedding_status().await.is_some() {
            let t = Instant::now();
            let e = wait_ready(&backend).await;
            println!("{} vectors loaded, semantic recall ready {} ms after open", e.embedded, t.elapsed().as_millis());
            while backend.embedding_status().await.is_some_and(|e| e.banks_measuring > 0) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            println!("neighbourhoods measured {} ms after open", t.elapsed().as_millis());
        }
        for (filter, tags) in [("", &[][..]), (", in one of 10 projects", &one_project[..])] {
            for q in qs.iter().take(50) {
                backend.recall(&scope, &query(q, tags)).await.unwrap();
            }
            let mut lat = Vec::new();
            for q in &qs {
                let t = Instant::now();
                std::hint::black_box(backend.recall(&scope, &query(q, tags)).await.unwrap());
                lat.push(t.elapsed());
            }
            lat.sort();
            println!(
                "recall, {name}{filter}: p50 {} p99 {} ({QUERIES} queries)",
                ms(pct(&lat, 0.5)),
                ms(pct(&lat, 0.99))
            );
        }
    }
}

fn status(addr: &str, token: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET /v1/status HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn daemon_numbers(dir: &Path) {
    let off = dir.join("off.toml");
    std::fs::write(&off, "[local]\nembedder = \"off\"\n").unwrap();
    let empty = tempfile::tempdir().unwrap();
    for (store, label) in [(empty.path(), "empty store"), (dir, "100k passages")] {
        for (config, name) in [(None, "built-in model"), (Some(off.as_path()), "embedder off")] {
            let (proc, healthy) = spawn_daemon(store, config);
            let t = Instant::now();
            if config.is_none() {
                while !status(&proc.addr, &proc.token).contains("\"state\":\"ready\"") {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            let ready = t.elapsed() + healthy;
            if config.is_none() {
                // Idle means after the neighbourhoods are measured too (the embedding thread's last work).
                while !status(&proc.addr, &proc.token).contains("\"banks_measuring\":0") {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            let measured = t.elapsed() + healthy;
            std::thread::sleep(Duration::from_secs(3));
            let rss = rss_kib(proc.child.id());
            let semantic = if config.is_none() {
                format!(
                    ", semantic recall ready after {} ms, neighbourhoods measured after {} ms",
                    ready.as_millis(),
                    measured.as_millis()
                )
            } else {
                String::new()
            };
            println!(
                "daemon, {label}, {name}: healthy after {} ms{semantic}; idle RSS {:.1} MiB",
                healthy.as_millis(),
                rss as f64 / 1024.0
            );
        }
    }
}
