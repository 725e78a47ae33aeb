//! What a database file's size says before SQLite opens it.

use std::path::Path;

/// Whether the database file at `path` was emptied since mneme wrote it: it is there with no
/// byte in it, and no write-ahead log beside it holds any. SQLite reads an empty file as a new,
/// empty database, so a spool or a store truncated to 0 bytes opened as a fresh one, and what
/// it held was gone without a word. mneme never leaves one empty: its first open sets WAL mode,
/// which writes the file's header. (A missing file is a new one, not an emptied one.)
pub fn was_emptied(path: &Path) -> bool {
    let len = |p: &Path| std::fs::metadata(p).ok().filter(|m| m.is_file()).map(|m| m.len());
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    len(path) == Some(0) && len(Path::new(&wal)).unwrap_or(0) == 0
}

/// Why a database file [`was_emptied`] is not opened.
pub const EMPTIED: &str = "the file is empty (0 bytes), yet mneme wrote it: it was truncated, and what it held is gone from it (opened, it would be taken for a new, empty one)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_file_left_empty_with_no_log_was_emptied() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("spool.db");
        assert!(!was_emptied(&db), "a new file");
        std::fs::write(&db, b"").unwrap();
        assert!(was_emptied(&db));
        std::fs::write(dir.path().join("spool.db-wal"), b"frames").unwrap();
        assert!(!was_emptied(&db), "its content is in the log");
        std::fs::write(&db, b"SQLite format 3\0").unwrap();
        assert!(!was_emptied(&db));
        assert!(!was_emptied(dir.path()), "a folder is another problem");
    }
}
