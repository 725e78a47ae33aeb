//! The queue's rows: appending items, handing out batches (with a batch id fixed at the first
//! attempt), recording failures, dead letters and their requeue, and the counts.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use mneme_core::{MemoryItem, MemoryType};
use rusqlite::{params, OptionalExtension, Transaction};

use super::writer::{Message, Removal};
use super::{Spool, SpoolCounts, SpoolError};

/// A record kept with the items it came with ([`Spool::append_once`]).
#[derive(Debug, Clone)]
pub struct OnceRecord {
    /// Its kind, as in [`Spool::save_record`].
    pub kind: &'static str,
    /// Its key.
    pub key: String,
    /// Its JSON.
    pub record: String,
}

const ITEM_COLUMNS: &str =
    "seq, id, session_id, bank, tags, content, context, kind, document_id, metadata, enqueued_at, batch_id, attempts, append,
     coalesce(request, seq)";

/// An item waiting in the spool.
#[derive(Debug, Clone, PartialEq)]
pub struct Spooled {
    /// Order of arrival.
    pub seq: i64,
    /// The session whose queue it is in.
    pub session_id: String,
    /// The bank it goes to.
    pub bank: String,
    /// The item (its tags are the scope's tags).
    pub item: MemoryItem,
    /// The delivery it belongs to, once one was attempted.
    pub batch_id: Option<String>,
    /// Failed deliveries so far.
    pub attempts: u32,
    /// The seq of the first item of the request it came in.
    pub request: i64,
}

impl Spool {
    /// Appends items to a session's queue; returns once they are on disk.
    pub async fn append(&self, session_id: &str, bank: &str, items: Vec<MemoryItem>) -> Result<(), SpoolError> {
        let (session_id, bank) = (session_id.to_owned(), bank.to_owned());
        let next_seq = self.next_seq.clone();
        let one = items.len() == 1;
        let append = move |t: &Transaction<'_>| insert_items(t, &next_seq, &session_id, &bank, &items);
        if one {
            self.call_one_statement(append).await
        } else {
            self.call(append).await
        }
    }

    /// Appends items as [`Spool::append`] does, and saves the record of the session they are
    /// for in the same transaction (see `Sessions::queue_pending`).
    pub async fn append_with_session(
        &self,
        session_id: &str,
        bank: &str,
        items: Vec<MemoryItem>,
        record: String,
    ) -> Result<(), SpoolError> {
        let (session_id, bank) = (session_id.to_owned(), bank.to_owned());
        let next_seq = self.next_seq.clone();
        self.call(move |t| {
            insert_items(t, &next_seq, &session_id, &bank, &items)?;
            super::records::save_session_in(t, &session_id, &record)
        })
        .await
    }

    /// Appends items as [`Spool::append`] does, and with them, in the same transaction, `once`:
    /// unless a record of its kind and key is kept already. Then nothing is appended and that
    /// record is the answer.
    pub async fn append_once(
        &self,
        session_id: &str,
        bank: &str,
        items: Vec<MemoryItem>,
        once: OnceRecord,
    ) -> Result<Option<String>, SpoolError> {
        let (session_id, bank) = (session_id.to_owned(), bank.to_owned());
        let next_seq = self.next_seq.clone();
        self.call(move |t| {
            let kept = super::records::record_in(t, once.kind, &once.key)?;
            if kept.is_some() {
                return Ok(kept);
            }
            t.execute(
                "INSERT INTO records (kind, key, record) VALUES (?, ?, ?)",
                params![once.kind, once.key, once.record],
            )?;
            insert_items(t, &next_seq, &session_id, &bank, &items)?;
            Ok(None)
        })
        .await
    }

    /// The next delivery of a session: the batch already attempted, if any, else up to `max`
    /// oldest items of one scope, which get a new batch id. Empty when nothing waits.
    ///
    /// A row this mneme cannot read (written by another version, or edited by hand) is moved to
    /// the dead letters with why, and said in [`NextBatch::set_aside`]: left in place, it held
    /// up every later item of its session for good, silently.
    pub async fn next_batch(&self, session_id: &str, max: usize) -> Result<NextBatch, SpoolError> {
        let session_id = session_id.to_owned();
        let now = mneme_core::time::rfc3339(std::time::SystemTime::now());
        self.call(move |t| {
            let mut set_aside = Vec::new();
            loop {
                let (items, unreadable) = next_rows(t, &session_id, max)?;
                if unreadable.is_empty() {
                    return Ok(NextBatch { items, set_aside });
                }
                for (seq, why) in &unreadable {
                    let why = format!("this mneme cannot read it ({why}); it was set aside");
                    t.execute(
                        "INSERT OR IGNORE INTO dead_letters (seq, id, session_id, bank, tags, content, context, kind, document_id,
                             metadata, enqueued_at, batch_id, attempts, last_error, failed_at, append, request)
                         SELECT seq, id, session_id, bank, tags, content, context, kind, document_id, metadata,
                             enqueued_at, batch_id, attempts, ?, ?, append, request FROM items WHERE session_id = ? AND seq = ?",
                        params![why, now, session_id, seq],
                    )?;
                    t.execute("DELETE FROM items WHERE session_id = ? AND seq = ?", params![session_id, seq])?;
                    set_aside.push(why);
                }
                // The readable rows are read again: a new batch takes the rows after them.
            }
        })
        .await
    }

    /// Removes a delivered batch, whose items have the sequence numbers `seqs` (a batch is
    /// consecutive in its session's queue; the range keeps a long backlog from being scanned).
    ///
    /// Returns at once: the removal rides on the writer's next transaction instead of paying
    /// for a commit and a sync of its own. Every later spool call sees it done. Should it be
    /// lost (a crash first), the batch is resent under the same batch id, which stores nothing
    /// twice.
    pub async fn delivered(&self, session_id: &str, batch_id: &str, seqs: std::ops::RangeInclusive<i64>) {
        let removal = Removal { session_id: session_id.to_owned(), batch_id: batch_id.to_owned(), seqs };
        let sent = match self.place().await {
            Ok(place) => self.jobs.send(Message::Remove(removal, place)).is_ok(),
            Err(_) => false,
        };
        if !sent {
            tracing::warn!(session_id, "spool writer stopped; batch {batch_id} stays spooled and is resent");
        }
    }

    /// Records a failed attempt; returns the batch's attempt count.
    pub async fn failed(&self, session_id: &str, batch_id: &str, reason: &str) -> Result<u32, SpoolError> {
        let (session_id, batch_id, reason) = (session_id.to_owned(), batch_id.to_owned(), reason.to_owned());
        self.call(move |t| {
            t.execute(
                "UPDATE items SET attempts = attempts + 1, last_error = ? WHERE session_id = ? AND batch_id = ?",
                params![reason, session_id, batch_id],
            )?;
            t.query_row(
                "SELECT coalesce(max(attempts), 0) FROM items WHERE session_id = ? AND batch_id = ?",
                [&session_id, &batch_id],
                |r| r.get(0),
            )
        })
        .await
    }

    /// Notes that the backend stored the items `stored` of a batch in an attempt that failed
    /// after them (see [`Spool::dead_letter`]).
    pub async fn mark_stored(&self, session_id: &str, batch_id: &str, stored: &[String]) -> Result<(), SpoolError> {
        let (session_id, batch_id) = (session_id.to_owned(), batch_id.to_owned());
        let stored = serde_json::to_string(stored).expect("strings serialize");
        self.call(move |t| mark_stored_in(t, &session_id, &batch_id, &stored)).await
    }

    /// Forgets which items an attempt stored ([`Spool::mark_stored`]): the backend that stored
    /// them is no longer the one in force, and the new one has not.
    pub async fn forget_stored(&self) -> Result<(), SpoolError> {
        self.call(|t| t.execute("UPDATE items SET stored = 0 WHERE stored <> 0", []).map(|_| ())).await
    }

    /// Moves a batch to the dead letters, but for the items of it the backend stored before it
    /// failed (`stored`, and those an earlier attempt noted: [`Spool::mark_stored`]): they are
    /// delivered, and go as a delivered batch's items go (older dead letters of their document
    /// they replace go with them). An item left of a document one of them began in the batch is
    /// an append from then on (sent again alone, it would replace what they stored).
    pub async fn dead_letter(
        &self,
        session_id: &str,
        batch_id: &str,
        reason: &str,
        stored: &[String],
    ) -> Result<DeadLettered, SpoolError> {
        let (session_id, batch_id, reason) = (session_id.to_owned(), batch_id.to_owned(), reason.to_owned());
        let stored = serde_json::to_string(stored).expect("strings serialize");
        let now = mneme_core::time::rfc3339(std::time::SystemTime::now());
        self.call(move |t| {
            mark_stored_in(t, &session_id, &batch_id, &stored)?;
            let delivered = stored_leave_as_delivered(t, &session_id, &batch_id)?;
            let dead = t.execute(
                "INSERT OR IGNORE INTO dead_letters (seq, id, session_id, bank, tags, content, context, kind, document_id, metadata,
                     enqueued_at, batch_id, attempts, last_error, failed_at, append, request)
                 SELECT seq, id, session_id, bank, tags, content, context, kind, document_id, metadata,
                     enqueued_at, batch_id, attempts, ?, ?, append, request FROM items WHERE session_id = ? AND batch_id = ?",
                params![reason, now, session_id, batch_id],
            )?;
            t.execute("DELETE FROM items WHERE session_id = ? AND batch_id = ?", [&session_id, &batch_id])?;
            Ok(DeadLettered { dead: dead as u64, delivered: delivered as u64 })
        })
        .await
    }

    /// Puts every dead letter back in its session's queue (keeping its batch id, so a batch the
    /// server did store after all is not stored twice). Returns the sessions touched and the count.
    pub async fn requeue_dead(&self) -> Result<(Vec<String>, u64), SpoolError> {
        self.call(|t| {
            let n = t.execute(
                "INSERT OR IGNORE INTO items (seq, id, session_id, bank, tags, content, context, kind, document_id, metadata,
                     enqueued_at, batch_id, attempts, last_error, append, request)
                 SELECT seq, id, session_id, bank, tags, content, context, kind, document_id, metadata,
                     enqueued_at, batch_id, 0, last_error, append, request FROM dead_letters ORDER BY seq",
                [],
            )?;
            let sessions = distinct_sessions(t, "dead_letters")?;
            t.execute("DELETE FROM dead_letters", [])?;
            Ok((sessions, n as u64))
        })
        .await
    }

    /// Sessions with items waiting, and how many each has.
    pub async fn waiting(&self) -> Result<BTreeMap<String, u64>, SpoolError> {
        self.call(|t| {
            let mut stmt = t.prepare("SELECT session_id, count(*) FROM items GROUP BY session_id")?;
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)))?;
            rows.collect()
        })
        .await
    }

    /// Per session: items spooled and dead letters (sessions with neither are left out).
    pub async fn counts_by_session(&self) -> Result<BTreeMap<String, SpoolCounts>, SpoolError> {
        self.call(|t| {
            let mut out: BTreeMap<String, SpoolCounts> = BTreeMap::new();
            for (table, dead) in [("items", false), ("dead_letters", true)] {
                let mut stmt = t.prepare(&format!("SELECT session_id, count(*) FROM {table} GROUP BY session_id"))?;
                let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64)))?;
                for row in rows {
                    let (session, n) = row?;
                    let c = out.entry(session).or_default();
                    if dead {
                        c.dead = n;
                    } else {
                        c.spooled = n;
                    }
                }
            }
            Ok(out)
        })
        .await
    }

    /// Deletes the waiting items (and dead letters) of one session, or of all.
    pub async fn discard(&self, session_id: Option<&str>) -> Result<u64, SpoolError> {
        let session_id = session_id.map(str::to_owned);
        self.call(move |t| {
            let n = match &session_id {
                Some(s) => {
                    t.execute("DELETE FROM dead_letters WHERE session_id = ?", [s])?;
                    t.execute("DELETE FROM items WHERE session_id = ?", [s])?
                }
                None => {
                    t.execute("DELETE FROM dead_letters", [])?;
                    t.execute("DELETE FROM items", [])?
                }
            };
            Ok(n as u64)
        })
        .await
    }

    /// Drops the items and dead letters of a scope, whichever session queued them: those of
    /// `bank` holding any of `tags` (every one of the bank when `tags` is empty), as a clear of
    /// that scope deletes stored memories. One that also holds another project's tag is kept
    /// for that project, without the cleared tags, as the local store keeps such a memory.
    /// Returns how many items went and the sessions whose items were dropped or changed.
    pub async fn discard_scope(&self, bank: &str, tags: &[String]) -> Result<(u64, Vec<String>), SpoolError> {
        let (bank, tags) = (bank.to_owned(), json(&tags));
        let project = mneme_core::PROJECT_TAG_PREFIX;
        self.call(move |t| {
            const IN_SCOPE: &str = "bank = ?1 AND (json_array_length(?2) = 0 OR EXISTS (
                SELECT 1 FROM json_each(tags) AS held WHERE held.value IN (SELECT value FROM json_each(?2))))";
            // Another project's tag, not among those cleared (none is when the whole bank is).
            const SHARED: &str = "json_array_length(?2) > 0 AND EXISTS (SELECT 1 FROM json_each(tags) AS other
                WHERE substr(other.value, 1, length(?3)) = ?3 AND other.value NOT IN (SELECT value FROM json_each(?2)))";
            const UNTAGGED: &str = "(SELECT json_group_array(kept.value) FROM json_each(tags) AS kept
                WHERE kept.value NOT IN (SELECT value FROM json_each(?2)))";
            let sessions: Vec<String> = t
                .prepare(&format!("SELECT DISTINCT session_id FROM items WHERE {IN_SCOPE}"))?
                .query_map(params![bank, tags], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            // A new body needs a new batch id: Hindsight answers 409 to an operation id it knows
            // sent with another body. (And what an attempt of the old batch stored is not this
            // body's: see `mark_stored`.)
            for set in ["UPDATE dead_letters SET batch_id = NULL", "UPDATE items SET batch_id = NULL, stored = 0"] {
                t.execute(&format!("{set}, tags = {UNTAGGED} WHERE {IN_SCOPE} AND {SHARED}"), params![bank, tags, project])?;
            }
            t.execute(&format!("DELETE FROM dead_letters WHERE {IN_SCOPE}"), params![bank, tags])?;
            let n = t.execute(&format!("DELETE FROM items WHERE {IN_SCOPE}"), params![bank, tags])?;
            Ok((n as u64, sessions))
        })
        .await
    }

    /// Drops what is queued (and dead) for one document of a bank, by any session. The items sent
    /// in a batch with them keep its id: each part of a delivery is named by the batch and its
    /// own items (see the Hindsight backend's parts), so a part already accepted is not sent
    /// again under a new name. Returns how many items went, and the sessions that held them.
    pub async fn discard_document(&self, bank: &str, document_id: &str) -> Result<(u64, Vec<String>), SpoolError> {
        let (bank, document_id) = (bank.to_owned(), document_id.to_owned());
        let (n, _dead, sessions) =
            self.discard_where("bank = ?1 AND document_id = ?2", (bank, Some(document_id))).await?;
        Ok((n, sessions))
    }

    /// Drops the memory `id` (of `bank`, when given) wherever it is queued or dead (a forget
    /// of the memory): returns how many rows went and the sessions that had them. Its
    /// transaction also carries the removals of the batches delivered before it.
    pub async fn discard_memory(&self, bank: Option<&str>, id: &str) -> Result<(u64, Vec<String>), SpoolError> {
        let (n, dead, sessions) = self
            .discard_where("id = ?1 AND (?2 IS NULL OR bank = ?2)", (id.to_owned(), bank.map(str::to_owned)))
            .await?;
        Ok((n + dead, sessions))
    }

    /// Deletes the items and dead letters matching `of_it` (an SQL condition on `?1` and `?2`):
    /// how many items and dead letters went, and the sessions whose items they were.
    async fn discard_where(
        &self,
        of_it: &'static str,
        (first, second): (String, Option<String>),
    ) -> Result<(u64, u64, Vec<String>), SpoolError> {
        self.call(move |t| {
            let sessions: Vec<String> = t
                .prepare(&format!("SELECT DISTINCT session_id FROM items WHERE {of_it}"))?
                .query_map(params![first, second], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            let dead = t.execute(&format!("DELETE FROM dead_letters WHERE {of_it}"), params![first, second])?;
            let n = t.execute(&format!("DELETE FROM items WHERE {of_it}"), params![first, second])?;
            Ok((n as u64, dead as u64, sessions))
        })
        .await
    }

    /// Whether items for `bank` are waiting (queued, or in a delivery not yet confirmed).
    pub async fn holds_bank(&self, bank: &str) -> Result<bool, SpoolError> {
        let bank = bank.to_owned();
        self.call(move |t| t.query_row("SELECT EXISTS(SELECT 1 FROM items WHERE bank = ?)", [bank], |r| r.get(0))).await
    }

    /// Totals for status.
    pub async fn counts(&self) -> Result<SpoolCounts, SpoolError> {
        self.call(|t| {
            let spooled: i64 = t.query_row("SELECT count(*) FROM items", [], |r| r.get(0))?;
            let dead: i64 = t.query_row("SELECT count(*) FROM dead_letters", [], |r| r.get(0))?;
            Ok(SpoolCounts { spooled: spooled as u64, dead: dead as u64 })
        })
        .await
    }
}

fn distinct_sessions(t: &Transaction<'_>, table: &str) -> rusqlite::Result<Vec<String>> {
    let mut stmt = t.prepare(&format!("SELECT DISTINCT session_id FROM {table}"))?;
    let rows = stmt.query_map([], |r| r.get(0))?;
    rows.collect()
}

/// How many of the oldest unbatched rows go in one delivery. A batch is what replaces a
/// document, so:
/// - it goes to one bank: it is cut at the first item of another;
/// - it holds one request's version of a document: it is cut before an item that replaces a
///   document an earlier request in the batch has (two transcripts of a session spooled during
///   an outage go in two deliveries, the later replacing the earlier, instead of being stored
///   side by side); appends to it stay;
/// - tags may differ (every backend stores each item's own) and do not cut: a document's items
///   in one request, tagged differently, would otherwise arrive in two batches and the second
///   would replace the first.
fn one_delivery(rows: &[Spooled]) -> usize {
    let Some(first) = rows.first() else { return 0 };
    let mut documents: std::collections::HashMap<&str, i64> = std::collections::HashMap::new();
    for (i, r) in rows.iter().enumerate() {
        if r.bank != first.bank {
            return i;
        }
        let Some(document) = r.item.document_id.as_deref() else { continue };
        match documents.get(document) {
            Some(&request) if request != r.request && !r.item.append => return i,
            Some(_) => {}
            None => {
                documents.insert(document, r.request);
            }
        }
    }
    rows.len()
}

fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("plain data serializes")
}

/// A session's next delivery, as [`Spool::next_batch`] hands it out.
#[derive(Debug, Default)]
pub struct NextBatch {
    /// The items to send, in order (empty: nothing waits).
    pub items: Vec<Spooled>,
    /// Why each row that could not be read was moved to the dead letters instead.
    pub set_aside: Vec<String>,
}

/// Marks the items of a batch whose ids the JSON array `stored` lists (see [`Spool::mark_stored`]).
fn mark_stored_in(t: &Transaction<'_>, session_id: &str, batch_id: &str, stored: &str) -> rusqlite::Result<()> {
    t.execute(
        "UPDATE items SET stored = 1 WHERE session_id = ?1 AND batch_id = ?2 AND id IN (SELECT value FROM json_each(?3))",
        params![session_id, batch_id, stored],
    )
    .map(|_| ())
}

/// The items of a batch marked stored leave the spool as delivered ones do (see
/// [`Spool::dead_letter`]); how many. Nothing is looked at when none is (each statement on the
/// dead letters reads them all, in the spool writer's one transaction: a dead-lettering held
/// every retain for seconds once thousands had piled up).
fn stored_leave_as_delivered(t: &Transaction<'_>, session_id: &str, batch_id: &str) -> rusqlite::Result<usize> {
    let any: bool = t
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM items WHERE session_id = ?1 AND batch_id = ?2 AND stored = 1)")?
        .query_row(params![session_id, batch_id], |r| r.get(0))?;
    if !any {
        return Ok(0);
    }
    // Their documents, first: each statement on the dead letters looks at those of these only.
    const STORED_DOCUMENTS: &str = "dead_letters.document_id IN (SELECT document_id FROM items
        WHERE session_id = ?1 AND batch_id = ?2 AND stored = 1 AND document_id IS NOT NULL)";
    // A stored item of the batch, a replace (`append = 0`) or an append, came after the dead
    // letter in its document.
    let stored_after = |append: u8| {
        format!(
            "EXISTS (SELECT 1 FROM items i WHERE i.session_id = ?1 AND i.batch_id = ?2 AND i.stored = 1
                 AND i.append = {append} AND i.document_id = dead_letters.document_id
                 AND i.bank = dead_letters.bank AND i.seq > dead_letters.seq)"
        )
    };
    // As `supersede_dead_letters` does for a delivered batch.
    t.execute(
        &format!("DELETE FROM dead_letters WHERE {STORED_DOCUMENTS} AND {}", stored_after(0)),
        params![session_id, batch_id],
    )?;
    t.execute(
        &format!("UPDATE dead_letters SET append = 1 WHERE {STORED_DOCUMENTS} AND append = 0 AND {}", stored_after(1)),
        params![session_id, batch_id],
    )?;
    t.execute(
        "UPDATE items SET append = 1 WHERE session_id = ?1 AND batch_id = ?2 AND document_id IS NOT NULL
             AND append = 0 AND stored = 0 AND EXISTS (
                 SELECT 1 FROM items AS s WHERE s.session_id = ?1 AND s.batch_id = ?2 AND s.stored = 1
                     AND s.document_id = items.document_id AND s.bank = items.bank AND s.seq < items.seq)",
        params![session_id, batch_id],
    )?;
    t.execute("DELETE FROM items WHERE session_id = ?1 AND batch_id = ?2 AND stored = 1", params![session_id, batch_id])
}

/// What [`Spool::dead_letter`] did with a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadLettered {
    /// Items moved to the dead letters.
    pub dead: u64,
    /// Items the backend had stored, which left the spool as delivered.
    pub delivered: u64,
}

/// Rows read: the items, and (seq, why) of each row that could not be read.
type ReadRows = (Vec<Spooled>, Vec<(i64, String)>);

/// The session's next delivery's rows (see [`Spool::next_batch`]), and the rows among them that
/// cannot be read: (seq, why). When there are any, no batch id is given out.
fn next_rows(t: &Transaction<'_>, session_id: &str, max: usize) -> rusqlite::Result<ReadRows> {
    // Batches are assigned oldest first, so an attempted batch is always at the front.
    let existing: Option<String> = t
        .prepare_cached("SELECT batch_id FROM items WHERE session_id = ? ORDER BY seq LIMIT 1")?
        .query_row([session_id], |r| r.get(0))
        .optional()?
        .flatten();
    if let Some(batch) = existing {
        let mut stmt = t.prepare_cached(&format!(
            "SELECT {ITEM_COLUMNS} FROM items WHERE session_id = ? AND batch_id = ? ORDER BY seq"
        ))?;
        return read_rows(stmt.query(params![session_id, batch])?);
    }
    // `LIMIT ? + 0`: a bare bound LIMIT makes SQLite (built with STAT4) re-prepare the
    // statement on every run.
    let mut stmt = t.prepare_cached(&format!(
        "SELECT {ITEM_COLUMNS} FROM items WHERE session_id = ? AND batch_id IS NULL ORDER BY seq LIMIT ? + 0"
    ))?;
    let (mut rows, unreadable) = read_rows(stmt.query(params![session_id, max as i64])?)?;
    if !unreadable.is_empty() {
        return Ok((rows, unreadable));
    }
    rows.truncate(one_delivery(&rows));
    continue_cut_request(t, session_id, &rows)?;
    let batch = crate::ids::new_id();
    if let (Some(first), Some(last)) = (rows.first(), rows.last()) {
        // The rows are consecutive among this session's unbatched ones: one ranged update marks
        // them (a requeued dead letter may sit before an attempted batch: that one keeps its id).
        t.prepare_cached(
            "UPDATE items SET batch_id = ? WHERE session_id = ? AND seq BETWEEN ? AND ? AND batch_id IS NULL",
        )?
        .execute(params![batch, session_id, first.seq, last.seq])?;
    }
    for r in &mut rows {
        r.batch_id = Some(batch.clone());
    }
    Ok((rows, unreadable))
}

/// A batch may end inside a request: cut at `queue.max_batch`, or before an item of the request
/// that replaces a document an earlier request in the batch has. Each document the request has
/// in the batch is then continued, not replaced, by its items left for the next batch: they
/// become appends (kept in the spool, so a restart resends them so too). Sent as they were, the
/// next batch would replace the document with its later items alone, and the first ones,
/// delivered and acknowledged, would be gone.
fn continue_cut_request(t: &Transaction<'_>, session_id: &str, rows: &[Spooled]) -> rusqlite::Result<()> {
    let Some(last) = rows.last() else { return Ok(()) };
    let documents: std::collections::BTreeSet<&str> =
        rows.iter().filter(|r| r.request == last.request).filter_map(|r| r.item.document_id.as_deref()).collect();
    let mut stmt = t.prepare_cached(
        "UPDATE items SET append = 1 WHERE session_id = ? AND seq > ? AND request = ? AND document_id = ?
             AND batch_id IS NULL",
    )?;
    for document in documents {
        stmt.execute(params![session_id, last.seq, last.request, document])?;
    }
    Ok(())
}

/// Items from rows of [`ITEM_COLUMNS`], and the rows that hold what this mneme cannot read (a
/// kind, tags or metadata it does not know, a value of another type): (seq, why).
fn read_rows(mut rows: rusqlite::Rows<'_>) -> rusqlite::Result<ReadRows> {
    let (mut items, mut unreadable) = (Vec::new(), Vec::new());
    while let Some(r) = rows.next()? {
        match read_item(r) {
            Ok(item) => items.push(item),
            Err(
                e @ (rusqlite::Error::FromSqlConversionFailure(..)
                | rusqlite::Error::InvalidColumnType(..)
                | rusqlite::Error::IntegralValueOutOfRange(..)),
            ) => unreadable.push((r.get(0)?, e.to_string())),
            Err(e) => return Err(e),
        }
    }
    Ok((items, unreadable))
}

fn read_item(r: &rusqlite::Row<'_>) -> rusqlite::Result<Spooled> {
    let bad = |i: usize, e: String| rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, e.into());
    let tags: String = r.get(4)?;
    let kind: String = r.get(7)?;
    let metadata: String = r.get(9)?;
    Ok(Spooled {
        seq: r.get(0)?,
        session_id: r.get(2)?,
        bank: r.get(3)?,
        item: MemoryItem {
            id: r.get(1)?,
            content: r.get(5)?,
            context: r.get(6)?,
            timestamp: r.get(10)?,
            metadata: serde_json::from_str(&metadata).map_err(|e| bad(9, e.to_string()))?,
            tags: serde_json::from_str(&tags).map_err(|e| bad(4, e.to_string()))?,
            document_id: r.get(8)?,
            kind: kind.parse::<MemoryType>().map_err(|e| bad(7, e))?,
            append: r.get(13)?,
        },
        batch_id: r.get(11)?,
        attempts: r.get::<_, i64>(12)? as u32,
        request: r.get(14)?,
    })
}

/// Inserts a request's items in order (the first item's seq is the request's).
fn insert_items(
    t: &Transaction<'_>,
    next_seq: &std::sync::atomic::AtomicI64,
    session_id: &str,
    bank: &str,
    items: &[MemoryItem],
) -> rusqlite::Result<()> {
    let mut stmt = t.prepare_cached(
        "INSERT INTO items (seq, id, session_id, bank, tags, content, context, kind, document_id, metadata, enqueued_at, append, request)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )?;
    let mut request = None;
    for item in items {
        let seq = next_seq.fetch_add(1, Ordering::Relaxed);
        let request = *request.get_or_insert(seq);
        stmt.execute(params![
            seq,
            item.id,
            session_id,
            bank,
            json(&item.tags),
            item.content,
            item.context,
            item.kind.as_str(),
            item.document_id,
            json(&item.metadata),
            item.timestamp,
            item.append,
            request,
        ])?;
    }
    Ok(())
}
