//! A wall clock out of range, run through libfaketime (Debian's `faketime`, which `.ci/run`
//! installs): `date -s` takes a typo. hyper's Date header panics there on every answer: a
//! daemon started so answered nothing, and its CLI blamed another program on the port
//! (review63 #1). It now says what is wrong, and does not start.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

/// Where Debian's `faketime` package puts the library.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

#[test]
fn a_clock_before_1970_or_past_9999_is_said_at_the_start() {
    if !std::path::Path::new(LIBFAKETIME).exists() {
        assert!(
            std::env::var("CI").is_err(),
            "the clock test must run under CI: no {LIBFAKETIME} (apt-get install faketime)"
        );
        eprintln!("skipped: no {LIBFAKETIME} (apt-get install faketime)");
        return;
    }
    for (clock, said) in [("@1969-12-31 23:00:00", "before 1970"), ("+2930000d", "after the year 9999")] {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.toml");
        std::fs::write(&config, "[server]\nlisten = \"127.0.0.1:0\"\n").unwrap();
        let mut child = Command::new(common::bin())
            .args(["serve", "--config"])
            .arg(&config)
            .envs(common::env_for(dir.path()))
            .env("LD_PRELOAD", LIBFAKETIME)
            .env("FAKETIME", clock)
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        while child.try_wait().unwrap().is_none() {
            if started.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                panic!("a daemon whose clock reads {clock} did not stop");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(stderr.contains(&format!("the system clock reads a time {said}")), "{clock}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}
