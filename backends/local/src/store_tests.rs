//! Tests of the synchronous store.

use rusqlite::StatementStatus;

use super::*;
use crate::recall::{RANKED_POOL, RANKED_POOL_SIZE};

fn item(id: usize, content: &str, doc: Option<&str>) -> MemoryItem {
    MemoryItem {
        document_id: doc.map(str::to_owned),
        ..MemoryItem::new(format!("item-{id}"), content, "2026-01-01T00:00:00.000Z")
    }
}

fn find(store: &Store, query: &str) -> Vec<String> {
    let filter = RecallFilter { bank: "b", tags: &[], tags_match: TagsMatch::Any, types: &[], max_chars: 100_000 };
    store.recall(query, &filter).unwrap().into_iter().map(|r| r.text).collect()
}

fn segments(store: &Store) -> i64 {
    store.conn.query_row("SELECT count(DISTINCT segid) FROM passages_fts_idx", [], |r| r.get(0)).unwrap()
}

/// The spool lets go of a delivered batch once the delivery returns: the store's commit must
/// survive a power loss by then (FULL syncs the log at every commit; NORMAL only at
/// checkpoints).
#[test]
fn a_commit_is_synced_before_it_returns() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("m.db")).unwrap();
    let sync: i64 = store.conn.query_row("PRAGMA synchronous", [], |r| r.get(0)).unwrap();
    let journal: String = store.conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
    assert_eq!((sync, journal.as_str()), (2, "wal"), "FULL is 2");
}

/// A vector is stored onto the passage that was read for it, not onto one that took its
/// pid with the same text in another memory or bank (it would be filed under the old one's).
#[test]
fn a_vector_is_stored_only_onto_the_passage_it_was_computed_for() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("m.db")).unwrap();
    assert_eq!(store.retain("b", &[item(1, "the heron cache expires hourly", None)]).unwrap(), 1);
    let read = store.unembedded("m", 0, 10).unwrap().remove(0);
    fn vector(p: &Unembedded) -> NewStoredVector<'_> {
        NewStoredVector { passage: p, scale: 1.0, data: &[1, 2, 3], crowding: None }
    }
    for (memory_seq, bank) in [(read.memory_seq + 1, read.bank.clone()), (read.memory_seq, "other".to_owned())] {
        let moved = Unembedded { memory_seq, bank, ..read.clone() };
        assert_eq!(store.put_vectors("m", &[vector(&moved)]).unwrap(), vec![None], "{moved:?}");
    }
    assert!(store.put_vectors("m", &[vector(&read)]).unwrap()[0].is_some());
}

#[test]
fn a_store_from_a_newer_mneme_is_refused_by_open_and_check() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    drop(Store::open(&path).unwrap());
    let newer = crate::schema::VERSION + 1;
    Connection::open(&path).unwrap().pragma_update(None, "user_version", newer as i64).unwrap();
    for e in [Store::open(&path).err().unwrap(), Store::check(&path).unwrap_err()] {
        assert!(matches!(e, OpenError::NewerSchema { found, known } if found == newer && known == newer - 1), "{e:?}");
        assert!(e.to_string().contains("is newer than this mneme supports"), "{e}");
    }
}

#[test]
fn a_batch_is_indexed_as_one_segment() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("m.db")).unwrap();
    let batch: Vec<MemoryItem> = (0..16).map(|i| item(i, &format!("walrus number{i} likes herring"), None)).collect();
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

/// A document's later memories (appends) follow its first in an export, on the same page:
/// Hindsight keeps of a document what one request holds, and parts sent apart replaced each
/// other (a migration kept only the last).
#[test]
fn an_export_keeps_a_documents_memories_together_across_pages() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("m.db")).unwrap();
    store.retain("b", &[item(1, "runbook part one", Some("runbook"))]).unwrap();
    for i in 2..6 {
        store.retain("b", &[item(i, &format!("loose note {i}"), None)]).unwrap();
    }
    let append = MemoryItem { append: true, ..item(6, "runbook part two", Some("runbook")) };
    store.retain("b", &[append]).unwrap();
    store.retain("b", &[item(7, "loose note 7", None)]).unwrap();
    let ids = |rows: &ExportRows| rows.memories.iter().map(|m| m.id.clone()).collect::<Vec<_>>();
    let all = store.export(None, 0, 100).unwrap();
    assert_eq!(ids(&all), ["item-1", "item-6", "item-2", "item-3", "item-4", "item-5", "item-7"]);
    assert_eq!(all.next, None);
    // Paged two at a time: the document is one page; nothing is left out or repeated.
    let (mut seen, mut after, mut pages) = (Vec::new(), 0, 0);
    loop {
        let page = store.export(None, after, 2).unwrap();
        assert!(page.memories.len() <= 2);
        seen.extend(ids(&page));
        pages += 1;
        match page.next {
            Some(next) => after = next,
            None => break,
        }
    }
    assert_eq!(seen, ids(&all), "in {pages} pages");
    // A document larger than the page is a page of its own.
    let page = store.export(None, 0, 1).unwrap();
    assert_eq!((ids(&page), page.next), (vec!["item-1".to_owned(), "item-6".to_owned()], Some(1)));
}

#[test]
fn a_forgotten_memory_leaves_nothing_readable_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let mut store = Store::open(&path).unwrap();
    let secret = "the prod password is zanzibarquux4471";
    let filler: Vec<MemoryItem> =
        (0..50).map(|i| item(i + 10, &format!("filler note {i} about the build cache"), None)).collect();
    store.retain("b", &filler).unwrap();
    store.retain("b", &[item(1, secret, None), item(2, &format!("doc part: {secret}"), Some("d"))]).unwrap();
    let traces = || -> Vec<String> {
        std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .filter(|e| std::fs::read(e.path()).unwrap().windows(9).any(|w| w == b"zanzibarq"))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    };
    assert!(!traces().is_empty(), "the test looks where the text is");
    assert_eq!(store.forget_memory("item-1", None).unwrap(), 1);
    assert_eq!(store.forget_document("b", "d").unwrap(), 1);
    store.erase_traces().unwrap();
    assert_eq!(traces(), Vec::<String>::new());
    assert!(!find(&store, "build cache").is_empty(), "the rest is still found");
}

/// A reader holding the log through a forget (a recall, the integrity check, a backup) keeps
/// the forgotten text in it: the store says so, and a retry once the reader is gone erases
/// it, without waiting for readers while one is still there.
#[test]
fn a_log_a_reader_held_through_a_forget_is_erased_once_it_lets_go() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let mut store = Store::open(&path).unwrap();
    store.retain("b", &[item(1, "the vault phrase is quokkamarble88", None)]).unwrap();
    store.retain("b", &[item(2, "an ordinary note about the build", None)]).unwrap();
    let in_log =
        || std::fs::read(dir.path().join("m.db-wal")).unwrap_or_default().windows(10).any(|w| w == b"quokkamarb");
    let mut reader = rusqlite::Connection::open(&path).unwrap();
    let snapshot = reader.transaction().unwrap();
    let _: i64 = snapshot.query_row("SELECT count(*) FROM memories", [], |r| r.get(0)).unwrap();
    store.conn.busy_timeout(std::time::Duration::from_millis(100)).unwrap();
    assert_eq!(store.forget_memory("item-1", None).unwrap(), 1);
    store.erase_traces().unwrap();
    assert!(store.traces_left() && in_log(), "the reader kept the log");
    let started = std::time::Instant::now();
    store.retry_erasure().unwrap();
    assert!(store.traces_left() && started.elapsed() < std::time::Duration::from_secs(1), "no wait for readers");
    drop(snapshot);
    store.retry_erasure().unwrap();
    assert!(!store.traces_left(), "truncated");
    assert!(!in_log(), "the forgotten text is gone from the log");
}

/// An erasure that fails (a full disk: here the database may not grow) after the deletion
/// committed is owed: the store says so, and a retry once there is room erases the text
/// (a forget answered an error though it had deleted, and its retry, deleting nothing,
/// erased nothing: the text stayed in the index for good).
#[test]
fn an_erasure_a_full_disk_refused_is_done_once_there_is_room() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let mut store = Store::open(&path).unwrap();
    store.retain("b", &[item(0, "the vault phrase is quokkamarble88", None)]).unwrap();
    // Many segments, so that merging them needs pages of its own.
    for batch in 0..40 {
        let notes: Vec<MemoryItem> = (0..50)
            .map(|i| item(1 + batch * 50 + i, &format!("note {batch} {i} about w{} and w{}", i * 7, batch * 13), None))
            .collect();
        store.retain("b", &notes).unwrap();
    }
    assert_eq!(store.forget_memory("item-0", None).unwrap(), 1);
    let pages: i64 = store.conn.query_row("PRAGMA page_count", [], |r| r.get(0)).unwrap();
    store.conn.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |_| Ok(())).unwrap();
    assert!(store.erase_traces().is_err(), "the merge needs room");
    assert!(store.traces_left(), "the erasure is owed");
    assert!(store.retry_erasure().is_err() && store.traces_left(), "still no room: still owed");
    // Owed across a restart too.
    let marker = Store::erase_marker(&path);
    assert!(marker.exists());
    drop(store);
    let mut store = Store::open(&path).unwrap();
    assert!(store.traces_left(), "still owed after a restart");
    store.retry_erasure().unwrap();
    assert!(!store.traces_left() && !marker.exists(), "erased");
    let on_disk = |name: &str| std::fs::read(dir.path().join(name)).unwrap_or_default();
    for file in ["m.db", "m.db-wal"] {
        assert!(!on_disk(file).windows(10).any(|w| w == b"quokkamarb"), "{file} holds the forgotten text");
    }
}

/// The debt is on disk before a deletion commits: a crash between the commit and the merge
/// left the forgotten text in the index's segments, and no marker to say so.
#[test]
fn a_deletion_owes_its_erasure_on_disk_before_it_commits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let marker = Store::erase_marker(&path);
    let mut store = Store::open(&path).unwrap();
    store.retain("b", &[item(0, "the vault phrase is quokkamarble88", None)]).unwrap();
    let deleted = crate::backend::erased(&mut store, |s| {
        assert!(marker.exists(), "no marker before the deletion");
        s.forget_memory("item-0", None)
    });
    assert_eq!(deleted.unwrap(), 1);
    assert!(!marker.exists() && !store.traces_left(), "merged: nothing owed");
    // A deletion that deletes nothing owes nothing.
    assert_eq!(crate::backend::erased(&mut store, |s| s.forget_memory("item-9", None)).unwrap(), 0);
    assert!(!marker.exists());
    // A crash after the commit (the merge never ran): the next start owes it, and merges.
    store.retain("b", &[item(1, "the second phrase is wombatgranite77", None)]).unwrap();
    store.note_erasure_owed();
    assert_eq!(store.forget_memory("item-1", None).unwrap(), 1);
    drop(store);
    let mut store = Store::open(&path).unwrap();
    assert!(store.traces_left(), "owed after the crash");
    store.retry_erasure().unwrap();
    assert!(!store.traces_left() && !marker.exists());
}

/// The marker stays until the log is emptied too: removed after the merge, a crash before the
/// checkpoint (a full disk refused it; here a reader holds the log) left the forgotten text in
/// the log for good, with nothing on disk to say so.
#[test]
fn an_owed_checkpoint_keeps_the_marker_until_the_log_is_emptied() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let marker = Store::erase_marker(&path);
    let mut store = Store::open(&path).unwrap();
    store.retain("b", &[item(0, "the vault phrase is quokkamarble88", None)]).unwrap();
    store.conn.busy_timeout(std::time::Duration::ZERO).unwrap();
    let reader = rusqlite::Connection::open(&path).unwrap();
    reader.execute_batch("BEGIN").unwrap();
    let _: i64 = reader.query_row("SELECT count(*) FROM memories", [], |r| r.get(0)).unwrap();
    let deleted = crate::backend::erased(&mut store, |s| s.forget_memory("item-0", None));
    assert_eq!(deleted.unwrap(), 1);
    assert!(store.traces_left() && marker.exists(), "the log's checkpoint is owed, and said so on disk");
    drop(reader);
    store.retry_erasure().unwrap();
    assert!(!store.traces_left() && !marker.exists(), "erased: nothing owed");
}

/// An import of several banks is all of them or none: on a full disk (here the database may
/// not grow) the bank before the one that failed was stored, and the request said 507,
/// "nothing was stored".
#[test]
fn an_import_of_several_banks_that_fails_stores_none() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("m.db")).unwrap();
    store.retain("a", &[item(0, "an earlier note", None)]).unwrap();
    let pages: i64 = store.conn.query_row("PRAGMA page_count", [], |r| r.get(0)).unwrap();
    store.conn.query_row(&format!("PRAGMA max_page_count = {}", pages + 8), [], |_| Ok(())).unwrap();
    let small = [item(1, "a small imported note", None)];
    let large: Vec<MemoryItem> =
        (0..200).map(|i| item(2 + i, &format!("note {i} {}", "words ".repeat(200)), None)).collect();
    assert!(store.import_banks(&[("a", &small), ("b", &large)]).is_err());
    store.conn.query_row("PRAGMA max_page_count = 1073741823", [], |_| Ok(())).unwrap();
    let count: i64 = store.conn.query_row("SELECT count(*) FROM memories", [], |r| r.get(0)).unwrap();
    assert_eq!(count, 1, "only the earlier note");
    assert_eq!(
        store.import_banks(&[("a", &small), ("b", &large[..2])]).unwrap(),
        3,
        "and it goes in once there is room"
    );
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
    for sql in [RANKED_POOL, INDEX_NEW_PASSAGES, EXPORT_LEADS, EXPORT_REST_OF_DOCUMENT] {
        let stmt = store.conn.prepare_cached(sql).unwrap();
        assert_eq!(stmt.get_status(StatementStatus::RePrepare), 0, "{sql}");
    }
    assert!(RANKED_POOL.ends_with(&format!("LIMIT {RANKED_POOL_SIZE}")));
}

/// A FIFO in place of the erasure marker does not block the writer: its open fails (no reader)
/// and is warned about, where it waited for a reader for good, and every later write with it.
#[test]
fn a_fifo_in_place_of_the_erasure_marker_blocks_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let store = Store::open(&path).unwrap();
    let made = std::process::Command::new("mkfifo").arg(Store::erase_marker(&path)).status().unwrap();
    assert!(made.success());
    let (done, waited) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        store.note_erasure_owed();
        let _ = done.send(());
    });
    assert!(waited.recv_timeout(std::time::Duration::from_secs(10)).is_ok(), "the writer waited on the FIFO");
}
