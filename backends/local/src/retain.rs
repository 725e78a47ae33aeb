//! One batch of retains inside its savepoint: replacing a document's passages, deduplicating,
//! splitting into passages and indexing them (see [`crate::store::Store::retain_batches`]).

use std::collections::{BTreeSet, HashMap};

use mneme_core::{MemoryItem, MemoryType};
use rusqlite::{params, params_from_iter, Connection, OptionalExtension};

use crate::dedupe::{self, ContentIndex};
use crate::passages;
use crate::rows::{decode_tags, encode_tags, merge_tags, same_projects, same_reach};
use crate::store::{Changes, INDEX_NEW_PASSAGES};

/// What a batch's document ids do to the passages a document already has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Documents {
    /// A retain: the batch is the document now; its stored memories not in the batch go
    /// (unless every item of that document in the batch is an append).
    Replace,
    /// An import: the memories join their document, whose stored memories stay (an export is
    /// read back in pages, and a document's memories may fall across two of them).
    Join,
}

/// What a write needs besides the transaction.
pub(crate) struct Writing<'a> {
    /// What document ids do.
    pub(crate) documents: Documents,
    pub(crate) contents: &'a mut ContentIndex,
    pub(crate) last_passage: &'a mut HashMap<(String, String), i64>,
    /// This batch's changes (kept only if it commits).
    pub(crate) changes: Changes,
}

/// One batch of [`Store::retain_batches`], inside its savepoint.
pub(crate) fn retain_one(
    tx: &Connection,
    w: &mut Writing<'_>,
    bank: &str,
    items: &[MemoryItem],
) -> rusqlite::Result<usize> {
    let mut inserted = 0;
    let mut new_pids = None;
    let mut tails: HashMap<(String, String), i64> = HashMap::new();
    {
        let documents: BTreeSet<&str> = match w.documents {
            Documents::Replace => items.iter().filter(|i| !i.append).filter_map(|i| i.document_id.as_deref()).collect(),
            Documents::Join => BTreeSet::new(),
        };
        for doc in documents {
            let keep: Vec<&str> =
                items.iter().filter(|i| i.document_id.as_deref() == Some(doc)).map(|i| i.id.as_str()).collect();
            let placeholders = vec!["?"; keep.len()].join(",");
            let sql = format!("DELETE FROM memories WHERE bank = ? AND document_id = ? AND id NOT IN ({placeholders})");
            let mut args: Vec<&str> = vec![bank, doc];
            args.extend(keep);
            let removed: Vec<i64> = tx
                .prepare_cached(&format!(
                    "SELECT p.pid FROM passages p JOIN memories m ON m.seq = p.memory_seq
                     WHERE m.bank = ? AND m.document_id = ? AND m.id NOT IN ({placeholders})"
                ))?
                .query_map(params_from_iter(args.iter()), |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            tx.execute(&sql, params_from_iter(args))?;
            crate::store::untail(tx, &removed, w.last_passage)?;
            crate::store::unlink_context(tx, &removed)?;
            w.changes.removed.extend(removed);
        }
        let mut bank_of = tx.prepare_cached("SELECT bank FROM memories WHERE id = ?")?;
        let mut candidate = tx.prepare_cached(
            "SELECT bank, content, tags, document_id, id, context, kind, metadata FROM memories WHERE seq = ?",
        )?;
        let mut merge = tx.prepare_cached("UPDATE memories SET tags = ? WHERE seq = ?")?;
        let mut insert = tx.prepare_cached(
            "INSERT INTO memories (id, bank, content, content_hash, context, kind, tags, metadata, document_id, created_at)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )?;
        let mut insert_passage =
            tx.prepare_cached("INSERT INTO passages (memory_seq, ord, text, prev_pid) VALUES (?, ?, ?, ?)")?;
        for item in items {
            let id = match bank_of.query_row([&item.id], |r| r.get::<_, String>(0)).optional()? {
                None => std::borrow::Cow::Borrowed(item.id.as_str()),
                Some(b) if b == bank => continue, // a batch sent again
                Some(_) => {
                    // The id is another bank's memory (an export imported into a bank of another
                    // name): this copy takes an id of its own, the same at every import. Taken
                    // for the other's, it was counted as there and nothing was copied.
                    let own = format!("{}-{:016x}", item.id, dedupe::content_hash(bank) as u64);
                    if bank_of.exists([&own])? {
                        continue;
                    }
                    std::borrow::Cow::Owned(own)
                }
            };
            let metadata = serde_json::to_string(&item.metadata).expect("string map serializes");
            let hash = dedupe::content_hash(&item.content);
            let key = dedupe::key(bank, hash);
            // A duplicate is the same content in the same document (or outside any): a row is
            // owned by its document, and a new version of one document must not take away what
            // another (or a fact retained on its own) holds.
            let mut dup = None;
            for seq in w.contents.candidates(key) {
                let row = candidate.query_row([seq], Candidate::read).optional()?;
                match row {
                    Some(Candidate { bank: b, content, tags, doc, id, own })
                        if b == bank && content == item.content =>
                    {
                        // An import of a copy made in Hindsight by a mneme from before the loose
                        // mark (see `mneme_core::transfer::LOOSE_MEMORY_KEY`): it sent a memory
                        // of no document as the document named by the memory's id, and reads
                        // back as a memory of that document.
                        let unmarked_copy = w.documents == Documents::Join
                            && doc.is_none()
                            && item.document_id.as_deref() == Some(id.as_str());
                        // Untagged is global (every project's recall sees it): merged with a
                        // project's tags it was narrowed to that project, and a clear of the
                        // project deleted it; a global retain of a project's memory stayed the
                        // project's. So with tags other than a project's. One of each is kept.
                        // A memory carries at most `MAX_MEMORY_TAGS`: past them the text is stored
                        // once more (merged without a cap, the same fact retained in 101 projects
                        // made a memory no import or migrate would take back).
                        // Another project's copy is merged only when nothing but its tag is
                        // its own: the row keeps the first copy's context and metadata, and a
                        // project's recall gave the other's (its session, a client's name), which
                        // stayed in the store after a clear of that project.
                        let shareable = same_projects(&tags, &item.tags)
                            || own == (item.context.clone(), item.kind.as_str().to_owned(), metadata.clone());
                        if (doc == item.document_id || unmarked_copy) && same_reach(&tags, &item.tags) && shareable {
                            let merged = merge_tags(&tags, &item.tags);
                            if decode_tags(&merged).len() <= mneme_core::MAX_MEMORY_TAGS {
                                dup = Some((seq, tags, merged));
                                break;
                            }
                        }
                    }
                    _ => w.contents.remove(key, seq), // gone, or a hash collision
                }
            }
            if let Some((seq, tags, merged)) = dup {
                if merged != tags {
                    merge.execute(params![merged, seq])?;
                    w.changes.retagged.insert(seq, merged);
                }
                continue;
            }
            insert.execute(params![
                id,
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
            w.contents.add(key, seq);
            // Its passages, each knowing the one before it: the previous passage of the memory,
            // else, for a conversation's turns, the session's turn before it (see `chain_of`).
            let chain = chain_of(tx, w.last_passage, bank, item)?;
            let mut prev = chain.as_ref().and_then(|c| c.before);
            for (ord, text) in passages::split(&item.content).into_iter().enumerate() {
                insert_passage.execute(params![seq, ord as i64, text, prev])?;
                let pid = tx.last_insert_rowid();
                new_pids = Some(new_pids.map_or((pid, pid), |(first, _): (i64, i64)| (first, pid)));
                prev = Some(pid);
            }
            if let (Some(Chain { key, .. }), Some(pid)) = (chain, prev) {
                tails.insert(key.clone(), pid);
                w.last_passage.insert(key, pid);
            }
            inserted += 1;
        }
    }
    // New passages take increasing pids above every older one: one range covers the batch.
    let mut put_tail =
        tx.prepare_cached("INSERT OR REPLACE INTO session_tails (bank, session, pid) VALUES (?, ?, ?)")?;
    for ((bank, session), pid) in tails {
        put_tail.execute(params![bank, session, pid])?;
    }
    if let Some((first, last)) = new_pids {
        tx.prepare_cached(INDEX_NEW_PASSAGES)?.execute([first, last])?;
        w.changes.first_added = Some(w.changes.first_added.map_or(first, |f| f.min(first)));
    }
    Ok(inserted)
}

/// The conversation a memory continues.
struct Chain {
    /// (bank, session): whose last passage the memory's passages become.
    key: (String, String),
    /// The passage before the memory's first.
    before: Option<i64>,
}

/// The conversation a memory continues, if any (see [`Chain`]).
///
/// - A conversation's turns as automatic retain stores them (experiences, in a session) follow
///   the session's last passage.
/// - Any other memory that reads as a turn (it opens with its speaker's name, see [`speaker`])
///   follows the session's last passage (the bank's, without a session) when that one is another
///   speaker's turn: a conversation fed turn by turn through the `retain` tool or Hindsight's API
///   arrives as facts (or as experiences without a session, when the items name a document),
///   and its turns need the turn before them as much.
/// - Any other fact stands alone: the fact retained before it is about something else.
fn chain_of(
    tx: &Connection,
    last_passage: &mut HashMap<(String, String), i64>,
    bank: &str,
    item: &MemoryItem,
) -> rusqlite::Result<Option<Chain>> {
    let session = item.metadata.get("session_id");
    if let (MemoryType::Experience, Some(session)) = (item.kind, session) {
        let key = (bank.to_owned(), session.clone());
        let before = last_passage_of(tx, last_passage, &key)?;
        return Ok(Some(Chain { key, before }));
    }
    let Some(who) = speaker(&item.content) else { return Ok(None) };
    let key = (bank.to_owned(), session.cloned().unwrap_or_default());
    let Some(before) = last_passage_of(tx, last_passage, &key)? else { return Ok(Some(Chain { key, before: None })) };
    let text: Option<String> = tx
        .prepare_cached(
            "SELECT substr(m.content, 1, 64) FROM passages p JOIN memories m ON m.seq = p.memory_seq WHERE p.pid = ?1",
        )?
        .query_row([before], |r| r.get(0))
        .optional()?;
    let replies = text.as_deref().and_then(speaker).is_some_and(|other| other != who);
    Ok(Some(Chain { key, before: replies.then_some(before) }))
}

/// The speaker a conversation turn opens with ("Caroline: …", "Dr. Ann Lee: …"): one to three
/// capitalised words (at most 40 bytes), then a colon and a space.
fn speaker(text: &str) -> Option<&str> {
    let (label, _) = text.split_once(": ")?;
    let name = |w: &str| {
        w.chars().next().is_some_and(char::is_uppercase)
            && w.chars().all(|c| c.is_alphabetic() || matches!(c, '\'' | '’' | '.' | '-'))
    };
    let words: Vec<&str> = label.split(' ').collect();
    (label.len() <= 40 && (1..=3).contains(&words.len()) && words.into_iter().all(name)).then_some(label)
}

/// The last passage of a session in a bank, from the map, else from `session_tails`.
fn last_passage_of(
    tx: &Connection,
    map: &mut HashMap<(String, String), i64>,
    key: &(String, String),
) -> rusqlite::Result<Option<i64>> {
    if let Some(pid) = map.get(key) {
        return Ok(Some(*pid));
    }
    let found: Option<i64> = tx
        .prepare_cached("SELECT pid FROM session_tails WHERE bank = ?1 AND session = ?2")?
        .query_row(params![key.0, key.1], |r| r.get(0))
        .optional()?;
    if let Some(pid) = found {
        map.insert(key.clone(), pid);
    }
    Ok(found)
}

/// A stored memory that may be the same as one being retained.
struct Candidate {
    bank: String,
    content: String,
    tags: String,
    doc: Option<String>,
    id: String,
    /// What a copy holds of its own besides its tags: context, kind and metadata (as stored).
    own: (Option<String>, String, String),
}

impl Candidate {
    fn read(r: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(Candidate {
            bank: r.get(0)?,
            content: r.get(1)?,
            tags: r.get(2)?,
            doc: r.get(3)?,
            id: r.get(4)?,
            own: (r.get(5)?, r.get(6)?, r.get(7)?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::speaker;

    #[test]
    fn a_turn_opens_with_its_speakers_name() {
        assert_eq!(speaker("Caroline: I went to the support group"), Some("Caroline"));
        assert_eq!(speaker("Dr. Ann O'Neil: take two"), Some("Dr. Ann O'Neil"));
        assert_eq!(speaker("Gotcha: the cache is cold"), Some("Gotcha"));
        for not_a_turn in [
            "The deploy uses cargo-dist",
            "the user: lowercase",
            "Four Words Are Too: many",
            "TODO:no space",
            "Build 42: a number",
            "",
        ] {
            assert_eq!(speaker(not_a_turn), None, "{not_a_turn}");
        }
    }
}
