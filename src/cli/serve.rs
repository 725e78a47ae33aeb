//! `mneme serve`: load the config, open the daemon, bind, serve until a signal, drain.

use std::path::Path;
use std::process::ExitCode;

use tokio::net::TcpListener;

use super::commands::load_settings;
use super::CliError;
use crate::daemon::{shutdown_signal, Daemon};

pub(super) async fn serve(config: Option<&Path>) -> Result<ExitCode, CliError> {
    // Everything the daemon creates (token, spool, memories, their WAL files) is private.
    // SAFETY: umask only changes this process's file-creation mask; it cannot fail.
    unsafe {
        libc::umask(0o077);
    }
    let loaded = load_settings(config)?;
    for w in &loaded.warnings {
        tracing::warn!("{w}");
    }
    if !loaded.exists {
        tracing::info!("no config file at {}; using the defaults", loaded.path.display());
    }
    let listen = loaded.settings.server.listen;
    let daemon = Daemon::open(loaded).await.map_err(|e| CliError::Other(e.to_string()))?;
    let listener = TcpListener::bind(listen).await.map_err(|e| {
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
