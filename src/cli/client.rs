//! The CLI's HTTP client for the daemon: finds it (config + pidfile), reads the token, checks the
//! protocol version, and turns failures into one clear line.

use std::path::Path;
use std::time::Duration;

use reqwest::Method;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::config::Settings;
use crate::daemon::api::{ErrorAnswer, Health, PROTOCOL};

use super::CliError;

/// How long the daemon has to answer its health check: it does no work.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a request may wait for the daemon's next bytes.
const READ_TIMEOUT: Duration = Duration::from_secs(120);

/// How long a command waits for a token the daemon is lending to a storage dir edited a moment
/// ago (its config watcher's debounce, and the reload after it).
const LENT_TOKEN_WAIT: Duration = Duration::from_secs(3);

/// A connection to a running daemon.
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
    /// `server.max_body_bytes`: a longer request is refused here, with the key that bounds it
    /// (sent, the daemon answers 413 before reading it and the write fails half-way).
    max_body: usize,
    /// The daemon's [`Health::max_import_bytes`] (`max_body` from a daemon before).
    max_import: usize,
    /// The daemon's [`Health::session_format`].
    session_format: u32,
    /// The proof of [`Client::connect`] has not been relied on yet: the first request needs
    /// no other (see [`Client::prove_again`]).
    fresh: std::sync::atomic::AtomicBool,
}

/// The address a running daemon recorded in its pidfile (second line), if any.
pub fn recorded_addr(pid_path: &Path) -> Option<String> {
    pidfile_line(pid_path, 1)
}

/// The pid of a daemon that holds the pidfile's lock (first line), if one does: it may not
/// answer (stopped, or wedged).
pub fn locked_pid(pid_path: &Path) -> Option<u32> {
    // A regular file only: a FIFO would wait for a writer (opened without waiting, to be told).
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(pid_path)
        .ok()
        .filter(|f| f.metadata().is_ok_and(|m| m.is_file()))?;
    // Shared: two commands looking at once do not take each other for a daemon.
    match file.try_lock_shared() {
        // Nobody holds it: no daemon (the lock goes with the file when it is dropped).
        Ok(()) | Err(std::fs::TryLockError::Error(_)) => None,
        Err(std::fs::TryLockError::WouldBlock) => pidfile_line(pid_path, 0)?.parse().ok(),
    }
}

fn pidfile_line(pid_path: &Path, n: usize) -> Option<String> {
    let text = crate::files::read_regular(pid_path).ok()?;
    text.lines().nth(n).map(str::trim).filter(|l| !l.is_empty()).map(str::to_owned)
}

impl Client {
    /// The largest request body the daemon takes (its own word; the config's from a daemon
    /// before it said).
    pub fn max_body(&self) -> usize {
        self.max_body
    }

    /// The longest import request the daemon takes ([`crate::daemon::IMPORT_ROOM`] more, but
    /// from a daemon before, which takes `max_body` there too).
    pub fn max_import_body(&self) -> usize {
        self.max_import
    }

    /// Whether the daemon counts a custom slash command the hooks keep as a turn (one started
    /// before session format 2 and still running after its binary was replaced does not).
    pub fn counts_command_turns(&self) -> bool {
        self.session_format >= 2
    }

    /// The address it talks to (`host:port`).
    pub fn addr(&self) -> &str {
        self.base.trim_start_matches("http://")
    }

    /// Connects to the daemon the settings point at and checks it speaks our protocol.
    pub async fn connect(settings: &Settings) -> Result<Client, CliError> {
        Self::connect_waiting(settings, Duration::ZERO).await
    }

    /// [`Client::connect`] for a command the user typed: when a daemon answers and no token is
    /// in the storage dir yet, waits a moment for the one the daemon lends a storage dir edited
    /// a moment ago ([`LENT_TOKEN_WAIT`]). Not for the hooks, which run on the agent's prompt.
    pub async fn connect_for_command(settings: &Settings) -> Result<Client, CliError> {
        Self::connect_waiting(settings, LENT_TOKEN_WAIT).await
    }

    /// [`Client::connect`] to the daemon at `addr` (`host:port`), not the one the settings point
    /// at: where a client that was given an address will send the token (Claude Code's MCP URL,
    /// written into `.mcp.json` before the daemon moved to another port).
    pub async fn connect_at(settings: &Settings, addr: String) -> Result<Client, CliError> {
        Self::connect_to(settings, Some(addr), Duration::ZERO).await
    }

    async fn connect_waiting(settings: &Settings, lent_token_wait: Duration) -> Result<Client, CliError> {
        Self::connect_to(settings, None, lent_token_wait).await
    }

    async fn connect_to(
        settings: &Settings,
        at: Option<String>,
        lent_token_wait: Duration,
    ) -> Result<Client, CliError> {
        let listen = settings.server.listen;
        let pid_path = settings.pid_path();
        let addr = match recorded_addr(&pid_path) {
            _ if at.is_some() => at.clone().unwrap_or_default(),
            Some(a) if listen.port() == 0 || a.ends_with(&format!(":{}", listen.port())) => a,
            // The daemon on this storage dir listens where it started: the config's address
            // changed since (a restart applies it), and `mneme reload` must still reach it to say so.
            Some(a) if locked_pid(&pid_path).is_some() => a,
            _ if listen.ip().is_unspecified() => format!("127.0.0.1:{}", listen.port()),
            _ => listen.to_string(),
        };
        let base = format!("http://{addr}");
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            // A daemon that stops answering mid-request (stopped, or wedged) fails the command
            // instead of hanging it; a long flush or an event stream keeps sending (keep-alives).
            .read_timeout(READ_TIMEOUT)
            .no_proxy()
            // The daemon never redirects: a program on the port that redirects the proof it is
            // asked for to a daemon holding the token would be sent the token.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| CliError::Other(format!("cannot build an HTTP client: {e}")))?;
        // No daemon has recorded itself in this storage dir: one may run on another (started
        // with other settings, or before `storage.dir` was edited, which takes a restart).
        let unrecorded = !pid_path.exists();
        let moved = "; one started before storage.dir was changed runs on the old dir until restarted";
        let not_running = || {
            // Asked at an address (the MCP URL `.mcp.json` names) other than the one the running
            // daemon recorded: it moved since the file was written (review98 #1: "it may be
            // starting" sent the user looking for an upgrade).
            let recorded = recorded_addr(&pid_path).filter(|recorded| at.is_some() && *recorded != addr);
            if let (Some(pid), Some(recorded)) = (locked_pid(&pid_path), recorded) {
                return CliError::NotRunning(format!(
                    "the mneme daemon (process {pid}) listens at {recorded}, not at {addr}: run `mneme hook claude-code --install --write` again to point .mcp.json at it"
                ));
            }
            // Its process holds the storage dir but does not listen yet: it is opening its store
            // (review76 #2: "not running (start it …)" while a start upgraded a large store).
            if let Some(pid) = locked_pid(&pid_path) {
                return CliError::NotRunning(format!(
                    "the mneme daemon (process {pid}) holds the storage dir {} but does not answer at {addr} yet: it may be starting (the first start of a newer mneme upgrades a large store for a while: its log says so); `mneme doctor` says more",
                    settings.storage.dir.display()
                ));
            }
            CliError::NotRunning(match (unrecorded, listen.port()) {
                (true, 0) => format!(
                    "no mneme daemon is running on the storage dir {} (start it with `mneme serve`{moved})",
                    settings.storage.dir.display()
                ),
                (true, _) => format!("the mneme daemon is not running at {addr} (start it with `mneme serve`{moved})"),
                (false, _) => format!("the mneme daemon is not running at {addr} (start it with `mneme serve`)"),
            })
        };
        if unrecorded && listen.port() == 0 && at.is_none() {
            // Port 0: only a daemon's pidfile says where it listens.
            return Err(not_running());
        }
        let hung = || {
            CliError::Silent(format!(
                "the mneme daemon at {addr} takes connections but does not answer within {HEALTH_TIMEOUT:?} (is it stopped or overloaded? `mneme doctor` and its log say more)"
            ))
        };
        let challenge = challenge()?;
        let health = http.get(format!("{base}/v1/health?challenge={challenge}")).timeout(HEALTH_TIMEOUT).send().await;
        // The address the answer came from, which the daemon's proof must name.
        let reached = health.as_ref().ok().and_then(reqwest::Response::remote_addr);
        let health: Health = match health {
            Err(e) if e.is_timeout() && !e.is_connect() => return Err(hung()),
            Ok(r) => health_answer(r).await.map_err(|e| {
                if e.is_timeout() {
                    hung()
                } else {
                    // Another program holds the port: no mneme daemon runs there (exit 3, as
                    // with nothing on it), and nothing was refused.
                    CliError::NotRunning(format!(
                        "no mneme daemon is running at {addr}: another program answers there ({e}); stop it or set server.listen"
                    ))
                }
            })?,
            Err(e) if e.is_connect() || e.is_timeout() => return Err(not_running()),
            // Taken and closed without an HTTP answer: no mneme daemon (which answers its health
            // check), so exit 3 as for another program there (it was exit 1). Unless nothing
            // listens there any more: then it was a daemon that stopped or crashed as this
            // connected (its backlog is dropped), and the advice to stop "it" was wrong.
            Err(e) => {
                let why = e.without_url();
                return Err(CliError::NotRunning(match still_listening(&addr).await {
                    false => format!(
                        "the mneme daemon at {addr} went away as this command connected: the connection was closed without an answer ({why}), and nothing listens there now (it was stopped or crashed; start it with `mneme serve`). Nothing was sent"
                    ),
                    true => format!(
                        "no mneme daemon is running at {addr}: what listens there closed the connection without an HTTP answer ({why}); stop it or set server.listen"
                    ),
                }));
            }
        };
        if health.protocol != PROTOCOL {
            return Err(CliError::Other(format!(
                "the daemon at {addr} (mneme {}) speaks protocol {}, this mneme speaks {PROTOCOL}: restart the daemon with this version",
                health.version, health.protocol
            )));
        }
        let token_path = settings.token_path();
        // A daemon answers, and no token is here: `storage.dir` may have been edited a moment
        // ago, and the daemon's reload (its file watcher) lends its token to the new folder.
        // Waited for briefly: `mneme reload` run right after the edit failed.
        if !token_path.exists() {
            let deadline = std::time::Instant::now() + lent_token_wait;
            while !token_path.exists() && std::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        // Read as the daemon reads it: a link, or a file of another user's, is whoever placed it
        // choosing the token, and a process of theirs answering with its proof was sent what
        // the command sends (review81 #1).
        let token = match crate::files::read_token(&token_path) {
            Ok(Some(token)) => token,
            // A daemon answers, yet never wrote its token here: it runs on another dir, or is
            // another user's. None of this config's runs, and nothing was sent: exit 3, as for
            // a daemon that proves another token (it was exit 1).
            // Emptied since (by hand, or a restore): not another daemon's doing (review88 #4).
            Ok(None) if token_path.exists() => {
                return Err(CliError::Other(format!(
                    "the token file {} is empty: a daemon writes its token there when it starts; restart the one at {addr} to write it again",
                    token_path.display()
                )))
            }
            Ok(None) => {
                return Err(CliError::NotRunning(format!(
                    "no mneme daemon of this config is running: the daemon at {addr} keeps its token elsewhere, there is none at {} (another storage dir's daemon or another user's; or storage.dir was changed after it started: restart it to apply)",
                    token_path.display()
                )))
            }
            Err(problem) => return Err(CliError::Other(problem.to_string())),
        };
        // The token goes only to a daemon that proves it holds it: whatever answers on the port
        // may be another user's process, which took it while the daemon was down. Proven at the
        // address reached: a relay another user runs elsewhere passes the question on to the
        // daemon, whose proof names the daemon's own address.
        if !proven_at(&health, &token, &challenge, reached) {
            let unproven = health.address_proof.is_none();
            let relayed = !unproven && proven_anywhere(&health, &token, &challenge);
            let token = token_path.display().to_string();
            return Err(CliError::NotOurs { addr, version: health.version, token, unproven, relayed });
        }
        Ok(Client {
            http,
            base,
            token,
            max_body: health.max_body_bytes.unwrap_or(settings.server.max_body_bytes),
            max_import: health.max_import_bytes.or(health.max_body_bytes).unwrap_or(settings.server.max_body_bytes),
            session_format: health.session_format,
            fresh: std::sync::atomic::AtomicBool::new(true),
        })
    }

    /// Before each request but the first, the daemon proves again that it holds the token: a
    /// daemon stopped during a long command (a restart, an upgrade) closes its connections, the
    /// next request opens a new one, and what answers on the port by then may be another user's
    /// program, which was sent the token and the next 500 memories of an import. (The proof
    /// and the request then go on one kept-alive connection, so the daemon that proved is the
    /// one that is asked, but in the moment between them.)
    async fn prove_again(&self) -> Result<(), CliError> {
        if self.fresh.swap(false, std::sync::atomic::Ordering::SeqCst) {
            return Ok(());
        }
        let addr = self.addr();
        let gone = |why: String| {
            CliError::NotRunning(format!(
                "the mneme daemon at {addr} went away during this command: {why}; nothing more was sent"
            ))
        };
        let challenge = challenge()?;
        let url = format!("{}/v1/health?challenge={challenge}", self.base);
        let answer =
            self.http.get(url).timeout(HEALTH_TIMEOUT).send().await.map_err(|e| gone(e.without_url().to_string()))?;
        let reached = answer.remote_addr();
        let health =
            health_answer(answer).await.map_err(|e| gone(format!("what answers there now is no mneme ({e})")))?;
        match proven_at(&health, &self.token, &challenge, reached) {
            true => Ok(()),
            false => Err(gone("what answers there now does not hold this mneme's token".into())),
        }
    }

    /// Sends a request and decodes the JSON answer; an error answer becomes [`CliError::Daemon`].
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<T, CliError> {
        self.request(method, path, body).await
    }

    /// `GET path`, decoded as one of the API's answer types.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, CliError> {
        self.request(Method::GET, path, None::<&()>).await
    }

    /// `POST path` with one of the API's request types as the body.
    pub async fn post<T: DeserializeOwned, B: Serialize + ?Sized>(&self, path: &str, body: &B) -> Result<T, CliError> {
        self.request(Method::POST, path, Some(body)).await
    }

    /// A request without a body (`POST /v1/retry`, `DELETE …`).
    pub async fn send<T: DeserializeOwned>(&self, method: Method, path: &str) -> Result<T, CliError> {
        self.request(method, path, None::<&()>).await
    }

    /// Any request, with one of the API's request types as the body, if any.
    pub(super) async fn request<T: DeserializeOwned, B: Serialize + ?Sized>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<T, CliError> {
        // The HTTP client refuses a URL past 64 KiB with its own words and the whole URL.
        if path.len() > MAX_PATH_BYTES {
            return Err(CliError::Other(format!(
                "the request's path is {} bytes, too long to send: a value in it is (a session id is at most 256 characters); nothing was sent",
                path.len()
            )));
        }
        let mut req = self.http.request(method, format!("{}{path}", self.base)).bearer_auth(&self.token);
        if let Some(b) = body {
            let bytes = serde_json::to_vec(b).map_err(|e| CliError::Other(format!("cannot write the request: {e}")))?;
            let most = match path == crate::daemon::IMPORT_PATH {
                true => self.max_import_body(),
                false => self.max_body,
            };
            if bytes.len() > most {
                return Err(CliError::Other(format!(
                    "the request is {} bytes, more than the daemon takes in one (server.max_body_bytes = {}); nothing was sent",
                    bytes.len(),
                    self.max_body
                )));
            }
            req = req.header(reqwest::header::CONTENT_TYPE, "application/json").body(bytes);
        }
        self.prove_again().await?;
        let resp = req.send().await.map_err(|e| failed("request to the daemon failed", e))?;
        let status = resp.status();
        let text = resp.text().await.map_err(|e| failed("reading the daemon's answer failed", e))?;
        if !status.is_success() {
            let answer = serde_json::from_str::<serde_json::Value>(&text).ok().filter(|v| v["error"].is_object());
            let (code, message) = match serde_json::from_str::<ErrorAnswer>(&text) {
                Ok(e) => (e.error.code, e.error.message),
                Err(_) => (String::new(), text),
            };
            return Err(CliError::Daemon { status: status.as_u16(), code, message, answer });
        }
        serde_json::from_str(&text).map_err(|e| CliError::Other(format!("unexpected answer from the daemon: {e}")))
    }

    /// A streaming GET (for Server-Sent Events).
    pub async fn stream(&self, path: &str) -> Result<reqwest::Response, CliError> {
        self.prove_again().await?;
        let resp = self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| failed("request to the daemon failed", e))?;
        if !resp.status().is_success() {
            return Err(CliError::Daemon {
                status: resp.status().as_u16(),
                code: String::new(),
                message: resp.text().await.unwrap_or_default(),
                answer: None,
            });
        }
        Ok(resp)
    }
}

/// Whether `health` proves that the daemon at `reached` (the address the client's connection
/// reached) holds `token` (see `Health::address_proof`).
fn proven_at(health: &Health, token: &str, challenge: &str, reached: Option<std::net::SocketAddr>) -> bool {
    let (Some(proof), Some(reached)) = (health.address_proof.as_deref(), reached) else { return false };
    let want = crate::daemon::api::health_proof_at(token, challenge, reached);
    crate::daemon::constant_time_eq(proof.as_bytes(), want.as_bytes())
}

/// Whether `health` proves that a daemon, wherever it is, holds `token`: one that does, but not
/// at the address reached, was reached through a relay.
fn proven_anywhere(health: &Health, token: &str, challenge: &str) -> bool {
    health.proof.as_deref().is_some_and(|p| {
        let want = crate::daemon::api::health_proof(token, challenge);
        crate::daemon::constant_time_eq(p.as_bytes(), want.as_bytes())
    })
}

/// The longest health answer read: a daemon's is a few hundred bytes, and what answers on the
/// port may be another user's program streaming without end (it took gigabytes of memory, in
/// every hook too).
const MAX_HEALTH_BYTES: usize = 64 * 1024;

/// A health answer, read up to [`MAX_HEALTH_BYTES`].
async fn health_answer(mut answer: reqwest::Response) -> Result<Health, HealthError> {
    let mut body = Vec::new();
    while let Some(chunk) = answer.chunk().await? {
        if body.len() + chunk.len() > MAX_HEALTH_BYTES {
            return Err(HealthError::TooLong);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(serde_json::from_slice(&body)?)
}

/// Why a health answer could not be read.
#[derive(Debug, thiserror::Error)]
enum HealthError {
    #[error("{0}")]
    Http(#[from] reqwest::Error),
    #[error("not a mneme health answer: {0}")]
    Json(#[from] serde_json::Error),
    #[error("an answer longer than {} KiB, where a mneme daemon's is a few hundred bytes", MAX_HEALTH_BYTES / 1024)]
    TooLong,
}

impl HealthError {
    fn is_timeout(&self) -> bool {
        matches!(self, HealthError::Http(e) if e.is_timeout())
    }
}

/// Whether something takes connections at `addr` (`host:port`) now, within a second.
async fn still_listening(addr: &str) -> bool {
    let connect = tokio::net::TcpStream::connect(addr);
    matches!(tokio::time::timeout(Duration::from_secs(1), connect).await, Ok(Ok(_)))
}

/// 128 random bits in hex, for the daemon to prove it holds the token (see
/// `Health::address_proof`).
fn challenge() -> Result<String, CliError> {
    let mut bytes = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .map_err(|_| CliError::Other("cannot draw random bytes for the daemon's challenge".into()))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The longest path (with its query) the CLI sends: far past any the daemon takes.
const MAX_PATH_BYTES: usize = 16 * 1024;

/// A request that failed on the way: a daemon gone silent is told apart from other failures.
/// (Without its URL, which repeated what the command was given, however long.)
fn failed(what: &str, e: reqwest::Error) -> CliError {
    let e = e.without_url();
    if e.is_timeout() {
        return CliError::Other(format!(
            "the daemon sent nothing for {READ_TIMEOUT:?}; what it was asked may still be going on there (see `mneme status` and `mneme notices`)"
        ));
    }
    CliError::Other(format!("{what}: {e}"))
}
