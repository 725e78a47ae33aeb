//! The `mneme` binary: parse arguments, set up logging, hand over to the library.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    // An agent reads a hook's exit status 2 as "block": the prompt is refused, a stop or a
    // compaction undone. A hook command this build cannot parse (an agent's settings written for
    // another version) fails with 1, which agents show and go on past.
    let hook = is_hook(std::env::args_os().skip(1));
    let cli = match mneme::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if hook && e.use_stderr() => {
            let _ = e.print();
            return ExitCode::FAILURE;
        }
        Err(e) if e.use_stderr() && wants_json(std::env::args_os().skip(1)) => {
            // A script asked for JSON: it gets the usage error as JSON too (exit 2, as clap's).
            let _ = e.print();
            let message = e.kind().as_str().map_or_else(|| "the command line is not valid".to_owned(), str::to_owned);
            println!("{}", serde_json::json!({"error": {"code": "usage", "message": message}}));
            return ExitCode::from(2);
        }
        Err(e) => e.exit(),
    };
    if matches!(cli.command, mneme::cli::Command::Serve) {
        keep_freed_memory_small();
    }
    if !matches!(cli.command, mneme::cli::Command::Serve) {
        // A command whose reader goes away (`mneme export | head`) ends quietly, as Unix tools
        // do, instead of panicking on the failed write (another write error ends it with 1): killed by SIGPIPE, once stdout's write
        // failed. SIGPIPE itself stays ignored (as the daemon ignores it: a client that hangs up
        // must never stop it): a write to the daemon's socket that it closed (a 413 answered
        // before the body was read) is an error to report, and it killed the CLI silently.
        let default_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let message =
                payload.downcast_ref::<String>().map(String::as_str).or(payload.downcast_ref::<&str>().copied());
            if let Some(failed) = message.and_then(|m| m.strip_prefix("failed printing to stdout: ")) {
                if failed.contains("Broken pipe") {
                    mneme::cli::end_by_sigpipe();
                }
                // Any other write error (a full disk under `> file`, EIO) is the command's
                // failure, said in one line: it was a panic with a backtrace and exit 101,
                // which hid that a retain had been acknowledged before its answer was printed.
                // (Standard error may be on the same full disk: not a second panic, an abort.)
                let _ = writeln!(std::io::stderr(), "mneme: cannot write standard output: {failed}");
                std::process::exit(1);
            }
            default_hook(info);
        }));
    }
    let default_level = match cli.command {
        mneme::cli::Command::Serve => "info",
        // A hook's stderr is shown to the user by the agent: only real errors.
        mneme::cli::Command::Hook { .. } => "error",
        _ => "warn",
    };
    let directives = match std::env::var("MNEME_LOG") {
        Ok(asked) => match not_a_level(&asked) {
            // A word that is not a level reads as a module to log, and silences everything else.
            Some(word) => {
                mneme::say!(
                    "mneme: MNEME_LOG names {:?}, which is not a level (trace, debug, info, warn, error, off) nor a mneme module: logging at {default_level}",
                    mneme_core::text::escape_controls(word)
                );
                default_level.to_owned()
            }
            None => asked,
        },
        Err(_) => default_level.to_owned(),
    };
    if let Some(krate) = held_whatever_asked(&directives) {
        mneme::say!(
            "mneme: MNEME_LOG names {krate}, whose logs are held at error whatever is asked: they carry what MCP clients send before private spans are removed"
        );
    }
    let filter = EnvFilter::try_new(quiet_dependencies(&directives)).unwrap_or_else(|_| {
        mneme::say!("mneme: MNEME_LOG is not a log filter: logging at {default_level}");
        EnvFilter::new(default_level)
    });
    match std::env::var("MNEME_LOG_FORMAT").as_deref().map(str::trim) {
        // One JSON object a line, for service managers and log shippers.
        Ok("json") => tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .log_internal_errors(false)
            .finish()
            .with(held())
            .init(),
        Ok("") | Ok("text") | Err(_) => {
            // Colour only for a person at a terminal: a file or a service manager gets plain text.
            let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
            tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_ansi(ansi)
                .with_writer(std::io::stderr)
                .log_internal_errors(false)
                .finish()
                .with(held())
                .init();
        }
        Ok(other) => {
            mneme::say!(
                "mneme: MNEME_LOG_FORMAT={other:?} is not a log format: use \"text\" (the default) or \"json\""
            );
            if !hook {
                return ExitCode::from(2);
            }
            // A hook inherits the agent's environment: it logs as text rather than block.
            tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_ansi(false)
                .with_writer(std::io::stderr)
                .log_internal_errors(false)
                .finish()
                .with(held())
                .init();
        }
    }
    mneme::cli::run(cli)
}

/// Bounds what glibc's allocator keeps of memory the daemon freed (review86). By default each
/// thread that allocates may get an arena of its own (up to 8 per core), and a block freed at
/// start (the embedding model's load) raises the size below which allocations come from the
/// arenas to ~6 MB, and the size an arena must free at its top before it gives any back to ~12
/// MB: the embedder's scratch buffers and the blocking pool's threads, coming and going, left a
/// daemon that needs ~20 MB holding 125 MB at rest after a 15-minute load, still rising. With
/// two arenas and large blocks mapped on their own (128 KiB and up, which also keeps the trim
/// threshold there), the same load left 72 MB, flat from its third minute. Called before any
/// thread starts; a variable the user set (`MALLOC_ARENA_MAX`, `MALLOC_MMAP_THRESHOLD_`) wins.
fn keep_freed_memory_small() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
            // SAFETY: mallopt only sets the allocator's parameters; no other thread runs yet.
            unsafe { libc::mallopt(libc::M_ARENA_MAX, 2) };
        }
        if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
            // SAFETY: as above.
            unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024) };
        }
    }
}

/// Crates whose output carries what clients send (memories before they are cleaned, bearer
/// tokens, an MCP client's self-description), with the most each may log unless `MNEME_LOG`
/// names them itself: rmcp logs the client's `initialize` at info, and a request it refuses at
/// warn with the JSON-RPC id the client chose (which may hold private text; mneme answers and
/// counts those refusals itself).
///
/// At trace, `notify` logs each change it sees, which a log file beside the config makes a loop
/// (each line a change, each change a line), and `tokenizers` logs every text it normalizes, a
/// character a line.
const CHATTY: [(&str, &str); 9] = [
    ("rmcp", "error"),
    ("notify", "info"),
    ("tokenizers", "info"),
    ("mio", "info"),
    ("hyper", "info"),
    ("hyper_util", "info"),
    ("h2", "info"),
    ("reqwest", "info"),
    ("tower_http", "info"),
];

/// Crates whose logs carry what clients send before mneme cleans it, held at error whatever
/// `MNEME_LOG` asks: rmcp logs each MCP request with its tool arguments at debug, `<private>`
/// spans included, and the client's `initialize` at info (review113 #5: `MNEME_LOG=debug,rmcp=debug`,
/// the obvious way to debug an MCP client, wrote private text to the log). A filter of its own,
/// beside `MNEME_LOG`'s: a directive naming a span (`[serve_inner]=debug`) reaches them too.
const HELD: [&str; 1] = ["rmcp"];

/// The filter that holds [`HELD`] at error. By target and level alone, so each call site's
/// answer is known once: a filter function asked at every event (a disabled `debug!` on the
/// retain path included) cost the daemon ~40 µs a retain in the bench.
fn held() -> tracing_subscriber::filter::Targets {
    HELD.iter()
        .fold(tracing_subscriber::filter::Targets::new(), |t, krate| t.with_target(*krate, tracing::Level::ERROR))
        .with_default(tracing::Level::TRACE)
}

/// The crate of [`HELD`] that `MNEME_LOG` names, if any (its directive has no effect: said).
fn held_whatever_asked(directives: &str) -> Option<&'static str> {
    HELD.into_iter().find(|krate| directives.contains(krate))
}

/// The first directive of `MNEME_LOG` that is a bare word but neither a level nor one of
/// mneme's modules (`verbose`, `info;x`): read as a module to log, it would hide every line.
fn not_a_level(directives: &str) -> Option<&str> {
    const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];
    directives.split(',').map(str::trim).filter(|d| !d.is_empty() && !d.contains('=')).find(|d| {
        !LEVELS.iter().any(|l| d.eq_ignore_ascii_case(l))
            && !d.starts_with("mneme")
            && !CHATTY.iter().any(|(k, _)| d == k)
    })
}

fn quiet_dependencies(directives: &str) -> String {
    let mut out = directives.to_owned();
    for (krate, level) in CHATTY {
        if !directives.contains(krate) {
            out.push_str(&format!(",{krate}={level}"));
        }
    }
    out
}

/// Whether the command is `hook`: its subcommand is the first word after the global options
/// (`mneme --config FILE hook claude-code`, as `--install` writes it, is a hook too).
/// Whether the command line asks for JSON (`--json` before a `--` that ends the options).
fn wants_json(args: impl Iterator<Item = std::ffi::OsString>) -> bool {
    args.take_while(|a| a != "--").any(|a| a == "--json")
}

fn is_hook(args: impl Iterator<Item = std::ffi::OsString>) -> bool {
    let mut args = args;
    while let Some(a) = args.next() {
        match a.to_str() {
            Some("--config") => {
                args.next();
            }
            Some(s) if s.starts_with("--config=") || s == "--json" => {}
            _ => return a == "hook",
        }
    }
    false
}
