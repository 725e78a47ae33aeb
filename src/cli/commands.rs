//! The commands that talk to a running daemon, and `config`.

use std::io::Read;
use std::path::Path;
use std::process::ExitCode;

use futures_util::StreamExt;
use reqwest::Method;
use serde_json::{json, Value};

use super::{CliError, Client, Command, ConfigAction};
use crate::config::{self, Loaded, Scoping};
use crate::daemon::api::{
    Clear, Cleared, Flush, Flushed, Notice, NoticeList, Queued, Recall, RecallAnswer, Reloaded, Requeued, Retain,
    RetainItem, SessionStarted, StartSession, Status,
};

/// Loads the config file the flag / environment point at.
pub(super) fn load_settings(flag: Option<&Path>) -> Result<Loaded, CliError> {
    let path = config::config_path(flag);
    config::load_from_env(&path).map_err(|e| CliError::Config(e.to_string()))
}

/// The settings a command that talks to the daemon needs: with a problem in the file, those of
/// its sections that reach the daemon (see [`config::load_for_client`]), and the problem.
fn read_client_settings(flag: Option<&Path>) -> Result<(Loaded, Option<config::ConfigErrors>), CliError> {
    config::load_for_client(&config::config_path(flag)).map_err(|e| CliError::Config(e.to_string()))
}

/// The settings for `reload`: what is wrong with the file is left to the daemon's answer (told
/// twice, and "going on" before the reload was refused), but for a file that cannot be read at
/// all, which leaves reload on the defaults, whose port may not be the daemon's: said then, or
/// the only word was "not running" (review106 #4).
fn load_settings_for_reload(flag: Option<&Path>) -> Result<Loaded, CliError> {
    let (loaded, problem) = read_client_settings(flag)?;
    if let Some(problem) = problem.filter(config::ConfigErrors::is_unreadable) {
        tell_going_on(&loaded, &problem);
    }
    Ok(loaded)
}

/// [`read_client_settings`], the problem told on stderr.
pub(super) fn load_client_settings(flag: Option<&Path>) -> Result<Loaded, CliError> {
    let (loaded, problem) = read_client_settings(flag)?;
    if let Some(problem) = problem {
        tell_going_on(&loaded, &problem);
    }
    Ok(loaded)
}

/// The config file's problem, and which of its sections the command goes on with.
fn tell_going_on(loaded: &Loaded, problem: &config::ConfigErrors) {
    let problem = mneme_core::text::escape_controls(&problem.to_string()).into_owned();
    // Which sections were read (review67 #2, review69 #3).
    let with = loaded.going_on_with();
    crate::say!("mneme: {problem}\nmneme: going on with {with}: the daemon keeps its last good configuration");
}

pub(super) fn config(flag: Option<&Path>, action: ConfigAction, as_json: bool) -> Result<ExitCode, CliError> {
    match action {
        ConfigAction::Example if as_json => println!("{}", json!({"example": config::EXAMPLE})),
        ConfigAction::Example => print!("{}", config::EXAMPLE),
        ConfigAction::Path if as_json => println!("{}", json!({"path": config::config_path(flag)})),
        ConfigAction::Path => {
            println!("{}", mneme_core::text::escape_controls(&config::config_path(flag).display().to_string()))
        }
        ConfigAction::Check => {
            let path = config::config_path(flag);
            // A file named (--config, MNEME_CONFIG) that is not there is most likely a typo, and
            // a daemon started so would store on the defaults: a check fails on it (exit 1, as
            // `mneme doctor` does), where the default path missing is the ordinary first run.
            let mut named_missing = false;
            let loaded = config::load_from_env(&path).map(|mut loaded| {
                if let Some(how) = config::config_named_by(flag).filter(|_| !loaded.exists) {
                    named_missing = true;
                    loaded.warnings.push(format!(
                        "{how} names a file that does not exist: the defaults apply (a daemon started so stores on them)"
                    ));
                }
                loaded
            });
            let exit = if named_missing { ExitCode::FAILURE } else { ExitCode::SUCCESS };
            match loaded {
                Ok(mut loaded) if as_json => {
                    loaded.warnings.extend(crate::config::secrets_others_may_read(&loaded));
                    println!(
                        "{}",
                        json!({"ok": !named_missing, "path": path, "exists": loaded.exists, "warnings": loaded.warnings})
                    );
                    return Ok(exit);
                }
                Ok(mut loaded) => {
                    let what = if loaded.exists { "is valid" } else { "does not exist; the defaults apply" };
                    let shown = mneme_core::text::escape_controls(&path.display().to_string()).into_owned();
                    println!("{shown} {what} (backend: {})", loaded.settings.memory.backend);
                    loaded.warnings.extend(crate::config::secrets_others_may_read(&loaded));
                    for w in loaded.warnings {
                        println!("warning: {w}");
                    }
                    return Ok(exit);
                }
                Err(e) if as_json => {
                    let errors: Vec<Value> =
                        e.errors.iter().map(|x| json!({"key": x.key, "line": x.line, "message": x.message})).collect();
                    println!("{}", json!({"ok": false, "path": path, "errors": errors}));
                    return Ok(ExitCode::from(2));
                }
                Err(e) => return Err(CliError::Config(e.to_string())),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) async fn remote(flag: Option<&Path>, command: Command, as_json: bool) -> Result<ExitCode, CliError> {
    // A clear not confirmed is refused first, whether or not a daemon runs.
    if let Command::Clear { remote, all, yes: false, .. } = command {
        let what = if remote && all {
            "clear --all --remote deletes, on the server, the configured bank and under per-project scoping every bank named after it (`{bank}-…`, each project's: also one another tool named so), and cannot be undone; add --yes to confirm"
        } else if remote {
            "clear --remote deletes the server's whole bank, every project's memories in it (Hindsight cannot delete by tag), and cannot be undone; add --yes to confirm"
        } else {
            "clear deletes memories and cannot be undone; add --yes to confirm"
        };
        return Err(CliError::Other(what.into()));
    }
    let settings = match command {
        Command::Reload => load_settings_for_reload(flag)?.settings,
        _ => load_client_settings(flag)?.settings,
    };
    let client = Client::connect_for_command(&settings).await?;
    match command {
        Command::Status => {
            let s: Status = client.get("/v1/status").await?;
            show(as_json, &s, human_status(&s));
        }
        Command::Flush { session } => {
            let given = session.clone();
            let flushed = client.post("/v1/flush", &Flush { session_id: session, wait: true }).await;
            let v: Flushed = flushed.map_err(|e| of_the_command_line(e, given.as_deref()))?;
            let Flushed { delivered, failed, held } = v;
            let mut said = format!("Delivered {delivered} {}, {failed} failed.", noun(delivered));
            if held > 0 {
                said.push_str(&format!(
                    " Memory is off: {held} {} kept spooled for the next backend that stores.",
                    noun(held)
                ));
            }
            show(as_json, &v, said);
            if failed > 0 {
                if !as_json {
                    crate::say!("mneme: {failed} {} could not be delivered; see `mneme notices`", noun(failed));
                }
                return Ok(ExitCode::from(1));
            }
        }
        Command::Retain { session, context, text } => {
            let text = or_stdin(text, client.max_body())?;
            if mneme_core::text::is_blank(&text) {
                return Err(CliError::Other("nothing to retain: the text is blank".into()));
            }
            let given = session.clone();
            let id = cli_session(&client, session).await?;
            let body = Retain { items: vec![RetainItem { content: text, context }] };
            let queued = client.post(&session_path(&id, "retain"), &body).await;
            let v: Queued = queued.map_err(|e| of_the_command_line(e, given.as_deref()))?;
            show(as_json, &v, v.message.clone());
        }
        Command::Recall { session, query } => {
            let query = or_stdin(query, client.max_body())?;
            let given = session.clone();
            let id = cli_session(&client, session).await?;
            let answer = client.post(&session_path(&id, "recall"), &Recall { query }).await;
            let v: RecallAnswer = answer.map_err(|e| of_the_command_line(e, given.as_deref()))?;
            show(as_json, &v, v.message.clone());
        }
        Command::Notices { follow, after } => {
            let list: NoticeList = client.get(&format!("/v1/notices?after={after}&limit=1000")).await?;
            let mut last = after;
            for n in &list.notices {
                print_notice(n, as_json);
                last = last.max(n.id); // a notice not stored yet has id 0
            }
            if list.notices.is_empty() && !follow && !as_json {
                println!("No notices.");
            }
            if follow {
                follow_notices(&client, last, as_json).await?;
            }
        }
        Command::Clear { session, all, here, remote, yes: _ } => {
            let session = match here {
                true => {
                    // As the daemon scopes it (its settings, not this command's): under global
                    // scoping a folder has no project, and its scope is the whole bank.
                    let started = start_cli_session(&client).await?;
                    if is_global(&started) {
                        return Err(CliError::Other(
                            "memory.scoping is \"global\": this folder's scope is the whole bank; clear it with --all"
                                .into(),
                        ));
                    }
                    Some(started.session_id)
                }
                false => session,
            };
            let given = session.clone().filter(|_| !here);
            let cleared = client.post("/v1/clear", &Clear { session_id: session, all, remote }).await;
            let v: Cleared = cleared.map_err(|e| of_the_command_line_for(e, given.as_deref(), CLEAR_HINT))?;
            show(as_json, &v, v.message.clone());
            // Said, and not a success: `mneme clear --all --yes && echo wiped` took a clear that
            // deleted nothing stored for one that did (review65 #5).
            if v.memory_off {
                return Ok(ExitCode::FAILURE);
            }
        }
        Command::Forget { id, bank, document } => {
            return super::browse::forget(&client, super::browse::ForgetTarget { id, bank, document }, as_json).await;
        }
        Command::Ui { valid_for, no_open } => {
            let opts = super::browse::UiOptions { valid_for, no_open, storage_dir: settings.storage.dir.clone() };
            return super::browse::ui(&client, opts, as_json).await;
        }
        Command::Retry => {
            let v: Requeued = client.send(Method::POST, "/v1/retry").await?;
            let n = v.requeued;
            show(as_json, &v, format!("Re-queued {n} dead {}.", if n == 1 { "letter" } else { "letters" }));
        }
        Command::Reload => match client.send::<Reloaded>(Method::POST, "/v1/reload").await {
            Ok(v) => {
                let backend = v.backend;
                let mut human = match v.previous_backend {
                    _ if v.not_read.is_some() => v.not_read.clone().unwrap_or_default(),
                    _ if !v.changed => format!("Reloaded the configuration (backend {backend}, unchanged)."),
                    Some(previous) if previous == backend => {
                        format!("Reopened the {backend} backend with its new settings.")
                    }
                    Some(previous) => format!("Switched the memory backend from {previous} to {backend}."),
                    None => format!("Switched the memory backend to {backend}."),
                };
                if !v.restart_needed.is_empty() {
                    human.push_str(&format!(" Restart mneme to apply {}.", v.restart_needed.join(", ")));
                }
                show(as_json, &v, human);
            }
            // A file the daemon refused is a config error (exit 2); a valid one whose backend
            // would not open (a Hindsight server down) is the daemon refusing (exit 1).
            Err(CliError::Daemon { status: 422, code, message, answer }) if code == "invalid_config" => {
                return Err(CliError::ConfigRefused { message, answer })
            }
            Err(e) => return Err(e),
        },
        Command::Serve
        | Command::Config { .. }
        | Command::Migrate { .. }
        | Command::Doctor
        | Command::Hook { .. }
        | Command::Export { .. }
        | Command::Import { .. } => unreachable!("handled before connecting"),
    }
    Ok(ExitCode::SUCCESS)
}

/// The session the CLI works in: the one given, or the current directory's "cli" session
/// (`cli-<hash of the directory>`: one shared id, scoped again by each call, let a retain from one
/// project land in another's scope when two ran at once).
/// A daemon's refusal worded for the command line: an unknown `--session` was told to "start it
/// with POST /v1/sessions" (the API's advice). The code and the answer `--json` prints stay.
fn of_the_command_line(e: CliError, session: Option<&str>) -> CliError {
    of_the_command_line_for(e, session, "(or leave it out: this folder's own session is used)")
}

/// What `clear` says of an unknown `--session` after the advice to name a known one.
const CLEAR_HINT: &str = "(or clear this folder's project with --here)";

/// [`of_the_command_line`] with the command's own `hint` on what else to do.
fn of_the_command_line_for(e: CliError, session: Option<&str>, hint: &str) -> CliError {
    match (e, session) {
        (CliError::Daemon { status, code, answer, .. }, Some(id)) if code == "unknown_session" => {
            let message = format!(
                "no session {} is known to the daemon: give --session the id of a session an agent started {hint}",
                mneme_core::text::quoted_unless_private(id)
            );
            CliError::Daemon { status, code, message, answer }
        }
        (e, _) => e,
    }
}

async fn cli_session(client: &Client, session: Option<String>) -> Result<String, CliError> {
    match session {
        Some(id) => Ok(id),
        None => Ok(start_cli_session(client).await?.session_id),
    }
}

/// Whether the daemon scopes by `global`: a folder's scope is then the whole bank. Asked of the
/// daemon; guessed from the bank's name, `-<project>` at its end, only when an earlier daemon
/// does not say (a bank id of its own such as `my-app` in a folder `app` looked per-project, and
/// `clear --here` there deleted every project's memories).
fn is_global(started: &SessionStarted) -> bool {
    match started.scoping.as_deref() {
        Some(scoping) => scoping == Scoping::Global.as_str(),
        None => started.scope.tags.is_empty() && !started.scope.bank.ends_with(&format!("-{}", started.project)),
    }
}

/// Starts (or scopes again) the current directory's "cli" session ([`cli_session`]).
async fn start_cli_session(client: &Client) -> Result<SessionStarted, CliError> {
    let cwd = super::working_folder().ok_or_else(|| {
        CliError::Other(
            "cannot read the current folder (deleted under this shell?): run the command from the project's folder, or name a session with --session".into(),
        )
    })?;
    let id = crate::ids::directory_session("cli", &cwd);
    let body = StartSession {
        session_id: id.clone(),
        cwd,
        agent: Some("mneme-cli".into()),
        parent_session_id: None,
        tools: None,
    };
    client.post("/v1/sessions", &body).await
}

async fn follow_notices(client: &Client, after: i64, as_json: bool) -> Result<(), CliError> {
    let resp = client.stream(&format!("/v1/notices/stream?after={after}")).await?;
    let mut body = resp.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| CliError::Other(format!("notice stream ended: {e}")))?;
        buf.extend_from_slice(&chunk);
        for n in whole_events(&mut buf) {
            print_notice(&n, as_json);
        }
    }
    // The stream never ends while the daemon runs: it stopped (or restarted).
    Err(CliError::Other("the daemon closed the notice stream: it stopped or restarted".into()))
}

/// The notices of the whole events at the start of `buf`, taken out of it. Events are cut from
/// the bytes before they are decoded: a character split between two chunks was decoded as two
/// replacement characters.
fn whole_events(buf: &mut Vec<u8>) -> Vec<Notice> {
    let mut notices = Vec::new();
    while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
        let event: Vec<u8> = buf.drain(..end + 2).collect();
        for line in String::from_utf8_lossy(&event).lines() {
            if let Some(n) = line.strip_prefix("data:").and_then(|d| serde_json::from_str::<Notice>(d.trim()).ok()) {
                notices.push(n);
            }
        }
    }
    notices
}

fn print_notice(n: &Notice, as_json: bool) {
    if as_json {
        println!("{}", serde_json::to_string(n).expect("notice serializes"));
        return;
    }
    let session = n.session_id.as_deref().map(|s| format!(" (session {s})")).unwrap_or_default();
    // Id 0: a notice the spool could not store yet (a full disk); it gets its id once stored.
    let id = if n.id > 0 { format!("#{}", n.id) } else { "(not stored yet)".to_owned() };
    let line = format!("{id} {} {:<7} [{}]{session} {}", n.at, n.level, n.source, n.message);
    println!("{}", mneme_core::text::escape_controls(&line));
}

pub(super) fn noun(n: u64) -> &'static str {
    if n == 1 {
        "memory"
    } else {
        "memories"
    }
}

fn human_bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

/// "healthy", "UNREACHABLE" for a Hindsight server that did not answer, else "UNHEALTHY": one
/// that answered but refuses the token (review64 #5) or has no `/health` at the configured path
/// (review67 #6), or a local store failing its check, was called unreachable.
fn health_word(b: &mneme_core::BackendStatus) -> &'static str {
    match b.healthy {
        true => "healthy",
        false if b.reachable == Some(false) => "UNREACHABLE",
        false => "UNHEALTHY",
    }
}

fn human_status(s: &Status) -> String {
    let up = s.uptime_seconds;
    let uptime = format!("{}h {}m {}s", up / 3600, up / 60 % 60, up % 60);
    let b = &s.backend;
    let mut backend = format!("{} ({})", b.backend, health_word(b));
    if let Some(v) = &b.version {
        backend.push_str(&format!(", server {v}"));
    }
    if let Some(m) = b.memories {
        backend.push_str(&format!(", {m} {}", noun(m)));
    }
    if let Some(bytes) = b.storage_bytes {
        backend.push_str(&format!(", {}", human_bytes(bytes)));
    }
    if let Some(d) = &b.detail {
        backend.push_str(&format!(" — {d}"));
    }
    if let Some(e) = &b.embedding {
        backend.push_str(&embedding_line(e));
    }
    if let (Some(words), Some(t)) = (b.thesaurus_words, &s.thesaurus) {
        let source = match (t.builtin, &t.file) {
            (true, Some(file)) => format!("the built-in list and {file}"),
            (true, None) => "the built-in list".to_owned(),
            (false, Some(file)) => file.clone(),
            (false, None) => "off".to_owned(),
        };
        backend.push_str(&format!("\nthesaurus: {source} ({words} words with alternatives)"));
    }
    let q = &s.queue;
    let config =
        if s.config_exists { s.config_path.clone() } else { format!("{} (not found: defaults)", s.config_path) };
    format!(
        "mneme {} running for {uptime} (pid {}) on {}\n\
         backend:  {backend}\n\
         queue:    {} pending, {} in flight, {} dead{}\n\
         sessions: {}\n\
         config:   {config}\n\
         storage:  {}\n\
         notices:  {}",
        s.version,
        s.pid,
        s.listen,
        q.pending,
        q.in_flight,
        q.dead,
        if q.dead > 0 { " (see `mneme notices`, then `mneme retry`)" } else { "" },
        s.sessions,
        s.storage_dir,
        if s.last_notice_id > 0 { format!("last #{} (see `mneme notices`)", s.last_notice_id) } else { "none".into() },
    )
}

/// `/v1/sessions/{id}/{tail}` with the id percent-encoded (an agent's session id may hold any
/// character).
/// The status's line on semantic recall (with its leading newline).
fn embedding_line(e: &mneme_core::EmbeddingStatus) -> String {
    let mut line = if e.state == "loading" {
        // The vectors on disk are not counted until they are read: "0 of 510 embedded" read as
        // if a restart had lost them all.
        format!(
            "\nsemantic: loading ({}): the model and the stored vectors of {} passages are being read; recall uses BM25 meanwhile",
            e.model, e.passages
        )
    } else {
        let pct = if e.passages == 0 { 100.0 } else { e.embedded as f64 * 100.0 / e.passages as f64 };
        format!("\nsemantic: {} ({}), {} of {} passages embedded ({pct:.0}%)", e.state, e.model, e.embedded, e.passages)
    };
    if let Some(err) = &e.error {
        line.push_str(&format!(" — {err}; recall uses BM25 meanwhile"));
    }
    if e.banks_measuring > 0 {
        let banks = if e.banks_measuring == 1 { "bank" } else { "banks" };
        line.push_str(&format!(", neighbourhoods of {} {banks} being measured", e.banks_measuring));
    }
    line
}

fn session_path(id: &str, tail: &str) -> String {
    super::browse::api_path(&["v1", "sessions", id, tail], None)
}

/// The argument, or standard input when it is `-`: at most `most` bytes, what the daemon takes
/// in one request (read without a bound, `/dev/zero` grew the CLI until the OOM killer came).
fn or_stdin(arg: String, most: usize) -> Result<String, CliError> {
    if arg != "-" {
        return Ok(arg);
    }
    let mut buf = Vec::new();
    std::io::stdin()
        .lock()
        .take(most as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|e| CliError::Other(format!("cannot read standard input: {e}")))?;
    if buf.len() > most {
        return Err(CliError::Other(format!(
            "standard input is longer than the daemon takes in one request (server.max_body_bytes = {most}); nothing was sent"
        )));
    }
    String::from_utf8(buf).map_err(|_| CliError::Other("standard input is not UTF-8 text; nothing was sent".into()))
}

/// An answer as one line of JSON (`--json`), or the line for a person.
fn show<T: serde::Serialize>(as_json: bool, answer: &T, human: String) {
    if as_json {
        println!("{}", serde_json::to_string(answer).expect("plain data serializes"));
    } else {
        println!("{}", mneme_core::text::escape_controls(&human));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loading_embedder_is_not_said_to_have_lost_its_vectors() {
        let e = |state: &str, embedded| mneme_core::EmbeddingStatus {
            model: "builtin:m".into(),
            state: state.into(),
            embedded,
            passages: 510,
            banks_measuring: 0,
            error: None,
        };
        let loading = embedding_line(&e("loading", 0));
        assert!(!loading.contains("0 of 510") && loading.contains("510 passages are being read"), "{loading}");
        assert_eq!(
            embedding_line(&e("ready", 255)),
            "\nsemantic: ready (builtin:m), 255 of 510 passages embedded (50%)"
        );
    }

    #[test]
    fn a_server_that_answers_is_unhealthy_not_unreachable() {
        let status = |backend: &str, healthy: bool, reachable: Option<bool>| -> mneme_core::BackendStatus {
            serde_json::from_value(serde_json::json!({
                "backend": backend, "healthy": healthy, "detail": null, "version": null, "reachable": reachable
            }))
            .unwrap()
        };
        assert_eq!(health_word(&status("hindsight", false, Some(false))), "UNREACHABLE");
        // Answered, without a version (a 404 at a wrong api_url path: review67 #6) or with one.
        assert_eq!(health_word(&status("hindsight", false, Some(true))), "UNHEALTHY");
        assert_eq!(health_word(&status("local", false, None)), "UNHEALTHY");
        assert_eq!(health_word(&status("local", true, None)), "healthy");
    }

    #[test]
    fn a_character_split_between_chunks_is_read_whole() {
        let event = "id: 7\ndata: {\"id\":7,\"at\":\"2026-01-01T00:00:00Z\",\"level\":\"info\",\"source\":\"local\",\"message\":\"déployé ✓ 部署\"}\n\n";
        let bytes = event.as_bytes();
        // Cut inside every character in turn: each cut must read the same message.
        for cut in 1..bytes.len() {
            let mut buf = bytes[..cut].to_vec();
            let mut got = whole_events(&mut buf);
            buf.extend_from_slice(&bytes[cut..]);
            got.extend(whole_events(&mut buf));
            assert_eq!(got.len(), 1, "cut at {cut}");
            assert_eq!(got[0].message, "déployé ✓ 部署", "cut at {cut}");
            assert!(buf.is_empty());
        }
    }
}
