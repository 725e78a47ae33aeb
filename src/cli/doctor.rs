//! `mneme doctor`: checks the configuration, the storage dir and token, the daemon, its backend
//! and its queue; prints each problem with what to do about it. Exit 0 when all is well.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::ExitCode;

use reqwest::Method;
use serde_json::json;

use super::{CliError, Client};
use crate::config;
use crate::daemon::api::Status;
use crate::files;
use crate::spool::Spool;

/// What to do about an empty token file: the daemon writes its token when it starts.
const RESTART_FOR_TOKEN: &str =
    "a running daemon writes it again when it starts: restart it (`kill` its process, then `mneme serve`)";

struct Report {
    lines: Vec<(bool, String, Option<String>)>,
}

impl Report {
    fn ok(&mut self, what: String) {
        self.lines.push((true, what, None));
    }
    fn problem(&mut self, what: String, fix: String) {
        self.lines.push((false, what, Some(fix)));
    }
    fn file_problem(&mut self, p: files::FileProblem) {
        self.problem(format!("{} {}: {}", p.what, p.path.display(), p.reason), p.fix);
    }
}

pub(super) async fn doctor(flag: Option<&Path>, as_json: bool) -> Result<ExitCode, CliError> {
    let mut r = Report { lines: Vec::new() };
    let path = config::config_path(flag);
    // An invalid file is said, and the rest is checked with its [server] and [storage] as the
    // other client commands read them: after a bad edit the daemon runs on its last good file,
    // and that is when the rest needs checking.
    // The file's [storage] unread (a problem in it): the daemon is looked for with the default
    // storage dir's token, and "start it" would be refused on the same file (review69 #3).
    let mut storage_unread = false;
    let settings = match config::load_for_client(&path) {
        Ok((loaded, problem)) => {
            storage_unread =
                loaded.exists && !loaded.storage_read() && problem.as_ref().is_some_and(|e| !e.is_unreadable());
            match problem {
                // Not read at all (another user may change it, a FIFO): what is below is checked
                // with the defaults and the environment, as the hooks and commands go on.
                Some(e) if e.is_unreadable() => r.problem(
                    e.to_string(),
                    "make it a regular file of your own that only you may write, in a folder of yours (the daemon refuses it too, and keeps the configuration it runs on); checked below with the defaults and the environment".into(),
                ),
                Some(e) => r.problem(
                    e.to_string(),
                    match storage_unread {
                        false => format!(
                            "fix the keys above in {} (`mneme config check`); checked below with {}",
                            path.display(),
                            loaded.going_on_with()
                        ),
                        true => format!("fix the keys above in {} (`mneme config check`)", path.display()),
                    },
                ),
                // Named (--config, MNEME_CONFIG) and not there: a typo, most likely, as `mneme
                // serve` and `status` warn (review69 #8).
                None if !loaded.exists && config::config_named_by(flag).is_some() => r.problem(
                    format!(
                        "the config file {} names, {}, does not exist: the defaults apply",
                        config::config_named_by(flag).unwrap_or_default(),
                        path.display()
                    ),
                    "create it, or name the file you meant".into(),
                ),
                None => {
                    let what = if loaded.exists { "is valid" } else { "does not exist: the defaults apply" };
                    r.ok(format!("config {} {what}", path.display()));
                }
            }
            for w in &loaded.warnings {
                r.problem(format!("environment: {w}"), "fix or unset that variable".into());
            }
            if let Some(w) = config::secrets_others_may_read(&loaded) {
                r.problem(w, format!("chmod 600 {}", loaded.path.display()));
            }
            Some(loaded.settings)
        }
        Err(e) => {
            r.problem(e.to_string(), format!("fix the keys above in {} (`mneme config check`)", path.display()));
            None
        }
    };
    if storage_unread {
        // The default storage dir is not the user's: its files, and a daemon proving another
        // token, would only mislead ("start it", which refuses the same file).
        r.problem(
            "the storage dir, its files and the daemon were not checked: the file's [storage] could not be read".into(),
            "fix the file first, then run `mneme doctor` again".into(),
        );
    } else if let Some(settings) = &settings {
        let dir = &settings.storage.dir;
        let metadata = std::fs::metadata(dir);
        // What the daemon refuses to start with, said as it says it.
        let refused = metadata.as_ref().ok().and_then(|m| files::storage_dir_refusal(dir, m));
        match metadata {
            Ok(_) if refused.is_some() => r.file_problem(refused.expect("just matched")),
            Ok(m) if m.permissions().mode() & 0o077 != 0 => r.problem(
                format!(
                    "storage dir {} is readable by others (mode {:o})",
                    dir.display(),
                    m.permissions().mode() & 0o777
                ),
                format!("chmod 700 {}", dir.display()),
            ),
            Ok(_) => r.ok(format!("storage dir {} is private", dir.display())),
            Err(_) => r.problem(
                format!("storage dir {} does not exist", dir.display()),
                "start the daemon once: `mneme serve`".into(),
            ),
        }
        let token = settings.token_path();
        let token_read = (std::fs::metadata(&token), files::read_token(&token));
        let token_empty = matches!(token_read, (Ok(_), Ok(None)));
        match token_read {
            (_, Err(p)) => r.file_problem(p),
            (Ok(m), Ok(Some(_))) if m.permissions().mode() & 0o022 != 0 => r.problem(
                format!(
                    "token {} may be written by others (mode {:o}): its token may be another user's",
                    token.display(),
                    m.permissions().mode() & 0o777
                ),
                "the next start of the daemon replaces it with a new one (clients read it again)".into(),
            ),
            (Ok(m), Ok(Some(_))) if m.permissions().mode() & 0o077 != 0 => r.problem(
                format!("token {} is readable by others (mode {:o})", token.display(), m.permissions().mode() & 0o777),
                format!("chmod 600 {}", token.display()),
            ),
            (Ok(_), Ok(Some(_))) => r.ok(format!("token {} has mode 600", token.display())),
            // Emptied since (by hand, a restore): not a daemon never started (review89 #4).
            (Ok(_), Ok(None)) => {
                r.problem(format!("the token file {} is empty", token.display()), RESTART_FOR_TOKEN.into())
            }
            _ => r.problem(format!("no token at {}", token.display()), "start the daemon once: `mneme serve`".into()),
        }
        // The memories and the spool are as private as the token (a restore made with umask 022).
        let open: Vec<_> =
            files::open_to_others(&settings.private_files()).into_iter().filter(|(p, _)| *p != token).collect();
        if !open.is_empty() {
            r.problem(
                format!("mneme's files are readable by others: {}", files::named_with_modes(&open)),
                "the next start of the daemon restricts them to 0600 (or `chmod 600` them)".into(),
            );
        }
        // The daemon on the configured address, with its answer to a status request.
        let daemon = match Client::connect(settings).await {
            Ok(client) => {
                let status = client.call::<Status>(Method::GET, "/v1/status", None).await;
                Ok((client, status))
            }
            Err(e) => Err(e),
        };
        // The daemon that holds this storage dir, answering or not.
        let holder = super::client::locked_pid(&settings.pid_path());
        // A daemon that holds its storage but does not answer (stopped, or wedged).
        let silent = daemon.as_ref().err().and(holder);
        // One answers on the address, but none holds this storage dir (and it does not say it
        // runs on it, where the pidfile cannot be locked): another mneme's, of another config on
        // the same port. Nothing it says is about this configuration.
        let says_ours = matches!(&daemon, Ok((_, Ok(s))) if same_dir(Path::new(&s.storage_dir), &settings.storage.dir));
        let foreign = daemon.is_ok() && holder.is_none() && !says_ours;
        let spool = settings.spool_path();
        match (&daemon, spool.exists()) {
            // (A log there without it is the running daemon's while it writes the spool back.)
            (_, false) => match Spool::orphaned_log(&spool) {
                Err(e) if holder.is_none() => r.file_problem(files::spool_problem(&spool, e)),
                _ => r.ok(format!("spool {} is not created yet", spool.display())),
            },
            // The running daemon holds the spool exclusively; it opened it, so it is sound.
            (Ok(_), true) if !foreign => r.ok(format!("spool {} is open in the running daemon", spool.display())),
            (Err(_), true) if silent.is_some() => {
                r.ok(format!("spool {} is held by the daemon (not checked while it holds it)", spool.display()))
            }
            (_, true) => match Spool::check(&spool) {
                Ok(c) => r.ok(format!("spool {} is sound ({} waiting, {} dead)", spool.display(), c.spooled, c.dead)),
                Err(e) => r.file_problem(files::spool_problem(&spool, e)),
            },
        }
        if settings.memory.backend == mneme_core::BackendId::Local {
            let store = settings.local_db_path();
            if store.exists() {
                match mneme_local::check_header(&store).and_then(|()| mneme_local::check(&store)) {
                    Ok(n) => {
                        r.ok(format!("local store {} is sound ({n} {})", store.display(), super::commands::noun(n)))
                    }
                    Err(e) => r.file_problem(files::local_store_problem(&store, e)),
                }
            } else {
                r.ok(format!("local store {} is not created yet", store.display()));
            }
        }
        match daemon {
            // It proved it holds this storage dir's token, from another dir: the one it started
            // on before storage.dir was edited (the reload lends it the token to be reached).
            Ok((client, Ok(s))) if foreign => r.problem(
                format!(
                    "the daemon on {} runs on the storage dir {}, not this config's {}: storage.dir was changed after it started",
                    client.addr(),
                    s.storage_dir,
                    settings.storage.dir.display()
                ),
                "run `mneme flush` (and `mneme retry`) so that nothing waits in its spool, then restart it to apply".into(),
            ),
            Ok((client, _)) if foreign => r.problem(
                format!(
                    "a daemon answers on {}, but none runs on this config's storage dir {}: it is another mneme's",
                    client.addr(),
                    settings.storage.dir.display()
                ),
                "stop that one, or give this config a server.listen of its own; then `mneme serve`".into(),
            ),
            Ok((_, status)) => match status {
                Ok(s) => {
                    r.ok(format!(
                        "daemon {} (pid {}) answers on {} and speaks protocol {}",
                        s.version, s.pid, s.listen, s.protocol
                    ));
                    let b = &s.backend;
                    if b.healthy {
                        let version = b.version.as_deref().map(|v| format!(" (server {v})")).unwrap_or_default();
                        r.ok(format!("backend {} is healthy{version}", b.backend));
                    } else {
                        r.problem(
                            format!(
                                "backend {} is unhealthy: {}",
                                b.backend,
                                b.detail.as_deref().unwrap_or("no detail")
                            ),
                            "check the server and the [hindsight] settings; retains stay spooled meanwhile".into(),
                        );
                    }
                    // Semantic recall off because of its embedder (a refused key, an endpoint
                    // down) is something wrong, though every retain and recall still answers.
                    match b.embedding.as_ref() {
                        Some(e) if e.state == "unavailable" => r.problem(
                            format!(
                                "semantic recall is unavailable ({}): recall answers by words only",
                                e.error.as_deref().unwrap_or("no detail")
                            ),
                            "check local.embedding_url, local.embedding_model and local.embedding_api_key, and the endpoint itself".into(),
                        ),
                        Some(e) => r.ok(format!("semantic recall {} ({}, {} of {} passages embedded)", e.state, e.model, e.embedded, e.passages)),
                        None => {}
                    }
                    let q = &s.queue;
                    r.ok(format!("spool: {} waiting, {} in flight", q.pending, q.in_flight));
                    if q.dead > 0 {
                        r.problem(
                            match q.dead {
                                1 => "1 dead letter could not be delivered".to_owned(),
                                n => format!("{n} dead letters could not be delivered"),
                            },
                            "read why with `mneme notices`, fix it, then `mneme retry`".into(),
                        );
                    }
                }
                Err(e) => {
                    r.problem(format!("the daemon refused the status request: {e}"), "check the token file".into())
                }
            },
            Err(CliError::NotRunning(m) | CliError::Silent(m)) => match silent {
                Some(pid) => r.problem(
                    // The client's own words may already say so, and send the reader here.
                    match m.trim_end_matches("; `mneme doctor` says more") {
                        said if said.contains("holds the storage") => said.to_owned(),
                        said => format!("{said}; its process {pid} holds the storage"),
                    },
                    format!("if it is starting, wait: the first start of a newer mneme upgrades the store, which takes a while on a large one (its log says \"upgrading the local store\"; stopped, it starts over); if it was stopped (Ctrl-Z, SIGSTOP): `kill -CONT {pid}`; else read its log and restart it: `kill {pid}`, then `mneme serve` (what is spooled is kept)"),
                ),
                None => r.problem(m, "start it: `mneme serve`".into()),
            },
            // The daemon holding this storage dir, older than the proof (an upgrade since).
            Err(e @ CliError::NotOurs { unproven: true, .. }) if holder.is_some() => {
                r.problem(e.to_string(), "restart the daemon with this mneme version".into())
            }
            // The daemon holding this storage dir proves another token: the file was replaced
            // since it started (it reads it at start).
            Err(e @ CliError::NotOurs { .. }) if holder.is_some() => r.problem(
                e.to_string(),
                "the token file changed since the daemon started: restart it (`kill` its process, then `mneme serve`) so that it reads the file again".into(),
            ),
            // Another mneme's (another storage dir, another token) or another user's process.
            Err(CliError::NotOurs { addr, .. }) => r.problem(
                format!(
                    "a daemon answers on {addr}, but none runs on this config's storage dir {}: it is another mneme's (or another user's process)",
                    settings.storage.dir.display()
                ),
                "stop that one, or give this config a server.listen of its own; then `mneme serve`".into(),
            ),
            // Said once, on the token's line.
            Err(_) if token_empty => {
                r.problem("the daemon cannot be asked: its token file is empty".into(), RESTART_FOR_TOKEN.into())
            }
            Err(e) => r.problem(e.to_string(), "restart the daemon with this mneme version".into()),
        }
    }
    let all_well = r.lines.iter().all(|(ok, _, _)| *ok);
    if as_json {
        let checks: Vec<_> =
            r.lines.iter().map(|(ok, what, fix)| json!({"ok": ok, "check": what, "fix": fix})).collect();
        println!("{}", json!({"ok": all_well, "checks": checks}));
    } else {
        // Control characters shown escaped, as `status` shows them: a check may quote what a
        // server or an endpoint said.
        let shown = |t: &str| mneme_core::text::escape_controls(t).into_owned();
        for (ok, what, fix) in &r.lines {
            println!("{} {}", if *ok { "ok  " } else { "FAIL" }, shown(what));
            if let Some(fix) = fix {
                println!("     → {}", shown(fix));
            }
        }
        println!("{}", if all_well { "All is well." } else { "Some checks failed." });
    }
    Ok(if all_well { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// Whether two paths name the same directory (compared as they resolve, when they do).
fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}
