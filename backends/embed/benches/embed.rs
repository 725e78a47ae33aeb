//! `cargo bench -p mneme-embed`: the built-in model's cost on this machine — load time, a short
//! query, and batches of passages of typical lengths. Reports numbers, asserts nothing.

use std::time::{Duration, Instant};

use mneme_embed::{Embedder, MiniLm};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let t = Instant::now();
    let model = MiniLm::load(threads).unwrap();
    println!("load: {:?} ({threads} threads for batches)", t.elapsed());
    breakdown(&model);
    if std::env::var_os("MNEME_EMBED_PROFILE_QUERY").is_some() {
        let ids = model.token_ids("how do we ship a release to production?").unwrap();
        for _ in 0..500 {
            model.embed_ids(&ids, 1);
        }
        return;
    }
    let query = "how do we ship a release to production?";
    let ids = model.token_ids(query).unwrap();
    let runs: Vec<Duration> = (0..50)
        .map(|_| {
            let t = Instant::now();
            model.embed(&[query]).unwrap();
            t.elapsed()
        })
        .collect();
    println!("query ({} tokens): median {:?}", ids.len(), median(runs));
    let words = "the deploy pipeline builds the release artifacts then uploads them to the staging bucket and waits";
    for target in [32usize, 64, 128, 160, 256] {
        let mut text = String::new();
        while model.token_ids(&text).unwrap().len() < target {
            text.push_str(words);
            text.push(' ');
        }
        let batch: Vec<&str> = vec![text.as_str(); 32];
        let t = Instant::now();
        model.embed(&batch).unwrap();
        let took = t.elapsed();
        println!(
            "passages of {} tokens, batch of 32: {:.1} passages/s ({:.1} ms each)",
            model.token_ids(&text).unwrap().len().min(256),
            32.0 / took.as_secs_f64(),
            took.as_secs_f64() * 1000.0 / 32.0
        );
    }
}

fn breakdown(model: &MiniLm) {
    let query = "how do we ship a release to production?";
    let t = Instant::now();
    for _ in 0..50 {
        model.token_ids(query).unwrap();
    }
    println!("tokenize: {:?}", t.elapsed() / 50);
    let ids = model.token_ids(query).unwrap();
    for threads in [1, 2] {
        let t = Instant::now();
        for _ in 0..50 {
            model.embed_ids(&ids, threads);
        }
        println!("forward, {threads} threads: {:?}", t.elapsed() / 50);
    }
}
