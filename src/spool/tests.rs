use std::time::Duration;

use super::*;

fn record(t: &Transaction<'_>, key: Option<&str>) -> rusqlite::Result<usize> {
    t.execute("INSERT INTO records (kind, key, record) VALUES ('test', ?, '{}')", [key])
}

#[tokio::test]
async fn a_failing_job_fails_alone_in_the_transaction_it_shares() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(&dir.path().join("spool.db")).unwrap();
    // The first job holds the writer, so the others wait and share its next transaction.
    let hold = spool.call(|_| {
        std::thread::sleep(Duration::from_millis(200));
        Ok(())
    });
    let good = spool.call_one_statement(|t| record(t, Some("good")));
    // A NULL key breaks NOT NULL: one statement, undone by SQLite itself.
    let bad_statement = spool.call_one_statement(|t| record(t, None));
    // Two statements, the second failing: the first is undone with it (its savepoint).
    let bad_job = spool.call(|t| {
        record(t, Some("half"))?;
        record(t, None)
    });
    let also_good = spool.call(|t| record(t, Some("also good")));
    let (hold, good, bad_statement, bad_job, also_good) = tokio::join!(hold, good, bad_statement, bad_job, also_good);
    hold.unwrap();
    assert_eq!(good.unwrap(), 1);
    assert!(bad_statement.is_err());
    assert!(bad_job.is_err());
    assert_eq!(also_good.unwrap(), 1);
    let keys = spool
        .call(|t| {
            let mut s = t.prepare("SELECT key FROM records WHERE kind = 'test' ORDER BY key")?;
            let keys = s.query_map([], |r| r.get::<_, String>(0))?.collect::<rusqlite::Result<Vec<_>>>();
            keys
        })
        .await
        .unwrap();
    assert_eq!(keys, vec!["also good", "good"]);
    let counts = spool.commit_counts();
    assert!(counts.commits >= 2 && counts.jobs == 6, "{counts:?}");
}

#[tokio::test]
async fn a_spool_of_the_previous_schema_keeps_its_items_after_the_upgrade() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spool.db");
    {
        // The spool as mneme wrote it before items could append (schema version 2).
        let conn = rusqlite::Connection::open(&path).unwrap();
        for sql in &SCHEMA[..2] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 2).unwrap();
        conn.execute(
            "INSERT INTO items (seq, id, session_id, bank, tags, content, context, kind, document_id, metadata, enqueued_at)
             VALUES (1, 'i1', 's', 'b', '[]', 'kept across the upgrade', NULL, 'world', 'doc', '{}', '2026-01-01T00:00:00Z')",
            [],
        )
        .unwrap();
    }
    let spool = Spool::open(&path).unwrap();
    let batch = spool.next_batch("s", 10).await.unwrap().items;
    assert_eq!(batch.len(), 1);
    assert_eq!(batch[0].item.content, "kept across the upgrade");
    assert!(!batch[0].item.append, "an item from before replaces its document, as it did");
}

#[tokio::test]
async fn items_kept_once_are_appended_with_their_record_and_not_again() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(&dir.path().join("spool.db")).unwrap();
    let item = |text: &str| mneme_core::MemoryItem::new(text, text, "2026-01-01T00:00:00.000Z");
    let once = |at: u64| OnceRecord { kind: "op", key: "k1".into(), record: format!("{{\"at\": {at}}}") };
    let first = spool.append_once("s", "b", vec![item("one"), item("two")], once(100)).await.unwrap();
    assert_eq!(first, None);
    let again = spool.append_once("s", "b", vec![item("three")], once(200)).await.unwrap();
    assert_eq!(again.as_deref(), Some("{\"at\": 100}"), "the first record answers");
    let kept: Vec<String> =
        spool.next_batch("s", 10).await.unwrap().items.into_iter().map(|s| s.item.content).collect();
    assert_eq!(kept, ["one", "two"]);
    assert_eq!(spool.forget_records_older_than("op", 100).await.unwrap(), 0);
    assert_eq!(spool.forget_records_older_than("op", 101).await.unwrap(), 1);
    assert_eq!(spool.record("op", "k1").await.unwrap(), None);
}

/// Of a kind's records, the `most` latest by their `at` are kept, the others deleted.
#[tokio::test]
async fn the_newest_records_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(&dir.path().join("spool.db")).unwrap();
    for (key, at) in [("a", 30), ("b", 10), ("c", 20)] {
        spool.save_record("ended", key, format!("{{\"at\": {at}}}")).await.unwrap();
    }
    spool.save_record("other", "x", "{\"at\": 1}".into()).await.unwrap();
    assert_eq!(spool.keep_newest_records("ended", "json_extract(record, '$.at') > 15", 1).await.unwrap(), 1);
    assert!(spool.record("ended", "c").await.unwrap().is_none(), "of those it names, the newest kept");
    spool.save_record("ended", "c", "{\"at\": 20}".into()).await.unwrap();
    assert_eq!(spool.keep_newest_records("ended", "1", 2).await.unwrap(), 1);
    assert!(spool.record("ended", "b").await.unwrap().is_none());
    assert!(spool.record("ended", "a").await.unwrap().is_some() && spool.record("ended", "c").await.unwrap().is_some());
    assert!(spool.record("other", "x").await.unwrap().is_some(), "another kind's stay");
}

/// An operation's record outlives its age while its bank has items waiting (review63 #7).
#[tokio::test]
async fn records_of_a_bank_with_items_waiting_are_kept_past_their_age() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(&dir.path().join("spool.db")).unwrap();
    let item = mneme_core::MemoryItem::new("one", "one", "2026-01-01T00:00:00.000Z");
    let once = OnceRecord { kind: "op", key: "k1".into(), record: "{\"bank\": \"b\", \"at\": 100}".into() };
    spool.append_once("s", "b", vec![item], once).await.unwrap();
    assert_eq!(spool.forget_records_older_than("op", 101).await.unwrap(), 0, "its items wait");
    let batch = spool.next_batch("s", 10).await.unwrap().items;
    spool.delivered("s", batch[0].batch_id.as_deref().unwrap(), batch[0].seq..=batch[0].seq).await;
    assert_eq!(spool.forget_records_older_than("op", 101).await.unwrap(), 1);
}

/// After `erase_traces` (a forget, a clear), the text of a delivered item is in no file: a
/// long item's overflow pages went to the free list with their text (`secure_delete = FAST`
/// zeroed rows, not freed pages), and the checkpoint copied them into spool.db.
#[tokio::test]
async fn erased_traces_leave_a_long_delivered_item_in_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(&dir.path().join("spool.db")).unwrap();
    let marker = "zanzibarquux4471";
    let text = format!("{}{marker}", "filler words ".repeat(400));
    spool.append("s", "b", vec![mneme_core::MemoryItem::new("i1", &text, "2026-01-01T00:00:00.000Z")]).await.unwrap();
    let batch = spool.next_batch("s", 10).await.unwrap().items;
    let batch_id = batch[0].batch_id.clone().unwrap();
    spool.delivered("s", &batch_id, batch[0].seq..=batch[0].seq).await;
    assert_eq!(spool.counts().await.unwrap().spooled, 0);
    spool.erase_traces().await.unwrap();
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        assert!(!bytes.windows(marker.len()).any(|w| w == marker.as_bytes()), "{} holds it", path.display());
    }
}

/// A job that fills the disk makes SQLite roll back its whole group's transaction: the jobs
/// after it hear so and store nothing (each committed on its own, while told it had failed).
#[tokio::test]
async fn jobs_after_one_that_fills_the_disk_store_nothing_and_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(&dir.path().join("spool.db")).unwrap();
    let hold = spool.call(|t| {
        let pages: i64 = t.query_row("PRAGMA page_count", [], |r| r.get(0))?;
        t.query_row(&format!("PRAGMA max_page_count = {}", pages + 2), [], |r| r.get::<_, i64>(0))?;
        std::thread::sleep(Duration::from_millis(200));
        Ok(())
    });
    let big = spool.call_one_statement(|t| {
        t.execute("INSERT INTO records (kind, key, record) VALUES ('test', 'big', ?)", ["x".repeat(200_000)])
    });
    let small = spool.call(|t| record(t, Some("small")));
    // The first job may share the group (and hear its failed commit) or go alone before it.
    let (_, big, small) = tokio::join!(hold, big, small);
    assert!(matches!(big, Err(SpoolError::Full(_))), "the full disk is said as such: {big:?}");
    let stored = spool.record("test", "small").await.unwrap();
    assert_eq!(small.is_ok(), stored.is_some(), "told {small:?}, stored {stored:?}");
}

/// A delivered batch's removal rides on the next transaction; when that transaction fails (a
/// job filled the disk and SQLite rolled it back) the removal rides on a later one: dropped,
/// the batch stayed spooled until a restart delivered it again, bringing back a memory
/// forgotten meanwhile.
#[tokio::test]
async fn a_removal_whose_transaction_failed_is_done_by_a_later_one() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(&dir.path().join("spool.db")).unwrap();
    spool
        .append("s", "b", vec![mneme_core::MemoryItem::new("i1", "delivered", "2026-01-01T00:00:00.000Z")])
        .await
        .unwrap();
    let batch = spool.next_batch("s", 10).await.unwrap().items;
    let batch_id = batch[0].batch_id.clone().unwrap();
    let hold = spool.call(|t| {
        let pages: i64 = t.query_row("PRAGMA page_count", [], |r| r.get(0))?;
        t.query_row(&format!("PRAGMA max_page_count = {}", pages + 2), [], |r| r.get::<_, i64>(0))?;
        std::thread::sleep(Duration::from_millis(200));
        Ok(())
    });
    let removal_then_full = async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        spool.delivered("s", &batch_id, batch[0].seq..=batch[0].seq).await;
        spool
            .call_one_statement(|t| {
                t.execute("INSERT INTO records (kind, key, record) VALUES ('test', 'big', ?)", ["x".repeat(200_000)])
            })
            .await
    };
    let (_, big) = tokio::join!(hold, removal_then_full);
    assert!(matches!(big, Err(SpoolError::Full(_))), "{big:?}");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while spool.counts().await.unwrap().spooled > 0 {
        assert!(std::time::Instant::now() < deadline, "the delivered batch stays spooled");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A forget of a memory drops it wherever it is queued, in its bank only when one is named.
#[tokio::test]
async fn a_forgotten_memory_is_dropped_from_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(&dir.path().join("spool.db")).unwrap();
    let item = |id: &str| mneme_core::MemoryItem::new(id, format!("text of {id}"), "2026-01-01T00:00:00.000Z");
    spool.append("s", "b", vec![item("i1"), item("i2")]).await.unwrap();
    spool.append("t", "c", vec![item("i3")]).await.unwrap();
    assert_eq!(spool.discard_memory(Some("b"), "i3").await.unwrap().0, 0, "another bank's");
    assert_eq!(spool.discard_memory(None, "i1").await.unwrap(), (1, vec!["s".to_owned()]));
    assert_eq!(spool.discard_memory(Some("c"), "i3").await.unwrap(), (1, vec!["t".to_owned()]));
    let left: Vec<String> = spool.next_batch("s", 10).await.unwrap().items.into_iter().map(|s| s.item.id).collect();
    assert_eq!(left, ["i2"]);
}

/// A session's turn and its record go in one transaction: both are there, or neither.
#[tokio::test]
async fn a_turn_and_its_session_record_are_written_together() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(&dir.path().join("spool.db")).unwrap();
    let item = mneme_core::MemoryItem::new("t1", "the turn", "2026-01-01T00:00:00.000Z");
    spool.append_with_session("s", "b", vec![item], r#"{"retained": 1}"#.into()).await.unwrap();
    assert_eq!(spool.counts().await.unwrap().spooled, 1);
    let sessions = spool.sessions().await.unwrap();
    assert_eq!(sessions, [("s".to_owned(), r#"{"retained": 1}"#.to_owned())]);
    // A record that cannot be written (no such table) takes the turn with it.
    spool.call(|t| t.execute_batch("ALTER TABLE sessions RENAME TO gone")).await.unwrap();
    let item = mneme_core::MemoryItem::new("t2", "another turn", "2026-01-01T00:00:00.000Z");
    assert!(spool.append_with_session("s", "b", vec![item], "{}".into()).await.is_err());
    assert_eq!(spool.counts().await.unwrap().spooled, 1);
}

/// A batch the backend stored part of before it failed for good, in this attempt or an earlier
/// one: the items it stored are delivered, not dead letters (put back, an append among them was
/// stored again), an older dead letter of their document goes as after a delivery (put back, it
/// replaced the newer version), and an item left of a document one of them began is an append
/// from then on (alone, it would replace it).
#[tokio::test]
async fn a_batch_dead_after_a_part_was_stored_keeps_only_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(&dir.path().join("spool.db")).unwrap();
    let item = |id: &str, document: &str| mneme_core::MemoryItem {
        document_id: Some(document.to_owned()),
        ..mneme_core::MemoryItem::new(id, id, "2026-01-01T00:00:00.000Z")
    };
    // An older version of d, a dead letter already: the stored d1 replaced it.
    spool.append("s", "b", vec![item("d0", "d")]).await.unwrap();
    let old = spool.next_batch("s", 10).await.unwrap().items[0].batch_id.clone().unwrap();
    spool.dead_letter("s", &old, "refused", &[]).await.unwrap();
    spool.append("s", "b", vec![item("d1", "d"), item("e1", "e"), item("d2", "d")]).await.unwrap();
    let batch = spool.next_batch("s", 10).await.unwrap().items;
    let batch_id = batch[0].batch_id.clone().unwrap();
    // Stored in an earlier attempt; the last one failed before it reached d1.
    spool.mark_stored("s", &batch_id, &["d1".to_owned()]).await.unwrap();
    let moved = spool.dead_letter("s", &batch_id, "refused", &[]).await.unwrap();
    assert_eq!(moved, DeadLettered { dead: 2, delivered: 1 });
    assert_eq!(spool.counts().await.unwrap().spooled, 0);
    spool.requeue_dead().await.unwrap();
    let again = spool.next_batch("s", 10).await.unwrap().items;
    let kept: Vec<(String, bool)> = again.iter().map(|s| (s.item.id.clone(), s.item.append)).collect();
    assert_eq!(kept, [("e1".to_owned(), false), ("d2".to_owned(), true)]);
    assert_eq!(again[0].batch_id.as_deref(), Some(batch_id.as_str()), "under its batch id still");
}

/// What an attempt stored is forgotten with the backend that stored it: dead-lettered on the
/// new one, those items were taken for delivered, and the new backend never had them.
#[tokio::test]
async fn what_an_old_backend_stored_is_not_taken_for_delivered() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(&dir.path().join("spool.db")).unwrap();
    let item = |id: &str| mneme_core::MemoryItem::new(id, id, "2026-01-01T00:00:00.000Z");
    spool.append("s", "b", vec![item("a"), item("b")]).await.unwrap();
    let batch_id = spool.next_batch("s", 10).await.unwrap().items[0].batch_id.clone().unwrap();
    spool.mark_stored("s", &batch_id, &["a".to_owned()]).await.unwrap();
    spool.forget_stored().await.unwrap();
    let moved = spool.dead_letter("s", &batch_id, "refused", &[]).await.unwrap();
    assert_eq!(moved, DeadLettered { dead: 2, delivered: 0 });
}

/// Records (a `/hindsight` bank's profile, a mental model) are neither saved nor deleted while
/// the spool's log is gone (answered, the save was lost and the deletion undone at the next
/// start); the writer, asked by the refusal, empties the deleted log into the file and opens it
/// again, and what was saved before and after is there at the next open.
#[tokio::test]
async fn records_are_refused_while_the_spool_log_is_gone_then_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spool.db");
    let spool = Spool::open(&path).unwrap();
    spool.save_record("model", "b/m", "{}".into()).await.unwrap();
    std::fs::remove_file(dir.path().join("spool.db-wal")).unwrap();
    // Refused while the log is gone (looked at every 100 ms), or saved after the writer's own
    // look wrote it back.
    let refused = spool.save_record("model", "b/n", "{}".into()).await;
    assert!(matches!(refused, Ok(()) | Err(SpoolError::Gone { .. })), "{refused:?}");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    // Saved until the spool has a log of its own again at the path (opened again after the
    // restore: a save may go into the deleted log before the writer's look).
    while spool.save_record("model", "b/o", "{}".into()).await.is_err() || !dir.path().join("spool.db-wal").exists() {
        assert!(std::time::Instant::now() < deadline, "the spool is not opened again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let keys = model_keys_after_a_crash(dir.path()).await;
    let expected: &[&str] = if refused.is_ok() { &["b/m", "b/n", "b/o"] } else { &["b/m", "b/o"] };
    assert_eq!(keys, expected);
}

/// The spool's file deleted (its folder too) is written back at once by the writer, asked by
/// the first refusal, and the writer goes on in the file written back: what was saved before and
/// after is in the files at the path (as a crash would leave them).
#[tokio::test]
async fn a_deleted_spool_is_written_back_at_once_and_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("data");
    std::fs::create_dir(&folder).unwrap();
    let path = folder.join("spool.db");
    let spool = Spool::open(&path).unwrap();
    spool.save_record("model", "before", "{}".into()).await.unwrap();
    std::fs::remove_dir_all(&folder).unwrap();
    // The writer's own look writes it back within 100 ms, with no request to notice it.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !folder.join("spool.db").exists() {
        assert!(std::time::Instant::now() < deadline, "not written back");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while spool.save_record("model", "after", "{}".into()).await.is_err() {
        assert!(std::time::Instant::now() < deadline, "the spool is not written back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!folder.join("spool.db.restoring").exists(), "renamed into place");
    assert_eq!(model_keys_after_a_crash(&folder).await, ["after", "before"]);
}

/// The keys of the `model` records in the spool at `folder`, read from a copy of its files as
/// they are now (as a crash would leave them).
async fn model_keys_after_a_crash(folder: &std::path::Path) -> Vec<String> {
    let copy = tempfile::tempdir().unwrap();
    for name in ["spool.db", "spool.db-wal"] {
        std::fs::copy(folder.join(name), copy.path().join(name)).unwrap();
    }
    let reopened = Spool::open(&copy.path().join("spool.db")).unwrap();
    reopened.records("model", "").await.unwrap().into_iter().map(|(k, _)| k).collect()
}

/// Records changed together: each one there is, as `change` answers; one it leaves, or that is
/// not there, stays as it was; one of another kind is not touched.
#[tokio::test]
async fn records_are_changed_together_as_asked() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(&dir.path().join("spool.db")).unwrap();
    for key in ["a", "b", "c"] {
        spool.save_record("ended", key, format!("{key}0")).await.unwrap();
    }
    spool.save_record("model", "a", "m0".into()).await.unwrap();
    let keys = ["a", "b", "missing", "c"].map(String::from).to_vec();
    let changed = spool.change_records("ended", keys, |r| (r != "b0").then(|| r.replace('0', "1"))).await.unwrap();
    assert_eq!(changed, 2);
    let records = spool.records("ended", "").await.unwrap();
    let expected = [("a", "a1"), ("b", "b0"), ("c", "c1")].map(|(k, r)| (k.to_owned(), r.to_owned()));
    assert_eq!(records, expected.to_vec());
    assert_eq!(spool.record("model", "a").await.unwrap().as_deref(), Some("m0"));
    assert_eq!(spool.record("ended", "missing").await.unwrap(), None);
}

/// A deleted spool is written back by the writer's own look while only removals of delivered
/// batches reach it (deliveries, no retain to notice): a look that came with a removal dropped
/// its decision, marked taken, and the file was never written back (review117 #1).
#[tokio::test]
async fn a_deleted_spool_is_written_back_while_only_removals_come() {
    for round in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spool.db");
        let spool = Spool::open(&path).unwrap();
        spool.save_record("model", "kept", "{}".into()).await.unwrap();
        std::fs::remove_file(&path).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_millis(1200);
        // (60 ms apart: the writer waits 20 ms for a job after a removal, so most of its looks
        // come with a removal.)
        while std::time::Instant::now() < deadline {
            spool.delivered("s", "b", 1..=1).await;
            tokio::time::sleep(Duration::from_millis(60)).await;
        }
        assert!(path.exists(), "round {round}: not written back");
        assert_eq!(model_keys_after_a_crash(dir.path()).await, ["kept"], "round {round}");
    }
}

/// What a write-back killed mid-way leaves is dealt with at the next open: a whole copy with no
/// spool at the path is put in place (the deleted file's log beside it removed), a copy cut short
/// is removed (review117 #3: the start made a new, empty spool without a word, and the partial
/// copy stayed).
#[tokio::test]
async fn a_write_back_killed_mid_way_is_finished_or_cleaned_at_the_next_open() {
    // A whole copy, as `write_back` renames it before it empties the log and puts it in place.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spool.db");
    {
        let spool = Spool::open(&path).unwrap();
        spool.save_record("model", "in the copy", "{}".into()).await.unwrap();
        spool.close(Duration::from_secs(5)).await;
    }
    std::fs::rename(&path, dir.path().join("spool.db.restored")).unwrap();
    std::fs::write(dir.path().join("spool.db-wal"), b"the deleted file's log frames".repeat(100)).unwrap();
    let spool = Spool::open(&path).unwrap();
    assert_eq!(spool.records("model", "").await.unwrap().len(), 1, "the copy is in place");
    assert!(!dir.path().join("spool.db.restored").exists());
    drop(spool);
    // A copy cut short beside no spool: removed, and the open goes on (the log there decides).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spool.db");
    std::fs::write(dir.path().join("spool.db.restoring"), b"half a database").unwrap();
    std::fs::write(dir.path().join("spool.db.restoring-journal"), b"its journal").unwrap();
    Spool::open(&path).unwrap();
    assert!(!dir.path().join("spool.db.restoring").exists(), "the partial copy is removed");
    assert!(!dir.path().join("spool.db.restoring-journal").exists());
}

/// Removals coming in a steady stream, each within the writer's wait of the last and no job
/// among them (deliveries of many sessions), are committed as they go: each waited its 20 ms
/// from the last message, so the whole stream was held back until it paused.
#[tokio::test]
async fn a_steady_stream_of_removals_is_committed_as_it_goes() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(&dir.path().join("spool.db")).unwrap();
    let before = spool.commit_counts().commits;
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_millis(400) {
        spool.delivered("s", "b", 1..=1).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let during = spool.commit_counts().commits - before;
    assert!(during >= 5, "{during} commits in 400 ms of removals");
}
