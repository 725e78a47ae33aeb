//! Live configuration: the daemon watches its config file and the thesaurus file it names (and
//! `POST /v1/reload` forces a read).
//!
//! A new file is validated first; an invalid one becomes an error notice naming the key and line,
//! and the running configuration stays. A valid one whose backend differs is switched to without
//! losing anything: every queue is drained into the old backend (for at most
//! `queue.shutdown_grace`), what is left stays spooled and goes to the new one, sessions are
//! re-scoped. Settings that only tune (queue sizes, recall knobs) apply without a swap. Settings
//! that need a new socket or data directory are reported as needing a restart.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use mneme_core::BackendId;
use notify::{RecursiveMode, Watcher};
use tokio_util::sync::CancellationToken;

use crate::config::{self, ConfigErrors, Settings};
use crate::lock::MutexExt;
use crate::notices::{Level, Notices};
use crate::queue::Queue;
use crate::session::Sessions;
use crate::state::{Current, DaemonState};

/// Quiet time after the last file event before the file is read (editors write in steps).
const DEBOUNCE: Duration = Duration::from_millis(300);

/// What a reload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reloaded {
    /// The backend now in force.
    pub backend: BackendId,
    /// Whether the backend was switched (or reopened with other settings).
    pub changed: bool,
    /// The backend in force before.
    pub previous: BackendId,
    /// Keys that changed but only apply after a restart.
    pub restart_needed: Vec<String>,
    /// Why the file was not read (gone, or empty), the running configuration kept.
    pub not_read: Option<String>,
}

/// Why a reload was refused (the running configuration stays).
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The file is invalid.
    #[error("{0}")]
    Invalid(ConfigErrors),
    /// The new backend could not be opened.
    #[error("cannot switch to the {backend} backend: {reason}")]
    Backend {
        /// Which.
        backend: BackendId,
        /// Why.
        reason: String,
    },
    /// The daemon stopped before the reload ended.
    #[error("the daemon is stopping")]
    Stopped,
}

/// How long the drain waits for a reload under way (see [`Reloader::stop`]).
const RELOAD_AT_STOP: std::time::Duration = std::time::Duration::from_secs(10);

/// Re-reads the config file and applies it.
pub struct Reloader {
    path: PathBuf,
    state: DaemonState,
    serial: tokio::sync::Mutex<()>,
    /// Set once the daemon drains (see [`Reloader::stop`]): no reload after it.
    stopped: std::sync::atomic::AtomicBool,
    queue: Queue,
    sessions: Sessions,
    notices: Notices,
    /// The text and the warnings of the last file read that loaded.
    last_warned: std::sync::Mutex<Option<(String, Vec<String>)>>,
    /// The last "restart mneme to apply" notice told, until a reload finds nothing waiting for a
    /// restart: the same notice is not told again (an edit's watcher and the `mneme reload` that
    /// followed it each told it: review109).
    last_restart_told: std::sync::Mutex<Option<String>>,
    /// The last refusal told (a file not read or not valid, a backend that cannot be opened), until
    /// a reload applies: told once, not again by the `mneme reload` that follows the watcher's
    /// (review115 #5, review118 #4).
    last_refusal_told: std::sync::Mutex<Option<String>>,
    /// When the last switch of backend ended, and the backend it switched from.
    last_switch: std::sync::Mutex<Option<(std::time::Instant, BackendId)>>,
    /// The file's text as the start read it.
    text_at_start: String,
}

impl Reloader {
    /// A reloader for the file at `path` that replaces `state`. `told_at_start`: the file's
    /// text as the start read it, and the warnings the start told (a notice each): a first
    /// reload of the same text says them no more.
    pub fn new(
        path: PathBuf,
        told_at_start: (String, Vec<String>),
        state: DaemonState,
        queue: Queue,
        sessions: Sessions,
        notices: Notices,
    ) -> Self {
        let text_at_start = told_at_start.0.clone();
        let at_start = Some(told_at_start).filter(|(text, _)| !text.trim().is_empty());
        Self {
            path,
            state,
            serial: tokio::sync::Mutex::new(()),
            stopped: std::sync::atomic::AtomicBool::new(false),
            queue,
            sessions,
            notices,
            last_warned: std::sync::Mutex::new(at_start),
            last_restart_told: std::sync::Mutex::new(None),
            last_refusal_told: std::sync::Mutex::new(None),
            last_switch: std::sync::Mutex::new(None),
            text_at_start,
        }
    }

    /// The settings in force.
    pub fn settings(&self) -> Arc<Settings> {
        self.state.settings()
    }

    /// Reads the file and applies it; one reload at a time. It runs to its end on a task of its
    /// own: a caller that stops waiting (a client that hangs up has its handler dropped) left a
    /// switch half done, the old backend drained and the new one dropped, or the new one in
    /// force with the sessions not moved to it and its notice never sent.
    pub async fn reload(self: &Arc<Self>) -> Result<Reloaded, ReloadError> {
        let me = self.clone();
        match tokio::spawn(async move { me.read_and_apply().await }).await {
            Ok(reloaded) => reloaded,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => Err(ReloadError::Stopped),
        }
    }

    /// Waits for a reload under way to end, and refuses those asked after it: the drain that
    /// follows closes the spool and the store a reload writes to (one the config watcher began
    /// as the daemon stopped logged "cannot save the sessions …: the writer thread stopped").
    /// Waited for [`RELOAD_AT_STOP`] at most: one stuck reading a hung file system must not
    /// keep the daemon from stopping.
    pub async fn stop(&self) {
        self.stopped.store(true, std::sync::atomic::Ordering::SeqCst);
        if tokio::time::timeout(RELOAD_AT_STOP, self.serial.lock()).await.is_err() {
            tracing::warn!("a reload still under way after {RELOAD_AT_STOP:?}: stopping without it");
        }
    }

    async fn read_and_apply(&self) -> Result<Reloaded, ReloadError> {
        let asked = std::time::Instant::now();
        let _one_at_a_time = self.serial.lock().await;
        if self.stopped.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(ReloadError::Stopped);
        }
        let old = self.settings();
        let path = self.path.clone();
        // Off the async worker: a config on a hung file system must not stop the daemon.
        let read = tokio::task::spawn_blocking(move || match config::read(&path) {
            // Empty: an editor truncates the file before it writes it again.
            Ok(None) => None,
            Ok(Some(text)) if text.trim().is_empty() => None,
            Ok(text) => {
                let read = text.clone().unwrap_or_default();
                Some((config::load_text_from_env(&path, text), read))
            }
            Err(e) => Some((Err(e), String::new())),
        });
        let (loaded, text) = match read.await {
            Ok(Some((loaded, text))) => (Some(loaded), text),
            Ok(None) => (None, String::new()),
            Err(e) => (Some(Err(config::ConfigErrors::unreadable(&self.path, e))), String::new()),
        };
        let Some(loaded) = loaded else {
            // A file that disappears or is emptied (deleted, or mid-save by an editor) is not a
            // request for the defaults: keep what runs. (Defaults: a file with only a comment.)
            let message = format!(
                "{} is gone or empty; the running configuration stays (a file holding only a comment means all defaults)",
                self.path.display()
            );
            self.tell_refusal(Level::Warning, message.clone()).await;
            let backend = old.memory.backend;
            let not_read = Some(message);
            return Ok(Reloaded { backend, changed: false, previous: backend, restart_needed: Vec::new(), not_read });
        };
        let mut new = match loaded {
            Ok(loaded) => {
                // An override hiding a key the file sets, a value the environment gave that was
                // ignored: a reload is when the user looks (an edit of memory.backend that an
                // environment variable hides changed nothing, without a word).
                // Said again only when the file or the warnings changed: an editor's save of an
                // unchanged file, or a reload that changed nothing, told the same thing each time.
                // A secret added to a file others may read, as the start says it (review73 #3).
                let mut warnings = loaded.warnings.clone();
                warnings.extend(config::secrets_others_may_read(&loaded));
                let warned = (text, warnings.clone());
                let repeated = {
                    let mut last = self.last_warned.lock().unwrap_or_else(|p| p.into_inner());
                    let repeated = last.as_ref() == Some(&warned);
                    *last = Some(warned);
                    repeated
                };
                if !warnings.is_empty() && !repeated {
                    let message = format!("Config reloaded with warnings: {}", warnings.join("; "));
                    self.notices.emit(Level::Warning, "config", None, message).await;
                }
                loaded.settings
            }
            Err(e) => {
                let message = format!("Config change not applied, the running configuration stays. {e}");
                self.tell_refusal(Level::Error, message).await;
                return Err(ReloadError::Invalid(e));
            }
        };
        let mut restart_needed = Vec::new();
        if new.server != old.server {
            // Each key named (review73 #6: "restart mneme to apply server").
            restart_needed.extend(changed_server_keys(&old.server, &new.server).into_iter().map(str::to_owned));
            new.server = old.server.clone();
        }
        // Where the local store would be after the restart (before the running folder is put back).
        let store_after_restart = new.local_db_path();
        if new.storage != old.storage {
            restart_needed.push("storage.dir".to_owned());
            let (running, moved_to) = (old.clone(), new.clone());
            let lent =
                tokio::task::spawn_blocking(move || crate::daemon::lend_token_and_address(&running, &moved_to)).await;
            match lent {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::warn!("cannot lend the token to {}: {e}", new.storage.dir.display()),
                Err(e) => tracing::warn!("cannot lend the token to {}: {e}", new.storage.dir.display()),
            }
            new.storage = old.storage.clone();
        }
        if new.queue.sync != old.queue.sync {
            restart_needed.push("queue.sync".to_owned());
            new.queue.sync = old.queue.sync;
        }
        if !restart_needed.is_empty() {
            let it = if restart_needed.len() == 1 { "it" } else { "them" };
            let mut message = format!(
                "{} changed in {}; restart mneme to apply {it}",
                restart_needed.join(" and "),
                self.path.display()
            );
            // A start on the new folder opens its spool only: what waits in this one would wait
            // there, unsaid, until a mneme on this folder runs again.
            if restart_needed.iter().any(|k| k == "storage.dir") {
                let d = self.queue.depths().await;
                let n = d.spooled + d.dead;
                if n > 0 {
                    let what = if n == 1 { "1 retain is" } else { &format!("{n} retains are") };
                    message.push_str(&format!(
                        ". {what} still in the spool in {} ({} queued, {} dead letters): run `mneme flush` (and `mneme retry`) before the restart, or they stay there until a mneme on that folder runs",
                        old.storage.dir.display(),
                        d.spooled,
                        d.dead
                    ));
                }
                // The local store in the folder (no `local.path` naming it) moves with it: a
                // restart opened a new, empty store, and following the advice above alone left
                // every memory behind (review73 #5).
                let (store, moved) = (old.local_db_path(), &store_after_restart);
                if store != *moved && store.exists() {
                    let what = match moved.exists() {
                        // A folder an earlier mneme used: moving the files there would replace
                        // its store and spool (review74 #3).
                        true => ", a store already there: to keep both, copy one into the other with `mneme export` and `mneme import` (moving the files would replace it)",
                        false => ". Stop mneme and move the store's files (and the spool's) into the new folder before the restart, or set local.path to it",
                    };
                    message.push_str(&format!(
                        ". The local store {} stays where it is: the restarted daemon opens {}{what}",
                        store.display(),
                        moved.display()
                    ));
                }
            }
            let told = {
                let mut last = self.last_restart_told.lock().unwrap_or_else(|p| p.into_inner());
                last.replace(message.clone()).as_ref() == Some(&message)
            };
            if !told {
                self.notices.emit(Level::Warning, "config", None, message).await;
            }
        } else {
            *self.last_restart_told.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
        let swap = new.memory.backend != old.memory.backend
            || (new.memory.backend == BackendId::Local
                && (new.local_db_path() != old.local_db_path() || new.local != old.local))
            || (new.memory.backend == BackendId::Hindsight && new.hindsight != old.hindsight);
        // Another store, not the same one reopened with other settings (an embedder, a
        // thesaurus edit): only then do the sessions' recent memories change.
        let store_changed = new.memory.backend != old.memory.backend
            || new.store_of(new.memory.backend) != old.store_of(old.memory.backend);
        let new = Arc::new(new);
        let mut backend = self.state.backend();
        // Memory turned on: what is retained while the store opens waits for it in the spool.
        let turning_on = !backend.capabilities().stores && new.memory.backend != BackendId::Off;
        if swap {
            self.state.opening_a_store(turning_on);
            // Opening a store (SQLite, its migrations) blocks: off the async workers.
            let opened = tokio::task::spawn_blocking({
                let (new, outages) = (new.clone(), self.state.embedder_outages().clone());
                move || crate::backends::build_while_running(&new, &outages).map_err(|e| e.to_string())
            })
            .await
            .unwrap_or_else(|e| Err(format!("opening it failed: {e}")));
            if opened.is_err() {
                self.state.opening_a_store(false);
            }
            backend = match opened {
                Ok(b) => b,
                Err(reason) => {
                    let message = format!(
                        "Cannot switch to the {} backend: {reason}; staying on {}",
                        new.memory.backend, old.memory.backend
                    );
                    self.tell_refusal(Level::Error, message).await;
                    return Err(ReloadError::Backend { backend: new.memory.backend, reason });
                }
            };
            // Another store (not the same one reopened with other settings): the sessions'
            // conversations so far stay in the old one, their tails queued before it is drained.
            // Memory turned on has no old store: what the sessions retained while this one
            // opened waited for it, and begins their conversations there (review79 #2).
            if store_changed && !turning_on {
                if let Err(e) = self.sessions.store_changing().await {
                    tracing::error!("cannot save the sessions before the store changes: {e}");
                }
            }
            // Nothing acknowledged may be lost: deliver what we can to the old backend first.
            let grace = old.queue.shutdown_grace;
            if tokio::time::timeout(grace, self.queue.flush_all()).await.is_err() {
                tracing::warn!(
                    "draining into the old backend took longer than {grace:?}; the rest goes to the new one"
                );
            }
            crate::backends::forward_events(&backend, &self.notices);
        }
        // Settings and backend change together, for every layer at once.
        self.state.replace(Current { settings: new.clone(), backend });
        self.state.opening_a_store(false);
        self.queue.settings_changed(&old.queue, &new.queue);
        if swap {
            self.queue.backend_switched().await;
        }
        // The instructions an agent sends with every model call are asked again only for another
        // store: a store reopened with other settings holds the same memories, and asking again
        // cost each live agent its prompt cache (review121 #4).
        if swap && store_changed {
            if let Err(e) = self.sessions.backend_switched().await {
                tracing::error!("cannot save the sessions after the backend switch: {e}");
            }
        }
        if new.retain.idle_after != old.retain.idle_after {
            self.sessions.idle_after_changed();
        }
        // Only a change of bank, scoping or backend moves sessions, and one of `retain.mode` starts
        // their next turns in a part of their own: a reload for anything else leaves them as they
        // are.
        if let Err(e) = self.sessions.follow_settings().await {
            tracing::error!("cannot save the sessions after the settings changed: {e}");
        }
        if swap {
            let message = if old.memory.backend == new.memory.backend {
                format!("the {} backend's settings changed; it was reopened with them", new.memory.backend)
            } else {
                format!("memory backend switched from {} to {}", old.memory.backend, new.memory.backend)
            };
            self.notices.emit(Level::Info, "config", None, message).await;
            *self.last_switch.locked() = Some((std::time::Instant::now(), old.memory.backend));
            // Whatever is still spooled goes to the new backend now.
            let queue = self.queue.clone();
            tokio::spawn(async move { queue.flush_all().await });
        } else if *new != *old {
            tracing::info!("configuration reloaded from {}", self.path.display());
        }
        // A switch the watcher made while this reload waited for it is this reload's change too:
        // `mneme reload` waited seconds for the store to open, then said "unchanged" (review76 #5).
        let (changed, previous) = match *self.last_switch.locked() {
            Some((ended, previous)) if !swap && ended > asked => (true, previous),
            _ => (swap, old.memory.backend),
        };
        // Applied: a refusal after it is news again.
        *self.last_refusal_told.lock().unwrap_or_else(|p| p.into_inner()) = None;
        Ok(Reloaded { backend: new.memory.backend, changed, previous, restart_needed, not_read: None })
    }

    /// Reloads on SIGHUP, as daemons do (its default action killed mneme with no drain: a
    /// closed terminal, or `kill -HUP` meant as "re-read the config"). The handler is installed
    /// when this is called; the reloads run until `stop`.
    pub fn reload_on_hangup(self: Arc<Self>, stop: CancellationToken) {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let mut hangup = match signal(SignalKind::hangup()) {
                Ok(h) => h,
                Err(e) => {
                    tracing::warn!("cannot handle SIGHUP (it would stop mneme without a drain): {e}");
                    return;
                }
            };
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        got = hangup.recv() => if got.is_none() { return },
                    }
                    tracing::info!("SIGHUP: reloading the configuration");
                    // A refused file says so in a notice, as any reload does.
                    let _ = self.reload().await;
                }
            });
        }
    }

    /// Watches the config file (and the thesaurus file it names, `local.thesaurus_file`) until
    /// `stop`; each change (debounced) triggers a reload.
    pub fn watch(self: Arc<Self>, stop: CancellationToken) {
        // A first run has no config folder yet: the nearest folder that exists is watched until
        // the missing ones appear (each is then watched as it comes, below).
        let Some(dir) = self.path.ancestors().skip(1).find(|d| d.is_dir()).map(Path::to_path_buf) else {
            tracing::info!(
                "not watching {}: no folder of its path exists (POST /v1/reload still works)",
                self.path.display()
            );
            return;
        };
        // The names of the files watched (a same-named file in a watched folder costs a reload
        // that changes nothing): the config's, and those of its folders that do not exist yet.
        let missing = self.path.strip_prefix(&dir).map(|p| p.iter().map(OsString::from).collect()).unwrap_or_default();
        let names: Arc<std::sync::Mutex<Vec<OsString>>> = Arc::new(std::sync::Mutex::new(missing));
        // One pending event is enough: the reload reads the file as it is by then.
        let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
        let edited_while_starting = tx.clone();
        let appeared_meanwhile = tx.clone();
        // Watch the folder, not the file: editors replace files by renaming over them.
        let watched = names.clone();
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            // Reading a file is not changing it: the reload's own read of the config (and of
            // the thesaurus) would otherwise set off the next reload, forever.
            let changed = event.ok().filter(|e| !matches!(e.kind, notify::EventKind::Access(_)));
            if let Some(event) = changed {
                let names = watched.lock().unwrap_or_else(|p| p.into_inner());
                if event.paths.iter().any(|p| p.file_name().is_some_and(|n| names.iter().any(|w| w == n))) {
                    let _ = tx.try_send(());
                }
            }
        });
        let mut watcher = match watcher {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!("cannot watch {}: {e} (POST /v1/reload still works)", dir.display());
                return;
            }
        };
        if let Err(e) = watcher.watch(&dir, RecursiveMode::NonRecursive) {
            tracing::warn!("cannot watch {}: {e} (POST /v1/reload still works)", dir.display());
            return;
        }
        tracing::info!("watching {} for changes", self.path.display());
        let mut folders = vec![dir];
        // Beside the config: the thesaurus it names, and what either is a symlink to (dotfile
        // managers keep configs as links; an edit changes the target, in another folder). Looked
        // up again after each reload: a link may have been pointed elsewhere.
        let config = self.path.clone();
        let mut watch_more = move |settings: &Settings, named: Option<PathBuf>| {
            // The config's folder and the missing ones above it, as far as they exist now.
            let unwatched: Vec<PathBuf> = config
                .ancestors()
                .skip(1)
                .take_while(|f| !folders.iter().any(|w| w == f))
                .map(Path::to_path_buf)
                .collect();
            for folder in unwatched {
                if folder.is_dir() && watcher.watch(&folder, RecursiveMode::NonRecursive).is_ok() {
                    folders.push(folder);
                }
            }
            let mut files = vec![config.clone()];
            files.extend(settings.local.thesaurus_file.as_ref().map(|f| f.path.clone()));
            // And the one the file names now, in force or not: an edit refused for its bad line
            // (or because it did not exist yet) is applied when it is fixed (review73 #1: only
            // an edit of the config itself, or `mneme reload`, applied it).
            files.extend(named.filter(|n| !files.contains(n)));
            // Every link of a chain (a dotfile manager's own layer of links: one in the middle
            // pointed elsewhere changes the config as much as an edit), and the file at its end.
            let hops: Vec<PathBuf> = files.iter().flat_map(|f| link_chain(f)).collect();
            let targets: Vec<PathBuf> = files.iter().filter_map(|f| std::fs::canonicalize(f).ok()).collect();
            for file in files.into_iter().chain(hops).chain(targets) {
                let (Some(folder), Some(name)) = (file.parent(), file.file_name()) else { continue };
                // Folders of it that do not exist yet (a thesaurus file named in `th/x/`, made
                // after the edit that names it: review74 #2): watched from the nearest that does,
                // by their names, as the config's own missing folders are.
                if !folder.is_dir() {
                    let mut names = names.lock().unwrap_or_else(|p| p.into_inner());
                    for missing in folder.ancestors().take_while(|f| !f.is_dir()) {
                        if let Some(n) = missing.file_name().filter(|n| !names.iter().any(|w| w == n)) {
                            names.push(n.to_owned());
                        }
                    }
                    if let Some(existing) = folder.ancestors().find(|f| f.is_dir()) {
                        if watcher.watch(existing, RecursiveMode::NonRecursive).is_ok()
                            && !folders.iter().any(|f| f == existing)
                        {
                            folders.push(existing.to_owned());
                        }
                    }
                }
                {
                    // The file, and its folder as its parent sees it: a folder replaced whole
                    // (`rm -rf` and a copy, a dotfile manager) is seen from there.
                    let mut names = names.lock().unwrap_or_else(|p| p.into_inner());
                    for name in [Some(name), folder.file_name()].into_iter().flatten() {
                        if !names.iter().any(|n| n == name) {
                            names.push(name.to_owned());
                        }
                    }
                }
                // The folder is watched again each time: one replaced whole is a new folder at
                // the same path, and the old one's watch went with it.
                match watcher.watch(folder, RecursiveMode::NonRecursive) {
                    Ok(()) if !folders.iter().any(|f| f == folder) => folders.push(folder.to_owned()),
                    Ok(()) => {}
                    Err(e) => tracing::debug!("cannot watch {} now: {e} (mneme reload still works)", folder.display()),
                }
                if let Some(parent) = folder.parent().filter(|p| !folders.iter().any(|f| f == p)) {
                    if watcher.watch(parent, RecursiveMode::NonRecursive).is_ok() {
                        folders.push(parent.to_owned());
                    }
                }
            }
        };
        let named_now = {
            let config = self.path.clone();
            // As the reload reads it: a FIFO put in its place is not waited on (review79 #4: the
            // daemon hung for good, SIGTERM included).
            move || config::read(&config).ok().flatten().and_then(|t| config::thesaurus_file_named(&t, &config))
        };
        watch_more(&self.settings(), named_now());
        // An edit made while the daemon started (opening its store can take a while: a newer
        // mneme upgrading a large one) came before this watch, and was never applied (review78
        // #5): the file is read once more now that edits are seen.
        // So is the thesaurus file the configuration names (review79 #1).
        let (config, at_start) = (self.path.clone(), self.text_at_start.clone());
        let thesaurus = self.settings().local.thesaurus_file.as_ref().map(|f| (f.path.clone(), f.lines.clone()));
        tokio::spawn(async move {
            let edited = tokio::task::spawn_blocking(move || {
                let config_now = config::read(&config).ok().flatten().unwrap_or_default();
                let thesaurus_edited = thesaurus.is_some_and(|(path, lines)| {
                    config::ThesaurusFile::read(path).map_or(true, |now| now.lines != lines)
                });
                config_now != at_start || thesaurus_edited
            });
            if edited.await.unwrap_or(false) {
                let _ = edited_while_starting.try_send(());
            }
        });
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    got = rx.recv() => if got.is_none() { return },
                }
                // Debounce: wait until the file has been quiet for a moment.
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(DEBOUNCE) => break,
                        got = rx.recv() => if got.is_none() { return },
                    }
                }
                // A file or folder the config names that appears after the reload read it and
                // before its name is watched would be seen by no one: the config's folder, or a
                // thesaurus file's folders made (`mkdir -p`, then the file) right after the notice
                // that it was missing. Read again when how much of their path exists changed.
                let before = how_much_exists(&self.path, named_now().as_deref());
                match self.reload().await {
                    Err(ReloadError::Stopped) => return,
                    Err(e) => tracing::warn!("config change not applied: {e}"),
                    Ok(_) => {}
                }
                let named = named_now();
                watch_more(&self.settings(), named.clone());
                if how_much_exists(&self.path, named.as_deref()) != before {
                    let _ = appeared_meanwhile.try_send(());
                }
            }
        });
    }

    /// Tells a reload's refusal as a notice, unless it was the last one told and no reload has
    /// applied since (the caller still hears it: `mneme reload` prints it).
    async fn tell_refusal(&self, level: Level, message: String) {
        {
            let mut last = self.last_refusal_told.lock().unwrap_or_else(|p| p.into_inner());
            if last.as_deref() == Some(message.as_str()) {
                return;
            }
            *last = Some(message.clone());
        }
        self.notices.emit(level, "config", None, message).await;
    }
}

/// For each of `config` and the file it names (`named`), how many of its path's parts exist.
fn how_much_exists(config: &Path, named: Option<&Path>) -> Vec<usize> {
    let existing = |path: &Path| path.ancestors().filter(|p| p.exists()).count();
    std::iter::once(config).chain(named).map(existing).collect()
}

/// The links a symbolic link at `path` goes through, each as its path (relative targets read
/// from the folder of the link that names them), after `path` itself; at most 16.
fn link_chain(path: &Path) -> Vec<PathBuf> {
    let mut chain = Vec::new();
    let mut at = path.to_path_buf();
    while chain.len() < 16 {
        let Ok(target) = std::fs::read_link(&at) else { break };
        at = match at.parent() {
            Some(folder) if target.is_relative() => folder.join(target),
            _ => target,
        };
        chain.push(at.clone());
    }
    chain
}

/// The `server.*` keys that differ between two readings (each needs a restart).
fn changed_server_keys(old: &crate::config::ServerSettings, new: &crate::config::ServerSettings) -> Vec<&'static str> {
    // Taken apart whole: a key added to the section is compared here, or this does not build.
    let crate::config::ServerSettings {
        listen,
        allow_remote,
        max_body_bytes,
        max_connections,
        header_timeout,
        body_timeout,
    } = old;
    [
        ("server.listen", *listen != new.listen),
        ("server.allow_remote", *allow_remote != new.allow_remote),
        ("server.max_body_bytes", *max_body_bytes != new.max_body_bytes),
        ("server.max_connections", *max_connections != new.max_connections),
        ("server.header_timeout", *header_timeout != new.header_timeout),
        ("server.body_timeout", *body_timeout != new.body_timeout),
    ]
    .into_iter()
    .filter_map(|(key, changed)| changed.then_some(key))
    .collect()
}
