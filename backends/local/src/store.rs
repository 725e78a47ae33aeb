//! The synchronous SQLite store. Every method runs on a blocking thread (see [`crate::LocalBackend`]).

use std::collections::BTreeSet;
use std::path::Path;

use mneme_core::{MemoryItem, Recalled, StoredMemory, TagsMatch};
use rusqlite::functions::FunctionFlags;
use rusqlite::{params, params_from_iter, Connection, OptionalExtension, TransactionBehavior};

use crate::dedupe::{self, ContentIndex};
use crate::fts;

/// Tag list separator (ASCII unit separator): cannot appear in a tag a user types.
const SEP: char = '\u{1f}';

/// At most this many rows are ranked into a recall answer before the token budget applies.
const RECALL_ROW_LIMIT: usize = 50;
/// Ranked candidates fetched from the memories table at a time.
const FETCH_CHUNK: usize = 25;

/// Filters and bounds for [`Store::recall`].
#[derive(Debug, Clone)]
pub struct RecallFilter<'a> {
    /// Bank to search.
    pub bank: &'a str,
    /// Tag filter (empty = none).
    pub tags: &'a [String],
    /// How `tags` match.
    pub tags_match: TagsMatch,
    /// Memory types (empty = all), as their wire spelling.
    pub types: &'a [&'a str],
    /// Stop adding results once their text passes this many characters.
    pub max_chars: usize,
}

/// Counts for status.
#[derive(Debug, Clone, Copy)]
pub struct Stats {
    /// Rows in `memories`.
    pub memories: u64,
    /// Database + WAL size in bytes.
    pub bytes: u64,
}

/// Candidates FTS5 ranks for a recall.
const RECALL_POOL: usize = RECALL_ROW_LIMIT * 4;

/// The candidate pool. Its LIMIT is a literal: a bound LIMIT makes SQLite (built with STAT4)
/// re-prepare the statement on every run, since the plan may depend on the value.
const RANKED_POOL: &str = "SELECT rowid, rank FROM memories_fts WHERE memories_fts MATCH ?1 ORDER BY rank LIMIT 200";

/// A page of an export. `LIMIT ?3 + 0`: an expression, so the bound value does not force a
/// re-prepare either.
const EXPORT_PAGE: &str = "SELECT seq, id, bank, content, context, kind, tags, metadata, document_id, created_at
     FROM memories WHERE seq > ?1 AND (?2 IS NULL OR bank = ?2) ORDER BY seq LIMIT ?3 + 0";

/// Indexes a batch's new rows in one statement, so FTS5 writes one segment per batch.
const INDEX_NEW_ROWS: &str =
    "INSERT INTO memories_fts(rowid, terms) SELECT seq, mneme_terms(content) FROM memories WHERE seq BETWEEN ?1 AND ?2";

/// One SQLite connection to the memory database.
pub struct Store {
    conn: Connection,
    /// Where each content is stored, for the dedupe on retain (built on the first retain).
    contents: ContentIndex,
}

impl Store {
    /// Opens (creating if needed) the database at `path`, in WAL mode, migrated.
    pub fn open(path: &Path) -> rusqlite::Result<Self> {
        let mut conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        // Statement and savepoint journals in memory, not in temporary files.
        conn.pragma_update(None, "temp_store", "MEMORY")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        // The FTS triggers call this; every connection that writes must have it.
        conn.create_scalar_function(
            "mneme_terms",
            1,
            FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
            |ctx| Ok(fts::index_terms(&ctx.get::<String>(0)?)),
        )?;
        crate::schema::migrate(&mut conn)?;
        Ok(Self { conn, contents: ContentIndex::default() })
    }

    /// See [`crate::check`].
    pub fn check(path: &Path) -> rusqlite::Result<u64> {
        use rusqlite::OpenFlags;
        let conn =
            Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        crate::schema::check_version(version as usize)?;
        let verdict: String = conn.query_row("PRAGMA quick_check", [], |r| r.get(0))?;
        if verdict != "ok" {
            return Err(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
                Some(format!("SQLite finds it damaged: {verdict}")),
            ));
        }
        if version == 0 {
            return Ok(0);
        }
        conn.query_row("SELECT count(*) FROM memories", [], |r| r.get::<_, i64>(0)).map(|n| n as u64)
    }

    /// Stores a batch in one transaction. Items whose id is already stored are skipped; identical
    /// content in the same bank is stored once (its tags merged); items carrying a document id
    /// replace the stored rows of that document that are not part of this batch.
    /// Returns how many rows were inserted.
    pub fn retain(&mut self, bank: &str, items: &[MemoryItem]) -> rusqlite::Result<usize> {
        let mut results = self.retain_batches(&[(bank, items)])?;
        results.pop().expect("one result per batch")
    }

    /// Stores several batches (bank, items) in one transaction, each as [`Store::retain`] would:
    /// a batch that fails is rolled back alone and gets its error; the others are committed
    /// together (one commit instead of one each). `Err` when the transaction itself fails.
    pub fn retain_batches(
        &mut self,
        batches: &[(&str, &[MemoryItem])],
    ) -> rusqlite::Result<Vec<rusqlite::Result<usize>>> {
        let results = self.retain_in_transaction(batches);
        if !matches!(&results, Ok(r) if r.iter().all(Result::is_ok)) {
            // Something rolled back: rows the map no longer lists may exist again.
            self.contents.invalidate();
        }
        results
    }

    fn retain_in_transaction(
        &mut self,
        batches: &[(&str, &[MemoryItem])],
    ) -> rusqlite::Result<Vec<rusqlite::Result<usize>>> {
        let Store { conn, contents } = self;
        // IMMEDIATE: the write lock is taken before the dedupe map is checked against other
        // connections' changes, so none can slip in between.
        let mut tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        contents.refresh(&tx)?;
        if let [(bank, items)] = batches {
            // Alone, the batch is the transaction: no savepoint needed.
            let n = retain_one(&tx, contents, bank, items);
            if n.is_ok() {
                tx.commit()?;
            }
            return Ok(vec![n]);
        }
        let mut results = Vec::with_capacity(batches.len());
        for (bank, items) in batches {
            let savepoint = tx.savepoint()?;
            match retain_one(&savepoint, contents, bank, items) {
                Ok(n) => {
                    savepoint.commit()?;
                    results.push(Ok(n));
                }
                Err(e) => results.push(Err(e)), // dropping the savepoint rolls it back
            }
        }
        tx.commit()?;
        Ok(results)
    }

    /// Full-text recall, best first, bounded by `filter.max_chars`.
    pub fn recall(&self, query: &str, filter: &RecallFilter<'_>) -> rusqlite::Result<Vec<Recalled>> {
        let Some(expr) = self.ranking_expression(query)? else { return Ok(Vec::new()) };
        // Fast path: FTS5 ranks and cuts a candidate pool on its own (its `rank` ordering never
        // touches the memories table); only the pool is fetched and filtered. When the filters
        // leave too few of a full pool, every match is filtered instead.
        let ranked: Vec<(i64, f64)> = self
            .conn
            .prepare_cached(RANKED_POOL)?
            .query_map([&expr], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        // Fetch the pool a chunk at a time: usually the first chunk fills the token budget.
        let mut rows = Vec::new();
        let mut chars = 0;
        for chunk in ranked.chunks(FETCH_CHUNK) {
            for r in self.fetch_ranked(chunk, filter)? {
                chars += r.text.chars().count();
                rows.push(r);
            }
            if chars >= filter.max_chars || rows.len() >= RECALL_ROW_LIMIT {
                break;
            }
        }
        if ranked.len() == RECALL_POOL && rows.len() < RECALL_ROW_LIMIT && chars < filter.max_chars {
            rows = self.recall_all_matches(&expr, filter)?;
        }
        let mut out = Vec::new();
        let mut used = 0;
        for r in rows {
            let len = r.text.chars().count();
            if !out.is_empty() && used + len > filter.max_chars {
                break;
            }
            used += len;
            out.push(r);
            if used >= filter.max_chars {
                break;
            }
        }
        Ok(out)
    }

    /// The memories among `ranked` (rowid, rank) that pass the filter, in rank order.
    fn fetch_ranked(&self, ranked: &[(i64, f64)], filter: &RecallFilter<'_>) -> rusqlite::Result<Vec<Recalled>> {
        if ranked.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = ranked.iter().map(|(id, _)| id.to_string()).collect();
        // The ids go in as one JSON array, so the statement text depends only on the filter's
        // shape and stays in the statement cache.
        let mut sql = String::from(
            "SELECT m.seq, m.content, m.kind, m.created_at, m.tags FROM memories m
             WHERE m.seq IN (SELECT value FROM json_each(?2)) AND m.bank = ?1",
        );
        let mut args: Vec<String> = vec![filter.bank.to_owned(), format!("[{}]", ids.join(","))];
        push_type_filter(&mut sql, &mut args, filter.types);
        push_tag_filter(&mut sql, &mut args, filter.tags, filter.tags_match);
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let mut found: std::collections::HashMap<i64, Recalled> = stmt
            .query_map(params_from_iter(args.iter()), |row| Ok((row.get(0)?, recalled(row, 1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(ranked
            .iter()
            .filter_map(|(id, rank)| found.remove(id).map(|r| Recalled { score: Some(-rank), ..r }))
            .take(RECALL_ROW_LIMIT)
            .collect())
    }

    /// Recall ranked by BM25 over every query term and every match, unpruned: the reference
    /// ranking that benchmarks hold [`Store::recall`] against.
    pub fn recall_exhaustive(&self, query: &str, filter: &RecallFilter<'_>) -> rusqlite::Result<Vec<Recalled>> {
        match fts::match_expression(query) {
            Some(expr) => self.recall_all_matches(&expr, filter),
            None => Ok(Vec::new()),
        }
    }

    /// Every match joined and filtered, best first (the slow, complete path).
    fn recall_all_matches(&self, expr: &str, filter: &RecallFilter<'_>) -> rusqlite::Result<Vec<Recalled>> {
        let mut sql = String::from(
            "SELECT m.content, m.kind, m.created_at, m.tags, bm25(memories_fts) AS score
             FROM memories_fts JOIN memories m ON m.seq = memories_fts.rowid
             WHERE memories_fts MATCH ?1 AND m.bank = ?2",
        );
        let mut args: Vec<String> = vec![expr.to_owned(), filter.bank.to_owned()];
        push_type_filter(&mut sql, &mut args, filter.types);
        push_tag_filter(&mut sql, &mut args, filter.tags, filter.tags_match);
        sql.push_str(&format!(" ORDER BY score LIMIT {RECALL_ROW_LIMIT}"));
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt.query_map(params_from_iter(args.iter()), |row| {
            Ok(Recalled { score: Some(-row.get::<_, f64>(4)?), ..recalled(row, 0)? })
        })?;
        rows.collect()
    }

    /// The MATCH expression recall ranks on: the query's rarest terms (see [`fts::select_terms`]).
    pub fn ranking_expression(&self, query: &str) -> rusqlite::Result<Option<String>> {
        let terms = fts::query_terms(query);
        let mut lookup = self.conn.prepare_cached("SELECT doc FROM memories_vocab WHERE term = ?")?;
        let mut with_df = Vec::with_capacity(terms.len());
        for term in terms {
            let df: Option<i64> = lookup.query_row([&term], |r| r.get(0)).optional()?;
            // Non-ASCII terms are stored with diacritics folded by SQLite: a miss says nothing.
            let df = match df {
                Some(n) => Some(n as u64),
                None if term.is_ascii() => Some(0),
                None => None,
            };
            with_df.push((term, df));
        }
        Ok(fts::or_expression(&fts::select_terms(with_df)))
    }

    /// The most recent memories of a bank passing a tag filter, newest first.
    pub fn recent(&self, bank: &str, tags: &[String], limit: usize) -> rusqlite::Result<Vec<Recalled>> {
        let mut sql = String::from("SELECT content, kind, created_at, tags FROM memories m WHERE m.bank = ?1");
        let mut args = vec![bank.to_owned()];
        push_tag_filter(&mut sql, &mut args, tags, TagsMatch::Any);
        sql.push_str(&format!(" ORDER BY seq DESC LIMIT {limit}"));
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt.query_map(params_from_iter(args.iter()), |row| recalled(row, 0))?;
        rows.collect()
    }

    /// Deletes a bank's memories; with tags, only those carrying one of them. Returns the count.
    pub fn clear_scope(&mut self, bank: &str, tags: &[String]) -> rusqlite::Result<u64> {
        let mut sql = String::from("DELETE FROM memories AS m WHERE m.bank = ?1");
        let mut args = vec![bank.to_owned()];
        push_tag_filter(&mut sql, &mut args, tags, TagsMatch::AnyStrict);
        Ok(self.conn.execute(&sql, params_from_iter(args.iter()))? as u64)
    }

    /// Deletes every memory. Returns the count.
    pub fn clear_all(&mut self) -> rusqlite::Result<u64> {
        let n = self.conn.execute("DELETE FROM memories", [])? as u64;
        Ok(n)
    }

    /// Up to `limit` memories after sequence `after`, oldest first, optionally of one bank.
    pub fn export(&self, bank: Option<&str>, after: i64, limit: usize) -> rusqlite::Result<Vec<(i64, StoredMemory)>> {
        let mut stmt = self.conn.prepare_cached(EXPORT_PAGE)?;
        let rows = stmt.query_map(params![after, bank, limit as i64], |r| {
            let kind: String = r.get(5)?;
            let metadata: String = r.get(7)?;
            Ok((
                r.get(0)?,
                StoredMemory {
                    id: r.get(1)?,
                    bank: r.get(2)?,
                    content: r.get(3)?,
                    context: r.get(4)?,
                    kind: kind.parse().unwrap_or_default(),
                    tags: decode_tags(&r.get::<_, String>(6)?),
                    metadata: serde_json::from_str(&metadata).unwrap_or_default(),
                    document_id: r.get(8)?,
                    created_at: r.get(9)?,
                },
            ))
        })?;
        rows.collect()
    }

    /// Memory count and size on disk.
    pub fn stats(&self) -> rusqlite::Result<Stats> {
        let memories: i64 = self.conn.query_row("SELECT count(*) FROM memories", [], |r| r.get(0))?;
        let pages: i64 = self.conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
        let page_size: i64 = self.conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
        let wal = self.conn.path().and_then(|p| std::fs::metadata(format!("{p}-wal")).ok()).map_or(0, |m| m.len());
        Ok(Stats { memories: memories as u64, bytes: (pages * page_size) as u64 + wal })
    }

    /// The underlying connection (benchmarks compare against a bare FTS5 query on it).
    pub fn connection(&self) -> &Connection {
        &self.conn
    }
}

/// One batch of [`Store::retain_batches`], inside its savepoint.
fn retain_one(
    tx: &Connection,
    contents: &mut ContentIndex,
    bank: &str,
    items: &[MemoryItem],
) -> rusqlite::Result<usize> {
    let mut inserted = 0;
    let mut new_seqs = None;
    {
        let documents: BTreeSet<&str> = items.iter().filter_map(|i| i.document_id.as_deref()).collect();
        for doc in documents {
            let keep: Vec<&str> =
                items.iter().filter(|i| i.document_id.as_deref() == Some(doc)).map(|i| i.id.as_str()).collect();
            let placeholders = vec!["?"; keep.len()].join(",");
            let sql = format!("DELETE FROM memories WHERE bank = ? AND document_id = ? AND id NOT IN ({placeholders})");
            let mut args: Vec<&str> = vec![bank, doc];
            args.extend(keep);
            tx.execute(&sql, params_from_iter(args))?;
        }
        let mut exists = tx.prepare_cached("SELECT 1 FROM memories WHERE id = ?")?;
        let mut candidate = tx.prepare_cached("SELECT bank, content, tags FROM memories WHERE seq = ?")?;
        let mut merge = tx.prepare_cached("UPDATE memories SET tags = ? WHERE seq = ?")?;
        let mut insert = tx.prepare_cached(
            "INSERT INTO memories (id, bank, content, content_hash, context, kind, tags, metadata, document_id, created_at)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )?;
        for item in items {
            if exists.exists([&item.id])? {
                continue;
            }
            let hash = dedupe::content_hash(&item.content);
            let key = dedupe::key(bank, hash);
            let mut dup = None;
            for seq in contents.candidates(key) {
                let row: Option<(String, String, String)> =
                    candidate.query_row([seq], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).optional()?;
                match row {
                    Some((b, content, tags)) if b == bank && content == item.content => {
                        dup = Some((seq, tags));
                        break;
                    }
                    _ => contents.remove(key, seq), // gone, or a hash collision
                }
            }
            if let Some((seq, tags)) = dup {
                let merged = merge_tags(&tags, &item.tags);
                if merged != tags {
                    merge.execute(params![merged, seq])?;
                }
                continue;
            }
            let metadata = serde_json::to_string(&item.metadata).expect("string map serializes");
            insert.execute(params![
                item.id,
                bank,
                item.content,
                hash,
                item.context,
                item.kind.as_str(),
                encode_tags(&item.tags),
                metadata,
                item.document_id,
                item.timestamp,
            ])?;
            let seq = tx.last_insert_rowid();
            contents.add(key, seq);
            new_seqs = Some(new_seqs.map_or((seq, seq), |(first, _)| (first, seq)));
            inserted += 1;
        }
    }
    // New rows take increasing seqs above every older row: one range covers the batch.
    if let Some((first, last)) = new_seqs {
        tx.prepare_cached(INDEX_NEW_ROWS)?.execute([first, last])?;
    }
    Ok(inserted)
}

/// A result from the columns content, kind, created_at, tags starting at `first`.
fn recalled(row: &rusqlite::Row<'_>, first: usize) -> rusqlite::Result<Recalled> {
    Ok(Recalled {
        text: row.get(first)?,
        kind: row.get(first + 1)?,
        mentioned_at: row.get(first + 2)?,
        tags: decode_tags(&row.get::<_, String>(first + 3)?),
        score: None,
    })
}

fn push_type_filter(sql: &mut String, args: &mut Vec<String>, types: &[&str]) {
    if types.is_empty() {
        return;
    }
    let start = args.len() + 1;
    let marks: Vec<String> = (0..types.len()).map(|i| format!("?{}", start + i)).collect();
    sql.push_str(&format!(" AND m.kind IN ({})", marks.join(",")));
    args.extend(types.iter().map(|t| (*t).to_owned()));
}

/// Appends Hindsight's tag-match semantics as SQL over the encoded `tags` column.
fn push_tag_filter(sql: &mut String, args: &mut Vec<String>, tags: &[String], mode: TagsMatch) {
    if tags.is_empty() {
        return;
    }
    let start = args.len() + 1;
    let tests: Vec<String> = (0..tags.len()).map(|i| format!("instr(m.tags, ?{}) > 0", start + i)).collect();
    let joined = match mode {
        TagsMatch::Any | TagsMatch::AnyStrict => tests.join(" OR "),
        TagsMatch::All | TagsMatch::AllStrict => tests.join(" AND "),
    };
    match mode {
        TagsMatch::Any | TagsMatch::All => sql.push_str(&format!(" AND (m.tags = '' OR ({joined}))")),
        TagsMatch::AnyStrict | TagsMatch::AllStrict => sql.push_str(&format!(" AND ({joined})")),
    }
    args.extend(tags.iter().map(|t| format!("{SEP}{t}{SEP}")));
}

fn encode_tags(tags: &[String]) -> String {
    let clean: Vec<&str> = tags.iter().map(|t| t.as_str()).filter(|t| !t.is_empty() && !t.contains(SEP)).collect();
    if clean.is_empty() {
        return String::new();
    }
    format!("{SEP}{}{SEP}", clean.join(&SEP.to_string()))
}

fn decode_tags(encoded: &str) -> Vec<String> {
    encoded.split(SEP).filter(|t| !t.is_empty()).map(str::to_owned).collect()
}

fn merge_tags(encoded: &str, more: &[String]) -> String {
    let mut tags = decode_tags(encoded);
    for t in more {
        if !tags.contains(t) {
            tags.push(t.clone());
        }
    }
    encode_tags(&tags)
}

#[cfg(test)]
mod tests {
    use mneme_core::MemoryType;
    use rusqlite::StatementStatus;

    use super::*;

    fn item(id: usize, content: &str, doc: Option<&str>) -> MemoryItem {
        MemoryItem {
            id: format!("item-{id}"),
            content: content.to_owned(),
            context: None,
            timestamp: "2026-01-01T00:00:00.000Z".into(),
            metadata: Default::default(),
            tags: vec![],
            document_id: doc.map(str::to_owned),
            kind: MemoryType::World,
        }
    }

    fn find(store: &Store, query: &str) -> Vec<String> {
        let filter = RecallFilter { bank: "b", tags: &[], tags_match: TagsMatch::Any, types: &[], max_chars: 100_000 };
        store.recall(query, &filter).unwrap().into_iter().map(|r| r.text).collect()
    }

    fn segments(store: &Store) -> i64 {
        store.conn.query_row("SELECT count(DISTINCT segid) FROM memories_fts_idx", [], |r| r.get(0)).unwrap()
    }

    #[test]
    fn a_batch_is_indexed_as_one_segment() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("m.db")).unwrap();
        let batch: Vec<MemoryItem> =
            (0..16).map(|i| item(i, &format!("walrus number{i} likes herring"), None)).collect();
        assert_eq!(store.retain("b", &batch).unwrap(), 16);
        assert_eq!(segments(&store), 1, "one FTS5 segment for the whole batch");
        assert_eq!(find(&store, "walrus").len(), 16);
        assert_eq!(find(&store, "number7"), vec!["walrus number7 likes herring".to_owned()]);

        // A document that replaces its previous version: the old row leaves the index, the new
        // one (which may reuse the deleted row's seq) enters it.
        store.retain("b", &[item(100, "draft one about otters", Some("doc"))]).unwrap();
        store.retain("b", &[item(101, "draft two about otters", Some("doc"))]).unwrap();
        assert_eq!(find(&store, "otters"), vec!["draft two about otters".to_owned()]);
        assert!(find(&store, "one").is_empty());
        // A resend indexes nothing twice.
        assert_eq!(store.retain("b", &batch).unwrap(), 0);
        assert_eq!(find(&store, "walrus").len(), 16);
    }

    #[test]
    fn duplicates_are_found_across_connections_and_after_deletes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.db");
        let mut a = Store::open(&path).unwrap();
        let mut b = Store::open(&path).unwrap();
        let count = |s: &Store, text: &str| -> i64 {
            s.conn.query_row("SELECT count(*) FROM memories WHERE content = ?", [text], |r| r.get(0)).unwrap()
        };
        a.retain("b", &[item(1, "the build uses sccache", None)]).unwrap(); // a's map is built now
        b.retain("b", &[item(2, "deploys go through staging", None)]).unwrap();
        // a learns of b's row through data_version, not through its own map.
        assert_eq!(a.retain("b", &[item(3, "deploys go through staging", None)]).unwrap(), 0);
        assert_eq!(count(&a, "deploys go through staging"), 1);
        // Another bank keeps its own copy.
        assert_eq!(a.retain("other", &[item(4, "deploys go through staging", None)]).unwrap(), 1);
        // A deleted row leaves a stale entry behind: the content is stored again.
        a.clear_all().unwrap();
        assert_eq!(a.retain("b", &[item(5, "the build uses sccache", None)]).unwrap(), 1);
        assert_eq!(a.retain("b", &[item(6, "the build uses sccache", None)]).unwrap(), 0);
        assert_eq!(count(&a, "the build uses sccache"), 1);
    }

    #[test]
    fn hot_statements_are_not_re_prepared() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("m.db")).unwrap();
        for round in 0..3 {
            let batch: Vec<MemoryItem> =
                (0..4).map(|i| item(round * 10 + i, &format!("gecko {round} {i}"), None)).collect();
            store.retain("b", &batch).unwrap();
            assert!(!find(&store, &format!("gecko {round}")).is_empty());
        }
        store.export(None, 0, 2).unwrap();
        store.export(None, 2, 3).unwrap();
        for sql in [RANKED_POOL, INDEX_NEW_ROWS, EXPORT_PAGE] {
            let stmt = store.conn.prepare_cached(sql).unwrap();
            assert_eq!(stmt.get_status(StatementStatus::RePrepare), 0, "{sql}");
        }
        assert!(RANKED_POOL.ends_with(&format!("LIMIT {RECALL_POOL}")));
    }
}
