//! A real daemon process on 127.0.0.1:0 with a temporary storage dir, and an HTTP client for it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

mod spawn;

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
        Self::serve(dir, &config, env, log)
    }

    /// Starts a daemon on `dir` whose config file is `config` (which need not exist).
    pub fn serve(dir: tempfile::TempDir, config: &Path, env: &[(&str, &str)], log: Option<&Path>) -> Daemon {
        let mut child = Command::new(bin())
            .args(["serve", "--config"])
            .arg(config)
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
        let addr = spawn::wait_for_addr(&mut child, &pid_path, Duration::from_secs(20), Duration::from_millis(20));
        let token = std::fs::read_to_string(dir.path().join("data/token")).unwrap().trim().to_owned();
        // The daemon closes a keep-alive connection idle for server.header_timeout (10 s): the
        // client lets go of it first, so a request never races that close.
        let http =
            reqwest::Client::builder().no_proxy().pool_idle_timeout(std::time::Duration::from_secs(5)).build().unwrap();
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

    /// The CLI as a plain process, for a test that sets its standard streams itself.
    pub fn command(&self) -> std::process::Command {
        let mut c = std::process::Command::new(bin());
        c.env("MNEME_CONFIG", self.config_path()).envs(env_for(self.dir.path()));
        c
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

/// Sends `signal` (TERM, KILL, STOP, CONT, INT, HUP) to a process, failing the test if it cannot be sent
/// (kill(2) directly: a minimal Debian has no kill(1), and a signal never sent would leave
/// `stop` waiting for ever).
pub fn unsafe_kill(pid: u32, signal: &str) {
    let number = match signal {
        "TERM" => libc::SIGTERM,
        "KILL" => libc::SIGKILL,
        "STOP" => libc::SIGSTOP,
        "CONT" => libc::SIGCONT,
        "INT" => libc::SIGINT,
        "HUP" => libc::SIGHUP,
        other => panic!("no signal {other} here"),
    };
    let pid = i32::try_from(pid).expect("a pid");
    // SAFETY: kill(2) takes no pointers; the pid is a child this test started.
    let sent = unsafe { libc::kill(pid, number) };
    assert_eq!(sent, 0, "kill -{signal} {pid}: {}", std::io::Error::last_os_error());
}

/// Counts rows with this content in the local store (read directly from SQLite).
pub fn stored_count(db: &Path, content: &str) -> i64 {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row("SELECT count(*) FROM memories WHERE content = ?", [content], |r| r.get(0)).unwrap()
}

// The Hindsight peer helpers are shared with the backend crate's own tests.
#[path = "../../backends/hindsight/tests/common.rs"]
mod peer;

// Not every test binary uses every helper.
#[allow(unused_imports)]
pub use peer::{chunk_bank, fresh_bank as fresh, peer_url as hindsight_peer, wait_for_document};

/// Every memory text in a Hindsight bank, sorted.
pub async fn bank_texts(url: &str, bank: &str) -> Vec<String> {
    let mut texts = peer::list_texts(url, bank).await;
    texts.sort();
    texts
}

/// Waits until a bank lists `n` memories (async retains land in the background), then a moment
/// more so a duplicate would show; sorted.
pub async fn wait_bank(url: &str, bank: &str, n: usize) -> Vec<String> {
    let mut texts = peer::wait_for_count(url, bank, n).await;
    texts.sort();
    texts
}

/// An address that refuses connections, kept for the test while `RefusingPort` lives: bound and
/// never listening. (The port of a listener bound and dropped at once was free for another
/// test's server to take: a "refused" Hindsight once answered as a keyed one.)
pub struct RefusingPort {
    _socket: tokio::net::TcpSocket,
    pub addr: std::net::SocketAddr,
}

pub fn refusing_port() -> RefusingPort {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(std::net::SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let addr = socket.local_addr().unwrap();
    RefusingPort { _socket: socket, addr }
}

/// An address that takes connections and never answers (a hung daemon or server), kept open
/// while the test runs.
pub async fn never_answering() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    addr
}
