//! Embedded migrations, tracked with `PRAGMA user_version`.

use crate::error::OpenError;
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
    r#"
-- Recall ranks passages (see passages.rs): a short memory is one, a long one is split. Each
-- passage knows the one before it in its conversation (the previous passage of its memory, or
-- for a conversation's turns the last one of the session's previous turn): its terms are indexed
-- as a second column, weighted half (the question's words are often in the turn before the answer).
CREATE TABLE passages (
    pid         INTEGER PRIMARY KEY,
    memory_seq  INTEGER NOT NULL,       -- memories.seq
    ord         INTEGER NOT NULL,       -- place in the memory
    text        TEXT NOT NULL,
    prev_pid    INTEGER                 -- the passage before it in its conversation
);
CREATE INDEX passages_memory ON passages(memory_seq, ord);
CREATE VIRTUAL TABLE passages_fts USING fts5(
    terms, ctx, content = '', contentless_delete = 1, tokenize = 'unicode61 remove_diacritics 2'
);
INSERT INTO passages_fts(passages_fts, rank) VALUES ('rank', 'bm25(1.0, 0.5)');
CREATE VIRTUAL TABLE passages_vocab USING fts5vocab(passages_fts, 'row');
-- The last passage of each session, the context of the session's next one.
CREATE TABLE session_tails (
    bank    TEXT NOT NULL,
    session TEXT NOT NULL,
    pid     INTEGER NOT NULL,
    PRIMARY KEY (bank, session)
) WITHOUT ROWID;
-- A passage's sentence vector, as int8 with one scale (x[i] = data[i] * scale), and the model
-- that computed it; vectors of another model than the configured one are computed again.
CREATE TABLE passage_vectors (
    pid    INTEGER PRIMARY KEY,
    model  TEXT NOT NULL,
    dim    INTEGER NOT NULL,
    scale  REAL NOT NULL,
    data   BLOB NOT NULL
);
CREATE TRIGGER memories_passages_ad AFTER DELETE ON memories BEGIN
    DELETE FROM passages WHERE memory_seq = old.seq;
END;
CREATE TRIGGER passages_ad AFTER DELETE ON passages BEGIN
    DELETE FROM passages_fts WHERE rowid = old.pid;
    DELETE FROM passage_vectors WHERE pid = old.pid;
END;
-- Memories stored before: one passage each (their vectors are computed in the background).
INSERT INTO passages (pid, memory_seq, ord, text) SELECT seq, seq, 0, content FROM memories;
INSERT INTO passages_fts (rowid, terms, ctx) SELECT pid, mneme_terms(text), '' FROM passages;
DROP TRIGGER memories_ad;
DROP TABLE memories_vocab;
DROP TABLE memories_fts;
"#,
    r#"
-- How crowded the passage's neighbourhood in its bank was when last measured (see
-- neighbourhood.rs), so a restart need not measure every bank again; NULL: not measured.
ALTER TABLE passage_vectors ADD COLUMN crowding REAL;
"#,
    // Ideographs and kana became words of their own, and full-width forms fold to ASCII.
    REINDEX_SPLIT_DIFFERENTLY,
    r#"
-- Memories stored before passages and left one passage by an earlier build of schema 4 are
-- split (in Rust: see `split_long_memories`).
"#,
    // Marks became part of their word (Thai's and Hindi's vowel signs), and Thai, Lao, Khmer and
    // Myanmar, written without spaces, are indexed a pair of letters at a time.
    REINDEX_SPLIT_DIFFERENTLY,
    // A camelCase or PascalCase name is indexed whole and by its words too.
    REINDEX_SPLIT_DIFFERENTLY,
    r#"
-- A removed passage is looked up among the sessions' tails by its pid: without an index, a
-- project's clear scanned every session's tail for each passage it removed (review72 #2: 138 s
-- for 37,667 memories).
CREATE INDEX IF NOT EXISTS session_tails_pid ON session_tails(pid);
"#,
    // An accented Latin letter is folded before its word is stemmed (`fts::folds`).
    REINDEX_SPLIT_DIFFERENTLY,
];

/// Indexes again the passages whose text (or whose context, the passage before) the index now
/// splits into other terms than runs of letters and digits (`fts::split_differs`). Each step
/// that changed the split repeats it (indexing again is the same for a passage already done).
const REINDEX_SPLIT_DIFFERENTLY: &str = r#"
CREATE TEMP TABLE reindexed AS
    SELECT p.pid FROM passages p LEFT JOIN passages q ON q.pid = p.prev_pid
    WHERE mneme_split_differs(p.text) OR mneme_split_differs(q.text);
DELETE FROM passages_fts WHERE rowid IN (SELECT pid FROM reindexed);
INSERT INTO passages_fts (rowid, terms, ctx)
    SELECT p.pid, mneme_own_terms(p.text, CASE WHEN q.memory_seq = p.memory_seq THEN q.text END), mneme_terms(q.text)
    FROM passages p LEFT JOIN passages q ON q.pid = p.prev_pid WHERE p.pid IN (SELECT pid FROM reindexed);
DROP TABLE reindexed;
"#;

/// The newest schema version.
pub const VERSION: usize = MIGRATIONS.len();

/// Brings the database up to the newest schema. Refuses a database from a newer mneme.
pub fn migrate(conn: &mut Connection) -> Result<(), OpenError> {
    migrate_to(conn, VERSION)
}

/// Brings the database up to schema `target` (tests build stores of earlier versions with it).
/// The connection must have `mneme_terms` (see [`crate::store::register_functions`]).
pub fn migrate_to(conn: &mut Connection, target: usize) -> Result<(), OpenError> {
    let current: usize = conn.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0))? as usize;
    check_version(current)?;
    for (version, sql) in MIGRATIONS.iter().enumerate().take(target).skip(current) {
        // Each step's version is read again inside its write lock: two processes opening an old
        // store at once (the daemon and `mneme migrate`) each ran the step, and the second
        // failed on what the first had made ("duplicate column").
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let now: usize = tx.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0))? as usize;
        // What the process it waited for left: a newer mneme's store is refused here too
        // (review79 #3: it was taken as upgraded, and written).
        check_version(now)?;
        if now > version {
            continue;
        }
        tx.execute_batch(sql)?;
        if version + 1 == SPLIT_VERSION {
            split_long_memories(&tx)?;
        }
        tx.pragma_update(None, "user_version", (version + 1) as i64)?;
        tx.commit()?;
    }
    Ok(())
}

/// The schema whose step splits the memories stored whole before passages (schema 4 made each
/// stored memory one passage; builds before this one left them so).
const SPLIT_VERSION: usize = 7;

/// A memory stored before passages and too long for one (a session's transcript) is split into
/// passages as a retain splits it now: one passage of 20,000 characters was embedded only in
/// its first 256 tokens, and never fitted a recall's budget but as its first result. Only a
/// memory that is one passage is: a retain's passages may run past [`MAX_PASSAGE`] with the
/// opening they repeat. Read a page at a time. Nothing points at such a passage: schema 4 gave
/// it no context, and the sessions' tails name only passages retained since.
///
/// [`MAX_PASSAGE`]: crate::passages::MAX_PASSAGE
fn split_long_memories(tx: &rusqlite::Transaction<'_>) -> Result<(), OpenError> {
    const PAGE: i64 = 256;
    let mut select = tx.prepare(
        "SELECT p.pid, p.memory_seq, p.text FROM passages p
         WHERE p.pid > ?1 AND length(p.text) > ?2
           AND NOT EXISTS (SELECT 1 FROM passages o WHERE o.memory_seq = p.memory_seq AND o.pid <> p.pid)
         ORDER BY p.pid LIMIT ?3",
    )?;
    let mut delete = tx.prepare("DELETE FROM passages WHERE pid = ?1")?;
    let mut insert =
        tx.prepare("INSERT INTO passages (pid, memory_seq, ord, text, prev_pid) VALUES (?1, ?2, ?3, ?4, ?5)")?;
    let (mut after, limit) = (0i64, crate::passages::MAX_PASSAGE as i64);
    // The highest pid before: every new passage is given one above it (SQLite would reuse a
    // deleted top pid), so one range indexes them all.
    let top: i64 = tx.query_row("SELECT coalesce(max(pid), 0) FROM passages", [], |r| r.get(0))?;
    let mut next = top;
    loop {
        let long: Vec<(i64, i64, String)> = select
            .query_map(rusqlite::params![after, limit, PAGE], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let Some(last) = long.last().map(|l| l.0) else { break };
        for (pid, memory, text) in long {
            delete.execute([pid])?;
            let mut prev: Option<i64> = None;
            for (ord, passage) in crate::passages::split(&text).into_iter().enumerate() {
                next += 1;
                insert.execute(rusqlite::params![next, memory, ord as i64, passage, prev])?;
                prev = Some(next);
            }
        }
        // New passages are above `top`: the pages read only the old ones.
        if last >= top {
            break;
        }
        after = last;
    }
    if next > top {
        tx.execute(crate::store::INDEX_NEW_PASSAGES, [top + 1, next])?;
    }
    Ok(())
}

/// Refuses a database written by a newer mneme.
pub fn check_version(current: usize) -> Result<(), OpenError> {
    if current > MIGRATIONS.len() {
        return Err(OpenError::NewerSchema { found: current, known: MIGRATIONS.len() });
    }
    Ok(())
}
