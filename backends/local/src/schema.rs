//! Embedded migrations, tracked with `PRAGMA user_version`.

use rusqlite::Connection;

/// Each entry moves the schema from version `i` to `i + 1`. Append only.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE memories (
    seq          INTEGER PRIMARY KEY,
    id           TEXT NOT NULL UNIQUE,      -- the item id: a resent batch stores nothing twice
    bank         TEXT NOT NULL,
    content      TEXT NOT NULL,
    content_hash INTEGER NOT NULL,          -- FNV-1a of content: identical content in a bank is stored once
    context      TEXT,
    kind         TEXT NOT NULL,
    tags         TEXT NOT NULL,             -- '' or US-separated with a US on each side: x1f a x1f b x1f
    metadata     TEXT NOT NULL,             -- JSON object
    document_id  TEXT,
    created_at   TEXT NOT NULL              -- when it was retained (RFC 3339 UTC)
);
CREATE INDEX memories_bank_hash ON memories(bank, content_hash);
CREATE INDEX memories_bank_doc ON memories(bank, document_id) WHERE document_id IS NOT NULL;
CREATE INDEX memories_bank_seq ON memories(bank, seq);
-- Contentless: the indexed text is the stemmed terms from mneme_terms() (see fts.rs), not the content.
CREATE VIRTUAL TABLE memories_fts USING fts5(
    terms, content = '', contentless_delete = 1, tokenize = 'unicode61 remove_diacritics 2'
);
CREATE VIRTUAL TABLE memories_vocab USING fts5vocab(memories_fts, 'row');
CREATE TRIGGER memories_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts(rowid, terms) VALUES (new.seq, mneme_terms(new.content));
END;
CREATE TRIGGER memories_ad AFTER DELETE ON memories BEGIN
    DELETE FROM memories_fts WHERE rowid = old.seq;
END;
"#,
    r#"
-- Index in Store::retain with one INSERT ... SELECT per batch: a per-row trigger made every row
-- its own FTS5 segment (each statement's savepoint flushes FTS5's pending terms).
DROP TRIGGER memories_ai;
"#,
    r#"
-- Duplicates are found through the writer's in-memory map (see dedupe.rs): this index took a
-- random page write for every new memory.
DROP INDEX memories_bank_hash;
"#,
];

/// Brings the database up to the newest schema. Refuses a database from a newer mneme.
pub fn migrate(conn: &mut Connection) -> rusqlite::Result<()> {
    let current: usize = conn.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0))? as usize;
    check_version(current)?;
    for (version, sql) in MIGRATIONS.iter().enumerate().skip(current) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (version + 1) as i64)?;
        tx.commit()?;
    }
    Ok(())
}

/// Refuses a database written by a newer mneme.
pub fn check_version(current: usize) -> rusqlite::Result<()> {
    if current > MIGRATIONS.len() {
        return Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_MISMATCH),
            Some(format!("database schema version {current} is newer than this mneme supports ({})", MIGRATIONS.len())),
        ));
    }
    Ok(())
}
