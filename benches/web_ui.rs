//! `cargo bench --bench web_ui`: the web view at 100,000 memories (`MNEME_BENCH_UI_MEMORIES`
//! sets another count) — its routes' latency and, in Chromium headless, the time to a full list
//! of 50 and the bytes transferred. Runs `tests/ui/render_bench.py` with the release daemon in a
//! loopback-only network namespace; needs root, `chromium` and `chromedriver`. Not a test: it
//! reports numbers and asserts nothing.

use std::path::Path;
use std::process::Command;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` probes with --list
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("web_ui bench skipped: not root (the browser runs in its own network namespace)");
        return;
    }
    let n = std::env::var("MNEME_BENCH_UI_MEMORIES").unwrap_or_else(|_| "100000".into());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = tempfile::tempdir().unwrap();
    let status = Command::new("bash")
        .arg(root.join("tests/clients/netns.sh"))
        .arg(root.join("tests/ui/render-bench.sh"))
        .arg(out.path().join("run"))
        .arg(&n)
        .env("MNEME_BIN", env!("CARGO_BIN_EXE_mneme"))
        .status()
        .expect("run the web view bench");
    if !status.success() {
        eprintln!("web_ui bench failed: {status}");
        std::process::exit(1);
    }
}
