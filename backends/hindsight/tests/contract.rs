//! The hindsight backend against a real Hindsight 1.1.0 server (the peer `.ci/run` starts).

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use mneme_core::*;

fn item(id: &str, content: &str, tags: &[&str], doc: Option<&str>) -> MemoryItem {
    MemoryItem {
        context: Some("contract".into()),
        tags: tags.iter().map(|t| t.to_string()).collect(),
        document_id: doc.map(str::to_owned),
        ..MemoryItem::new(id, content, "2026-01-02T03:04:05.000Z").in_session("s1")
    }
}

/// A fresh bank on the peer that stores content as chunks, a backend for it and its scope.
struct Peer {
    url: String,
    bank: String,
    b: mneme_hindsight::HindsightBackend,
    scope: Scope,
}

/// [`Peer`] for a bank named after `prefix`; `None` (the test skips) without a peer.
async fn peer_bank(prefix: &str) -> Option<Peer> {
    let url = peer_url()?;
    let bank = fresh_bank(prefix);
    chunk_bank(&url, &bank).await;
    let b = backend(&url);
    let scope = Scope { bank: bank.clone(), tags: vec![] };
    Some(Peer { url, bank, b, scope })
}

/// A memory as an export holds it: a world fact of its own, undocumented.
fn exported(id: &str, bank: &str, content: &str) -> StoredMemory {
    StoredMemory {
        id: id.into(),
        bank: bank.into(),
        content: content.into(),
        context: None,
        tags: vec![],
        metadata: BTreeMap::new(),
        document_id: None,
        kind: MemoryType::World,
        created_at: "2026-01-02T03:04:05Z".into(),
    }
}

fn query(q: &str, tags: &[&str], mode: TagsMatch, types: &[MemoryType]) -> RecallQuery {
    RecallQuery {
        query: q.into(),
        budget: Budget::Mid,
        max_tokens: 2048,
        types: types.to_vec(),
        tags: tags.iter().map(|t| t.to_string()).collect(),
        tags_match: mode,
        deadline: None,
    }
}

/// The bank's memory texts once each of `contents` is in one of them. An append joins its
/// document's text, which the server cuts into chunks as it likes (an append made once the
/// text before it is stored may share a chunk with it).
async fn wait_for_texts(url: &str, bank: &str, contents: &[&str]) -> Vec<String> {
    for _ in 0..120 {
        let texts = list_texts(url, bank).await;
        if contents.iter().all(|c| texts.iter().any(|t| t.contains(c))) {
            // Give a duplicate a moment to show up, if there were one.
            tokio::time::sleep(Duration::from_millis(1500)).await;
            return list_texts(url, bank).await;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("{bank} never held all of {contents:?}: {:?}", list_texts(url, bank).await)
}

/// The bank's memories as the server lists them (their tags and metadata too).
async fn listed_memories(url: &str, bank: &str) -> Vec<serde_json::Value> {
    let v: serde_json::Value = reqwest::get(format!("{url}/v1/default/banks/{bank}/memories/list?limit=100"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["items"].as_array().cloned().unwrap_or_default()
}

/// Every one of `contents` is stored exactly once across `texts`.
fn each_once(texts: &[String], contents: &[&str]) {
    for c in contents {
        let n: usize = texts.iter().map(|t| t.matches(c).count()).sum();
        assert_eq!(n, 1, "{c:?} once: {texts:?}");
    }
}

#[tokio::test]
async fn a_resent_batch_is_stored_once() {
    let Some(Peer { url, bank, b, scope }) = peer_bank("contract-resend").await else { return };
    let batch = RetainBatch {
        id: fresh_batch_id(),
        items: vec![
            item("1", "The zebrafish pipeline runs nightly", &[], Some("doc-a")),
            item("2", "Quokka builds use musl", &[], Some("doc-b")),
        ],
    };
    b.retain(&scope, &batch).await.unwrap();
    b.retain(&scope, &batch).await.unwrap(); // a resend after a lost reply
    let mut texts = wait_for_count(&url, &bank, 2).await;
    texts.sort();
    assert_eq!(texts, vec!["Quokka builds use musl", "The zebrafish pipeline runs nightly"]);
}

/// A delivery is done once the server has stored the items, not when it has queued them: the
/// memories are listed the moment `retain` returns (the spool lets go of a batch only then).
#[tokio::test]
async fn a_retain_returns_once_the_server_has_stored_it() {
    let Some(Peer { url, bank, b, scope }) = peer_bank("contract-stored").await else { return };
    let batch = RetainBatch {
        id: fresh_batch_id(),
        items: vec![
            item("1", "The heron deploy runs at noon", &[], None),
            item("2", "Ibis logs rotate daily", &[], None),
        ],
    };
    b.retain(&scope, &batch).await.unwrap();
    let mut texts = list_texts(&url, &bank).await;
    texts.sort();
    assert_eq!(texts, ["Ibis logs rotate daily", "The heron deploy runs at noon"]);
    // The operation mneme waited on is the one the server ran, and it is completed.
    let op = mneme_hindsight::operation_id(&format!("{}/1,2", batch.id)); // see `parts`
    let v: serde_json::Value =
        reqwest::get(format!("{url}/v1/default/banks/{bank}/operations/{op}")).await.unwrap().json().await.unwrap();
    assert_eq!(v["status"], "completed", "{v}");
}

#[tokio::test]
async fn recall_filters_on_tags_match_and_types() {
    let Some(Peer { url, bank, b, scope }) = peer_bank("contract-tags").await else { return };
    let batch = RetainBatch {
        id: fresh_batch_id(),
        items: vec![
            item("1", "walrus untagged note", &[], Some("d1")),
            item("2", "walrus alpha project note", &["project:alpha"], Some("d2")),
            item("3", "walrus beta project note", &["project:beta"], Some("d3")),
        ],
    };
    b.retain(&scope, &batch).await.unwrap();
    wait_for_count(&url, &bank, 3).await;
    let texts = |r: Vec<Recalled>| {
        let mut t: Vec<String> = r.into_iter().map(|x| x.text).collect();
        t.sort();
        t
    };
    let any = b.recall(&scope, &query("walrus note", &["project:alpha"], TagsMatch::Any, &[])).await.unwrap();
    assert_eq!(texts(any), vec!["walrus alpha project note", "walrus untagged note"]);
    let strict = b.recall(&scope, &query("walrus note", &["project:alpha"], TagsMatch::AnyStrict, &[])).await.unwrap();
    assert_eq!(texts(strict), vec!["walrus alpha project note"]);
    let worlds = b.recall(&scope, &query("walrus note", &[], TagsMatch::Any, &[MemoryType::World])).await.unwrap();
    assert_eq!(worlds.len(), 3);
    assert!(worlds.iter().all(|r| r.kind == "world" && !r.mentioned_at.is_empty()));
    let experiences =
        b.recall(&scope, &query("walrus note", &[], TagsMatch::Any, &[MemoryType::Experience])).await.unwrap();
    assert!(experiences.is_empty(), "{experiences:?}");
}

#[tokio::test]
async fn a_missing_bank_is_no_memories_and_reflect_answers() {
    let Some(url) = peer_url() else { return };
    let b = backend(&url);
    let missing = Scope { bank: fresh_bank("contract-missing"), tags: vec![] };
    assert!(b.recall(&missing, &query("anything", &[], TagsMatch::Any, &[])).await.unwrap().is_empty());
    let bank = fresh_bank("contract-reflect");
    let scope = Scope { bank: bank.clone(), tags: vec![] };
    b.retain(&scope, &RetainBatch { id: fresh_batch_id(), items: vec![item("1", "We deploy on Fridays.", &[], None)] })
        .await
        .unwrap();
    let q = ReflectQuery {
        query: "When do we deploy?".into(),
        context: None,
        budget: Budget::Low,
        tags: vec![],
        tags_match: TagsMatch::Any,
        tag_groups: None,
        types: vec![],
        max_tokens: None,
    };
    let text = b.reflect(&scope, &q).await.unwrap();
    assert!(!text.trim().is_empty(), "the mock LLM answers something");
    let status = b.status().await;
    assert!(status.healthy, "{status:?}");
    assert_eq!(status.version.as_deref(), Some("1.1.0"));
}

#[tokio::test]
async fn a_422_becomes_a_readable_permanent_reason() {
    let Some(url) = peer_url() else { return };
    // The server's real 422 shape, read by the same code the backend uses.
    let r = reqwest::Client::new()
        .post(format!("{url}/v1/default/banks/{}/memories", fresh_bank("contract-422")))
        .json(&serde_json::json!({"items": [{}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    let e = mneme_hindsight::errors::from_status("retain", r.status(), None, &r.text().await.unwrap());
    assert!(!e.is_transient());
    assert!(e.to_string().contains("body.items.0.content: Field required"), "{e}");
}

#[tokio::test]
async fn clear_remote_deletes_the_banks_memories() {
    let Some(Peer { url, bank, b, scope }) = peer_bank("contract-clear").await else { return };
    b.retain(&scope, &RetainBatch { id: fresh_batch_id(), items: vec![item("1", "ephemeral ocelot", &[], Some("d"))] })
        .await
        .unwrap();
    wait_for_count(&url, &bank, 1).await;
    let kept = b.clear(&scope, ClearWhat::Scope).await.unwrap();
    assert!(kept.message.contains("were kept"));
    assert_eq!(list_texts(&url, &bank).await.len(), 1);
    b.clear(&scope, ClearWhat::Remote).await.unwrap();
    assert!(list_texts(&url, &bank).await.is_empty());
}

#[tokio::test]
async fn bearer_auth_with_the_right_and_a_wrong_token() {
    let Ok(url) = std::env::var("MNEME_HINDSIGHT_AUTH_URL") else {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("MNEME_HINDSIGHT_AUTH_URL is not set: .ci/run must start the peer with an API key");
        }
        eprintln!("skipping: MNEME_HINDSIGHT_AUTH_URL not set");
        return;
    };
    let key = std::env::var("MNEME_HINDSIGHT_AUTH_KEY").unwrap();
    let scope = Scope { bank: fresh_bank("contract-auth"), tags: vec![] };
    let q = query("anything", &[], TagsMatch::Any, &[]);
    let right = mneme_hindsight::HindsightBackend::new(config(&url, Some(&key))).unwrap();
    assert!(right.recall(&scope, &q).await.is_ok());
    let wrong = mneme_hindsight::HindsightBackend::new(config(&url, Some("not-the-key"))).unwrap();
    let e = wrong.recall(&scope, &q).await.unwrap_err();
    assert!(!e.is_transient(), "{e}");
    assert!(e.to_string().contains("hindsight.api_token"), "{e}");
    assert!(!e.to_string().contains("not-the-key"));
    let none = mneme_hindsight::HindsightBackend::new(config(&url, None)).unwrap();
    assert!(!none.recall(&scope, &q).await.unwrap_err().is_transient());
    // The server's /health takes no key: status asks a route that does.
    assert!(right.status().await.healthy);
    for refused in [&wrong, &none] {
        let status = refused.status().await;
        assert!(!status.healthy, "{status:?}");
        assert!(status.detail.unwrap_or_default().contains("hindsight.api_token"));
    }
}

#[tokio::test]
async fn missions_are_set_on_the_bank_once() {
    let Some(url) = peer_url() else { return };
    let bank = fresh_bank("contract-mission");
    let mut config = config(&url, None);
    config.bank_mission = "Remember engineering decisions".into();
    config.retain_mission = "Keep build and test facts".into();
    let b = mneme_hindsight::HindsightBackend::new(config).unwrap();
    b.start(&Scope { bank: bank.clone(), tags: vec![] }).await.unwrap();
    let v: serde_json::Value =
        reqwest::get(format!("{url}/v1/default/banks/{bank}/config")).await.unwrap().json().await.unwrap();
    assert_eq!(v["config"]["reflect_mission"], "Remember engineering decisions");
    assert_eq!(v["config"]["retain_mission"], "Keep build and test facts");
}

#[tokio::test]
async fn a_bank_is_browsed_shown_and_its_documents_forgotten() {
    let Some(Peer { url, bank, b, scope }) = peer_bank("contract-browse").await else { return };
    let items = vec![
        item("1", "The okapi service owns billing exports", &["project:zoo"], Some("doc-okapi")),
        item("2", "The tapir job compacts logs hourly", &["project:zoo"], Some("doc-tapir")),
        item("3", "Untagged note about the capybara cache", &[], Some("doc-capy")),
        item("4", "The quokka deploys run at noon", &[], Some("doc-pair")),
        item("5", "The quokka rollbacks keep the last image", &[], Some("doc-pair")),
    ];
    b.retain(&scope, &RetainBatch { id: fresh_batch_id(), items }).await.unwrap();
    wait_for_count(&url, &bank, 5).await;
    // A memory's detail says how many units its document holds: the server's count, not 1
    // (the view asked to delete "all 1" of a document's memories: review114 #4).
    let listed =
        b.browse(&BrowseQuery { bank: Some(bank.clone()), limit: 10, ..BrowseQuery::default() }).await.unwrap();
    let in_pair = listed.memories.iter().find(|m| m.content.contains("quokka deploys")).expect("listed");
    let shown = b.memory(&in_pair.id, Some(&bank)).await.unwrap();
    assert_eq!(shown.memory.document_id.as_deref(), Some("doc-pair"));
    assert_eq!(shown.document_memories, 2, "{shown:?}");
    let one_unit = listed.memories.iter().find(|m| m.content.contains("capybara")).expect("listed");
    assert_eq!(b.memory(&one_unit.id, Some(&bank)).await.unwrap().document_memories, 1);
    b.forget(&Forget::Document { id: "doc-pair".into(), bank: bank.clone() }).await.unwrap();
    for _ in 0..40 {
        if list_texts(&url, &bank).await.len() == 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }

    let all = b.browse(&BrowseQuery { bank: Some(bank.clone()), limit: 2, ..BrowseQuery::default() }).await.unwrap();
    assert_eq!(all.memories.len(), 2);
    let next = all.next.clone().expect("a second page");
    let rest = BrowseQuery { bank: Some(bank.clone()), limit: 2, cursor: Some(next), ..BrowseQuery::default() };
    assert_eq!(b.browse(&rest).await.unwrap().memories.len(), 1);
    let tagged = BrowseQuery { bank: Some(bank.clone()), tags: vec!["project:zoo".into()], limit: 10, cursor: None };
    let tagged = b.browse(&tagged).await.unwrap();
    let mut texts: Vec<&str> = tagged.memories.iter().map(|m| m.content.as_str()).collect();
    texts.sort();
    assert_eq!(texts, ["The okapi service owns billing exports", "The tapir job compacts logs hourly"]);

    let okapi = tagged.memories.iter().find(|m| m.content.contains("okapi")).unwrap();
    let shown = b.memory(&okapi.id, Some(&bank)).await.unwrap();
    assert_eq!(shown.memory.content, okapi.content);
    assert_eq!(shown.memory.document_id.as_deref(), Some("doc-okapi"));
    assert_eq!(shown.memory.kind, okapi.kind);
    // An id that is no UUID (the server answers 400) is no memory.
    assert!(matches!(b.memory("not-a-uuid", Some(&bank)).await, Err(BackendError::NotFound(_))));
    assert!(matches!(
        b.memory("00000000-0000-0000-0000-000000000000", Some(&bank)).await,
        Err(BackendError::NotFound(_))
    ));
    let banks = b.banks().await.unwrap();
    assert!(banks.iter().any(|x| x.bank == bank), "{banks:?}");
    // Read a page at a time, the list is whole: one request of 1,000 left the rest of a server
    // with more out (review69 #4). Here pages of 2, against the same list in one.
    let paged = mneme_hindsight::HindsightBackend::new(mneme_hindsight::HindsightConfig {
        banks_page: 2,
        ..config(&url, None)
    })
    .unwrap();
    let mut in_pages: Vec<String> = paged.banks().await.unwrap().into_iter().map(|x| x.bank).collect();
    let mut whole: Vec<String> = banks.iter().map(|x| x.bank.clone()).collect();
    assert!(whole.len() > 2, "{whole:?}");
    in_pages.sort();
    whole.sort();
    assert_eq!(in_pages, whole);

    let one = Forget::Memory { id: okapi.id.clone(), bank: Some(bank.clone()) };
    assert!(matches!(b.forget(&one).await, Err(BackendError::Unsupported(_))), "no single-unit delete in 1.1");
    let done = b.forget(&Forget::Document { id: "doc-okapi".into(), bank: bank.clone() }).await.unwrap();
    assert_eq!(done.deleted, Some(1), "{done:?}");
    let mut left = list_texts(&url, &bank).await;
    left.sort();
    assert_eq!(left, ["The tapir job compacts logs hourly", "Untagged note about the capybara cache"]);
    let missing = b.forget(&Forget::Document { id: "doc-okapi".into(), bank: bank.clone() }).await;
    assert!(matches!(missing, Err(BackendError::NotFound(_))), "{missing:?}");
}

#[tokio::test]
async fn one_export_imports_into_two_banks_and_again_into_the_same_one() {
    let Some(url) = peer_url() else { return };
    let b = backend(&url);
    let (one, two) = (fresh_bank("contract-import-a"), fresh_bank("contract-import-b"));
    chunk_bank(&url, &one).await;
    chunk_bank(&url, &two).await;
    let export = |bank: &str| vec![exported("same-id-in-every-export", bank, "The kestrel job runs at dawn")];
    b.import(&export(&one)).await.unwrap();
    b.import(&export(&two)).await.expect("operation ids are global on Hindsight: the bank must be part of it");
    b.import(&export(&one)).await.expect("a re-import is idempotent");
    assert_eq!(wait_for_count(&url, &one, 1).await, ["The kestrel job runs at dawn"]);
    assert_eq!(wait_for_count(&url, &two, 1).await, ["The kestrel job runs at dawn"]);
}

/// A backup imported again after a clear of the bank is stored again: the server answers an
/// operation id it has seen from what it did then, so the second import stored nothing and
/// said it had (the usual restore: export, clear, import).
#[tokio::test]
async fn a_backup_imported_after_a_clear_is_stored_again() {
    let Some(Peer { url, bank, b, scope }) = peer_bank("contract-restore").await else { return };
    let export = vec![
        exported("restore-1", &bank, "The puffin cron runs at six"),
        exported("restore-2", &bank, "Gannet builds need the nightly toolchain"),
    ];
    let contents = ["Gannet builds need the nightly toolchain", "The puffin cron runs at six"];
    for round in 0..3 {
        b.import(&export).await.unwrap();
        each_once(&wait_for_texts(&url, &bank, &contents).await, &contents);
        if round == 1 {
            b.import(&export).await.unwrap(); // still there: nothing twice
            each_once(&wait_for_texts(&url, &bank, &contents).await, &contents);
        }
        b.clear(&scope, ClearWhat::Remote).await.unwrap();
        assert_eq!(list_texts(&url, &bank).await, Vec::<String>::new());
    }
}

/// A memory's type survives a copy to the server and back: the server makes every chunk a
/// `world` fact, so a transcript (`experience`) came back a world fact and a `recall.types` that
/// kept transcripts out let it in.
#[tokio::test]
async fn an_imported_memory_comes_back_with_its_type() {
    let Some(Peer { url, bank, b, .. }) = peer_bank("contract-import-type").await else { return };
    let mut transcript = exported("typed-1", &bank, "user: how do we ship? assistant: with cargo-dist");
    transcript.kind = MemoryType::Experience;
    transcript.document_id = Some("session-typed".into());
    let fact = exported("typed-2", &bank, "The ibis cache is warmed at noon");
    // A client's own value under the key is its own: left as it is.
    let mut own = exported("typed-3", &bank, "The heron job keeps its own note");
    own.metadata.insert(transfer::TYPE_KEY.to_owned(), "note".to_owned());
    b.import(&[transcript, fact, own]).await.unwrap();
    let contents = [
        "The heron job keeps its own note",
        "The ibis cache is warmed at noon",
        "user: how do we ship? assistant: with cargo-dist",
    ];
    each_once(&wait_for_texts(&url, &bank, &contents).await, &contents);
    let page = b.export(Some(&bank), None, 100).await.unwrap();
    let kinds: BTreeMap<&str, MemoryType> = page.memories.iter().map(|m| (m.content.as_str(), m.kind)).collect();
    assert_eq!(kinds[contents[1]], MemoryType::World);
    assert_eq!(kinds[contents[2]], MemoryType::Experience, "{:?}", page.memories);
    for m in &page.memories {
        let kept = m.metadata.get(transfer::TYPE_KEY).map(String::as_str);
        assert_eq!(kept, (m.content == contents[0]).then_some("note"), "{m:?}");
    }
}

/// An import the server answers 404 (a wrong api_url) fails instead of counting as sent.
#[tokio::test]
async fn an_import_answered_404_is_not_success() {
    let Some(Peer { url, bank, .. }) = peer_bank("contract-import-404").await else { return };
    let backup = vec![exported("restored-memory", &bank, "The heron cache is warmed at noon")];
    let wrong = backend(&format!("{url}/not-hindsight"));
    let e = wrong.import(&backup).await.expect_err("a 404 stored nothing");
    assert!(!e.is_transient() && e.to_string().contains("404"), "{e}");
}

/// An import whose chunk holds a document of three memories beside two memories of their own:
/// sent asynchronously (the document as a replace and two appends, in order, so no retain names
/// it twice), stored once however often it is imported.
#[tokio::test]
async fn a_document_of_several_memories_imports_whole_in_order_and_once() {
    let Some(Peer { url, bank, b, .. }) = peer_bank("contract-import-doc").await else { return };
    let memory = |id: &str, content: &str, doc: Option<&str>| StoredMemory {
        id: id.into(),
        bank: bank.clone(),
        content: content.into(),
        context: None,
        tags: vec![],
        metadata: BTreeMap::new(),
        document_id: doc.map(str::to_owned),
        kind: MemoryType::World,
        created_at: "2026-01-02T03:04:05Z".into(),
    };
    let export = vec![
        memory("r1", "Runbook: drain the walrus queue", Some("runbook")),
        memory("k", "The kestrel job runs at dawn", None),
        memory("r2", "Runbook: restart the narwhal workers", Some("runbook")),
        memory("o", "The osprey cache holds a day", Some("osprey")),
        memory("r3", "Runbook: page the beluga on-call", Some("runbook")),
    ];
    for _ in 0..2 {
        b.import(&export).await.unwrap();
    }
    let contents: Vec<&str> = export.iter().map(|m| m.content.as_str()).collect();
    each_once(&wait_for_texts(&url, &bank, &contents).await, &contents);
    let text = wait_for_document(&url, &bank, "runbook", &["walrus", "narwhal", "beluga"]).await;
    let at = |needle: &str| text.find(needle).unwrap();
    assert!(at("walrus") < at("narwhal") && at("narwhal") < at("beluga"), "in order: {text:?}");
    assert_eq!(text.matches("Runbook:").count(), 3, "{text:?}");
}

/// An imported document of memories with tags of their own keeps each memory's on the server,
/// however often it is imported: sent as a replace and appends, each took the last one's
/// (review61 #6).
#[tokio::test]
async fn an_imported_documents_memories_keep_their_own_tags() {
    let Some(Peer { url, bank, b, .. }) = peer_bank("contract-import-tags").await else { return };
    let memory = |id: &str, content: &str, tag: &str| StoredMemory {
        id: id.into(),
        bank: bank.clone(),
        content: content.into(),
        context: None,
        tags: vec![tag.into()],
        metadata: BTreeMap::new(),
        document_id: Some("doc-q".into()),
        kind: MemoryType::World,
        created_at: "2026-01-02T03:04:05Z".into(),
    };
    let export = vec![
        memory("q1", "The quasar one alpha service", "project:alpha"),
        memory("q2", "The quasar two beta service", "project:beta"),
    ];
    for _ in 0..2 {
        b.import(&export).await.unwrap();
    }
    wait_for_count(&url, &bank, 2).await;
    let items = listed_memories(&url, &bank).await;
    assert_eq!(items.len(), 2, "{items:?}");
    for (needle, tag) in [("quasar one", "project:alpha"), ("quasar two", "project:beta")] {
        let m = items.iter().find(|m| m["text"].as_str().unwrap_or("").contains(needle)).expect(needle);
        assert_eq!(m["tags"], serde_json::json!([tag]), "{m}");
    }
}

#[tokio::test]
async fn an_append_adds_to_its_document_and_a_plain_retain_replaces_it() {
    let Some(Peer { url, bank, b, scope }) = peer_bank("contract-append").await else { return };
    let first = item("1", "The walrus service deploys on Fridays", &[], Some("doc-w"));
    b.retain(&scope, &RetainBatch { id: fresh_batch_id(), items: vec![first] }).await.unwrap();
    wait_for_document(&url, &bank, "doc-w", &["walrus"]).await;
    let more = MemoryItem { append: true, ..item("2", "The narwhal tests run on bun", &[], Some("doc-w")) };
    b.retain(&scope, &RetainBatch { id: fresh_batch_id(), items: vec![more] }).await.unwrap();
    let text = wait_for_document(&url, &bank, "doc-w", &["walrus", "narwhal"]).await;
    assert!(text.contains("walrus") && text.contains("narwhal"), "{text}");
    let replacing = item("3", "The beluga cache is warmed at start", &[], Some("doc-w"));
    b.retain(&scope, &RetainBatch { id: fresh_batch_id(), items: vec![replacing] }).await.unwrap();
    let text = wait_for_document(&url, &bank, "doc-w", &["beluga"]).await;
    assert!(!text.contains("walrus") && !text.contains("narwhal"), "replaced: {text}");
}

/// A delivery naming a document more than once (one request's document of two items and a later
/// append to it) beside a loose item and another document: stored in order, and once when the
/// batch is resent after a lost reply. Sent synchronously, as before, the resend stored the
/// append and the loose item again; sent as one asynchronous retain, the other document's
/// retain raced the appends and wiped them.
#[tokio::test]
async fn a_batch_naming_a_document_twice_is_stored_in_order_and_once_when_resent() {
    let Some(Peer { url, bank, b, scope }) = peer_bank("contract-shared").await else { return };
    let contents = [
        "The walrus service deploys on Fridays",
        "The narwhal tests run on bun",
        "Quokka builds use musl",
        "The zebrafish pipeline runs nightly",
        "The beluga cache is warmed at start",
    ];
    let batch = RetainBatch {
        id: fresh_batch_id(),
        items: vec![
            item("1", contents[0], &[], Some("doc-x")),
            item("2", contents[1], &[], Some("doc-x")),
            item("3", contents[2], &[], None),
            item("4", contents[3], &[], Some("doc-y")),
            MemoryItem { append: true, ..item("5", contents[4], &[], Some("doc-x")) },
        ],
    };
    b.retain(&scope, &batch).await.unwrap();
    b.retain(&scope, &batch).await.unwrap(); // a resend after a lost reply
    each_once(&wait_for_texts(&url, &bank, &contents).await, &contents);
    let text = wait_for_document(&url, &bank, "doc-x", &["walrus", "narwhal", "beluga"]).await;
    let at = |needle: &str| text.find(needle).unwrap();
    assert!(at("walrus") < at("narwhal") && at("narwhal") < at("beluga"), "in the batch's order: {text:?}");
    for needle in ["walrus", "narwhal", "beluga"] {
        assert_eq!(text.matches(needle).count(), 1, "{needle} once: {text:?}");
    }
}

/// A delivery that replaces a document with several items keeps each item's own tags and
/// metadata on the server, as the server does with the same request: sent as a replace and
/// appends, each append gave the whole document its tags and metadata, and a project's memory
/// took another project's tag (review59 #1). One request, not one a memory (each took the
/// server's worker half a second: review59 #8).
#[tokio::test]
async fn a_documents_items_keep_their_own_tags_and_metadata() {
    let Some(Peer { url, bank, b, scope }) = peer_bank("contract-item-tags").await else { return };
    let mut first = item("1", "The nebula one service deploys on Fridays", &["project:alpha"], Some("doc-n"));
    first.metadata.insert("origin".into(), "first".into());
    let mut second = item("2", "The nebula two tests run on bun", &["project:beta"], Some("doc-n"));
    second.metadata.insert("origin".into(), "second".into());
    let batch = RetainBatch { id: fresh_batch_id(), items: vec![first, second] };
    b.retain(&scope, &batch).await.unwrap();
    // Resent (a lost reply, a later part's failure): the server answers a second synchronous
    // retain of the document by giving both memories every item's tags, unless the document is
    // deleted first (review61 #1).
    b.retain(&scope, &batch).await.unwrap();
    wait_for_count(&url, &bank, 2).await;
    let items = listed_memories(&url, &bank).await;
    assert_eq!(items.len(), 2, "{items:?}");
    for (needle, tag, origin) in [("nebula one", "project:alpha", "first"), ("nebula two", "project:beta", "second")] {
        let m = items.iter().find(|m| m["text"].as_str().unwrap_or("").contains(needle)).expect(needle);
        assert_eq!(m["tags"], serde_json::json!([tag]), "{m}");
        assert_eq!(m["metadata"]["origin"], origin, "{m}");
    }
    let beta = b.recall(&scope, &query("nebula", &["project:beta"], TagsMatch::AllStrict, &[])).await.unwrap();
    assert!(beta.iter().all(|r| r.text.contains("nebula two")) && !beta.is_empty(), "{beta:?}");
}

/// An append delivered right after a delivery that replaced its document beside another one
/// lands after that replace. Sent as one retain naming both documents, the replace was not put
/// in line with the append and, run after it, wiped it.
#[tokio::test]
async fn an_append_right_after_a_two_document_delivery_is_kept() {
    let Some(Peer { url, bank, b, scope }) = peer_bank("contract-order").await else { return };
    let first = vec![
        item("1", "The walrus service deploys on Fridays", &[], Some("doc-x")),
        item("2", "The zebrafish pipeline runs nightly", &[], Some("doc-y")),
    ];
    b.retain(&scope, &RetainBatch { id: fresh_batch_id(), items: first }).await.unwrap();
    let more = MemoryItem { append: true, ..item("3", "The narwhal tests run on bun", &[], Some("doc-x")) };
    b.retain(&scope, &RetainBatch { id: fresh_batch_id(), items: vec![more] }).await.unwrap();
    wait_for_count(&url, &bank, 3).await;
    let text = wait_for_document(&url, &bank, "doc-x", &["walrus", "narwhal"]).await;
    assert!(text.find("walrus") < text.find("narwhal"), "{text:?}");
}

/// Items retained without a document (the retain tool's facts) are each a document of their
/// own: Hindsight 1.1 forgets by document, and one shared by a whole delivery would take the
/// rest of the batch with the memory forgotten.
#[tokio::test]
async fn a_fact_retained_with_others_is_forgotten_alone() {
    let Some(Peer { url, bank, b, scope }) = peer_bank("contract-loose").await else { return };
    let items = vec![
        item("1", "The wombat queue drains every minute", &[], None),
        item("2", "The numbat cache holds sessions for a day", &[], None),
    ];
    b.retain(&scope, &RetainBatch { id: fresh_batch_id(), items }).await.unwrap();
    wait_for_count(&url, &bank, 2).await;
    let all = b.browse(&BrowseQuery { bank: Some(bank.clone()), limit: 10, ..BrowseQuery::default() }).await.unwrap();
    let wombat = all.memories.iter().find(|m| m.content.contains("wombat")).unwrap();
    let document = wombat.document_id.clone().expect("a document of its own");
    let done = b.forget(&Forget::Document { id: document, bank: bank.clone() }).await.unwrap();
    assert_eq!(done.deleted, Some(1), "{done:?}");
    assert_eq!(list_texts(&url, &bank).await, ["The numbat cache holds sessions for a day"]);
}

/// What another client of the server stored inside `<private>` spans is passed on by neither
/// recall nor export, in any field: recall cleaned only the text, and export nothing (a file
/// then held what the README says no file holds).
#[tokio::test]
async fn what_another_client_marked_private_is_neither_recalled_nor_exported() {
    let Some(p) = peer_bank("contract-private").await else { return };
    let items = serde_json::json!({"async": false, "items": [
        {"content": "The deploy key is <private>hunter2-content</private> and rotates monthly",
         "context": "ops notes <private>hunter2-context</private>",
         "tags": ["ops", "<private>hunter2-tag</private>"],
         "metadata": {"note": "kept <private>hunter2-metadata</private>"},
         "document_id": "deploy-notes"},
        {"content": "<private>hunter2-whole</private>", "document_id": "all-private"},
    ]});
    let r = reqwest::Client::new()
        .post(format!("{}/v1/default/banks/{}/memories", p.url, p.bank))
        .json(&items)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    let listed = wait_for_count(&p.url, &p.bank, 2).await;
    assert!(listed.iter().any(|t| t.contains("hunter2-content")), "the server holds it as sent: {listed:?}");

    let page = p.b.export(Some(&p.bank), None, 100).await.unwrap();
    let exported = format!("{:?}", page.memories);
    assert!(!exported.contains("hunter2"), "{exported}");
    assert!(exported.contains("rotates monthly"), "{exported}");
    // The wholly private one stays in its page, blank, for the reader to leave out and count.
    assert_eq!(page.memories.len(), 2, "{exported}");
    assert!(page.memories.iter().any(|m| m.content.trim().is_empty()), "{exported}");
    let results = p.b.recall(&p.scope, &query("deploy key rotates monthly", &[], TagsMatch::Any, &[])).await.unwrap();
    let recalled = format!("{results:?}");
    assert!(!recalled.contains("hunter2"), "{recalled}");
    assert!(recalled.contains("rotates monthly"), "{recalled}");
    // Nor the web view's list and lookup of the bank.
    let browse = BrowseQuery { bank: Some(p.bank.clone()), limit: 100, ..BrowseQuery::default() };
    let listed = p.b.browse(&browse).await.unwrap();
    let shown = format!("{:?}", listed.memories);
    assert!(!shown.contains("hunter2") && shown.contains("rotates monthly"), "{shown}");
    assert_eq!(listed.memories.len(), 1, "the wholly private one is not listed: {shown}");
    let one = p.b.memory(&listed.memories[0].id, Some(&p.bank)).await.unwrap();
    assert!(!format!("{one:?}").contains("hunter2"), "{one:?}");
}
