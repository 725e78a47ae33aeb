//! What the benchmarks share: a release daemon process, its RSS, file descriptors and CPU, a
//! deterministic PRNG with made-up words, and percentiles.
#![allow(dead_code)] // not every bench uses every helper

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../../tests/common/spawn.rs"]
mod spawn;

/// A running `mneme serve`, killed on drop.
pub struct Proc {
    pub child: Child,
    pub addr: String,
    pub token: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.child.id().to_string()).status();
        let _ = self.child.wait();
    }
}

/// Starts the release daemon on 127.0.0.1:0 with its data in `dir/data` and the config file
/// `config` (`None`: defaults), and waits until `/v1/health` answers; returns it and how long
/// that took.
// The child is owned by the returned `Proc`, whose Drop kills and waits for it.
#[allow(clippy::zombie_processes)]
pub fn spawn_daemon(dir: &Path, config: Option<&Path>) -> (Proc, Duration) {
    let started = Instant::now();
    let none = dir.join("none.toml");
    // `MNEME_BENCH_BIN` runs another build (say, the last commit's) for alternating A/B runs.
    let bin = std::env::var_os("MNEME_BENCH_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_mneme").into());
    let child = Command::new(bin)
        .arg("serve")
        .env("MNEME_CONFIG", config.unwrap_or(&none))
        .env("MNEME_STORAGE__DIR", dir.join("data"))
        .env("MNEME_SERVER__LISTEN", "127.0.0.1:0")
        .env("MNEME_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let pid_path = dir.join("data/mneme.pid");
    loop {
        if let Some(addr) = spawn::recorded_addr(&pid_path, child.id()) {
            // Healthy = the health route answers.
            let mut buf = [0u8; 512];
            if let Ok(mut s) = std::net::TcpStream::connect(&addr) {
                use std::io::{Read, Write};
                let _ = s.write_all(b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
                if s.read(&mut buf).is_ok_and(|n| n > 12 && buf.starts_with(b"HTTP/1.1 200")) {
                    let took = started.elapsed();
                    let token = std::fs::read_to_string(dir.join("data/token")).unwrap().trim().to_owned();
                    return (Proc { child, addr, token }, took);
                }
            }
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// Resident memory of a process, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Open file descriptors of a process.
pub fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

/// utime + stime of a process, in clock ticks (1/100 s on Linux).
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = after.split_whitespace().collect();
    fields.get(11).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
        + fields.get(12).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0)
}

/// The `p` quantile of sorted durations.
pub fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Milliseconds with three decimals.
pub fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

/// A small deterministic PRNG (xorshift64*), so every run uses the same data and queries.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// A content word: rank drawn with density ~1/rank over the vocabulary past its 50 most
    /// common words (those play the role of English stopwords), so the commonest content word is
    /// in a few percent of memories, as in real notes.
    pub fn word(&mut self, vocab: &[String]) -> String {
        let u = (self.next() % 1_000_000) as f64 / 1_000_000.0;
        let span = vocab.len() as f64 / 50.0;
        let rank = (50.0 * span.powf(u)) as usize;
        vocab[rank.min(vocab.len() - 1)].clone()
    }
    pub fn stopword(&mut self) -> &'static str {
        const WORDS: [&str; 12] = ["the", "a", "to", "of", "and", "in", "is", "for", "we", "it", "on", "with"];
        WORDS[(self.next() % WORDS.len() as u64) as usize]
    }
}

/// 40,000 distinct made-up words.
pub fn vocabulary() -> Vec<String> {
    let syll = [
        "ka", "lo", "mi", "ne", "ru", "ta", "vo", "shi", "pre", "dex", "ton", "bar", "qui", "zen", "fal", "gor", "wip",
        "hus", "jen", "yax",
    ];
    let mut v = Vec::new();
    for a in syll {
        for b in syll {
            for c in syll {
                for d in ["", "er", "ing", "s", "al"] {
                    v.push(format!("{a}{b}{c}{d}"));
                }
            }
        }
    }
    v
}

/// A memory-like sentence: content words with stopwords between them.
pub fn sentence(rng: &mut Rng, vocab: &[String], words: usize) -> String {
    let mut out = Vec::with_capacity(words * 2);
    for _ in 0..words {
        if rng.next().is_multiple_of(3) {
            out.push(rng.stopword().to_owned());
        }
        out.push(rng.word(vocab));
    }
    out.join(" ")
}
