//! Where the config file and the data directory are.

use std::path::{Path, PathBuf};

fn home() -> PathBuf {
    std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/"))
}

fn xdg(var: &str, fallback: &str) -> PathBuf {
    match std::env::var_os(var) {
        Some(v) if Path::new(&v).is_absolute() => PathBuf::from(v),
        _ => home().join(fallback),
    }
}

/// `--config`, else `MNEME_CONFIG`, else `$XDG_CONFIG_HOME/mneme/config.toml`; absolute (from
/// the current directory): a bare `c.toml` has no folder to watch, so a daemon started with one
/// never saw an edit.
pub fn config_path(flag: Option<&Path>) -> PathBuf {
    let path = match (flag, std::env::var_os("MNEME_CONFIG")) {
        (Some(p), _) => p.to_path_buf(),
        (None, Some(p)) if !p.is_empty() => PathBuf::from(p),
        _ => xdg("XDG_CONFIG_HOME", ".config").join("mneme").join("config.toml"),
    };
    std::path::absolute(&path).unwrap_or(path)
}

/// `$XDG_DATA_HOME/mneme` (`~/.local/share/mneme`).
pub fn default_storage_dir() -> PathBuf {
    xdg("XDG_DATA_HOME", ".local/share").join("mneme")
}

/// Expands a leading `~/` and makes a relative path relative to `base` (the config file's folder).
pub fn resolve(path: &str, base: Option<&Path>) -> PathBuf {
    let p = if let Some(rest) = path.strip_prefix("~/") { home().join(rest) } else { PathBuf::from(path) };
    match base {
        Some(b) if p.is_relative() => b.join(p),
        _ => p,
    }
}
