//! The files in the storage dir (token, spool, local store) and what to tell the user when one
//! cannot be used: its full path, why, and what to do. The daemon refuses to start with these
//! messages; `mneme doctor` reports the same ones.

use std::fmt;
use std::path::{Path, PathBuf};

/// A storage file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileProblem {
    /// What the file is ("spool", "local memory store", "token", "storage dir").
    pub what: &'static str,
    /// Its full path.
    pub path: PathBuf,
    /// What is wrong.
    pub reason: String,
    /// What to do about it.
    pub fix: String,
}

impl fmt::Display for FileProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot use the {} {}: {}. {}", self.what, self.path.display(), self.reason, self.fix)
    }
}

impl std::error::Error for FileProblem {}

fn quoted(path: &Path) -> String {
    let p = path.display().to_string();
    if p.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+".contains(c)) {
        p
    } else {
        format!("'{}'", p.replace('\'', r"'\''"))
    }
}

/// Where a damaged file is moved to: `<name>.broken` beside it.
fn aside(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!("{name}.broken"))
}

/// The advice for a damaged database file: move it aside (keeping it) and start again.
fn move_aside(path: &Path, lost: &str) -> String {
    format!(
        "If it is damaged, move it aside (`mv {} {}`; {lost}) and start mneme again; `mneme doctor` checks every storage file",
        quoted(path),
        quoted(&aside(path))
    )
}

/// The spool could not be opened.
pub fn spool_problem(path: &Path, reason: impl fmt::Display) -> FileProblem {
    let reason = reason.to_string();
    FileProblem {
        what: "spool",
        path: path.to_owned(),
        reason: reason.strip_prefix("spool: ").unwrap_or(&reason).to_owned(),
        fix: move_aside(path, "retains still queued in it would not be delivered"),
    }
}

/// The local store could not be opened.
pub fn local_store_problem(path: &Path, reason: impl fmt::Display) -> FileProblem {
    FileProblem {
        what: "local memory store",
        path: path.to_owned(),
        reason: reason.to_string(),
        fix: move_aside(
            path,
            &format!(
                "the memories in it are then no longer recalled; `sqlite3 {} .recover` may save them",
                quoted(&aside(path))
            ),
        ),
    }
}

/// The token file exists but cannot be read, or holds something that is not a token.
pub fn token_problem(path: &Path, reason: impl fmt::Display) -> FileProblem {
    FileProblem {
        what: "token",
        path: path.to_owned(),
        reason: reason.to_string(),
        fix: format!(
            "Check its owner and mode (`ls -l {p}`), or delete it (`rm {p}`) and mneme makes a new one at the next start (clients read it again)",
            p = quoted(path)
        ),
    }
}

/// The storage dir is not a usable folder.
pub fn storage_dir_problem(path: &Path, reason: impl fmt::Display) -> FileProblem {
    FileProblem {
        what: "storage dir",
        path: path.to_owned(),
        reason: reason.to_string(),
        fix: "Point storage.dir (or MNEME_STORAGE__DIR) at a folder mneme may write, or fix this one's owner and mode"
            .into(),
    }
}

/// Reads a token file: `Ok(None)` when there is none yet (or it is empty), a problem when it
/// cannot be read or does not hold a token.
pub fn read_token(path: &Path) -> Result<Option<String>, FileProblem> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(token_problem(path, e)),
    };
    let text = String::from_utf8(bytes).map_err(|_| token_problem(path, "it is not text"))?;
    let token = text.trim();
    if token.is_empty() {
        return Ok(None);
    }
    if !token.chars().all(|c| c.is_ascii_graphic()) || token.len() < 16 {
        return Err(token_problem(path, "it does not hold a token (16 or more visible ASCII characters)"));
    }
    Ok(Some(token.to_owned()))
}
