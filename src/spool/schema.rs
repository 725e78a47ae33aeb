//! The spool's tables.

/// Each entry moves the schema from version `i` to `i + 1`. Append only.
pub(super) const SCHEMA: &[&str] = &[
    r#"
CREATE TABLE items (
    session_id   TEXT NOT NULL,
    seq          INTEGER NOT NULL,       -- arrival order; never reused while a row holds it
    id           TEXT NOT NULL,
    bank         TEXT NOT NULL,
    tags         TEXT NOT NULL,      -- JSON array
    content      TEXT NOT NULL,
    context      TEXT,
    kind         TEXT NOT NULL,
    document_id  TEXT,
    metadata     TEXT NOT NULL,      -- JSON object
    enqueued_at  TEXT NOT NULL,
    batch_id     TEXT,               -- fixed at the first delivery attempt: resends reuse it
    attempts     INTEGER NOT NULL DEFAULT 0,
    last_error   TEXT,
    -- Clustered by session: an append touches one B-tree (one or two pages a commit).
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE TABLE dead_letters (
    seq          INTEGER PRIMARY KEY,
    id           TEXT NOT NULL UNIQUE,
    session_id   TEXT NOT NULL,
    bank         TEXT NOT NULL,
    tags         TEXT NOT NULL,
    content      TEXT NOT NULL,
    context      TEXT,
    kind         TEXT NOT NULL,
    document_id  TEXT,
    metadata     TEXT NOT NULL,
    enqueued_at  TEXT NOT NULL,
    batch_id     TEXT,
    attempts     INTEGER NOT NULL,
    last_error   TEXT,
    failed_at    TEXT NOT NULL
);
CREATE TABLE notices (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    at           TEXT NOT NULL,
    level        TEXT NOT NULL,
    source       TEXT NOT NULL,
    session_id   TEXT,
    message      TEXT NOT NULL
);
CREATE TABLE sessions (
    id           TEXT PRIMARY KEY,
    record       TEXT NOT NULL       -- JSON, owned by the session layer
);
"#,
    r#"
-- Small objects other layers keep (the Hindsight API's bank profiles and mental models).
CREATE TABLE records (
    kind         TEXT NOT NULL,
    key          TEXT NOT NULL,
    record       TEXT NOT NULL,      -- JSON, owned by the layer that wrote it
    PRIMARY KEY (kind, key)
) WITHOUT ROWID;
"#,
    r#"
-- 1 when the item adds to its document instead of replacing it (update_mode "append").
ALTER TABLE items ADD COLUMN append INTEGER NOT NULL DEFAULT 0;
ALTER TABLE dead_letters ADD COLUMN append INTEGER NOT NULL DEFAULT 0;
-- The seq of the first item of the request it came in (NULL before: its own seq), so that a
-- delivery never holds two requests' versions of one document.
ALTER TABLE items ADD COLUMN request INTEGER;
ALTER TABLE dead_letters ADD COLUMN request INTEGER;
"#,
    r#"
-- 1 when the backend stored the item in an attempt of its batch that failed after it: it is
-- delivered, and never sent to the dead letters (see `Spool::dead_letter`).
ALTER TABLE items ADD COLUMN stored INTEGER NOT NULL DEFAULT 0;
"#,
];
