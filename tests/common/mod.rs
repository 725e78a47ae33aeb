//! A real daemon process on 127.0.0.1:0 with a temporary storage dir, and an HTTP client for it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// A running `mneme serve`.
pub struct Daemon {
    pub dir: tempfile::TempDir,
    pub child: Option<Child>,
    pub addr: String,
    pub token: String,
    pub http: reqwest::Client,
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_mneme")
}

impl Daemon {
    /// Starts a daemon with `extra` appended to a config that binds 127.0.0.1:0 in a temp dir.
    pub fn start(extra: &str) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        Self::start_in(dir, extra)
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("config.toml")
    }

    pub fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Starts a daemon on an existing dir (a restart keeps the data).
    pub fn start_in(dir: tempfile::TempDir, extra: &str) -> Daemon {
        Self::start_with_env(dir, extra, &[])
    }

    /// Like [`Daemon::start_in`], with extra environment variables for the daemon process.
    pub fn start_with_env(dir: tempfile::TempDir, extra: &str, env: &[(&str, &str)]) -> Daemon {
        Self::start_logged(dir, extra, env, None)
    }

    /// Like [`Daemon::start_with_env`], with the daemon's stderr written to `log`.
    pub fn start_logged(dir: tempfile::TempDir, extra: &str, env: &[(&str, &str)], log: Option<&Path>) -> Daemon {
        let config = dir.path().join("config.toml");
        if !config.exists() || !extra.is_empty() {
            std::fs::write(&config, extra).unwrap();
        }
        let mut child = Command::new(bin())
            .args(["serve", "--config"])
            .arg(&config)
            .envs(env_for(dir.path()))
            .env("MNEME_LOG", "error")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(match log {
                Some(path) => Stdio::from(std::fs::File::create(path).unwrap()),
                None => Stdio::inherit(),
            })
            .spawn()
            .expect("spawn mneme serve");
        let pid_path = dir.path().join("data/mneme.pid");
        let deadline = Instant::now() + Duration::from_secs(20);
        let addr = loop {
            if let Some(addr) = std::fs::read_to_string(&pid_path).ok().and_then(|t| {
                let mut lines = t.lines();
                let pid: u32 = lines.next()?.trim().parse().ok()?;
                (pid == child.id()).then(|| lines.next().map(str::to_owned)).flatten()
            }) {
                break addr;
            }
            assert!(Instant::now() < deadline, "daemon did not start");
            if let Ok(Some(status)) = child.try_wait() {
                panic!("daemon exited at start: {status}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let token = std::fs::read_to_string(dir.path().join("data/token")).unwrap().trim().to_owned();
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        Daemon { dir, child: Some(child), addr, token, http }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// An authorised request; returns (status, JSON body or Null).
    pub async fn req(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut r = self.http.request(method, self.url(path)).bearer_auth(&self.token);
        if let Some(b) = body {
            r = r.json(&b);
        }
        let resp = r.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.req(reqwest::Method::POST, path, Some(body)).await
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.req(reqwest::Method::GET, path, None).await
    }

    pub async fn start_session(&self, id: &str, cwd: &str) -> Value {
        let (status, v) = self.post("/v1/sessions", json!({"session_id": id, "cwd": cwd})).await;
        assert_eq!(status, 200, "{v}");
        v
    }

    /// SIGTERM and wait.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        unsafe_kill(child.id(), "TERM");
        child.wait().unwrap()
    }

    /// SIGKILL and wait.
    pub fn kill(&mut self) {
        let mut child = self.child.take().expect("running");
        unsafe_kill(child.id(), "KILL");
        let _ = child.wait();
    }

    /// Stops the process and hands back its directory (for a restart).
    pub fn into_dir(mut self) -> tempfile::TempDir {
        if self.child.is_some() {
            self.stop();
        }
        std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap())
    }

    /// A CLI command against this daemon.
    pub fn cli(&self) -> assert_cmd::Command {
        let mut c = assert_cmd::Command::new(bin());
        c.env("MNEME_CONFIG", self.config_path()).env("MNEME_LOG", "error").envs(env_for(self.dir.path()));
        c
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Where a test daemon listens and keeps its data: set from the environment so the config file
/// holds only what a test adds.
pub fn env_for(dir: &Path) -> Vec<(String, String)> {
    vec![
        ("MNEME_SERVER__LISTEN".into(), "127.0.0.1:0".into()),
        ("MNEME_STORAGE__DIR".into(), dir.join("data").display().to_string()),
    ]
}

fn unsafe_kill(pid: u32, signal: &str) {
    let _ = Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status();
}

/// Counts rows with this content in the local store (read directly from SQLite).
pub fn stored_count(db: &Path, content: &str) -> i64 {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row("SELECT count(*) FROM memories WHERE content = ?", [content], |r| r.get(0)).unwrap()
}

/// The Hindsight peer's URL (`MNEME_HINDSIGHT_URL`). Outside CI a missing peer skips the test
/// with a message; under `CI=true` it fails, so a run without the peer cannot pass silently.
pub fn hindsight_peer() -> Option<String> {
    match std::env::var("MNEME_HINDSIGHT_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ if std::env::var("CI").is_ok_and(|v| v == "true") => panic!("MNEME_HINDSIGHT_URL is not set in CI"),
        _ => {
            eprintln!("skipping: set MNEME_HINDSIGHT_URL to a running Hindsight peer (see .ci/run)");
            None
        }
    }
}

/// A name no other test run uses.
pub fn fresh(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("{prefix}-{nanos:x}")
}

/// Creates a Hindsight bank that stores content as chunks (the mock LLM would otherwise split it).
pub async fn chunk_bank(url: &str, bank: &str) {
    let r = reqwest::Client::new()
        .put(format!("{url}/v1/default/banks/{bank}"))
        .json(&serde_json::json!({"retain_extraction_mode": "chunks", "enable_observations": false}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
}

/// Every memory text in a Hindsight bank, sorted.
pub async fn bank_texts(url: &str, bank: &str) -> Vec<String> {
    let v: Value = reqwest::get(format!("{url}/v1/default/banks/{bank}/memories/list?limit=1000"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut t: Vec<String> = v["items"]
        .as_array()
        .map(|a| a.iter().map(|i| i["text"].as_str().unwrap_or("").to_owned()).collect())
        .unwrap_or_default();
    t.sort();
    t
}

/// Waits until a bank lists `n` memories (async retains land in the background), then a moment
/// more so a duplicate would show.
pub async fn wait_bank(url: &str, bank: &str, n: usize) -> Vec<String> {
    for _ in 0..120 {
        if bank_texts(url, bank).await.len() >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    bank_texts(url, bank).await
}
