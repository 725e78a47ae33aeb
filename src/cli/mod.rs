//! The `mneme` command line: `serve` runs the daemon; every other command talks to it over HTTP
//! (except `config`, which works on the file alone). Human output by default, `--json` for scripts.

mod browse;
mod client;
mod commands;
mod doctor;
mod hook;
mod migrate;
mod serve;
mod transfer;
mod versions;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub use client::{recorded_addr, Client};

/// mneme: a local memory daemon for AI coding agents.
#[derive(Debug, Parser)]
#[command(name = "mneme", version, about, propagate_version = true)]
pub struct Cli {
    /// Config file (default: $MNEME_CONFIG, else $XDG_CONFIG_HOME/mneme/config.toml).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the daemon's JSON answer instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon in the foreground (logs to stderr; SIGINT/SIGTERM drain and stop).
    Serve,
    /// Show the daemon's backend, queue, sessions and config.
    Status,
    /// Deliver queued memories now and wait.
    Flush {
        /// Only this session's queue.
        #[arg(long, value_name = "ID")]
        session: Option<String>,
    },
    /// Retain a memory (TEXT, or - to read standard input).
    Retain {
        /// Session to retain under (default: a "cli" session in the current directory).
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// What the memory is about.
        #[arg(long, value_name = "TEXT")]
        context: Option<String>,
        /// The memory, or - for standard input.
        text: String,
    },
    /// Recall memories relevant to QUERY.
    Recall {
        /// Session whose scope to search (default: a "cli" session in the current directory).
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// What to look for (`-`: standard input).
        query: String,
    },
    /// Show notices (failed deliveries, dead letters, config problems).
    Notices {
        /// Keep printing new notices as they come.
        #[arg(long, short)]
        follow: bool,
        /// Only notices after this id.
        #[arg(long, value_name = "ID", default_value_t = 0)]
        after: i64,
    },
    /// Delete memories: one session's scope, this folder's project, or everything.
    #[command(group(clap::ArgGroup::new("what").required(true).args(["session", "all", "here"])))]
    Clear {
        /// The scope of this session.
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// Everything.
        #[arg(long)]
        all: bool,
        /// The scope of this folder's project, as `mneme retain` run here stores into it (a
        /// project whose agent sessions have ended has no session left to name).
        #[arg(long)]
        here: bool,
        /// Also delete the server's memories (hindsight): the whole bank, every project's memories
        /// in it, even with --session (Hindsight cannot delete by tag).
        #[arg(long)]
        remote: bool,
        /// Confirm: clearing cannot be undone.
        #[arg(long)]
        yes: bool,
    },
    /// Put dead letters back in the queue and deliver them.
    Retry,
    /// Delete one memory (by the id `mneme export` or the web view shows) or, with --document,
    /// every memory of a document.
    Forget {
        /// The memory id (or the document id with --document).
        id: String,
        /// Its bank (needed for a document, and on the Hindsight backend).
        #[arg(long, value_name = "BANK")]
        bank: Option<String>,
        /// `ID` names a document: forget all of its memories.
        #[arg(long)]
        document: bool,
    },
    /// Print (and on a desktop, open) a one-time login URL for the web view at /ui.
    Ui {
        /// How long the browser stays logged in (e.g. 8h, 2days; default 12h, at most 30 days).
        #[arg(long, value_name = "DURATION", value_parser = browse::parse_valid_for)]
        valid_for: Option<std::time::Duration>,
        /// Only print the URL.
        #[arg(long)]
        no_open: bool,
    },
    /// Re-read the config file now (the daemon also watches it); switches backends live.
    Reload,
    /// Write the stored memories as JSON lines (one memory a line) to standard output or a file.
    Export {
        /// Only this bank (default: every bank; on Hindsight every bank of this configuration: the
        /// configured bank, and under per-project scoping each project's).
        #[arg(long, value_name = "BANK")]
        bank: Option<String>,
        /// Write here instead of standard output.
        #[arg(long, short, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Read memories written by `mneme export` (a file, or - for standard input). Idempotent.
    Import {
        /// The JSON-lines file.
        file: PathBuf,
    },
    /// Copy memories from one store to another; resumable and idempotent.
    Migrate {
        /// Source backend: local or hindsight.
        #[arg(long, value_name = "BACKEND", value_parser = storing_backend)]
        from: mneme_core::BackendId,
        /// Target backend: local or hindsight.
        #[arg(long, value_name = "BACKEND", value_parser = storing_backend)]
        to: mneme_core::BackendId,
        /// Only this bank (default: every bank; from Hindsight, every bank of this configuration:
        /// the configured one and, under per-project scoping, each project's).
        #[arg(long, value_name = "BANK")]
        bank: Option<String>,
        /// Copy about this many memories in this run (run again to continue): a document is
        /// never cut, so its last memories may go over.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
        limit: Option<u64>,
    },
    /// Check the installation and the running daemon; say what to do about each problem.
    Doctor,
    /// Agent hooks: read a hook event on stdin, answer on stdout, never block the agent.
    Hook {
        /// Which agent.
        #[command(subcommand)]
        agent: HookAgent,
    },
    /// Check, locate or print the configuration.
    Config {
        /// Which.
        #[command(subcommand)]
        action: ConfigAction,
    },
}

/// `mneme hook …`
#[derive(Debug, Subcommand)]
pub enum HookAgent {
    /// Claude Code (SessionStart, UserPromptSubmit, PreCompact, Stop, SessionEnd).
    ClaudeCode {
        /// Print the hooks configuration for .claude/settings.json instead of handling an event.
        #[arg(long)]
        install: bool,
        /// With --install: merge it into ./.claude/settings.json and ./.mcp.json.
        #[arg(long, requires = "install")]
        write: bool,
        /// With --install: the hooks only, without mneme's MCP server (no memory tools).
        #[arg(long, requires = "install")]
        no_mcp: bool,
        /// Print the headers for mneme's MCP server (Claude Code's `headersHelper`).
        #[arg(long, conflicts_with = "install")]
        mcp_headers: bool,
        /// Take mneme's hooks, MCP server and its approval out of ./.claude/settings.json and
        /// ./.mcp.json, leaving everything else.
        #[arg(long, conflicts_with_all = ["install", "mcp_headers"])]
        uninstall: bool,
    },
}

/// `mneme config …`
#[derive(Debug, Subcommand)]
pub enum ConfigAction {
    /// Validate the config file (and environment overrides); report every problem.
    Check,
    /// Print the example configuration with every key and its default.
    Example,
    /// Print which config file is used.
    Path,
}

/// Why a command failed; each maps to an exit code.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// No daemon answers (exit 3).
    #[error("{0}")]
    NotRunning(String),
    /// A daemon takes connections but does not answer (exit 3): stopped, or wedged.
    #[error("{0}")]
    Silent(String),
    /// What answers on the address does not hold this mneme's token (exit 3): another mneme's
    /// daemon, of another storage dir, or another user's process. Nothing was sent to it.
    #[error("{}", not_ours_message(addr, version, token, *unproven, *relayed))]
    NotOurs {
        /// Where it answers.
        addr: String,
        /// The version it says it is.
        version: String,
        /// This mneme's token file.
        token: String,
        /// It gave no proof at all (a mneme older than the check, or not mneme), rather than a
        /// wrong one (another token: another storage dir's daemon).
        unproven: bool,
        /// It proved the token for another address than the one reached: what answers passes
        /// the question on to this mneme's daemon elsewhere (a relay).
        relayed: bool,
    },
    /// The daemon refused (exit 1).
    #[error("{message}")]
    Daemon {
        /// HTTP status.
        status: u16,
        /// The answer's error code (`invalid_config`, `backend_unavailable`, …); empty when the
        /// answer had none.
        code: String,
        /// Its message.
        message: String,
        /// The daemon's whole error answer (`{"error": {…}}` and what rides beside it, such as a
        /// refused reload's `errors`), which `--json` prints as it came.
        answer: Option<serde_json::Value>,
    },
    /// The configuration is invalid (exit 2).
    #[error("{0}")]
    Config(String),
    /// The daemon refused a reload's file (exit 2): its answer lists each key and line.
    #[error("{message}")]
    ConfigRefused {
        /// The daemon's message.
        message: String,
        /// Its whole answer, for `--json`.
        answer: Option<serde_json::Value>,
    },
    /// Anything else (exit 1).
    #[error("{0}")]
    Other(String),
}

fn not_ours_message(addr: &str, version: &str, token: &str, unproven: bool, relayed: bool) -> String {
    if relayed {
        format!(
            "what answers at {addr} passes questions on to this mneme's daemon at another address: a relay (another user's process, perhaps on a port the daemon used before); the token was not sent. Name the address the daemon listens at (`mneme status` says it)"
        )
    } else if unproven {
        format!(
            "what answers at {addr} as mneme {version} does not prove it holds this mneme's token ({token}): a daemon older than this mneme (restart it with this version) or another user's process; the token was not sent"
        )
    } else {
        format!(
            "what answers at {addr} as mneme {version} does not hold this mneme's token ({token}): a daemon of another storage dir, or another user's process; the token was not sent"
        )
    }
}

impl CliError {
    /// The same failure, its message followed by `note` (what had been done before it).
    pub(crate) fn with_note(self, note: &str) -> Self {
        match self {
            CliError::NotRunning(m) => CliError::NotRunning(m + note),
            CliError::Silent(m) => CliError::Silent(m + note),
            CliError::Config(m) => CliError::Config(m + note),
            CliError::Other(m) => CliError::Other(m + note),
            CliError::Daemon { status, code, message, mut answer } => {
                let message = message + note;
                if let Some(said) = answer.as_mut().and_then(|a| a.get_mut("error")).and_then(|e| e.as_object_mut()) {
                    said.insert("message".into(), message.clone().into());
                }
                CliError::Daemon { status, code, message, answer }
            }
            other => other,
        }
    }

    /// A short name of the kind of failure, for `--json`.
    fn code(&self) -> &'static str {
        match self {
            CliError::NotRunning(_) => "not_running",
            CliError::Silent(_) => "not_answering",
            CliError::Daemon { .. } => "refused",
            CliError::NotOurs { .. } => "not_ours",
            CliError::Config(_) | CliError::ConfigRefused { .. } => "invalid_config",
            CliError::Other(_) => "failed",
        }
    }

    /// The failure as `--json` prints it: the daemon's own answer when it refused (its code,
    /// such as `unknown_session`, and its details), else `{"error": {code, message}}`.
    fn json(&self) -> serde_json::Value {
        match self {
            CliError::Daemon { answer: Some(answer), .. } | CliError::ConfigRefused { answer: Some(answer), .. } => {
                answer.clone()
            }
            _ => serde_json::json!({"error": {"code": self.code(), "message": self.to_string()}}),
        }
    }
}

/// Why no daemon was found, when the config file is gone or empty: the command then looked
/// where the defaults say, while a daemon started with the file keeps its settings (as it does
/// through an editor's save) and runs where the file said. Empty when the file has content.
fn config_gone_note(flag: Option<&std::path::Path>) -> String {
    let path = crate::config::config_path(flag);
    // Read as the config is (a regular file only: a FIFO waited for a writer for ever).
    let state = match crate::config::read(&path) {
        // (Its folder gone too: a first run, nothing was there to lose.)
        Ok(None) if path.parent().is_some_and(|f| f.is_dir()) => "does not exist",
        Ok(Some(text)) if text.bytes().all(|b| b.is_ascii_whitespace()) => "is empty",
        _ => return String::new(),
    };
    format!(
        "; {} {state}, so this command looked where the defaults say: a daemon started while it held settings keeps them and runs where they said until it is restarted (put the file back, its [server] and [storage] at least, to reach it)",
        path.display()
    )
}

/// A backend that keeps memories (`local` or `hindsight`), for migrate.
/// The folder a command runs in, as sent to the daemon: the process's, else the shell's `PWD`
/// when that folder was deleted under it (the daemon names a folder that is gone by the nearest
/// one that is not). Taken for "/", a clear of "this folder's project" deleted the memories of
/// the project of no folder. `None` when neither can be read.
pub(crate) fn working_folder() -> Option<String> {
    match std::env::current_dir() {
        Ok(dir) => Some(crate::session::cwd_to_send(&dir)),
        Err(_) => std::env::var("PWD").ok().filter(|pwd| std::path::Path::new(pwd).is_absolute()),
    }
}

fn storing_backend(s: &str) -> Result<mneme_core::BackendId, String> {
    match s.parse::<mneme_core::BackendId>() {
        Ok(mneme_core::BackendId::Off) | Err(_) => {
            Err(format!("{s:?} is not a backend that keeps memories: local or hindsight"))
        }
        Ok(id) => Ok(id),
    }
}

impl CliError {
    fn exit_code(&self) -> ExitCode {
        match self {
            // Another program on the port is no daemon of this mneme's, as the README says: a
            // script that reads 3 as "not running" read 1, "refused", for it.
            CliError::NotRunning(_) | CliError::Silent(_) | CliError::NotOurs { .. } => ExitCode::from(3),
            CliError::Config(_) | CliError::ConfigRefused { .. } => ExitCode::from(2),
            CliError::Daemon { .. } | CliError::Other(_) => ExitCode::from(1),
        }
    }
}

/// Runs a parsed command line; prints errors as one line on stderr.
/// Ends the process as a Unix tool whose reader went away ends: killed by SIGPIPE (which the CLI
/// otherwise ignores, so that a write to a socket the daemon closed is an error it can tell).
pub fn end_by_sigpipe() {
    // SAFETY: restoring SIGPIPE's default and raising it ends the process at once.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::raise(libc::SIGPIPE);
    }
}

/// How long blocking calls still running when a command (or `serve`'s drain) has ended are
/// waited for.
const STRAGGLERS: std::time::Duration = std::time::Duration::from_secs(1);

pub fn run(cli: Cli) -> ExitCode {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if std::env::var_os("TOKIO_WORKER_THREADS").is_none() {
        // One async worker: a request's async part is short (parse, route, JSON, a hand-off to
        // the spool or store threads, which do the disk work). A second worker mostly adds
        // cross-thread wake-ups: on 2 cores, 9k retains/s with two against 10.5k with one.
        // TOKIO_WORKER_THREADS still overrides.
        builder.worker_threads(1);
    }
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            crate::say!("mneme: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let json = cli.json;
    // An export to standard output: the memories are there, and an error is no line of theirs.
    let memories_on_stdout = matches!(&cli.command, Command::Export { output: None, .. });
    let config = cli.config.clone();
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve => serve::serve(cli.config.as_deref()).await,
            Command::Config { action } => commands::config(cli.config.as_deref(), action, cli.json),
            Command::Migrate { from, to, bank, limit } => {
                migrate::migrate(cli.config.as_deref(), migrate::Plan { from, to, bank, limit }, cli.json).await
            }
            Command::Doctor => doctor::doctor(cli.config.as_deref(), cli.json).await,
            Command::Hook { agent: HookAgent::ClaudeCode { install: true, write, no_mcp, .. } } => {
                hook::install(cli.config.as_deref(), hook::Install { write, mcp: !no_mcp }, cli.json)
            }
            Command::Hook { agent: HookAgent::ClaudeCode { uninstall: true, .. } } => {
                hook::uninstall(cli.config.as_deref(), cli.json)
            }
            Command::Hook { agent: HookAgent::ClaudeCode { mcp_headers: true, .. } } => {
                hook::mcp_headers(cli.config.as_deref()).await
            }
            Command::Hook { agent: HookAgent::ClaudeCode { .. } } => Ok(hook::claude_code(cli.config.as_deref()).await),
            Command::Export { bank, output } => transfer::export(cli.config.as_deref(), bank, output, cli.json).await,
            Command::Import { file } => transfer::import(cli.config.as_deref(), &file, cli.json).await,
            other => commands::remote(cli.config.as_deref(), other, cli.json).await,
        }
    });
    // A blocking call still running past the command's end (a question's vector from an
    // endpoint that hangs, which recall stopped waiting for after a second) would hold the process
    // until its own timeout, up to `local.embedding_timeout`: past the drain, nothing is waited for.
    runtime.shutdown_timeout(STRAGGLERS);
    match result {
        Ok(code) => code,
        Err(e) => {
            let e = if matches!(e, CliError::NotRunning(_)) {
                e.with_note(&config_gone_note(config.as_deref()))
            } else {
                e
            };
            crate::say!("mneme: {}", mneme_core::text::escape_controls(&e.to_string()));
            if json && !memories_on_stdout {
                // A script reading standard output gets the failure as JSON too.
                println!("{}", e.json());
            }
            e.exit_code()
        }
    }
}
