//! Opening the daemon: storage dir, single-instance lock, token, spool, backend, queue, sessions.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use super::own_files::{OwnFiles, PidFile, TokenFile};
use super::AppState;
use crate::config::{Loaded, Settings};
use crate::files::{self, FileProblem};
use crate::hindsight_api::HindsightApi;
use crate::metrics::Metrics;
use crate::notices::{Level, Notices};
use crate::queue::Queue;
use crate::reload::Reloader;
use crate::session::Sessions;
use crate::spool::Spool;
use crate::state::DaemonState;

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Another daemon holds the storage dir.
    #[error("another mneme daemon{} is already using {dir}; stop it first (or point this one at another storage.dir)",
        .pid.map(|p| format!(" (pid {p})")).unwrap_or_default())]
    AlreadyRunning {
        /// Its pid, when the pidfile says.
        pid: Option<u32>,
        /// The storage dir.
        dir: PathBuf,
    },
    /// A file in the storage dir (or the dir itself) cannot be used.
    #[error(transparent)]
    File(#[from] FileProblem),
    /// A file in the storage dir could not be opened, locked or written.
    #[error("cannot {what} {}: {source}", .path.display())]
    Storage {
        /// What was being done (`open`, `lock`, `write`).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        #[source]
        source: std::io::Error,
    },
    /// The operating system gave no randomness for a new token.
    #[error("cannot generate a token: {0}")]
    Token(#[source] std::io::Error),
    /// The backend could not be opened.
    #[error("cannot open the {backend} memory backend: {reason}")]
    Backend {
        /// Which.
        backend: String,
        /// Why.
        reason: String,
    },
}

/// A daemon ready to serve.
pub struct Daemon {
    pub(super) settings: Arc<Settings>,
    pub(super) sessions: Sessions,
    hindsight: HindsightApi,
    queue: Queue,
    notices: Notices,
    metrics: Arc<Metrics>,
    pub(super) reloader: Arc<Reloader>,
    token: String,
    config_path: PathBuf,
    /// The pidfile (held for the daemon's life: the single-instance lock) and the token file,
    /// put back while it runs if they are deleted.
    pub(super) own_files: Arc<OwnFiles>,
}

impl Daemon {
    /// Sets everything up from a loaded configuration and starts delivering what a previous run
    /// left spooled.
    pub async fn open(loaded: Loaded) -> Result<Daemon, StartError> {
        let settings = Arc::new(loaded.settings);
        let dir = &settings.storage.dir;
        create_private_dir(dir)?;
        let lock = lock_storage(&settings.pid_path(), dir)?;
        let token = load_or_create_token(&settings.token_path())?;
        make_files_private(&settings.private_files());
        let spool_path = settings.spool_path();
        let spool =
            Spool::open_with(&spool_path, settings.queue.sync).map_err(|e| files::spool_problem(&spool_path, e))?;
        let notices = Notices::new(spool.clone());
        let metrics = Arc::new(Metrics::default());
        // The store's header is read before the process opens the store (never beside it: see
        // `mneme_local::check_header`).
        if settings.memory.backend == mneme_core::BackendId::Local {
            let store = settings.local_db_path();
            mneme_local::check_header(&store).map_err(|e| StartError::File(files::local_store_problem(&store, e)))?;
        }
        let embedder_outages = mneme_local::OutageNotices::default();
        let backend = crate::backends::build(&settings, &embedder_outages).map_err(|e| match e {
            crate::backends::BuildError::File(f) => StartError::File(f),
            other => StartError::Backend { backend: settings.memory.backend.to_string(), reason: other.to_string() },
        })?;
        crate::backends::forward_events(&backend, &notices);
        let state = DaemonState::opened_with(settings.clone(), backend, embedder_outages);
        let queue = Queue::new(spool.clone(), state.clone(), notices.clone(), metrics.clone());
        // What the spool holds is counted before the sessions load: loading queues the pending
        // tail of each session idle too long, which `enqueue` counts itself (counted by both,
        // it stayed pending for good and its timer fired every flush interval).
        match queue.recover().await {
            Ok(0) => {}
            Ok(n) => tracing::info!("delivering {n} items spooled by a previous run"),
            // Acknowledged retains it holds would never be delivered: the spool is damaged, and
            // the daemon stops with what to do, as for the sessions kept in it.
            Err(e) => {
                return Err(files::spool_problem(&spool_path, format!("cannot read its queued items: {e}")).into())
            }
        }
        let sessions = Sessions::load(state.clone(), queue.clone(), spool.clone(), notices.clone(), metrics.clone())
            .await
            .map_err(|e| files::spool_problem(&spool_path, format!("cannot load the sessions kept in it: {e}")))?;
        // A bank, scoping or backend changed while mneme was down applies to the sessions kept.
        sessions
            .follow_settings()
            .await
            .map_err(|e| files::spool_problem(&spool_path, format!("cannot re-scope the sessions kept in it: {e}")))?;
        for warning in &loaded.warnings {
            notices.emit(Level::Warning, "config", None, warning.clone()).await;
        }
        let hindsight = HindsightApi::new(sessions.clone(), queue.clone(), spool);
        let reloader = Arc::new(Reloader::new(
            loaded.path.clone(),
            (loaded.text, loaded.warnings),
            state,
            queue.clone(),
            sessions.clone(),
            notices.clone(),
        ));
        Ok(Daemon {
            sessions,
            hindsight,
            queue,
            notices,
            metrics,
            reloader,
            token: token.clone(),
            config_path: loaded.path,
            own_files: Arc::new(OwnFiles {
                dir: settings.storage.dir.clone(),
                pidfile: PidFile::new(settings.pid_path(), lock),
                token: TokenFile { path: settings.token_path(), token: token.clone() },
            }),
            settings,
        })
    }

    /// The bearer token clients must send.
    pub fn token(&self) -> &str {
        &self.token
    }

    pub(super) fn state(&self, listen: SocketAddr) -> Arc<AppState> {
        Arc::new(AppState {
            sessions: self.sessions.clone(),
            hindsight: self.hindsight.clone(),
            queue: self.queue.clone(),
            notices: self.notices.clone(),
            metrics: self.metrics.clone(),
            reloader: self.reloader.clone(),
            token: self.token.clone(),
            token_path: self.settings.token_path(),
            allow_remote: self.settings.server.allow_remote,
            started: Instant::now(),
            listen,
            config_path: self.config_path.clone(),
            storage_dir: self.settings.storage.dir.clone(),
            max_body_bytes: self.settings.server.max_body_bytes,
            stopping: CancellationToken::new(),
            ui: super::ui::UiAuth::default(),
            notice_streams: Arc::new(tokio::sync::Semaphore::new(super::routes::MAX_NOTICE_STREAMS)),
        })
    }
}

fn storage_error(what: &'static str, path: &Path, source: std::io::Error) -> StartError {
    StartError::Storage { what, path: path.to_owned(), source }
}

pub(super) fn create_private_dir(dir: &Path) -> Result<(), StartError> {
    match std::fs::metadata(dir) {
        Ok(m) => match files::storage_dir_refusal(dir, &m) {
            Some(problem) => Err(problem.into()),
            // Others may list it (a folder the user made, or named by mistake: a home folder):
            // said, as `doctor` says it, and left as it is (its files are private).
            None if m.permissions().mode() & 0o077 != 0 => {
                let mode = m.permissions().mode() & 0o777;
                tracing::warn!(
                    "storage dir {} is readable by others (mode {mode:o}); its files are private, but `chmod 700` it",
                    dir.display()
                );
                Ok(())
            }
            None => Ok(()),
        },
        Err(_) => {
            std::fs::create_dir_all(dir)
                .map_err(|e| files::storage_dir_problem(dir, format!("cannot create it: {e}")))?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| files::storage_dir_problem(dir, format!("cannot make it private: {e}")))?;
            Ok(())
        }
    }
}

/// Takes an exclusive lock on the pidfile (released by the OS if the process dies) and writes our pid.
fn lock_storage(pid_path: &Path, dir: &Path) -> Result<File, StartError> {
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(pid_path)
        .map_err(|e| storage_error("open", pid_path, e))?;
    // A FIFO or device there: flock refuses it ("Invalid argument"), which said nothing useful.
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        let why = std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "it is not a regular file (mneme writes its pid there: remove it)",
        );
        return Err(storage_error("lock", pid_path, why));
    }
    if let Err(e) = lock_soon(&file) {
        return match e {
            std::fs::TryLockError::WouldBlock => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                Err(StartError::AlreadyRunning {
                    pid: text.lines().next().and_then(|l| l.trim().parse().ok()),
                    dir: dir.to_owned(),
                })
            }
            std::fs::TryLockError::Error(e) => Err(storage_error("lock", pid_path, e)),
        };
    }
    file.set_len(0).map_err(|e| storage_error("write", pid_path, e))?;
    writeln!(file, "{}", std::process::id()).map_err(|e| storage_error("write", pid_path, e))?;
    Ok(file)
}

/// How long a start waits for the pidfile's lock before taking it for another daemon's: a CLI
/// command that looks for a daemon holds it for a moment (`cli::client::locked_pid`).
const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_millis(250);

/// The pidfile's exclusive lock, tried again for [`LOCK_PATIENCE`] while someone holds it.
fn lock_soon(file: &File) -> Result<(), std::fs::TryLockError> {
    let started = std::time::Instant::now();
    loop {
        match file.try_lock() {
            Err(std::fs::TryLockError::WouldBlock) if started.elapsed() < LOCK_PATIENCE => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

/// The storage dir's files that others may read (the memories, the spool and their logs, after
/// a restore made with umask 022) are restricted to 0600, as the token is: the folder's mode
/// alone kept them from others, and a folder others may read is only warned about.
fn make_files_private(files: &[PathBuf]) {
    let open = files::open_to_others(files);
    if open.is_empty() {
        return;
    }
    for (path, _) in &open {
        if let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)) {
            tracing::warn!("cannot restrict {} to mode 600: {e}", path.display());
        }
    }
    let named = files::named_with_modes(&open);
    tracing::warn!("mneme's files were readable by others: {named}; restricted them to 0600");
}

/// Reads the token, or generates one (mode 0600) on first start. A token file others can read
/// is tightened back to 0600; one others could write is replaced by a new token (its contents
/// may be another user's choice, which would give that user every route).
fn load_or_create_token(path: &Path) -> Result<String, StartError> {
    match files::read_token(path)? {
        Some(token) => {
            let mode = std::fs::metadata(path).map(|m| m.permissions().mode() & 0o777).unwrap_or(0o600);
            if mode & 0o022 != 0 {
                tracing::warn!(
                    "{} was writable by others (mode {mode:o}), so its token may be another user's; replaced it with a new one (clients read it again)",
                    path.display()
                );
                let token = crate::ids::secret_hex(32).map_err(StartError::Token)?;
                write_token(path, &token)?;
                return Ok(token);
            }
            if mode & 0o077 != 0 {
                tracing::warn!("{} was readable by others (mode {mode:o}); restricting it to 0600", path.display());
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                    .map_err(|e| files::token_problem(path, format!("cannot restrict it to mode 600: {e}")))?;
            }
            Ok(token)
        }
        None => {
            let token = crate::ids::secret_hex(32).map_err(StartError::Token)?;
            write_token(path, &token)?;
            Ok(token)
        }
    }
}

/// Writes `token` to `path`: private (0600), synced, then renamed into place.
pub(super) fn write_token(path: &Path, token: &str) -> Result<(), StartError> {
    let tmp = path.with_extension("tmp");
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| storage_error("write", &tmp, e))?;
    f.write_all(token.as_bytes()).and_then(|_| f.sync_all()).map_err(|e| storage_error("write", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| storage_error("write", path, e))
}

/// A reload found `storage.dir` changed, which takes a restart: the running daemon's token and
/// address (its pidfile, unlocked) are lent to the new folder (`new`, made as a start makes it),
/// unless a token is there, so that the CLI, which looks for them where the file now says, still
/// reaches this daemon to flush its spool before the restart (it could not, and the notice said
/// to). The daemon started on the new folder keeps the token and writes its own pidfile.
/// Whether they were lent.
pub fn lend_token_and_address(running: &Settings, new: &Settings) -> Result<bool, StartError> {
    let new_path = new.token_path();
    if new_path.exists() {
        return Ok(false);
    }
    let Some(token) = files::read_token(&running.token_path())? else { return Ok(false) };
    create_private_dir(&new.storage.dir)?;
    write_token(&new_path, &token)?;
    if let (Ok(pidfile), false) = (std::fs::read(running.pid_path()), new.pid_path().exists()) {
        std::fs::write(new.pid_path(), pidfile).map_err(|e| storage_error("write", &new.pid_path(), e))?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    /// A CLI command looking for a daemon holds the pidfile's lock for a moment: a daemon
    /// starting just then waits it out instead of refusing as if another daemon ran.
    #[test]
    fn a_start_waits_out_a_lock_held_for_a_moment() {
        let dir = tempfile::tempdir().unwrap();
        let pid_path = dir.path().join("mneme.pid");
        std::fs::write(&pid_path, "").unwrap();
        let probe = std::fs::File::open(&pid_path).unwrap();
        probe.lock_shared().unwrap();
        let release = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            drop(probe);
        });
        let held = super::lock_storage(&pid_path, dir.path());
        assert!(held.is_ok(), "{:?}", held.err().map(|e| e.to_string()));
        release.join().unwrap();
        // A daemon that holds it is still told apart.
        let second = super::lock_storage(&pid_path, dir.path());
        assert!(matches!(second, Err(super::StartError::AlreadyRunning { .. })));
    }
}
