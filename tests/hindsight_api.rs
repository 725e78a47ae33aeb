//! The Hindsight API mneme serves under `/hindsight`, driven over HTTP against a real daemon
//! process on the local store: what a Hindsight client retains is what mneme's own routes recall
//! and the other way round, the answers have Hindsight's shapes, bad input gets Hindsight's
//! status codes, and nothing private or unauthenticated gets through.

mod common;

use std::time::Duration;

use common::Daemon;
use serde_json::{json, Value};

const LEXICAL: &str = "[local]\nembedder = \"off\"\n";

fn bank_path(bank: &str, rest: &str) -> String {
    format!("/hindsight/v1/default/banks/{bank}{rest}")
}

#[tokio::test]
async fn a_hindsight_retain_is_recalled_by_mneme_sessions_and_the_other_way_round() {
    let d = Daemon::start(LEXICAL);
    let (status, v) = d
        .post(
            &bank_path("mneme", "/memories"),
            json!({"items": [{"content": "We deploy with cargo-dist on every tag.", "context": "release notes",
                    "tags": ["project:shop"], "metadata": {"session_id": "omp-1"},
                    "timestamp": "2026-01-02T03:04:05.250+01:00"}], "async": true}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["success"], true);
    assert_eq!(v["bank_id"], "mneme");
    assert_eq!(v["items_count"], 1);
    assert_eq!(v["async"], true);
    assert!(v["operation_id"].as_str().is_some_and(|s| !s.is_empty()), "{v}");
    for key in ["operation_ids", "usage"] {
        assert!(v.as_object().unwrap().contains_key(key) && v[key].is_null(), "{key}: {v}");
    }
    d.post("/v1/flush", json!({})).await;

    // mneme's own session in the project `shop` (bank mneme, tag project:shop) sees it.
    d.start_session("cc-1", "/tmp/hs-compat/shop").await;
    let (_, v) = d.post("/v1/sessions/cc-1/recall", json!({"query": "cargo-dist deploy"})).await;
    assert!(v["results"][0]["text"].as_str().unwrap_or_default().contains("cargo-dist"), "{v}");

    // What the session retains, the Hindsight API recalls with the project's tag.
    let (status, _) = d
        .post("/v1/sessions/cc-1/retain", json!({"items": [{"content": "The staging database is on port 5433."}]}))
        .await;
    assert_eq!(status, 202);
    d.post("/v1/flush", json!({})).await;
    let (status, v) = d
        .post(
            &bank_path("mneme", "/memories/recall"),
            json!({"query": "staging database port", "tags": ["project:shop"], "tags_match": "any", "max_tokens": 500}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let first = &v["results"][0];
    assert!(first["text"].as_str().unwrap().contains("5433"), "{v}");
    assert!(first["id"].as_str().is_some_and(|s| !s.is_empty()), "{v}");
    assert_eq!(first["type"], "world");
    assert_eq!(first["tags"], json!(["project:shop"]));
    for key in ["trace", "entities", "chunks", "source_facts", "source_facts_truncated"] {
        assert!(v.as_object().unwrap().contains_key(key), "{key}: {v}");
    }

    // The time the client gave is kept, in UTC; another project's tag does not see it.
    let (_, v) =
        d.post(&bank_path("mneme", "/memories/recall"), json!({"query": "cargo-dist", "tags": ["project:shop"]})).await;
    assert_eq!(v["results"][0]["mentioned_at"], "2026-01-02T02:04:05.250Z", "{v}");
    let (_, v) = d
        .post(
            &bank_path("mneme", "/memories/recall"),
            json!({"query": "cargo-dist", "tags": ["project:other"], "tags_match": "all_strict"}),
        )
        .await;
    assert_eq!(v["results"], json!([]), "{v}");
}

#[tokio::test]
async fn a_synchronous_retain_is_stored_when_answered_and_a_document_replaces_itself() {
    let d = Daemon::start(LEXICAL);
    let retain = |text: &str| json!({"items": [{"content": text, "document_id": "omp-session-7", "metadata": {"session_id": "omp-7"}}]});
    let (status, v) =
        d.post(&bank_path("omp", "/memories"), retain("user: which linter?\nassistant: clippy pedantic")).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["async"], false);
    assert!(v["operation_id"].is_null(), "{v}");
    // No flush: a synchronous retain is delivered before the answer.
    let (_, v) = d.post(&bank_path("omp", "/memories/recall"), json!({"query": "linter"})).await;
    assert!(v["results"][0]["text"].as_str().unwrap_or_default().contains("clippy"), "{v}");
    assert_eq!(v["results"][0]["type"], "experience");
    assert_eq!(v["results"][0]["document_id"], "omp-session-7");

    d.post(&bank_path("omp", "/memories"), retain("user: which formatter?\nassistant: rustfmt nightly")).await;
    let (_, v) =
        d.post(&bank_path("omp", "/memories/recall"), json!({"query": "linter clippy formatter rustfmt"})).await;
    let texts: Vec<&str> = v["results"].as_array().unwrap().iter().map(|r| r["text"].as_str().unwrap()).collect();
    assert!(texts.iter().any(|t| t.contains("rustfmt")), "{texts:?}");
    assert!(!texts.iter().any(|t| t.contains("clippy")), "the document's old version is gone: {texts:?}");
}

#[tokio::test]
async fn bad_requests_get_hindsight_status_codes_and_both_error_shapes() {
    let d = Daemon::start(LEXICAL);
    let check_422 = |v: &Value| {
        assert!(v["detail"].is_array(), "{v}");
        assert!(v["detail"][0]["msg"].as_str().is_some(), "{v}");
        assert!(v["error"]["code"].as_str().is_some() && v["error"]["message"].as_str().is_some(), "{v}");
    };
    let (status, v) = d.post(&bank_path("b", "/memories"), json!({"items": [{"content": "   "}]})).await;
    assert_eq!(status, 422, "{v}");
    check_422(&v);
    let (status, v) =
        d.post(&bank_path("b", "/memories"), json!({"items": [{"content": "x", "timestamp": "yesterday"}]})).await;
    assert_eq!(status, 422, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("items[0].timestamp"), "{v}");
    let (status, v) = d.post(&bank_path("b", "/memories"), json!({"items": "nope"})).await;
    assert_eq!(status, 422, "{v}");
    let (status, v) = d.post(&bank_path("b", "/memories/recall"), json!({"query": "  "})).await;
    assert_eq!(status, 422, "{v}");
    check_422(&v);
    let (status, v) = d.post(&bank_path("b", "/memories/recall"), json!({"query": "x", "types": ["dream"]})).await;
    assert_eq!(status, 422, "{v}");
    // As Hindsight: no items is not an error, and stores nothing.
    let (status, v) = d.post(&bank_path("b", "/memories"), json!({"items": []})).await;
    assert_eq!((status, v["items_count"].clone()), (200, json!(0)), "{v}");
    // The local store has no LLM to reflect with: an error Hindsight clients handle.
    let (status, v) = d.post(&bank_path("b", "/reflect"), json!({"query": "what do we know?"})).await;
    assert_eq!(status, 422, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("LLM"), "{v}");
    // A route mneme does not serve.
    let (status, v) = d.get(&bank_path("b", "/graph")).await;
    assert_eq!(status, 404, "{v}");
    assert!(v["detail"].as_str().unwrap().starts_with("Not Found"), "{v}");

    // No token, a wrong token, a foreign Origin: refused like every route.
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let url = d.url(&bank_path("b", "/memories/recall"));
    let r = http.post(&url).json(&json!({"query": "x"})).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = http.post(&url).bearer_auth("wrong").json(&json!({"query": "x"})).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = http
        .post(&url)
        .bearer_auth(&d.token)
        .header("Origin", "https://evil.example")
        .json(&json!({"query": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
}

#[tokio::test]
async fn banks_and_mental_models_are_kept_and_computed_from_recall() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start_in(dir, LEXICAL);
    let (status, v) =
        d.req(reqwest::Method::PUT, &bank_path("omp", ""), Some(json!({"reflect_mission": "Help with Rust"}))).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v,
        json!({"bank_id": "omp", "name": "omp", "disposition": {"skepticism": 3, "literalism": 3, "empathy": 3},
               "mission": "Help with Rust", "background": "Help with Rust", "reflect_mission": "Help with Rust"})
    );
    let (status, v) = d.get(&bank_path("omp", "/mental-models?detail=metadata")).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v, json!({"items": [], "total": 0, "limit": 100, "offset": 0}));

    d.post(
        &bank_path("omp", "/memories"),
        json!({"items": [{"content": "The user prefers tabs over spaces.", "tags": ["project:p"]}]}),
    )
    .await;
    let model = json!({"id": "user-preferences", "name": "User preferences", "source_query": "what does the user prefer?",
                       "tags": ["project:p"], "max_tokens": 500, "trigger": {"refresh_after_consolidation": true}});
    let (status, v) = d.post(&bank_path("omp", "/mental-models"), model.clone()).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["mental_model_id"], "user-preferences");
    assert!(v["operation_id"].as_str().is_some(), "{v}");
    let (status, v) = d.post(&bank_path("omp", "/mental-models"), model).await;
    assert_eq!(status, 409, "{v}");

    let (_, v) = d.get(&bank_path("omp", "/mental-models?detail=metadata")).await;
    let item = &v["items"][0];
    assert_eq!(item["id"], "user-preferences");
    assert_eq!(item["tags"], json!(["project:p"]));
    assert!(item["content"].is_null() && item["source_query"].is_null(), "{v}");
    let (_, v) = d.get(&bank_path("omp", "/mental-models?detail=content")).await;
    assert_eq!(v["items"][0]["content"], "- The user prefers tabs over spaces.", "{v}");
    assert!(v["items"][0]["last_refreshed_at"].as_str().is_some(), "{v}");

    // Kept across a restart, in the spool's database.
    d.stop();
    let d = Daemon::start_in(d.into_dir(), "");
    let (_, v) = d.get(&bank_path("omp", "/mental-models/user-preferences?detail=full")).await;
    assert_eq!(v["source_query"], "what does the user prefer?", "{v}");
    let (_, v) = d.get("/hindsight/v1/default/banks").await;
    assert_eq!(v["banks"][0]["bank_id"], "omp", "{v}");

    // A refresh sees what was retained since.
    d.post(
        &bank_path("omp", "/memories"),
        json!({"items": [{"content": "The user prefers short commit messages.", "tags": ["project:p"]}]}),
    )
    .await;
    let (status, _) = d.post(&bank_path("omp", "/mental-models/user-preferences/refresh"), json!({})).await;
    assert_eq!(status, 200);
    let (_, v) = d.get(&bank_path("omp", "/mental-models/user-preferences?detail=content")).await;
    assert!(v["content"].as_str().unwrap().contains("commit messages"), "{v}");
    let (status, v) = d.get(&bank_path("omp", "/mental-models/user-preferences/history")).await;
    assert_eq!((status, v), (200, json!([])));

    let (status, _) = d.req(reqwest::Method::DELETE, &bank_path("omp", "/mental-models/user-preferences"), None).await;
    assert_eq!(status, 200);
    let (status, v) = d.get(&bank_path("omp", "/mental-models/user-preferences")).await;
    assert_eq!(status, 404, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("not found"), "{v}");
}

#[tokio::test]
async fn private_spans_in_any_field_never_reach_the_disk() {
    let d = Daemon::start(LEXICAL);
    let secret = |field: &str| format!("HSECRET-{field}-zq9zq9");
    let fields = ["content", "context", "metadata", "tag", "document", "doctag", "model"];
    let p = |field: &str| format!("<private>{}</private>", secret(field));
    let (status, v) = d
        .post(
            &bank_path("priv", "/memories"),
            json!({"items": [{"content": format!("visible fact {}", p("content")),
                              "context": format!("ctx {}", p("context")),
                              "metadata": {"session_id": "s", "note": p("metadata")},
                              "tags": ["project:x", p("tag")],
                              "document_id": format!("doc-{}", p("document"))}],
                   "document_tags": [p("doctag")], "async": false}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = d
        .post(
            &bank_path("priv", "/mental-models"),
            json!({"name": format!("m {}", p("model")), "source_query": "visible fact"}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    // An item with nothing but a private span is not stored, and the count says so.
    let (_, v) = d.post(&bank_path("priv", "/memories"), json!({"items": [{"content": p("content")}]})).await;
    assert_eq!(v["items_count"], 0, "{v}");
    d.post("/v1/flush", json!({})).await;
    let (_, v) = d.post(&bank_path("priv", "/memories/recall"), json!({"query": "visible fact"})).await;
    assert_eq!(v["results"][0]["text"], "visible fact", "{v}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    for entry in walk(&d.data()) {
        let bytes = std::fs::read(&entry).unwrap();
        for f in fields {
            let s = secret(f);
            assert!(!bytes.windows(s.len()).any(|w| w == s.as_bytes()), "{s} is in {}", entry.display());
        }
    }
}

#[tokio::test]
async fn with_the_backend_off_nothing_is_kept() {
    let d = Daemon::start("[memory]\nbackend = \"off\"\n");
    let (status, v) = d.post(&bank_path("b", "/memories"), json!({"items": [{"content": "a fact"}]})).await;
    assert_eq!((status, v["items_count"].clone(), v["success"].clone()), (200, json!(0), json!(true)), "{v}");
    let (status, v) = d.post(&bank_path("b", "/memories/recall"), json!({"query": "fact"})).await;
    assert_eq!((status, v["results"].clone()), (200, json!([])), "{v}");
}

#[tokio::test]
async fn an_acknowledged_retain_survives_the_daemon_being_killed() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start_in(dir, &format!("{LEXICAL}[queue]\nflush_interval = \"1h\"\n"));
    let (status, _) = d
        .post(
            &bank_path("omp", "/memories"),
            json!({"items": [{"content": "Kill-proof fact about sqlite."}], "async": true}),
        )
        .await;
    assert_eq!(status, 200);
    d.kill();
    let d = Daemon::start_in(d.into_dir(), "");
    let (_, v) = d.post(&bank_path("omp", "/memories/recall"), json!({"query": "kill-proof sqlite"})).await;
    let found = v["results"].as_array().is_some_and(|r| !r.is_empty());
    let v = if found {
        v
    } else {
        d.post("/v1/flush", json!({})).await;
        d.post(&bank_path("omp", "/memories/recall"), json!({"query": "kill-proof sqlite"})).await.1
    };
    assert_eq!(v["results"][0]["text"], "Kill-proof fact about sqlite.", "{v}");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}
