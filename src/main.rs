//! The `mneme` binary: parse arguments, set up logging, hand over to the library.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = mneme::cli::Cli::parse();
    if !matches!(cli.command, mneme::cli::Command::Serve) {
        // A command whose reader goes away (`mneme export | head`) ends quietly, as Unix tools
        // do, instead of panicking on the failed write. The daemon keeps ignoring SIGPIPE: a
        // client that hangs up must never stop it.
        // SAFETY: setting a signal's disposition to its default before any thread starts.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let default_level = match cli.command {
        mneme::cli::Command::Serve => "info",
        // A hook's stderr is shown to the user by the agent: only real errors.
        mneme::cli::Command::Hook { .. } => "error",
        _ => "warn",
    };
    let directives = std::env::var("MNEME_LOG").unwrap_or_else(|_| default_level.to_owned());
    let filter = EnvFilter::try_new(quiet_dependencies(&directives)).unwrap_or_else(|_| EnvFilter::new(default_level));
    match std::env::var("MNEME_LOG_FORMAT").as_deref().map(str::trim) {
        // One JSON object a line, for service managers and log shippers.
        Ok("json") => tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init(),
        Ok("") | Ok("text") | Err(_) => {
            // Colour only for a person at a terminal: a file or a service manager gets plain text.
            let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
            tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi).with_writer(std::io::stderr).init();
        }
        Ok(other) => {
            eprintln!("mneme: MNEME_LOG_FORMAT={other:?} is not a log format: use \"text\" (the default) or \"json\"");
            return ExitCode::from(2);
        }
    }
    mneme::cli::run(cli)
}

/// Crates whose output carries what clients send (memories before they are cleaned, bearer
/// tokens, an MCP client's self-description), with the most each may log unless `MNEME_LOG`
/// names them itself: rmcp logs the client's `initialize` at info, and a request it refuses at
/// warn with the JSON-RPC id the client chose (which may hold private text; mneme answers and
/// counts those refusals itself).
const CHATTY: [(&str, &str); 6] = [
    ("rmcp", "error"),
    ("hyper", "info"),
    ("hyper_util", "info"),
    ("h2", "info"),
    ("reqwest", "info"),
    ("tower_http", "info"),
];

fn quiet_dependencies(directives: &str) -> String {
    let mut out = directives.to_owned();
    for (krate, level) in CHATTY {
        if !directives.contains(krate) {
            out.push_str(&format!(",{krate}={level}"));
        }
    }
    out
}
