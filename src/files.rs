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

/// How the advice of a file problem ends when the daemon must be started again to retry.
const START_AGAIN: &str = "start mneme again";

impl FileProblem {
    /// The same problem met by a running daemon switching to the file's store: the retry is
    /// saving the config again (or `mneme reload`), not a start (the daemon runs on).
    pub fn met_while_running(mut self) -> Self {
        self.fix = self.fix.replace(START_AGAIN, "save the config again (or run `mneme reload`)");
        self
    }
}

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

/// The advice for a database file that cannot be opened, by why: a full or read-only disk and a
/// newer mneme's file are not damage, and moving the file aside would lose what it holds; only
/// for anything else, move it aside (keeping it) and start again.
fn advice(path: &Path, reason: &str, lost: &str) -> String {
    let lower = reason.to_lowercase();
    let dir = quoted(path.parent().unwrap_or(Path::new(".")));
    if ["no space", "disk is full", "disk i/o error"].iter().any(|s| lower.contains(s)) {
        return format!(
            "Its disk may be full or failing: free some space (`df -h {dir}`) and start mneme again. Keep the file where it is ({lost} if it were moved)"
        );
    }
    if lower.contains("readonly") || lower.contains("read-only") {
        return format!(
            "mneme must write it: check the folder's owner and mode (`ls -ld {dir}`) and that its file system is not mounted read-only"
        );
    }
    // Another process writes it (a daemon, or `mneme migrate` upgrading it to this build's
    // schema): the file is sound, and moving it aside under that process would lose it.
    if lower.contains("database is locked") || lower.contains("database is busy") {
        return "Another process is writing to it (a mneme daemon or `mneme migrate`: the first opening by a newer mneme upgrades it, which takes a while on a large store): let it finish, then start mneme again; `mneme doctor` says which process holds the storage. Keep the file where it is".into();
    }
    if lower.contains("older than this mneme") {
        return "A mneme daemon holds its storage: if it is starting, wait until it answers (a newer mneme's first start upgrades the store, a while on a large one); if it is an earlier mneme, restart it with this one first (its start upgrades the store). Then run this again".into();
    }
    if lower.contains("newer mneme") || lower.contains("newer than this mneme") {
        return "It was written by a newer mneme: run that version (or a later one) on it".into();
    }
    if path.is_dir() {
        return format!("{} is a folder: name a file (in it, or elsewhere) instead", quoted(path));
    }
    if lower.contains("without the database it belongs to") {
        let log = mneme_core::database_file::log_of(path);
        return format!(
            "Put the database back from a backup if there is one; else move the log aside (`mv {} {}`; {lost}) and start mneme again",
            quoted(&log),
            quoted(&aside(&log))
        );
    }
    if lower.contains("is empty (0 bytes)") {
        return format!(
            "Put it back from a backup if there is one; else move it aside (`mv {} {}`) and start mneme again with an empty one",
            quoted(path),
            quoted(&aside(path))
        );
    }
    // Nothing to move aside when the file or its folder cannot be made or reached.
    if lower.contains("permission denied") || lower.contains("access denied") {
        return format!("mneme cannot reach it: check the owner and mode of the file and its folders (`ls -ld {dir}`)");
    }
    let not_made = ["no such file", "unable to open", "cannot create", "not a directory", "file exists"]
        .iter()
        .any(|s| lower.contains(s));
    // A folder on the way is a file: it exists, and cannot be made a folder.
    let file_on_the_way = path.ancestors().skip(1).find(|a| a.is_file());
    if let Some(file) = file_on_the_way.filter(|_| not_made) {
        return format!("{} is a file, not a folder: set the path to one under a folder", quoted(file));
    }
    if not_made && !path.parent().is_some_and(Path::is_dir) {
        return format!(
            "Its folder {dir} does not exist and cannot be made: create it, or set the path to one that can be"
        );
    }
    format!(
        "If it is damaged, move it aside (`mv {} {}`; {lost}) and start mneme again; `mneme doctor` checks every storage file",
        quoted(path),
        quoted(&aside(path))
    )
}

/// Whether `a` and `b` name the same file: the same inode when both exist, else the same place
/// once the links on the way are followed (one that does not exist yet would be made there).
pub fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    if let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(b)) {
        return (x.dev(), x.ino()) == (y.dev(), y.ino());
    }
    matches!((place_of(a), place_of(b)), (Some(x), Some(y)) if x == y)
}

/// Where `path` leads: part by part, each that exists with its links followed, the others (folders
/// not made yet, and a `..` after one) taken as written (review118 #1: `dir/sub/../spool.db` with
/// `sub` not made yet, or a storage dir not made yet, led to the spool all the same). A
/// canonical path holds no link, so its `..` is its parent.
fn place_of(path: &Path) -> Option<PathBuf> {
    use std::path::Component;
    let absolute = match path.is_absolute() {
        true => path.to_owned(),
        false => std::env::current_dir().ok()?.join(path),
    };
    let mut place = PathBuf::from("/");
    for component in absolute.components() {
        match component {
            Component::Normal(name) => place.push(name),
            Component::ParentDir => {
                place.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => continue,
        }
        // Where it exists, its links followed (as the kernel follows them, before a `..`).
        if let Ok(real) = std::fs::canonicalize(&place) {
            place = real;
        }
    }
    Some(place)
}

/// The spool could not be opened.
pub fn spool_problem(path: &Path, reason: impl fmt::Display) -> FileProblem {
    let reason = reason.to_string();
    FileProblem {
        what: "spool",
        path: path.to_owned(),
        fix: advice(path, &reason, "retains still queued in it would not be delivered"),
        reason: reason.strip_prefix("spool: ").unwrap_or(&reason).to_owned(),
    }
}

/// The local store could not be opened.
pub fn local_store_problem(path: &Path, reason: impl fmt::Display) -> FileProblem {
    let reason = reason.to_string();
    let lost = format!(
        "the memories in it are then no longer recalled; `sqlite3 {} .recover` may save them",
        quoted(&aside(path))
    );
    FileProblem { what: "local memory store", path: path.to_owned(), fix: advice(path, &reason, &lost), reason }
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

/// Why the daemon refuses an existing storage dir, if it does: another user who owns the
/// folder, or may write in it, could plant the token clients send (and read every memory), so
/// it must be this user's alone; and it must be a folder. `mneme doctor` asks the same.
pub fn storage_dir_refusal(dir: &Path, m: &std::fs::Metadata) -> Option<FileProblem> {
    use std::os::unix::fs::MetadataExt;
    let reason = if !m.is_dir() {
        "it is not a folder".to_owned()
    } else if m.uid() != effective_uid() {
        format!("it belongs to another user (uid {}); mneme keeps its token and memories only in a folder of its own user's", m.uid())
    } else if m.mode() & 0o022 != 0 {
        format!("others may write in it (mode {:o}): `chmod 700` it, as mneme makes it", m.mode() & 0o7777)
    } else {
        return None;
    };
    Some(storage_dir_problem(dir, reason))
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

/// The text of the file at `path`, a regular file only: a FIFO in its place (the token, the
/// pidfile) would wait for a writer, and the command with it.
pub fn read_regular(path: &Path) -> std::io::Result<String> {
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "it is not a regular file"));
    }
    std::fs::read_to_string(path)
}

/// The text of the regular file at `path`, when it holds at most `max` bytes. Judged as opened,
/// without waiting (a FIFO would wait for a writer), so a link another user points at
/// `/dev/zero` or a FIFO is refused, not read without end.
pub fn read_regular_bounded(path: &Path, max: u64) -> std::io::Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "it is not a regular file"));
    }
    let mut text = String::new();
    file.take(max + 1).read_to_string(&mut text)?;
    if text.len() as u64 > max {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("it is longer than {max} bytes")));
    }
    Ok(text)
}

/// The longest token file read (a token is 64 characters; a user's own may be longer).
const MAX_TOKEN_FILE: u64 = 64 * 1024;

/// Reads a token file: `Ok(None)` when there is none yet (or it is empty), a problem when it
/// cannot be read or does not hold a token.
pub fn read_token(path: &Path) -> Result<Option<String>, FileProblem> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    // Judged as opened, and read from what was opened: checked by name and read by name again,
    // a link another user swapped in between (in a folder they may write in) was read, and its
    // token sent to their process (review83 #3). Not following a link, nor waiting on a FIFO.
    let opened = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path);
    let mut file = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        // Whoever placed a link there chose the token clients are asked for.
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(token_problem(path, "it is a symbolic link; the token is a file of its own"))
        }
        Err(e) => return Err(token_problem(path, e)),
    };
    let m = file.metadata().map_err(|e| token_problem(path, e))?;
    if m.is_dir() {
        return Err(token_problem(path, "it is a folder"));
    }
    if !m.is_file() {
        return Err(token_problem(path, "it is not a regular file"));
    }
    // So did whoever placed a file of theirs.
    if m.uid() != effective_uid() {
        return Err(token_problem(path, format!("it belongs to another user (uid {})", m.uid())));
    }
    let mut bytes = Vec::new();
    // A token is short: a file of gigabytes is read no further than this.
    file.by_ref().take(MAX_TOKEN_FILE + 1).read_to_end(&mut bytes).map_err(|e| token_problem(path, e))?;
    if bytes.len() as u64 > MAX_TOKEN_FILE {
        return Err(token_problem(path, format!("it is longer than {MAX_TOKEN_FILE} bytes, and holds no token")));
    }
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

/// Those of `files` that exist, are this user's, and that others may read or write (after a
/// restore made with umask 022), with their modes: the memories and the spool are as private
/// as the token. A symbolic link is followed (a store kept on another disk through one is still
/// mneme's; the storage dir, which holds the link, is this user's alone), and only a regular file
/// of this user's is named.
pub fn open_to_others(files: &[PathBuf]) -> Vec<(PathBuf, u32)> {
    use std::os::unix::fs::MetadataExt;
    let mut seen = std::collections::HashSet::new();
    let mut open = |path: &PathBuf| {
        let m = std::fs::metadata(path).ok()?;
        let open = m.is_file() && m.uid() == effective_uid() && m.mode() & 0o077 != 0;
        // A file named twice (a link and where it leads) once.
        (open && seen.insert((m.dev(), m.ino()))).then(|| (path.clone(), m.mode() & 0o777))
    };
    files.iter().filter_map(&mut open).collect()
}

/// `files` named with their modes, for a message: `/d/spool.db (mode 644), /d/memories.db (mode 644)`.
pub fn named_with_modes(files: &[(PathBuf, u32)]) -> String {
    files.iter().map(|(p, mode)| format!("{} (mode {mode:o})", p.display())).collect::<Vec<_>>().join(", ")
}

/// Makes every file and directory this process creates from now on private to its user (the
/// storage dir, the spool, the memories and their WAL files), whatever the shell's umask.
pub fn create_private() {
    // SAFETY: umask only changes this process's file-creation mask; it cannot fail.
    unsafe {
        libc::umask(0o077);
    }
}

/// The user this process runs as.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_advice_fits_the_reason() {
        let spool = Path::new("/data/mneme/spool.db");
        let full = spool_problem(spool, "spool: disk I/O error");
        assert!(full.fix.contains("df -h /data/mneme") && !full.fix.contains("mv "), "{full}");
        let ro = local_store_problem(spool, "attempt to write a readonly database");
        assert!(ro.fix.contains("read-only") && !ro.fix.contains("mv "), "{ro}");
        let newer = spool_problem(spool, "spool: schema version 99 was written by a newer mneme (this one knows 7)");
        assert!(newer.fix.contains("newer mneme") && !newer.fix.contains("mv "), "{newer}");
        let newer = local_store_problem(spool, "database schema version 9 is newer than this mneme supports (8)");
        assert!(newer.fix.contains("newer mneme"), "{newer}");
        let damaged = spool_problem(spool, "spool: file is not a database");
        assert!(damaged.fix.contains("mv /data/mneme/spool.db /data/mneme/spool.db.broken"), "{damaged}");
        // A file that cannot be made has nothing to move aside.
        let nowhere = local_store_problem(Path::new("/proc/nope/x.db"), "unable to open database file");
        assert!(nowhere.fix.contains("does not exist") && !nowhere.fix.contains("mv "), "{nowhere}");
        let folder = tempfile::tempdir().unwrap();
        let a_folder = local_store_problem(folder.path(), "unable to open database file");
        assert!(a_folder.fix.contains("is a folder") && !a_folder.fix.contains("mv "), "{a_folder}");
        // A folder on the way that is a file: said so, not that it "does not exist".
        let file = folder.path().join("afile");
        std::fs::write(&file, "").unwrap();
        let under_a_file = local_store_problem(&file.join("x.db"), "File exists (os error 17)");
        assert!(under_a_file.fix.contains("afile is a file, not a folder"), "{under_a_file}");
        // Another process writing it (upgrading it) is no damage (review76 #3).
        let locked = local_store_problem(spool, "database is locked");
        assert!(locked.fix.contains("Another process") && !locked.fix.contains("mv "), "{locked}");
        let older = local_store_problem(
            spool,
            "database schema version 8 is older than this mneme's (10), and is not upgraded while a daemon may be running on it",
        );
        assert!(older.fix.contains("restart it with this one first") && !older.fix.contains("mv "), "{older}");
        let denied = spool_problem(spool, "spool: Permission denied (os error 13)");
        assert!(denied.fix.contains("ls -ld") && !denied.fix.contains("mv "), "{denied}");
    }

    #[test]
    fn a_running_daemon_is_told_to_reload_not_to_start() {
        let store = Path::new("/data/mneme/memories.db");
        for reason in ["disk I/O error", "database is locked", "file is not a database", "is empty (0 bytes)"] {
            let at_start = local_store_problem(store, reason);
            assert!(at_start.fix.contains("start mneme again"), "{at_start}");
            let running = local_store_problem(store, reason).met_while_running();
            assert!(!running.fix.contains("start mneme") && running.fix.contains("mneme reload"), "{running}");
        }
    }
}
