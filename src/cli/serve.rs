//! `mneme serve`: load the config, open the daemon, bind, serve until a signal, drain.

use std::path::Path;
use std::process::ExitCode;

use tokio::net::TcpListener;

use super::commands::load_settings;
use super::CliError;
use crate::daemon::{shutdown_signal, Daemon};

pub(super) async fn serve(config: Option<&Path>) -> Result<ExitCode, CliError> {
    crate::files::create_private();
    refuse_a_clock_out_of_range()?;
    let loaded = load_settings(config)?;
    for w in &loaded.warnings {
        tracing::warn!("{w}");
    }
    if let Some(w) = crate::config::secrets_others_may_read(&loaded) {
        tracing::warn!("{w}");
    }
    match crate::config::config_named_by(config) {
        Some(how) if !loaded.exists => tracing::warn!(
            "the config file {how} names, {}, does not exist; using the defaults (the file is read once it appears)",
            loaded.path.display()
        ),
        _ if !loaded.exists => tracing::info!("no config file at {}; using the defaults", loaded.path.display()),
        _ => {}
    }
    raise_fd_limit(loaded.settings.server.max_connections);
    ignore_file_size_signal();
    let listen = loaded.settings.server.listen;
    let hangups_while_opening = survive_hangups_while_opening();
    let daemon = Daemon::open(loaded).await.map_err(|e| CliError::Other(e.to_string()))?;
    if let Some(task) = hangups_while_opening {
        task.abort();
    }
    let listener = listen_on(listen).map_err(|e| {
        let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
            " (another program uses it: change server.listen)"
        } else {
            ""
        };
        CliError::Other(format!("cannot listen on {listen}: {e}{hint}"))
    })?;
    daemon.serve(listener, shutdown_signal()).await.map_err(|e| CliError::Other(e.to_string()))?;
    Ok(ExitCode::SUCCESS)
}

/// The kernel's queue of connections not accepted yet. The standard library's (and tokio's) 128
/// overflowed under another local user's flood of connections, and the owner's clients' SYNs were
/// dropped, each retried a second later (review112 #2); the kernel caps it at `somaxconn`.
const LISTEN_BACKLOG: u32 = 4096;

/// A listener on `addr` with [`LISTEN_BACKLOG`] (and `SO_REUSEADDR`, as tokio's `bind` sets it).
fn listen_on(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        std::net::SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        std::net::SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// SIGHUP's default action kills the process: until the daemon's reloader takes the signal, a
/// `kill -HUP` meant as "re-read the config" (or a closed terminal) killed a start in the middle
/// of opening its store, the store's upgrade included, which on a large one takes seconds
/// (review76 #4). Nothing is lost by taking it: the watch compares the config and thesaurus
/// files with what the start read as it begins, and applies an edit made meanwhile (review78 #5).
fn survive_hangups_while_opening() -> Option<tokio::task::JoinHandle<()>> {
    let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok()?;
    Some(tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            tracing::info!("SIGHUP while mneme starts: the configuration is read again once it listens");
        }
    }))
}

/// A wall clock before 1970 or past the year 9999 (a typo given to `date -s`): the HTTP server's
/// Date header panics on every answer there, so a daemon started with it answered nothing, and
/// its CLI blamed another program on the port (review63 #1). Said at once instead. (Should the
/// clock go there while the daemon runs, what it stamps is kept within range.)
fn refuse_a_clock_out_of_range() -> Result<(), CliError> {
    let now = std::time::SystemTime::now();
    if mneme_core::time::is_writable(now) {
        return Ok(());
    }
    let when = if now < std::time::SystemTime::UNIX_EPOCH { "before 1970" } else { "after the year 9999" };
    Err(CliError::Other(format!(
        "the system clock reads a time {when}: mneme dates what it stores by it, and cannot answer HTTP requests with it; set the clock (timedatectl, or an NTP client) and start mneme again"
    )))
}

/// File descriptors the daemon needs besides its connections (databases, WAL files, the
/// watcher, the blocking pool's readers).
const FD_HEADROOM: u64 = 256;

/// Raises the soft open-file limit so `max_connections` connections fit (up to the hard limit).
/// A write past the file-size limit (`ulimit -f`) fails with EFBIG instead of killing the
/// daemon with SIGXFSZ: the spool and the store answer such a failure (a 503, the queue keeps
/// what it acknowledged), and a dead daemon answered nothing at all.
fn ignore_file_size_signal() {
    // SAFETY: setting a signal's disposition to SIG_IGN installs no handler code.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

fn raise_fd_limit(max_connections: usize) {
    let want = max_connections as u64 + FD_HEADROOM;
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed in.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 || lim.rlim_cur >= want {
            return;
        }
        let target = want.min(lim.rlim_max);
        let raised = libc::rlimit { rlim_cur: target, rlim_max: lim.rlim_max };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 || target < want {
            tracing::warn!(
                "the open-file limit ({}) is below server.max_connections + {FD_HEADROOM}; lower max_connections or raise `ulimit -n`",
                target
            );
        }
    }
}
