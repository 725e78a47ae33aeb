//! The local backend against a real SQLite file.

use mneme_core::*;
use mneme_local::{LocalBackend, LocalConfig, Thesaurus};

fn item(id: &str, content: &str, tags: &[&str], kind: MemoryType, doc: Option<&str>) -> MemoryItem {
    MemoryItem {
        context: Some("test".into()),
        tags: tags.iter().map(|t| t.to_string()).collect(),
        document_id: doc.map(str::to_owned),
        kind,
        ..MemoryItem::new(id, content, "2026-01-02T03:04:05Z").in_session("s1")
    }
}

fn scope(bank: &str) -> Scope {
    Scope { bank: bank.into(), tags: vec![] }
}

fn query(q: &str, tags: &[&str], mode: TagsMatch) -> RecallQuery {
    RecallQuery {
        query: q.into(),
        budget: Budget::Mid,
        max_tokens: 1024,
        types: vec![],
        tags: tags.iter().map(|t| t.to_string()).collect(),
        tags_match: mode,
        deadline: None,
    }
}

fn open() -> (tempfile::TempDir, LocalBackend) {
    let dir = tempfile::tempdir().unwrap();
    let b = LocalBackend::open(&LocalConfig::lexical(dir.path().join("m.db"))).unwrap();
    (dir, b)
}

async fn texts(b: &LocalBackend, bank: &str, q: RecallQuery) -> Vec<String> {
    let mut t: Vec<String> = b.recall(&scope(bank), &q).await.unwrap().into_iter().map(|r| r.text).collect();
    t.sort();
    t
}

#[tokio::test]
async fn resending_a_batch_and_identical_content_store_once() {
    let (_d, b) = open();
    let batch = RetainBatch {
        id: "b1".into(),
        items: vec![
            item("1", "the parser uses pest", &["project:w"], MemoryType::World, None),
            item("2", "tabs not spaces", &[], MemoryType::World, None),
        ],
    };
    b.retain(&scope("bank"), &batch).await.unwrap();
    b.retain(&scope("bank"), &batch).await.unwrap();
    let again = RetainBatch {
        id: "b2".into(),
        items: vec![item("3", "the parser uses pest", &["project:x"], MemoryType::World, None)],
    };
    b.retain(&scope("bank"), &again).await.unwrap();
    assert_eq!(b.status().await.memories, Some(2));
    // The same content in another bank is another memory.
    b.retain(&scope("other"), &again).await.unwrap();
    assert_eq!(b.status().await.memories, Some(3));
    // Merged tags: the duplicate's tag now matches a strict filter.
    assert_eq!(
        texts(&b, "bank", query("parser", &["project:x"], TagsMatch::AnyStrict)).await,
        vec!["the parser uses pest"]
    );
}

/// The same text retained by more projects than a memory carries tags is stored once more
/// past [`MAX_MEMORY_TAGS`]: merged without a cap, a memory of 105 project tags was built, and
/// no import or migrate would take it back. Every project still finds it, and an export imports.
#[tokio::test]
async fn the_same_text_from_more_projects_than_a_memory_has_tags_is_stored_again() {
    let (_d, b) = open();
    let text = "The user prefers conventional commits";
    let projects = MAX_MEMORY_TAGS + 5;
    for p in 0..projects {
        let batch = RetainBatch {
            id: format!("b{p}"),
            items: vec![item(&format!("m{p}"), text, &[&format!("project:p{p}")], MemoryType::World, None)],
        };
        b.retain(&scope("bank"), &batch).await.unwrap();
    }
    assert_eq!(b.status().await.memories, Some(2), "one memory a hundred projects");
    let page = b.export(Some("bank"), None, 10).await.unwrap();
    let tags: Vec<usize> = page.memories.iter().map(|m| m.tags.len()).collect();
    assert!(tags.iter().all(|&n| n <= MAX_MEMORY_TAGS), "{tags:?}");
    assert_eq!(tags.iter().sum::<usize>(), projects, "{tags:?}");
    for p in [0, MAX_MEMORY_TAGS - 1, MAX_MEMORY_TAGS, projects - 1] {
        let found = texts(&b, "bank", query("conventional commits", &[&format!("project:p{p}")], TagsMatch::AnyStrict));
        assert_eq!(found.await, vec![text], "project {p}");
    }
    let (_d2, fresh) = open();
    assert_eq!(fresh.import(&page.memories).await.unwrap(), Some(2));
}

/// An identifier asked for is found before notes holding one of its words and an alternative of
/// the other: the built-in thesaurus has `config > toml yaml …`, and asked `parse_config`, notes of
/// "parse" and "YAML" or of "config" and "toml" ranked with the memory naming `parse_config(path)`
/// (12th of 23 in review39's store), and a small budget left it out. Its words as a phrase rank it
/// first; so do a path's.
#[tokio::test]
async fn an_identifier_is_found_before_notes_of_its_words_and_their_alternatives() {
    let (_d, b) = open();
    let answer =
        "The config parser lives in src/config/parse.rs; its entry point is parse_config(path) -> Result<Config>.";
    let mut items = vec![item("0", answer, &[], MemoryType::World, None)];
    for i in 0..10 {
        let note = format!("The auth timeout {i} is 30 seconds, set in config/auth{i}.toml.");
        items.push(item(&format!("t{i}"), &note, &[], MemoryType::World, None));
    }
    for (i, what) in ["YAML front matter", "CSV upload", "INI file", "TOML manifest"].iter().enumerate() {
        let note = format!("We parse the {what} by hand, no library.");
        items.push(item(&format!("p{i}"), &note, &[], MemoryType::World, None));
    }
    b.retain(&scope("bank"), &RetainBatch { id: "b".into(), items }).await.unwrap();
    for q in ["parse_config", "where is parse_config defined?", "src/config/parse.rs"] {
        let first = b.recall(&scope("bank"), &query(q, &[], TagsMatch::Any)).await.unwrap();
        assert_eq!(first.first().map(|r| r.text.as_str()), Some(answer), "{q}: {first:?}");
    }
}

/// A memory another client retained under a tag of its own (`team:red`, through `/hindsight`)
/// is not merged with a project's retain of the same text: merged, a clear of the project
/// deleted it (only a project's tag kept a shared memory). Each keeps its own, and a clear of the
/// project takes the project's copy only.
#[tokio::test]
async fn a_memory_of_another_tag_is_not_taken_by_a_projects_clear() {
    let (_d, b) = open();
    let text = "Red team runbook: rotate the keys on Fridays";
    let retain = |id: &str, tags: &[&str]| RetainBatch {
        id: format!("b{id}"),
        items: vec![item(id, text, tags, MemoryType::World, None)],
    };
    b.retain(&scope("bank"), &retain("1", &["team:red"])).await.unwrap();
    b.retain(&scope("bank"), &retain("2", &["project:alpha"])).await.unwrap();
    // The other tag with a project's: not the first client's memory either.
    b.retain(&scope("bank"), &retain("3", &["team:red", "project:alpha"])).await.unwrap();
    // The same other tags, from two projects: one memory, as before.
    b.retain(&scope("bank"), &retain("4", &["team:red", "project:beta"])).await.unwrap();
    assert_eq!(b.status().await.memories, Some(3));
    let alpha = Scope { bank: "bank".into(), tags: vec!["project:alpha".into()] };
    b.clear(&alpha, ClearWhat::Scope).await.unwrap();
    assert_eq!(b.status().await.memories, Some(2), "the first client's, and project beta's");
    assert_eq!(texts(&b, "bank", query("runbook", &["team:red"], TagsMatch::AnyStrict)).await, vec![text]);
    assert!(texts(&b, "bank", query("runbook", &["project:alpha"], TagsMatch::AnyStrict)).await.is_empty());
    let beta = Scope { bank: "bank".into(), tags: vec!["project:beta".into()] };
    b.clear(&beta, ClearWhat::Scope).await.unwrap();
    assert_eq!(b.status().await.memories, Some(1), "the first client's stays");
}

/// The same text from two projects, each with a context and session of its own, is a memory of
/// each: merged, the row kept the first project's context and session, the second project's
/// recall gave them, and a clear of the first left them in the store (review58 #1). With
/// nothing of their own but the tag, they are one memory, as before.
#[tokio::test]
async fn another_projects_copy_with_its_own_context_is_not_merged() {
    let (_d, b) = open();
    let text = "We use pnpm workspaces for the monorepo";
    let retain = |id: &str, project: &str, context: &str, session: &str| RetainBatch {
        id: format!("b{id}"),
        items: vec![MemoryItem {
            context: Some(context.into()),
            ..item(id, text, &[project], MemoryType::World, None).in_session(session)
        }],
    };
    b.retain(&scope("bank"), &retain("1", "project:alpha", "alpha work for client ACME", "sA")).await.unwrap();
    b.retain(&scope("bank"), &retain("2", "project:beta", "beta notes", "sB")).await.unwrap();
    assert_eq!(b.status().await.memories, Some(2));
    let asked = query("pnpm workspaces", &["project:beta"], TagsMatch::AnyStrict);
    let recalled = b.recall(&scope("bank"), &asked).await.unwrap();
    assert_eq!(recalled.len(), 1, "{recalled:?}");
    let beta = &recalled[0];
    assert_eq!(beta.context.as_deref(), Some("beta notes"), "{beta:?}");
    assert_eq!(beta.metadata.get("session_id").map(String::as_str), Some("sB"), "{beta:?}");
    assert_eq!(beta.tags, vec!["project:beta".to_string()], "{beta:?}");
    let alpha = Scope { bank: "bank".into(), tags: vec!["project:alpha".into()] };
    b.clear(&alpha, ClearWhat::Scope).await.unwrap();
    let left = b.export(Some("bank"), None, 10).await.unwrap().memories;
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(!format!("{left:?}").contains("ACME"), "the cleared project's context stayed: {left:?}");
    // A third project's copy with the same context and session as beta's: one memory.
    b.retain(&scope("bank"), &retain("3", "project:gamma", "beta notes", "sB")).await.unwrap();
    assert_eq!(b.status().await.memories, Some(1));
}

/// Untagged is global: the same text retained by a project is kept apart from it (merged,
/// the global memory became the project's, and a clear of the project deleted it), and a
/// global retain of a project's memory is global. A tag holding the tag separator is kept.
#[tokio::test]
async fn a_global_memory_and_a_projects_copy_of_it_keep_their_reach() {
    let (_d, b) = open();
    let text = "our CI runs on buildkite";
    let retain = |id: &str, tags: &[&str]| RetainBatch {
        id: format!("b{id}"),
        items: vec![item(id, text, tags, MemoryType::World, None)],
    };
    b.retain(&scope("bank"), &retain("1", &[])).await.unwrap();
    b.retain(&scope("bank"), &retain("2", &["project:plain"])).await.unwrap();
    b.retain(&scope("bank"), &retain("3", &["project:repoa"])).await.unwrap();
    b.retain(&scope("bank"), &retain("4", &[])).await.unwrap();
    assert_eq!(b.status().await.memories, Some(2));
    for project in ["project:repoa", "project:other"] {
        assert_eq!(texts(&b, "bank", query("buildkite", &[project], TagsMatch::Any)).await, vec![text], "{project}");
    }
    let plain = Scope { bank: "bank".into(), tags: vec!["project:plain".into()] };
    b.clear(&plain, ClearWhat::Scope).await.unwrap();
    let repoa = Scope { bank: "bank".into(), tags: vec!["project:repoa".into()] };
    b.clear(&repoa, ClearWhat::Scope).await.unwrap();
    assert_eq!(texts(&b, "bank", query("buildkite", &["project:other"], TagsMatch::Any)).await, vec![text]);
    assert_eq!(b.status().await.memories, Some(1));

    let odd = "project:ctl\u{1f}proj";
    b.retain(&scope("bank"), &retain("5", &[odd])).await.unwrap();
    b.retain(
        &scope("bank"),
        &RetainBatch {
            id: "b6".into(),
            items: vec![item("6", "a fact of the odd project", &[odd], MemoryType::World, None)],
        },
    )
    .await
    .unwrap();
    assert!(texts(&b, "bank", query("odd project", &["project:plain"], TagsMatch::Any)).await.is_empty());
    assert_eq!(texts(&b, "bank", query("odd project", &[odd], TagsMatch::AnyStrict)).await.len(), 1);
    let odd_scope = Scope { bank: "bank".into(), tags: vec![odd.into()] };
    b.clear(&odd_scope, ClearWhat::Scope).await.unwrap();
    assert_eq!(b.status().await.memories, Some(1), "the global memory stays");
}

/// A word rare in the whole store and found only in other projects' memories does not hide a
/// project's own: the postings budget, spent on it, left the project's words out of the
/// ranking, and "deploy the billing service" found nothing where "deploy" found the note.
#[tokio::test]
async fn a_word_only_other_projects_hold_does_not_hide_the_projects_own_memory() {
    let (_d, b) = open();
    let mut items = vec![item("a", "To deploy alpha, run the go script.", &["project:alpha"], MemoryType::World, None)];
    for i in 0..6000 {
        let billing = if i % 2000 == 0 { " for billing" } else { "" };
        let text = format!("Beta note {i}: deploy step {i}{billing}.");
        items.push(item(&format!("b{i}"), &text, &["project:beta"], MemoryType::World, None));
    }
    b.retain(&scope("bank"), &RetainBatch { id: "all".into(), items }).await.unwrap();
    for q in ["deploy", "how do we deploy the billing service"] {
        let found = texts(&b, "bank", query(q, &["project:alpha"], TagsMatch::Any)).await;
        assert_eq!(found, vec!["To deploy alpha, run the go script."], "{q}");
    }
}

/// A row belongs to its document: the same text in another document, or retained on its own,
/// is that one's, and a new version of the first document leaves it. Recall shows it once.
#[tokio::test]
async fn identical_content_in_other_documents_survives_a_new_version_of_one() {
    let (_d, b) = open();
    let batch = |id: &str, items: Vec<MemoryItem>| RetainBatch { id: id.into(), items };
    let w = MemoryType::World;
    b.retain(&scope("bank"), &batch("1", vec![item("a1", "Use pnpm, not npm.", &[], w, Some("notes-A"))]))
        .await
        .unwrap();
    b.retain(&scope("bank"), &batch("2", vec![item("b1", "Use pnpm, not npm.", &[], w, Some("notes-B"))]))
        .await
        .unwrap();
    b.retain(&scope("bank"), &batch("3", vec![item("f1", "Use pnpm, not npm.", &["project:y"], w, None)]))
        .await
        .unwrap();
    b.retain(&scope("bank"), &batch("4", vec![item("f2", "Use pnpm, not npm.", &["project:x"], w, None)]))
        .await
        .unwrap();
    assert_eq!(b.status().await.memories, Some(3), "once per document, and once outside any");
    // Recall shows the text once: the copies would only spend the agent's budget.
    assert_eq!(texts(&b, "bank", query("pnpm", &[], TagsMatch::Any)).await, vec!["Use pnpm, not npm."]);
    b.retain(&scope("bank"), &batch("5", vec![item("a2", "notes A v2: switched to bun", &[], w, Some("notes-A"))]))
        .await
        .unwrap();
    let kept: Vec<(String, Option<String>)> = b
        .export(Some("bank"), None, 100)
        .await
        .unwrap()
        .memories
        .into_iter()
        .map(|m| (m.content, m.document_id))
        .collect();
    assert_eq!(kept.len(), 3, "{kept:?}");
    for doc in [Some("notes-B"), None] {
        assert!(kept.contains(&("Use pnpm, not npm.".into(), doc.map(str::to_owned))), "{doc:?}: {kept:?}");
    }
    assert!(kept.contains(&("notes A v2: switched to bun".into(), Some("notes-A".into()))), "{kept:?}");
}

#[tokio::test]
async fn a_document_id_replaces_the_previous_version() {
    let (_d, b) = open();
    let v1 = RetainBatch {
        id: "a".into(),
        items: vec![item("t1", "transcript alpha version one", &[], MemoryType::Experience, Some("sess"))],
    };
    let v2 = RetainBatch {
        id: "b".into(),
        items: vec![item("t2", "transcript alpha version two", &[], MemoryType::Experience, Some("sess"))],
    };
    b.retain(&scope("bank"), &v1).await.unwrap();
    b.retain(&scope("bank"), &v2).await.unwrap();
    b.retain(&scope("bank"), &v2).await.unwrap();
    assert_eq!(texts(&b, "bank", query("alpha", &[], TagsMatch::Any)).await, vec!["transcript alpha version two"]);
    assert_eq!(b.status().await.memories, Some(1));
}

#[tokio::test]
async fn an_imported_document_arrives_whole_across_imports() {
    let (_d, b) = open();
    let stored = |id: &str, text: &str| StoredMemory {
        id: id.into(),
        bank: "bank".into(),
        content: text.into(),
        context: None,
        tags: vec![],
        metadata: Default::default(),
        document_id: Some("notes".into()),
        kind: MemoryType::Experience,
        created_at: "2026-01-01T00:00:00Z".into(),
    };
    let (first, second) =
        (stored("n1", "design notes part one on queues"), stored("n2", "design notes part two on queues"));
    // An export read back in pages: the document's memories fall across two imports.
    assert_eq!(b.import(std::slice::from_ref(&first)).await.unwrap(), Some(1));
    assert_eq!(b.import(std::slice::from_ref(&second)).await.unwrap(), Some(1));
    assert_eq!(b.status().await.memories, Some(2), "the second part did not replace the first");
    // Importing again stores nothing twice.
    assert_eq!(b.import(&[first.clone(), second.clone()]).await.unwrap(), Some(0));
    assert_eq!(b.status().await.memories, Some(2));
    // Into a bank of another name (the export's bank rewritten), it is a copy, stored once:
    // taken for the first bank's memories, nothing was copied.
    let copies: Vec<StoredMemory> = [&first, &second].map(|m| StoredMemory { bank: "copy".into(), ..m.clone() }).into();
    assert_eq!(b.import(&copies).await.unwrap(), Some(2));
    assert_eq!(b.import(&copies).await.unwrap(), Some(0));
    assert_eq!(b.status().await.memories, Some(4));
    let in_copy = b.export(Some("copy"), None, 10).await.unwrap().memories;
    assert_eq!(in_copy.len(), 2);
    assert!(in_copy.iter().all(|m| m.id != first.id && m.id != second.id), "{in_copy:?}");
    b.clear(&scope("copy"), ClearWhat::Scope).await.unwrap();
    assert_eq!(b.status().await.memories, Some(2));
    // A retain of the document still replaces it.
    let v2 = RetainBatch {
        id: "c".into(),
        items: vec![item("n3", "design notes rewritten", &[], MemoryType::Experience, Some("notes"))],
    };
    b.retain(&scope("bank"), &v2).await.unwrap();
    assert_eq!(b.status().await.memories, Some(1));
}

/// A memory of no document that a mneme from before the loose mark copied into Hindsight comes
/// back as a memory of the document named by its own id (with the server's id for it): imported,
/// it is the memory it was, not a second copy. Another text in that document is stored.
#[tokio::test]
async fn an_unmarked_copy_from_hindsight_is_the_memory_it_was() {
    let (_d, b) = open();
    let fact = RetainBatch {
        id: "a".into(),
        items: vec![item("m1", "we deploy with cargo-dist", &["t"], MemoryType::World, None)],
    };
    b.retain(&scope("bank"), &fact).await.unwrap();
    let copy = |id: &str, text: &str| StoredMemory {
        id: id.into(),
        bank: "bank".into(),
        content: text.into(),
        context: None,
        tags: vec!["t".into()],
        metadata: Default::default(),
        document_id: Some("m1".into()),
        kind: MemoryType::World,
        created_at: "2026-01-01T00:00:00Z".into(),
    };
    assert_eq!(b.import(&[copy("0e5c-server-id", "we deploy with cargo-dist")]).await.unwrap(), Some(0));
    assert_eq!(b.status().await.memories, Some(1));
    assert_eq!(b.import(&[copy("0e5c-other-id", "a fact the server drew from it")]).await.unwrap(), Some(1));
    // A retain naming a document is not an import: it stays a document of its own.
    let doc = RetainBatch {
        id: "b".into(),
        items: vec![item("d1", "we deploy with cargo-dist", &[], MemoryType::World, Some("m1"))],
    };
    b.retain(&scope("bank"), &doc).await.unwrap();
    assert_eq!(b.status().await.memories, Some(2), "the retain replaced the document's memory");
}

#[tokio::test]
async fn recall_accepts_any_text() {
    let (_d, b) = open();
    let batch = RetainBatch {
        id: "a".into(),
        items: vec![item("1", "naïve café uses AND and OR", &[], MemoryType::World, None)],
    };
    b.retain(&scope("bank"), &batch).await.unwrap();
    for q in ["\"unbalanced", "(a OR", "AND", "*", "-x", "NEAR(", "日本語 \"'", "", "   ", "cafe", "NAIVE"] {
        let r = b.recall(&scope("bank"), &query(q, &[], TagsMatch::Any)).await;
        assert!(r.is_ok(), "query {q:?} failed: {r:?}");
    }
    assert_eq!(texts(&b, "bank", query("cafe", &[], TagsMatch::Any)).await.len(), 1, "diacritics folded");
    // A type list of any length (each type once: SQLite allows 32,766 parameters), and a query of
    // 4 MB of distinct words (read from its start, each word once: it was quadratic).
    let many = RecallQuery { types: vec![MemoryType::World; 40_000], ..query("cafe", &[], TagsMatch::Any) };
    assert_eq!(b.recall(&scope("bank"), &many).await.unwrap().len(), 1);
    let long: String = (0..500_000).map(|i| format!("w{i} ")).collect::<String>() + "cafe";
    b.recall(&scope("bank"), &query(&long, &[], TagsMatch::Any)).await.unwrap();
}

#[tokio::test]
async fn a_question_after_a_paragraph_of_context_is_found_by_its_words() {
    // The words that find the memory come after twenty others: they used to be past the query
    // terms looked up (the first 16), so nothing was found.
    let (_d, b) = open();
    let items = vec![
        item("1", "The invoices bucket is s3://acme-billing-invoices", &[], MemoryType::World, None),
        item("2", "Deploys go out on Thursdays after the standup", &[], MemoryType::World, None),
    ];
    b.retain(&scope("bank"), &RetainBatch { id: "a".into(), items }).await.unwrap();
    let context = "yesterday afternoon during our long planning meeting several teammates discussed \
        quarterly roadmap priorities including onboarding improvements dashboard latency reporting \
        accuracy customer feedback triage hiring plans budget reviews vendor contracts";
    let q = format!("{context}; which bucket holds invoices?");
    let found = texts(&b, "bank", query(&q, &[], TagsMatch::Any)).await;
    assert!(found.iter().any(|t| t.contains("invoices bucket")), "{found:?}");
    // After a pasted stack trace: its long identifiers are in no memory, and no longer crowd
    // the question's words out of the terms recall ranks on (it found nothing).
    let frames: Vec<String> =
        (0..60).map(|i| format!("  at com.example.Dispatcher.invoke{i}(Dispatcher.java:{i})")).collect();
    let q = format!("{}\nwhich bucket holds invoices?", frames.join("\n"));
    let found = texts(&b, "bank", query(&q, &[], TagsMatch::Any)).await;
    assert!(found.iter().any(|t| t.contains("invoices bucket")), "{found:?}");
}

#[tokio::test]
async fn tag_match_modes_follow_hindsight() {
    let (_d, b) = open();
    let batch = RetainBatch {
        id: "a".into(),
        items: vec![
            item("1", "widget untagged", &[], MemoryType::World, None),
            item("2", "widget red", &["red"], MemoryType::World, None),
            item("3", "widget red blue", &["red", "blue"], MemoryType::World, None),
            item("4", "widget green", &["green"], MemoryType::World, None),
        ],
    };
    b.retain(&scope("bank"), &batch).await.unwrap();
    let t = |tags: &'static [&'static str], m| texts(&b, "bank", query("widget", tags, m));
    assert_eq!(t(&["red", "blue"], TagsMatch::Any).await, vec!["widget red", "widget red blue", "widget untagged"]);
    assert_eq!(t(&["red", "blue"], TagsMatch::AnyStrict).await, vec!["widget red", "widget red blue"]);
    assert_eq!(t(&["red", "blue"], TagsMatch::All).await, vec!["widget red blue", "widget untagged"]);
    assert_eq!(t(&["red", "blue"], TagsMatch::AllStrict).await, vec!["widget red blue"]);
    assert_eq!(t(&[], TagsMatch::AllStrict).await.len(), 4);
}

#[tokio::test]
async fn types_filter_and_token_bound() {
    let (_d, b) = open();
    let long = "gizmo ".repeat(200);
    let batch = RetainBatch {
        id: "a".into(),
        items: vec![
            item("1", "gizmo fact", &[], MemoryType::World, None),
            item("2", "gizmo happened", &[], MemoryType::Experience, None),
            item("3", &long, &[], MemoryType::World, None),
        ],
    };
    b.retain(&scope("bank"), &batch).await.unwrap();
    let mut q = query("gizmo", &[], TagsMatch::Any);
    q.types = vec![MemoryType::Experience];
    assert_eq!(texts(&b, "bank", q.clone()).await, vec!["gizmo happened"]);
    q.types = vec![];
    q.max_tokens = 10; // ~40 chars: the first result always, then only what fits
    let got = b.recall(&scope("bank"), &q).await.unwrap();
    assert!(got.iter().map(|r| r.text.len()).sum::<usize>() <= 40 || got.len() == 1, "{got:?}");
}

#[tokio::test]
async fn instructions_clear_and_reflect() {
    let (_d, b) = open();
    assert_eq!(b.instructions(&scope("bank")).await.unwrap(), None);
    let s = Scope { bank: "bank".into(), tags: vec!["project:a".into()] };
    let batch = RetainBatch {
        id: "a".into(),
        items: vec![
            item("1", "alpha fact", &["project:a"], MemoryType::World, None),
            item("2", "beta fact", &["project:b"], MemoryType::World, None),
        ],
    };
    b.retain(&s, &batch).await.unwrap();
    let md = b.instructions(&s).await.unwrap().unwrap();
    assert!(md.contains("alpha fact") && !md.contains("beta fact"), "{md}");
    // Stored text is framed as background, as the recalled block is (review58 #4).
    assert!(
        md.starts_with("## Recent memories\nRecalled background from earlier sessions")
            && md.contains("not instructions"),
        "{md}"
    );
    // A session's transcript (an experience) is not listed: it filled the list after each turn.
    let transcript = RetainBatch {
        id: "t".into(),
        items: vec![item("3", "[role: user]\nwhat now\n[user:end]", &["project:a"], MemoryType::Experience, None)],
    };
    b.retain(&s, &transcript).await.unwrap();
    let md = b.instructions(&s).await.unwrap().unwrap();
    assert!(md.contains("alpha fact") && !md.contains("what now"), "{md}");
    let report = b.clear(&s, ClearWhat::Scope).await.unwrap();
    assert_eq!(report.deleted, Some(2));
    assert_eq!(b.status().await.memories, Some(1));
    assert!(matches!(
        b.reflect(
            &s,
            &ReflectQuery {
                query: "q".into(),
                context: None,
                budget: Budget::Mid,
                tags: vec![],
                tags_match: TagsMatch::Any,
                tag_groups: None,
                types: vec![],
                max_tokens: None,
            }
        )
        .await,
        Err(BackendError::Unsupported(_))
    ));
    b.clear(&s, ClearWhat::All).await.unwrap();
    assert_eq!(b.status().await.memories, Some(0));
}

#[tokio::test]
async fn browsing_lists_newest_first_and_forgetting_removes_a_memory_or_a_document_everywhere() {
    let (dir, b) = open();
    let long: String =
        (0..50).map(|i| format!("[user]: paragraph {i} about the walrus ingestion design\n\n")).collect();
    let items = vec![
        item("1", "the narwhal cache is warmed at boot", &["project:a"], MemoryType::World, None),
        item("2", &long, &["project:a"], MemoryType::Experience, Some("design")),
        item(
            "3",
            "the design doc has a second part about walrus offsets",
            &["project:b"],
            MemoryType::World,
            Some("design"),
        ),
    ];
    b.retain(&scope("bank"), &RetainBatch { id: "b1".into(), items }).await.unwrap();
    b.retain(
        &scope("other"),
        &RetainBatch { id: "b2".into(), items: vec![item("4", "other bank", &[], MemoryType::World, None)] },
    )
    .await
    .unwrap();

    let page = b.browse(&BrowseQuery { limit: 10, ..BrowseQuery::default() }).await.unwrap();
    let ids: Vec<&str> = page.memories.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["4", "3", "2", "1"], "newest first over every bank");
    let first = b.browse(&BrowseQuery { bank: Some("bank".into()), limit: 2, ..BrowseQuery::default() }).await.unwrap();
    assert_eq!(first.memories.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(), ["3", "2"]);
    let rest =
        BrowseQuery { bank: Some("bank".into()), limit: 2, cursor: first.next.clone(), ..BrowseQuery::default() };
    let rest = b.browse(&rest).await.unwrap();
    assert_eq!(rest.memories.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(), ["1"]);
    assert!(rest.next.is_none());
    let tagged = BrowseQuery { bank: Some("bank".into()), tags: vec!["project:a".into()], limit: 10, cursor: None };
    assert_eq!(b.browse(&tagged).await.unwrap().memories.len(), 2);
    let bad = BrowseQuery { cursor: Some("x".into()), limit: 1, ..BrowseQuery::default() };
    assert!(matches!(b.browse(&bad).await, Err(BackendError::Invalid(_))));
    let banks = b.banks().await.unwrap();
    assert_eq!(
        banks,
        [BankCount { bank: "bank".into(), memories: Some(3) }, BankCount { bank: "other".into(), memories: Some(1) }]
    );

    let detail = b.memory("2", None).await.unwrap();
    assert!(detail.passages.len() > 1, "the long memory is split");
    assert_eq!(detail.passages[0].lines().next(), Some("[user]: paragraph 0 about the walrus ingestion design"));
    assert_eq!(detail.document_memories, 2);
    assert!(matches!(b.memory("2", Some("other")).await, Err(BackendError::NotFound(_))));

    let done = b.forget(&Forget::Memory { id: "1".into(), bank: None }).await.unwrap();
    assert_eq!(done.deleted, Some(1));
    assert!(
        texts(&b, "bank", query("narwhal cache", &[], TagsMatch::Any)).await.is_empty(),
        "recall no longer finds it"
    );
    assert!(matches!(b.forget(&Forget::Memory { id: "1".into(), bank: None }).await, Err(BackendError::NotFound(_))));

    let done = b.forget(&Forget::Document { id: "design".into(), bank: "bank".into() }).await.unwrap();
    assert_eq!(done.deleted, Some(2), "{done:?}");
    assert!(texts(&b, "bank", query("walrus", &[], TagsMatch::Any)).await.is_empty());
    let conn = rusqlite::Connection::open(dir.path().join("m.db")).unwrap();
    let left: i64 = conn.query_row("SELECT count(*) FROM passages", [], |r| r.get(0)).unwrap();
    assert_eq!(left, 1, "only the other bank's passage is left");
    let tails: i64 =
        conn.query_row("SELECT count(*) FROM session_tails WHERE bank = 'bank'", [], |r| r.get(0)).unwrap();
    assert_eq!(tails, 0, "no session's next turn points at a forgotten passage");
    assert!(matches!(
        b.forget(&Forget::Document { id: "design".into(), bank: "bank".into() }).await,
        Err(BackendError::NotFound(_))
    ));
    // Retaining the same content again stores it again (the dedupe map forgot it too).
    b.retain(
        &scope("bank"),
        &RetainBatch {
            id: "b3".into(),
            items: vec![item("5", "the narwhal cache is warmed at boot", &[], MemoryType::World, None)],
        },
    )
    .await
    .unwrap();
    assert_eq!(
        texts(&b, "bank", query("narwhal cache", &[], TagsMatch::Any)).await,
        ["the narwhal cache is warmed at boot"]
    );
}

#[tokio::test]
async fn a_question_in_other_words_is_found_through_the_thesaurus() {
    let (_d, b) = open();
    let notes = [
        "We deploy with cargo-dist.",
        "We chose PostgreSQL over MongoDB for the reporting queries.",
        "The database is backed up every night.",
        "Lunch is at noon on Fridays.",
        "Errors are reported to Sentry.",
    ];
    let items = notes.iter().enumerate().map(|(i, t)| item(&i.to_string(), t, &[], MemoryType::World, None)).collect();
    b.retain(&scope("bank"), &RetainBatch { id: "a".into(), items }).await.unwrap();
    let ranked = |q: &'static str| {
        let b = &b;
        async move {
            b.recall(&scope("bank"), &query(q, &[], TagsMatch::Any))
                .await
                .unwrap()
                .into_iter()
                .map(|r| r.text)
                .collect::<Vec<_>>()
        }
    };
    // No word in common: "ship" and "release" stand for "deploy".
    assert_eq!(ranked("how do we ship a release?").await, vec![notes[0].to_owned()]);
    // A general word reaches the notes naming an instance, and so does its synonym ("db").
    for q in ["which database do we use?", "which db do we use?"] {
        let found = ranked(q).await;
        assert!(found.contains(&notes[1].to_owned()) && found.contains(&notes[2].to_owned()), "{q}: {found:?}");
    }
    // Not the other way round: an instance does not reach the general word.
    assert_eq!(ranked("postgres").await, vec![notes[1].to_owned()]);
    // A word with no alternatives finds what it says, and nothing else.
    assert_eq!(ranked("lunch").await, vec![notes[3].to_owned()]);
}

/// A note holding the question's own words ranks above one holding only their alternatives
/// (review71 #1): asked "page size", the note saying "pagination" twice (an alternative of
/// "page", and rarer) came first, above `DEFAULT_PAGE_SIZE`; asked "state machine for orders",
/// a note on gunicorn (`machine` ~ `server` > `gunicorn`) came above `OrderStateMachine` in
/// `src/orders/state.rs`. An alternative stands in for a word; it counts half of one.
#[tokio::test]
async fn a_notes_own_words_rank_above_their_alternatives() {
    let (_d, b) = open();
    let page_size = "The constant DEFAULT_PAGE_SIZE is 50 and MAX_PAGE_SIZE is 500; larger limits are clamped.";
    let orders = "The OrderStateMachine in src/orders/state.rs forbids going from Shipped back to Pending.";
    let mut notes = vec![
        page_size.to_owned(),
        "The pagination is cursor-based: responses include next_cursor; offset pagination was removed.".to_owned(),
        orders.to_owned(),
        "We replaced gunicorn with uvicorn workers (8 per pod) when the API moved to async.".to_owned(),
    ];
    // The question's words are common in a real store; their alternatives rarer.
    for i in 0..30 {
        notes.push(format!("The landing page {i} loads in two seconds."));
        notes.push(format!("The upload size limit {i} is ten megabytes."));
        notes.push(format!("Ticket {i}: the order state is shown on the account screen."));
    }
    notes.extend((0..500).map(|i| format!("Lunch {i} is at noon on Fridays.")));
    // Facts, not a session's turns (a turn's index holds its neighbour's words too).
    let items =
        notes.iter().enumerate().map(|(i, t)| MemoryItem::new(i.to_string(), t, "2026-01-02T03:04:05Z")).collect();
    b.retain(&scope("bank"), &RetainBatch { id: "a".into(), items }).await.unwrap();
    for (q, expected) in [("page size", page_size), ("state machine for orders", orders)] {
        let found: Vec<String> = b
            .recall(&scope("bank"), &query(q, &[], TagsMatch::Any))
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.text)
            .collect();
        assert_eq!(found.first().map(String::as_str), Some(expected), "{q}: {found:?}");
    }
}

#[tokio::test]
async fn the_thesaurus_can_be_turned_off_or_extended() {
    let notes = ["We deploy with cargo-dist.", "The storefront runs on three kubernetes nodes."];
    let recalled = |thesaurus: std::sync::Arc<Thesaurus>, q: &'static str| async move {
        let d = tempfile::tempdir().unwrap();
        let b = LocalBackend::open(&LocalConfig::lexical(d.path().join("m.db")).with_thesaurus(thesaurus)).unwrap();
        let items =
            notes.iter().enumerate().map(|(i, t)| item(&i.to_string(), t, &[], MemoryType::World, None)).collect();
        b.retain(&scope("bank"), &RetainBatch { id: "a".into(), items }).await.unwrap();
        let found = b.recall(&scope("bank"), &query(q, &[], TagsMatch::Any)).await.unwrap();
        found.into_iter().map(|r| r.text).collect::<Vec<_>>()
    };
    let ours = "k8s kubernetes\norchard > storefront\n";
    // Off: words alone, so a question in other words finds nothing.
    assert!(recalled(Thesaurus::none(), "how do we ship a release?").await.is_empty());
    assert!(recalled(Thesaurus::none(), "k8s").await.is_empty());
    // The user's lines alone: their words (no word in common with the note), not the built-in ones.
    let alone = || std::sync::Arc::new(Thesaurus::with_lines(false, ours).unwrap());
    assert_eq!(recalled(alone(), "k8s").await, vec![notes[1].to_owned()]);
    assert_eq!(recalled(alone(), "the orchard").await, vec![notes[1].to_owned()]);
    assert!(recalled(alone(), "how do we ship a release?").await.is_empty());
    // Both: the built-in list and the user's lines.
    let both = || std::sync::Arc::new(Thesaurus::with_lines(true, ours).unwrap());
    assert_eq!(recalled(both(), "how do we ship a release?").await, vec![notes[0].to_owned()]);
    assert_eq!(recalled(both(), "k8s").await, vec![notes[1].to_owned()]);
    // Without the user's lines their words are unknown.
    assert!(recalled(Thesaurus::builtin(), "the orchard").await.is_empty());
}

#[tokio::test]
async fn a_word_written_after_a_recall_is_found_by_the_next() {
    // Enough passages that one more does not make recall read every frequency again.
    let (_d, b) = open();
    let items =
        (0..200).map(|i| item(&i.to_string(), &format!("note {i} about the build"), &[], MemoryType::World, None));
    b.retain(&scope("bank"), &RetainBatch { id: "a".into(), items: items.collect() }).await.unwrap();
    let recall = |q: &'static str| {
        let b = &b;
        async move {
            let found = b.recall(&scope("bank"), &query(q, &[], TagsMatch::Any)).await.unwrap();
            found.into_iter().map(|r| r.text).collect::<Vec<_>>()
        }
    };
    assert!(recall("narwhal").await.is_empty());
    assert!(!recall("narwhal build").await.is_empty(), "the known word still finds");
    let narwhal = item("n", "the narwhal cache is warmed at boot", &[], MemoryType::World, None);
    b.retain(&scope("bank"), &RetainBatch { id: "b".into(), items: vec![narwhal] }).await.unwrap();
    assert_eq!(recall("narwhal").await, ["the narwhal cache is warmed at boot"]);
    assert_eq!(recall("narwhal build").await[0], "the narwhal cache is warmed at boot");
}

#[tokio::test]
async fn exact_tags_match_the_whole_set_and_none_means_untagged() {
    let (_d, b) = open();
    let w = MemoryType::World;
    let items = vec![
        item("1", "the otter build runs on arm", &["a"], w, None),
        item("2", "the otter build runs on x86", &["a", "b", "a"], w, None),
        item("3", "the otter build runs on riscv", &[], w, None),
    ];
    b.retain(&scope("bank"), &RetainBatch { id: "e".into(), items }).await.unwrap();
    let exact = |tags: &'static [&'static str]| query("otter build runs", tags, TagsMatch::Exact);
    assert_eq!(texts(&b, "bank", exact(&["a"])).await, vec!["the otter build runs on arm"]);
    assert_eq!(texts(&b, "bank", exact(&["b", "a"])).await, vec!["the otter build runs on x86"]);
    assert_eq!(texts(&b, "bank", exact(&[])).await, vec!["the otter build runs on riscv"]);
    assert!(TagsMatch::Exact.matches(&["b".into(), "a".into()], &["a".into(), "b".into()]));
    assert!(!TagsMatch::Exact.matches(&["a".into()], &["a".into(), "b".into()]));
}

/// A damaged file is found by the integrity check that runs after the start, and told: a notice
/// naming the file and an unhealthy status (it was found only by recalls failing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_store_is_told_after_the_start() {
    use std::io::{Seek, SeekFrom, Write};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    {
        let b = LocalBackend::open(&LocalConfig::lexical(&path)).unwrap();
        let items: Vec<MemoryItem> = (0..300)
            .map(|i| {
                item(&format!("m{i}"), &format!("note {i} about the harbour crane {i}"), &[], MemoryType::World, None)
            })
            .collect();
        b.retain(&scope("b"), &RetainBatch { id: "x".into(), items }).await.unwrap();
        let mut events = b.take_events().unwrap();
        assert!(b.status().await.healthy);
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        assert!(events.try_recv().is_err(), "a sound file raises nothing");
    }
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())).unwrap();
    let page: u64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0)).unwrap();
    drop(conn);
    let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    for n in 2..6 {
        // The headers of a few b-tree pages.
        file.seek(SeekFrom::Start(n * page)).unwrap();
        file.write_all(&[0xff; 64]).unwrap();
    }
    drop(file);
    let b = LocalBackend::open(&LocalConfig::lexical(&path)).unwrap();
    let mut events = b.take_events().unwrap();
    let told = tokio::time::timeout(std::time::Duration::from_secs(30), events.recv()).await.unwrap().unwrap();
    assert!(told.problem && told.message.contains("damaged") && told.message.contains("m.db"), "{told:?}");
    let status = b.status().await;
    assert!(!status.healthy && status.detail.unwrap().contains("damaged"));
}

/// Chinese and Japanese write no spaces: each ideograph or kana is a word, so a word inside a
/// sentence (a Latin one against it too) is found; a store indexed before is indexed again.
#[tokio::test]
async fn words_in_chinese_and_japanese_text_are_found_also_in_a_store_indexed_before() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let notes =
        ["キャッシュサーバーはRedisではなくMemcachedを使っています。", "数据库备份每天晚上进行。", "Lunch is at noon."];
    let found = |b: &LocalBackend, q: &'static str| {
        let b = b.clone();
        async move { texts(&b, "bank", query(q, &[], TagsMatch::Any)).await }
    };
    {
        let b = LocalBackend::open(&LocalConfig::lexical(path.clone())).unwrap();
        let items =
            notes.iter().enumerate().map(|(i, t)| item(&i.to_string(), t, &[], MemoryType::World, None)).collect();
        b.retain(&scope("bank"), &RetainBatch { id: "a".into(), items }).await.unwrap();
        assert_eq!(found(&b, "Memcached").await, vec![notes[0].to_owned()]);
        assert_eq!(found(&b, "数据库").await, vec![notes[1].to_owned()]);
        assert_eq!(found(&b, "ｍｅｍｃａｃｈｅｄ").await, vec![notes[0].to_owned()], "full-width folds");
    }
    // As the schemas before 6 indexed them: a run of letters one term, whatever its script (6
    // indexed ideographs and kana as words of their own).
    index_as_runs_of_letters(&path, 5);
    let b = LocalBackend::open(&LocalConfig::lexical(path.clone())).unwrap();
    assert_eq!(found(&b, "Memcached").await, vec![notes[0].to_owned()]);
    assert_eq!(found(&b, "数据库").await, vec![notes[1].to_owned()]);
    assert_eq!(found(&b, "lunch").await, vec![notes[2].to_owned()], "the others are as they were");
}

/// Thai writes no spaces, and its vowel signs, like Hindi's, are marks: a Thai word inside a
/// sentence is found, a Hindi word is told from one of the same consonants, Arabic's optional
/// vowel points and an accent typed apart are folded away; a store indexed before (marks were
/// separators, a Thai run one term) is indexed again.
#[tokio::test]
async fn words_with_marks_and_thai_words_are_found_also_in_a_store_indexed_before() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let notes = [
        "เราใช้ระบบคิวแบบทนทานสำหรับงานพื้นหลัง", // we use a durable queue system for background jobs
        "काम पूरा हुआ",                       // the work is done
        "कम समय बचा है",                     // little time is left
        "كَتَبَ الطالب الدرس",                 // the student wrote the lesson
        "cafe\u{301} au lait every morning",
    ];
    let found = |b: &LocalBackend, q: &'static str| {
        let b = b.clone();
        async move { texts(&b, "bank", query(q, &[], TagsMatch::Any)).await }
    };
    let check = |b: LocalBackend| async move {
        assert_eq!(found(&b, "คิว").await, vec![notes[0].to_owned()], "queue");
        assert_eq!(found(&b, "ทนทาน").await, vec![notes[0].to_owned()], "durable");
        assert_eq!(found(&b, "ระบบคิว").await, vec![notes[0].to_owned()], "queue system");
        assert_eq!(found(&b, "काम").await, vec![notes[1].to_owned()], "work, not little");
        assert_eq!(found(&b, "كتب").await, vec![notes[3].to_owned()], "wrote, without its vowel points");
        assert_eq!(found(&b, "café").await, vec![notes[4].to_owned()], "an accent typed apart");
    };
    {
        let b = LocalBackend::open(&LocalConfig::lexical(path.clone())).unwrap();
        let items =
            notes.iter().enumerate().map(|(i, t)| item(&i.to_string(), t, &[], MemoryType::World, None)).collect();
        b.retain(&scope("bank"), &RetainBatch { id: "a".into(), items }).await.unwrap();
        check(b).await;
    }
    // As schema 7 indexed them: runs of letters and digits, marks between.
    index_as_runs_of_letters(&path, 7);
    check(LocalBackend::open(&LocalConfig::lexical(path.clone())).unwrap()).await;
}

/// A camelCase name, or a PascalCase one of three words or more, is found by its words, by the
/// snake_case spelling and by the name itself (review71 #2), also in a store indexed before
/// (schema 8: the name one term); a product's name of two words stays one.
#[tokio::test]
async fn camel_case_names_are_found_by_their_words_also_in_a_store_indexed_before() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let notes = [
        "ThumbnailImageGenerator resizes uploaded images to 256px",
        "fetchUserProfile throws ProfileUnavailableError when the cache is cold",
        "On a 429 the client reads retryAfter before trying again",
        "The generated docs are regenerated nightly; events go to ClickHouse",
        "The signup handler calls get_user_by_email before it sends the mail",
    ];
    // In the order recall gives (`texts` sorts).
    let found = |b: &LocalBackend, q: &'static str| {
        let b = b.clone();
        async move {
            let found = b.recall(&scope("bank"), &query(q, &[], TagsMatch::Any)).await.unwrap();
            found.into_iter().map(|r| r.text).collect::<Vec<_>>()
        }
    };
    let check = |b: LocalBackend| async move {
        assert_eq!(found(&b, "thumbnail generator").await.first(), Some(&notes[0].to_owned()));
        assert_eq!(found(&b, "profile unavailable error").await.first(), Some(&notes[1].to_owned()));
        assert_eq!(found(&b, "fetch user profile").await.first(), Some(&notes[1].to_owned()));
        assert_eq!(found(&b, "retry_after").await.first(), Some(&notes[2].to_owned()));
        assert_eq!(found(&b, "retryAfter").await, vec![notes[2].to_owned()]);
        assert_eq!(found(&b, "ProfileUnavailableError").await, vec![notes[1].to_owned()]);
        // And the other way: a camelCase question finds the snake_case name (review74 #4).
        assert_eq!(found(&b, "getUserByEmail").await.first(), Some(&notes[4].to_owned()));
        // A product's name of two words stays one: "house" is not ClickHouse.
        assert_eq!(found(&b, "house").await, Vec::<String>::new());
        assert_eq!(found(&b, "ClickHouse").await, vec![notes[3].to_owned()]);
    };
    {
        let b = LocalBackend::open(&LocalConfig::lexical(path.clone())).unwrap();
        let items =
            notes.iter().enumerate().map(|(i, t)| item(&i.to_string(), t, &[], MemoryType::World, None)).collect();
        b.retain(&scope("bank"), &RetainBatch { id: "a".into(), items }).await.unwrap();
        check(b).await;
    }
    index_as_runs_of_letters(&path, 8);
    check(LocalBackend::open(&LocalConfig::lexical(path.clone())).unwrap()).await;
}

/// Indexes the store at `path` as an earlier schema did (each run of letters and digits a term,
/// lowercased), and says it is of `version`.
fn index_as_runs_of_letters(path: &std::path::Path, version: i64) {
    let conn = rusqlite::Connection::open(path).unwrap();
    let rows: Vec<(i64, String)> = conn
        .prepare("SELECT pid, text FROM passages")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    for (pid, text) in rows {
        let old: Vec<String> =
            text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect();
        conn.execute("DELETE FROM passages_fts WHERE rowid = ?1", [pid]).unwrap();
        conn.execute(
            "INSERT INTO passages_fts (rowid, terms, ctx) VALUES (?1, ?2, '')",
            rusqlite::params![pid, old.join(" ")],
        )
        .unwrap();
    }
    conn.pragma_update(None, "user_version", version).unwrap();
}

/// A forget while another process writes the store (`mneme migrate --to local` beside the
/// daemon) waits for it: a read that became a write was not given the busy timeout, and failed
/// at once as "database is locked".
#[tokio::test]
async fn a_forget_waits_for_another_process_writing_the_store() {
    let (dir, b) = open();
    b.retain(
        &scope("b"),
        &RetainBatch { id: "batch-1".into(), items: vec![item("m1", "the kite", &[], MemoryType::World, None)] },
    )
    .await
    .unwrap();
    let other = rusqlite::Connection::open(dir.path().join("m.db")).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(300));
        other.execute_batch("COMMIT").unwrap();
    });
    let forgotten = b.forget(&Forget::Memory { id: "m1".into(), bank: Some("b".into()) }).await;
    writer.join().unwrap();
    assert_eq!(forgotten.unwrap().deleted, Some(1));
}

/// The size said is the files' on disk: the pages still only in the WAL were counted twice,
/// and the size fell to a third at the next checkpoint with nothing deleted (review65 #4).
#[tokio::test]
async fn the_size_said_is_the_size_on_disk() {
    let (d, b) = open();
    let items = (0..30).map(|i| {
        item(&i.to_string(), &format!("note {i} {}", "about otters ".repeat(120)), &[], MemoryType::World, None)
    });
    b.retain(&scope("bank"), &RetainBatch { id: "b".into(), items: items.collect() }).await.unwrap();
    let said = b.status().await.storage_bytes.unwrap();
    let len = |name: &str| std::fs::metadata(d.path().join(name)).map_or(0, |m| m.len());
    assert!(len("m.db-wal") > 0, "the WAL holds the pages");
    assert_eq!(said, len("m.db") + len("m.db-wal"));
}

/// The statements a clear or a forget runs for each removed passage find their rows by an
/// index, not by scanning a table whose size is the store's: a project's clear scanned every
/// session's tail for each passage (review72 #2: 138 s for 37,667 memories; 11.6 s for 15,000
/// sessions, 0.22 s with the index).
#[tokio::test]
async fn a_removed_passage_s_rows_are_found_by_an_index() {
    let (dir, b) = open();
    b.retain(&scope("b"), &RetainBatch { id: "1".into(), items: vec![item("m", "x", &[], MemoryType::World, None)] })
        .await
        .unwrap();
    let conn = rusqlite::Connection::open(dir.path().join("m.db")).unwrap();
    let statement = "DELETE FROM session_tails WHERE pid = 1";
    let plan: Vec<String> = conn
        .prepare(&format!("EXPLAIN QUERY PLAN {statement}"))
        .unwrap()
        .query_map([], |r| r.get::<_, String>(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(plan.iter().any(|step| step.contains("INDEX")), "{statement}: {plan:?}");
}

/// A schema upgrade that waited for another process's write lock reads the version that process
/// left: a newer mneme's store is refused, not taken as upgraded and written (review79 #3).
#[tokio::test]
async fn an_upgrade_that_waited_refuses_what_a_newer_mneme_left() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    drop(LocalBackend::open(&LocalConfig::lexical(&path)).unwrap());
    let other = rusqlite::Connection::open(&path).unwrap();
    other.pragma_update(None, "user_version", 9).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let newer = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(300));
        other.pragma_update(None, "user_version", 99).unwrap();
        other.execute_batch("COMMIT").unwrap();
    });
    let opened = LocalBackend::open(&LocalConfig::lexical(&path));
    newer.join().unwrap();
    let e = opened.err().expect("refused");
    assert!(e.to_string().contains("newer than this mneme"), "{e}");
}
