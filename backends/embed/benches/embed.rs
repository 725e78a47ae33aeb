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
    println!(
        "load: {:?} ({threads} threads for batches; kernel: {})",
        t.elapsed(),
        mneme_embed::kernel::Kernel::best().name()
    );
    breakdown(&model);
    kernels();
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
        // Five batches: the VM's speed drifts, and one batch can meet a stolen core.
        let runs: Vec<Duration> = (0..5)
            .map(|_| {
                let t = Instant::now();
                model.embed(&batch).unwrap();
                t.elapsed()
            })
            .collect();
        let rate = |d: Duration| 32.0 / d.as_secs_f64();
        let (slowest, fastest) = (runs.iter().max().unwrap(), runs.iter().min().unwrap());
        let took = median(runs.clone());
        println!(
            "passages of {} tokens, batches of 32: median {:.1} passages/s ({:.1} ms each; 5 batches {:.1}-{:.1}/s)",
            model.token_ids(&text).unwrap().len().min(256),
            rate(took),
            took.as_secs_f64() * 1000.0 / 32.0,
            rate(*slowest),
            rate(*fastest)
        );
    }
}

/// Each integer kernel this processor runs, alone on one thread, on the shapes of a 164-token
/// passage's feed-forward products and of a query's: the best of 20 rounds (a kernel's time is
/// steady; the VM's drift is not).
fn kernels() {
    use mneme_embed::kernel::{linear_q8_on, Kernel, Product};
    for (n, k, outs) in [(164, 384, 1536), (164, 1536, 384), (11, 384, 384)] {
        let x: Vec<f32> = (0..n * k).map(|i| ((i * 31 % 17) as f32 - 8.0) / 8.0).collect();
        let q: Vec<u8> = (0..outs * k).map(|i| ((i * 7 % 255) as i32 - 127) as i8 as u8).collect();
        let scales = vec![0.01f32; outs];
        let b = vec![0f32; outs];
        let mut out = vec![0f32; n * outs];
        let product = Product { x: &x, q: &q, scales: &scales, b: &b, n, k, outs };
        let rates: Vec<String> = Kernel::available()
            .into_iter()
            .filter(|kernel| *kernel != Kernel::Portable)
            .map(|kernel| {
                let best = (0..20)
                    .map(|_| {
                        let t = Instant::now();
                        for _ in 0..5 {
                            linear_q8_on(kernel, &product, &mut out, 1);
                        }
                        t.elapsed() / 5
                    })
                    .min()
                    .unwrap();
                let macs = (n * k * outs) as f64 / best.as_secs_f64() / 1e9;
                format!("{} {:.0} µs ({macs:.0} G multiply-adds/s)", kernel.name(), best.as_secs_f64() * 1e6)
            })
            .collect();
        println!("kernel, {n} tokens × {k} → {outs}, one thread: {}", rates.join(", "));
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
