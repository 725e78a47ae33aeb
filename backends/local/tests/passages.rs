//! Long memories are stored as passages: recall returns the best of them within the budget,
//! a document's new version replaces all of its passages, and export/import keep memories whole.

use mneme_core::*;
use mneme_local::{LocalBackend, LocalConfig};

fn item(id: &str, content: &str, doc: Option<&str>) -> MemoryItem {
    MemoryItem {
        document_id: doc.map(str::to_owned),
        kind: MemoryType::Experience,
        ..MemoryItem::new(id, content, "2026-01-02T03:04:05Z").in_session("s1")
    }
}

fn scope() -> Scope {
    Scope { bank: "b".into(), tags: vec![] }
}

fn query(q: &str, max_tokens: usize) -> RecallQuery {
    RecallQuery {
        query: q.into(),
        budget: Budget::Mid,
        max_tokens,
        types: vec![],
        tags: vec![],
        tags_match: TagsMatch::Any,
        deadline: None,
    }
}

/// A 40-turn session transcript as automatic retain stores it, about 50,000 characters, every
/// turn mentioning the build and one turn the answer.
fn transcript(marker: &str) -> String {
    (0..40)
        .map(|i| {
            let user = if i == 23 {
                format!("where do the {marker} nightly artifacts go?")
            } else {
                format!("turn {i}: can you look at the build again, it is still failing on {}", "the linker step ".repeat(20))
            };
            let assistant = if i == 23 {
                format!("The {marker} nightly artifacts are uploaded to the bucket s3://orchard-nightly by the publish job.")
            } else {
                format!("I looked at the build in turn {i}. {}", "The linker complains about a missing symbol again. ".repeat(12))
            };
            format!("[role: user]\n{user}\n[user:end]\n\n[role: assistant]\n{assistant}\n[assistant:end]")
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

async fn open() -> (tempfile::TempDir, LocalBackend) {
    let dir = tempfile::tempdir().unwrap();
    let b = LocalBackend::open(&LocalConfig::lexical(dir.path().join("m.db"))).unwrap();
    (dir, b)
}

#[tokio::test]
async fn a_long_session_is_recalled_as_passages_within_the_budget() {
    let (_d, b) = open().await;
    let long = transcript("zephyr");
    assert!(long.chars().count() > 40_000, "{}", long.chars().count());
    b.retain(&scope(), &RetainBatch { id: "1".into(), items: vec![item("t1", &long, Some("session-1"))] })
        .await
        .unwrap();
    let stats = b.status().await;
    assert_eq!(stats.memories, Some(1));

    for max_tokens in [1024, 200, 30, 1] {
        let results =
            b.recall(&scope(), &query("where do the zephyr nightly artifacts go?", max_tokens)).await.unwrap();
        let total: usize = results.iter().map(|r| r.text.chars().count()).sum();
        assert!(!results.is_empty());
        assert!(total <= max_tokens * 4, "max_tokens {max_tokens}: {total} characters");
        if max_tokens >= 200 {
            assert!(results[0].text.contains("s3://orchard-nightly"), "{max_tokens}: {:?}", results[0].text);
        } else if max_tokens >= 30 {
            // Cut to the window with the question's words.
            assert!(results[0].text.contains("zephyr nightly artifacts"), "{max_tokens}: {:?}", results[0].text);
        }
        assert!(results.len() <= 2, "at most two passages of one memory: {}", results.len());
    }
    // A short fact that matches is never crowded out by the transcript.
    b.retain(&scope(), &RetainBatch { id: "2".into(), items: vec![item("f1", "The linker needs mold on CI.", None)] })
        .await
        .unwrap();
    let results = b.recall(&scope(), &query("why does the linker fail on the build?", 1024)).await.unwrap();
    assert!(results.iter().any(|r| r.text == "The linker needs mold on CI."), "{results:?}");
    let total: usize = results.iter().map(|r| r.text.chars().count()).sum();
    assert!(total <= 4096, "{total}");
}

#[tokio::test]
async fn a_new_version_of_a_document_replaces_all_of_its_passages() {
    let (_d, b) = open().await;
    b.retain(&scope(), &RetainBatch { id: "1".into(), items: vec![item("v1", &transcript("zephyr"), Some("doc"))] })
        .await
        .unwrap();
    assert!(!b.recall(&scope(), &query("zephyr", 1024)).await.unwrap().is_empty());
    b.retain(&scope(), &RetainBatch { id: "2".into(), items: vec![item("v2", &transcript("quokka"), Some("doc"))] })
        .await
        .unwrap();
    assert!(b.recall(&scope(), &query("zephyr", 1024)).await.unwrap().is_empty(), "no passage of the old version");
    assert!(!b.recall(&scope(), &query("quokka", 1024)).await.unwrap().is_empty());
    assert_eq!(b.status().await.memories, Some(1));
}

#[tokio::test]
async fn export_and_import_keep_memories_whole() {
    let (_d, b) = open().await;
    let long = transcript("zephyr");
    b.retain(&scope(), &RetainBatch { id: "1".into(), items: vec![item("t1", &long, Some("doc"))] }).await.unwrap();
    let page = b.export(None, None, 100).await.unwrap();
    assert_eq!(page.memories.len(), 1);
    assert_eq!(page.memories[0].content, long, "exported whole, not as passages");
    let (_d2, other) = open().await;
    assert_eq!(other.import(&page.memories).await.unwrap(), Some(1));
    assert_eq!(other.import(&page.memories).await.unwrap(), Some(0));
    let results = other.recall(&scope(), &query("zephyr nightly artifacts", 1024)).await.unwrap();
    assert!(results[0].text.contains("s3://orchard-nightly"), "{results:?}");
    assert!(results[0].text.chars().count() < 1500);
}

/// The embedder is given each passage without the lines it repeats from the one before (they
/// are the one before's; its score reaches this one through the predecessor smoothing).
#[test]
fn a_passage_is_embedded_without_the_opening_it_repeats() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = mneme_local::store::Store::open(&dir.path().join("m.db")).unwrap();
    store
        .retain("b", &[item("t", &transcript("cobalt"), None), item("n", "… a short note\n\nof its own", None)])
        .unwrap();
    let all = store.unembedded("any-model", 0, 1000).unwrap();
    let (long, short): (Vec<_>, Vec<_>) = all.iter().partition(|p| p.memory_seq == all[0].memory_seq);
    assert!(long.len() > 5, "{}", long.len());
    assert_eq!(long[0].previous, None);
    assert_eq!(long[0].embedding_text(), long[0].text);
    for pair in long.windows(2) {
        assert_eq!(pair[1].previous.as_deref(), Some(pair[0].text.as_str()));
        let own = pair[1].embedding_text();
        assert!(pair[1].text.starts_with("… ") && own.starts_with("[role: ") && pair[1].text.ends_with(own), "{own}");
    }
    // A memory's first passage follows nothing, not even the last passage stored before it.
    assert_eq!(short.len(), 1);
    assert_eq!(short[0].previous, None);
    assert_eq!(short[0].embedding_text(), "… a short note\n\nof its own");
}

/// The FTS rows matching `expr` (an FTS5 MATCH expression), by rowid (the passage's pid).
fn fts_rows(store: &mneme_local::store::Store, expr: &str) -> Vec<i64> {
    let mut stmt = store
        .connection()
        .prepare("SELECT rowid FROM passages_fts WHERE passages_fts MATCH ?1 ORDER BY rowid")
        .unwrap();
    stmt.query_map([expr], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
}

/// BM25 indexes a passage's own text: a word of the lines a passage repeats from the one before
/// is in the later one's context column only, with the rest of the passage before.
#[test]
fn the_repeated_opening_is_indexed_as_context_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = mneme_local::store::Store::open(&dir.path().join("m.db")).unwrap();
    // Frames that each end in a word of their own.
    let long = (0..30)
        .map(|i| format!("[role: user]\n{} tok{i}q\n[user:end]", "the deploy failed again on the runner ".repeat(3)))
        .collect::<Vec<_>>()
        .join("\n\n");
    store.retain("b", &[item("t", &long, None)]).unwrap();
    let passages = store.unembedded("any-model", 0, 1000).unwrap();
    assert!(passages.len() > 3, "{}", passages.len());
    let matching = |column: &str, term: &str| fts_rows(&store, &format!("{column} : \"{term}\""));
    for pair in passages.windows(2) {
        let (before, after) = (&pair[0], &pair[1]);
        let opening = &after.text[..after.text.len() - after.embedding_text().len()];
        let word =
            opening.split(|c: char| !c.is_alphanumeric()).find(|w| w.starts_with("tok")).expect("a frame's word");
        let term = mneme_local::fts::index_terms(word);
        assert_eq!(matching("terms", &term), vec![before.pid], "{word}: only the passage it belongs to");
        assert!(matching("ctx", &term).contains(&after.pid), "{word}: the next one's context");
    }
}

/// A session's transcript retained again as a new version of its document starts with no
/// context: the session's last passage was the old version's, deleted by the replace, and the
/// new version's first passage took it (the pid its own later passage then reused) as the
/// passage before it, indexed with that passage's words. The same after a restart.
#[test]
fn a_new_version_of_a_sessions_document_starts_without_context() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let version = |turns: usize| {
        let text = (0..turns)
            .map(|i| {
                format!("[role: user]\n{} word{i}x\n[user:end]", "the deploy failed again on the runner ".repeat(4))
            })
            .collect::<Vec<_>>()
            .join("\n\n");
        item(&format!("v{turns}"), &text, Some("s1"))
    };
    let first_link = |store: &mneme_local::store::Store| {
        let all = store.unembedded("any-model", 0, 1000).unwrap();
        let first = all.iter().min_by_key(|p| p.pid).unwrap();
        (first.prev_pid, all.len())
    };
    let mut store = mneme_local::store::Store::open(&path).unwrap();
    store.retain("b", &[version(10)]).unwrap();
    store.retain("b", &[version(20)]).unwrap();
    let (before, passages) = first_link(&store);
    assert!(passages > 3, "{passages}");
    assert_eq!(before, None, "the new version's first passage has no passage before it");
    drop(store);
    let mut store = mneme_local::store::Store::open(&path).unwrap();
    store.retain("b", &[version(30)]).unwrap();
    assert_eq!(first_link(&store).0, None, "after a restart too");
}

/// Facts that read as a conversation's turns ("Name: …", by another speaker than the one before)
/// know the turn before them: in their session, or in their bank when retained without one (a
/// conversation fed turn by turn through the `retain` tool or Hindsight's API arrives as facts).
/// Other facts stand alone and leave the conversation as it was. It is kept across retains and
/// restarts, BM25 indexes the turn before as context, and forgetting a turn takes it out of the
/// next one's context.
#[test]
fn turns_retained_as_facts_know_the_turn_before_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let fact = |id: &str, content: &str, session: Option<&str>| {
        let item = MemoryItem::new(id, content, "2026-01-02T03:04:05Z");
        match session {
            Some(s) => item.in_session(s),
            None => item,
        }
    };
    let mut store = mneme_local::store::Store::open(&path).unwrap();
    store
        .retain(
            "b",
            &[
                fact("a", "Caroline: I went to the support group yesterday", Some("s1")),
                fact("x", "Melanie: We painted a lake sunrise", None),
                fact("b", "Melanie: How did it go", Some("s1")),
                fact("y", "Caroline: It was powerful", None),
                fact("c", "Jon: A different session", Some("s2")),
                fact("n", "The deploy uses cargo-dist", Some("s1")),
                fact("g1", "Gotcha: the runner needs docker", Some("s3")),
                fact("g2", "Gotcha: the cache is cold on Mondays", Some("s3")),
            ],
        )
        .unwrap();
    // Turns named as one document, without a session (Hindsight's API makes them experiences).
    let turn_of_document = |id: &str, content: &str| MemoryItem {
        kind: MemoryType::Experience,
        document_id: Some("conversation-1".into()),
        ..MemoryItem::new(id, content, "2026-01-02T03:04:05Z")
    };
    store
        .retain(
            "d",
            &[turn_of_document("d1", "Nate: I won the tournament"), turn_of_document("d2", "Joanna: Congrats")],
        )
        .unwrap();
    store.retain("other", &[fact("z", "In another bank", None)]).unwrap();
    // (pid, the passage before it) of the passage that starts with `text`.
    let link = |store: &mneme_local::store::Store, text: &str| {
        let all = store.unembedded("any-model", 0, 100).unwrap();
        all.iter().find(|p| p.text.starts_with(text)).map(|p| (p.pid, p.prev_pid)).unwrap()
    };
    let get = |text: &str| link(&store, text);
    assert_eq!(get("Caroline: I went").1, None);
    assert_eq!(get("Melanie: How").1, Some(get("Caroline: I went").0), "the one before in its session");
    assert_eq!(get("Melanie: We painted").1, None);
    assert_eq!(get("Caroline: It was").1, Some(get("Melanie: We painted").0), "the one before in its bank");
    assert_eq!(get("Jon:").1, None, "another session starts its own");
    assert_eq!(get("In another bank").1, None, "another bank starts its own");
    assert_eq!(get("The deploy").1, None, "a fact stands alone");
    assert_eq!(get("Gotcha: the cache").1, None, "a label repeated is not a reply");
    assert_eq!(get("Joanna: Congrats").1, Some(get("Nate: I won").0), "an experience without a session too");
    let (asked, painted_after) = (get("Melanie: How").0, get("Caroline: It was").0);
    drop(store);
    let mut store = mneme_local::store::Store::open(&path).unwrap();
    store.retain("b", &[fact("d", "Caroline: Thanks for asking", Some("s1"))]).unwrap();
    assert_eq!(link(&store, "Caroline: Thanks").1, Some(asked), "after a restart, and past the fact between");
    assert_eq!(fts_rows(&store, "ctx : \"sunris\""), vec![painted_after]);
    let forgotten = store.forget_memory("x", Some("b")).unwrap();
    assert_eq!(forgotten, 1);
    assert_eq!(fts_rows(&store, "sunris"), Vec::<i64>::new(), "a forgotten turn's words are in no context");
    assert_eq!(link(&store, "Caroline: It was").1, None);
}

#[tokio::test]
async fn a_question_of_only_stopwords_recalls_nothing() {
    let (_d, b) = open().await;
    let facts = ["The build uses sccache.", "We deploy on Fridays.", "It is what it is, and the tests are slow."];
    let items: Vec<MemoryItem> = facts.iter().enumerate().map(|(i, f)| item(&format!("f{i}"), f, None)).collect();
    b.retain(&scope(), &RetainBatch { id: "batch".into(), items }).await.unwrap();
    for q in [
        "the a of and to is",
        "what is it",
        "Is it?",
        "   ",
        "what's it about?",
        "isn't it?",
        "all of those",
        "I'm here",
    ] {
        assert_eq!(b.recall(&scope(), &query(q, 1000)).await.unwrap(), vec![], "{q:?}");
    }
    assert_eq!(b.recall(&scope(), &query("what are the tests like", 1000)).await.unwrap().len(), 1);
}

/// A short fact is found however many passages of a few long transcripts outrank it: each
/// transcript gives at most two passages, so the pool must reach past the passages it holds
/// back (ranked first and capped after, a fact below the 800th passage was lost).
#[tokio::test]
async fn many_passages_of_a_few_transcripts_do_not_crowd_out_a_fact() {
    let (_d, b) = open().await;
    let turn = |i: usize| {
        format!(
            "[role: user]\nturn {i}: the zebra enclosure again, zebra zebra zebra\n[user:end]\n\n[role: assistant]\nThe zebra keepers checked turn {i} and the zebra is fine. {}\n[assistant:end]",
            "Nothing else changed in the paddock today. ".repeat(8)
        )
    };
    let transcript = (0..100).map(turn).collect::<Vec<_>>().join("\n\n");
    let mut items: Vec<MemoryItem> = (0..10)
        .map(|t| item(&format!("t{t}"), &transcript.replace("turn", &format!("session {t} turn")), None))
        .collect();
    items.push(MemoryItem { kind: MemoryType::World, ..item("fact", "Zebra feed is in shed 3.", None) });
    b.retain(&scope(), &RetainBatch { id: "1".into(), items }).await.unwrap();
    let found = b.recall(&scope(), &query("zebra", 100_000)).await.unwrap();
    assert!(found.iter().any(|r| r.text == "Zebra feed is in shed 3."), "{} results, no fact", found.len());
}

/// A session's conversation gives at most two passages however many documents automatic retain
/// stored it as (the parts of a history that started over, `last-turn` documents): a session
/// compacted five times filled the answer, and the short facts asked about were left out.
#[tokio::test]
async fn a_sessions_conversation_gives_two_passages_whatever_its_documents() {
    let (_d, b) = open().await;
    let turn = |part: usize, i: usize| {
        format!(
            "[role: user]\npart {part} turn {i}: deploy the port again with cargo-dist, deploy it\n[user:end]\n\n[role: assistant]\nDeployed the port in part {part} turn {i}. {}\n[assistant:end]",
            "Nothing else changed. ".repeat(8)
        )
    };
    let mut items: Vec<MemoryItem> = (1..=5)
        .map(|part| {
            let document = if part == 1 { "s1".to_owned() } else { format!("s1-part{part}") };
            let text = (0..10).map(|i| turn(part, i)).collect::<Vec<_>>().join("\n\n");
            item(&format!("part{part}"), &text, Some(&document))
        })
        .collect();
    items.extend((0..5).map(|i| item(&format!("last{i}"), &turn(9, i), Some(&format!("s1-170000000000{i}")))));
    // Another session's, and a document no session's automatic retain names: counted apart.
    items.push(item("other", &turn(7, 1), Some("s2")));
    items.push(item("notes", &turn(8, 1), Some("s1-notes")));
    items.extend((0..10).map(|i| MemoryItem {
        kind: MemoryType::World,
        ..item(&format!("fact{i}"), &format!("Fact {i}: we deploy port {i} with cargo-dist."), None)
    }));
    b.retain(&scope(), &RetainBatch { id: "1".into(), items }).await.unwrap();
    let found = b.recall(&scope(), &query("deploy cargo-dist port", 1024)).await.unwrap();
    let of = |doc: &dyn Fn(&str) -> bool| found.iter().filter(|r| r.document_id.as_deref().is_some_and(doc)).count();
    assert!(of(&|d| d == "s1" || d.starts_with("s1-") && d != "s1-notes") <= 2, "{found:#?}");
    assert_eq!(found.iter().filter(|r| r.kind == "world").count(), 10, "every fact: {found:#?}");
    assert_eq!((of(&|d| d == "s2"), of(&|d| d == "s1-notes")), (1, 1), "{found:#?}");
}
