//! The `mneme` binary: parse arguments, set up logging, hand over to the library.

use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = mneme::cli::Cli::parse();
    let default_level = match cli.command {
        mneme::cli::Command::Serve => "info",
        // A hook's stderr is shown to the user by the agent: only real errors.
        mneme::cli::Command::Hook { .. } => "error",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_env("MNEME_LOG").unwrap_or_else(|_| EnvFilter::new(default_level)))
        .with_writer(std::io::stderr)
        .init();
    mneme::cli::run(cli)
}
