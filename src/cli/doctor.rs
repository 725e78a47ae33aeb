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
}

pub(super) async fn doctor(flag: Option<&Path>, as_json: bool) -> Result<ExitCode, CliError> {
    let mut r = Report { lines: Vec::new() };
    let path = config::config_path(flag);
    let settings = match config::load(&path, &|k| std::env::var(k).ok()) {
        Ok(loaded) => {
            let what = if loaded.exists { "is valid" } else { "does not exist: the defaults apply" };
            r.ok(format!("config {} {what}", path.display()));
            for w in &loaded.warnings {
                r.problem(format!("environment: {w}"), "fix or unset that variable".into());
            }
            Some(loaded.settings)
        }
        Err(e) => {
            r.problem(e.to_string(), format!("fix the keys above in {} (`mneme config check`)", path.display()));
            None
        }
    };
    if let Some(settings) = &settings {
        let dir = &settings.storage.dir;
        match std::fs::metadata(dir) {
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
        match std::fs::metadata(&token) {
            Ok(m) if m.permissions().mode() & 0o077 != 0 => r.problem(
                format!("token {} is readable by others (mode {:o})", token.display(), m.permissions().mode() & 0o777),
                format!("chmod 600 {}", token.display()),
            ),
            Ok(_) => r.ok(format!("token {} has mode 600", token.display())),
            Err(_) => {
                r.problem(format!("no token at {}", token.display()), "start the daemon once: `mneme serve`".into())
            }
        }
        match Client::connect(settings).await {
            Ok(client) => match client.call::<Status>(Method::GET, "/v1/status", None).await {
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
                    let q = &s.queue;
                    r.ok(format!("spool: {} waiting, {} in flight", q.pending, q.in_flight));
                    if q.dead > 0 {
                        r.problem(
                            format!("{} dead letters could not be delivered", q.dead),
                            "read why with `mneme notices`, fix it, then `mneme retry`".into(),
                        );
                    }
                }
                Err(e) => {
                    r.problem(format!("the daemon refused the status request: {e}"), "check the token file".into())
                }
            },
            Err(CliError::NotRunning(m)) => r.problem(m, "start it: `mneme serve`".into()),
            Err(e) => r.problem(e.to_string(), "restart the daemon with this mneme version".into()),
        }
    }
    let all_well = r.lines.iter().all(|(ok, _, _)| *ok);
    if as_json {
        let checks: Vec<_> =
            r.lines.iter().map(|(ok, what, fix)| json!({"ok": ok, "check": what, "fix": fix})).collect();
        println!("{}", json!({"ok": all_well, "checks": checks}));
    } else {
        for (ok, what, fix) in &r.lines {
            println!("{} {what}", if *ok { "ok  " } else { "FAIL" });
            if let Some(fix) = fix {
                println!("     → {fix}");
            }
        }
        println!("{}", if all_well { "All is well." } else { "Some checks failed." });
    }
    Ok(if all_well { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
