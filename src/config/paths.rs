//! Where the config file and the data directory are.

use std::ffi::OsString;
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

/// What named the config file, when it is not the default one: `--config` or `MNEME_CONFIG`.
/// (A file the user named that does not exist is more likely a typo than a wish for the
/// defaults.)
pub fn config_named_by(flag: Option<&Path>) -> Option<&'static str> {
    match (flag, std::env::var_os("MNEME_CONFIG")) {
        (Some(_), _) => Some("--config"),
        (None, Some(p)) if !p.is_empty() => Some("MNEME_CONFIG"),
        _ => None,
    }
}

/// `$XDG_DATA_HOME/mneme` (`~/.local/share/mneme`).
pub fn default_storage_dir() -> PathBuf {
    xdg("XDG_DATA_HOME", ".local/share").join("mneme")
}

/// Expands a leading `~/` and `$NAME` or `${NAME}` from the environment, and makes a relative
/// path relative to `base` (the config file's folder). A variable that is not set (or empty) is
/// an error naming it: kept as written, `$HOME/.mneme` made a folder called `$HOME` beside the
/// config.
/// A value that is not UTF-8 (a Latin-1 folder name) is taken as it is, as `HOME` is.
pub fn resolve(path: &str, base: Option<&Path>) -> Result<PathBuf, String> {
    resolve_with(path, base, &|name| std::env::var_os(name))
}

/// [`resolve`] with the environment given.
pub fn resolve_with(
    path: &str,
    base: Option<&Path>,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<PathBuf, String> {
    let path = PathBuf::from(expand_variables(path, env)?);
    // (`~` as the first component: `~/x` or `~`, not `~user`.)
    let p = match path.strip_prefix("~") {
        Ok(rest) if rest.as_os_str().is_empty() => home(),
        Ok(rest) => home().join(rest),
        Err(_) => path,
    };
    Ok(match base {
        Some(b) if p.is_relative() => b.join(p),
        _ => p,
    })
}

/// `$NAME` and `${NAME}` replaced by their values; a `$` before anything else stays as it is.
fn expand_variables(text: &str, env: &dyn Fn(&str) -> Option<OsString>) -> Result<OsString, String> {
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = OsString::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, len) = match after.strip_prefix('{') {
            Some(inner) => match inner.find('}') {
                Some(end) if end > 0 && inner[..end].chars().all(is_name) => (&inner[..end], end + 2),
                _ => {
                    let shown = mneme_core::text::quoted_unless_private(text);
                    return Err(format!("{shown}: \"${{\" opens no variable name closed by \"}}\""));
                }
            },
            None => {
                let end = after.find(|c: char| !is_name(c)).unwrap_or(after.len());
                (&after[..end], end)
            }
        };
        if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
            out.push("$");
            rest = after;
            continue;
        }
        match env(name).filter(|v| !v.is_empty()) {
            Some(value) => out.push(value),
            None => {
                let shown = mneme_core::text::quoted_unless_private(text);
                return Err(format!("{shown} names ${name}, which is not set in mneme's environment"));
            }
        }
        rest = &after[len..];
    }
    out.push(rest);
    Ok(out)
}

/// The `local.thesaurus_file` a config text names, resolved as its value is (see [`resolve`]),
/// whether or not the rest of the text, or the file, is valid: a reload refused for that file
/// is applied once the file is fixed, so the file is watched before it is in force.
pub fn thesaurus_file_named(text: &str, config: &Path) -> Option<PathBuf> {
    let table: toml::Table = text.parse().ok()?;
    let named = table.get("local")?.get("thesaurus_file")?.as_str()?.trim();
    (!named.is_empty()).then(|| resolve(named, config.parent()).ok()).flatten()
}
