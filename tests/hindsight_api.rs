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
    let uuid_form = |s: &str| {
        s.split('-').map(str::len).eq([8, 4, 4, 4, 12]) && s.chars().all(|c| c == '-' || c.is_ascii_hexdigit())
    };
    assert!(v["operation_id"].as_str().is_some_and(uuid_form), "written as Hindsight writes its ids: {v}");
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

    // Items sharing a document in one request form the document, whatever their tags.
    let items = json!({"items": [
        {"content": "Alice works at Google", "document_id": "doc1", "tags": ["a"]},
        {"content": "Bob went hiking yesterday", "document_id": "doc1", "tags": ["b"]},
    ]});
    let (status, v) = d.post(&bank_path("hs4", "/memories"), items).await;
    assert_eq!((status, &v["items_count"]), (200, &json!(2)), "{v}");
    let (_, v) = d.get("/v1/export?bank=hs4").await;
    let mut kept: Vec<(String, Value)> = v["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["content"].as_str().unwrap().to_owned(), m["tags"].clone()))
        .collect();
    kept.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        kept,
        [("Alice works at Google".to_owned(), json!(["a"])), ("Bob went hiking yesterday".to_owned(), json!(["b"]))]
    );
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
    // Not a date-time, or one that its offset moves out of what can be written (these two
    // panicked the handler: the connection dropped with no answer).
    // A document no URL can name (its delete would be a request for another path).
    // A bank with spaces at its ends: every `?bank=` is trimmed, so it could not be named again.
    for bank in ["%20b", "b%20"] {
        let (status, v) = d.post(&bank_path(bank, "/memories"), json!({"items": [{"content": "x"}]})).await;
        assert!((400..500).contains(&status), "{bank}: {status} {v}");
        assert!(v.to_string().contains("bank_id"), "{v}");
    }
    // A disposition trait out of its range, in the flat form Hindsight 1.1 still takes too.
    for body in [
        json!({"disposition_literalism": 9}),
        json!({"disposition_empathy": 0}),
        json!({"disposition": {"skepticism": 6, "literalism": 3, "empathy": 3}}),
    ] {
        let (status, v) = d.req(reqwest::Method::PATCH, &bank_path("b", ""), Some(body.clone())).await;
        assert_eq!(status, 422, "{body}: {v}");
    }
    for document in [".", "..", " .. ", "..<private>s</private>"] {
        let (status, v) =
            d.post(&bank_path("b", "/memories"), json!({"items": [{"content": "x", "document_id": document}]})).await;
        assert_eq!(status, 422, "{document}: {v}");
        assert!(v["error"]["message"].as_str().unwrap().contains("items[0].document_id"), "{v}");
    }
    // Year 1 and year 9999 are Hindsight's placeholders for "no date", which it refuses too.
    // One of spaces only too, as the server answers (it was taken for none: review59 #5); an
    // empty one the server takes for none, as mneme does.
    for timestamp in [
        "yesterday",
        "   ",
        "0001-01-01T00:30:00+01:00",
        "9999-12-31T23:00:00-02:00",
        "9999-06-01T00:00:00Z",
        "0001-01-01T00:00:00Z",
    ] {
        let (status, v) =
            d.post(&bank_path("b", "/memories"), json!({"items": [{"content": "x", "timestamp": timestamp}]})).await;
        assert_eq!(status, 422, "{timestamp}: {v}");
        assert!(v["error"]["message"].as_str().unwrap().contains("items[0].timestamp"), "{v}");
    }
    let (status, v) = d.post(&bank_path("b", "/memories"), json!({"items": [{"content": "x", "timestamp": ""}]})).await;
    assert_eq!(status, 200, "an empty timestamp is none, as on the server: {v}");
    // A value refused is not repeated when it holds a private span.
    for bad in [
        json!({"items": [{"content": "x", "timestamp": "<private>S3CRET</private>"}]}),
        json!({"items": [{"content": "x"}], "operation_id": "<private>S3CRET</private>"}),
    ] {
        let (status, v) = d.post(&bank_path("b", "/memories"), bad).await;
        assert_eq!(status, 422, "{v}");
        assert!(!v.to_string().contains("S3CRET"), "{v}");
    }
    // A body that is not JSON, or none: FastAPI's 422 with a list, as for any invalid body.
    for body in ["{\"query\":", ""] {
        let r = d
            .http
            .post(d.url(&bank_path("b", "/memories/recall")))
            .bearer_auth(&d.token)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = r.status();
        let v: Value = r.json().await.unwrap();
        assert_eq!(status, 422, "{body:?}: {v}");
        check_422(&v);
    }
    let (status, v) = d.post(&bank_path("b", "/memories"), json!({"items": "nope"})).await;
    assert_eq!(status, 422, "{v}");
    let (status, v) = d.post(&bank_path("b", "/memories/recall"), json!({"query": "  "})).await;
    assert_eq!(status, 422, "{v}");
    check_422(&v);
    let (status, v) = d.post(&bank_path("b", "/memories/recall"), json!({"query": "x", "types": ["dream"]})).await;
    assert_eq!(status, 422, "{v}");
    // A huge bad value: still both shapes (the body was empty past 64 KiB), its echo cut short.
    for body in
        [json!({"query": "x", "budget": "x".repeat(60_000)}), json!({"query": "x", "tags": "y".repeat(100_000)})]
    {
        let (status, v) = d.post(&bank_path("b", "/memories/recall"), body).await;
        assert_eq!(status, 422, "{v}");
        check_422(&v);
        assert!(v.to_string().len() < 5_000, "{} bytes", v.to_string().len());
    }
    // As Hindsight: no items is not an error, and stores nothing.
    let (status, v) = d.post(&bank_path("b", "/memories"), json!({"items": []})).await;
    assert_eq!((status, v["items_count"].clone()), (200, json!(0)), "{v}");
    // The local store has no LLM to reflect with: an error Hindsight clients handle.
    let (status, v) = d.post(&bank_path("b", "/reflect"), json!({"query": "what do we know?"})).await;
    assert_eq!(status, 422, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("LLM"), "{v}");
    // What mneme would not pass on is refused, not dropped (review59 #2): a structured answer, the
    // facts behind it, a filter given both ways.
    for (body, named) in [
        (json!({"query": "q", "response_schema": {"type": "object"}}), "response_schema"),
        (json!({"query": "q", "include": {"facts": {}}}), "include"),
        (json!({"query": "q", "tags": ["a"], "tag_groups": [{"tags": ["b"]}]}), "mutually exclusive"),
    ] {
        let (status, v) = d.post(&bank_path("b", "/reflect"), body.clone()).await;
        assert!((400..500).contains(&status), "{v}");
        assert!(v.to_string().contains(named), "{named}: {v}");
        if named != "mutually exclusive" {
            continue;
        }
        // A recall too, as the server answers (review59 #7).
        let (status, v) = d.post(&bank_path("b", "/memories/recall"), body).await;
        assert!((400..500).contains(&status), "{v}");
        assert!(v.to_string().contains(named), "{named}: {v}");
    }
    // A PATCH changes a bank there is: one never made is a 404, as on the server, and is not
    // made (review59 #4); a PUT makes it, and then a PATCH changes it.
    let (status, v) = d.req(reqwest::Method::PATCH, &bank_path("never-made", ""), Some(json!({"name": "x"}))).await;
    assert_eq!(status, 404, "{v}");
    let (_, v) = d.get("/hindsight/v1/default/banks").await;
    assert!(!v.to_string().contains("never-made"), "{v}");
    // One a client has just written to, its retain still queued, is there (review61 #4).
    let (status, v) =
        d.post(&bank_path("written", "/memories"), json!({"items": [{"content": "x"}], "async": true})).await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = d.req(reqwest::Method::PATCH, &bank_path("written", ""), Some(json!({"name": "w"}))).await;
    assert_eq!(status, 200, "{v}");
    // Another bank's queued retain, whose queue id starts as this bank's would, does not make
    // it one (review62 #5).
    let item = json!({"items": [{"content": "y", "metadata": {"session_id": "by:s"}}], "async": true});
    let (status, v) = d.post(&bank_path("near:by", "/memories"), item).await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = d.req(reqwest::Method::PATCH, &bank_path("near", ""), Some(json!({"name": "n"}))).await;
    assert_eq!(status, 404, "{v}");
    let (status, v) = d.req(reqwest::Method::PUT, &bank_path("made", ""), Some(json!({"name": "x"}))).await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = d.req(reqwest::Method::PATCH, &bank_path("made", ""), Some(json!({"name": "y"}))).await;
    assert_eq!((status, v["name"].clone()), (200, json!("y")), "{v}");
    // A route mneme does not serve.
    let (status, v) = d.get(&bank_path("b", "/graph")).await;
    assert_eq!(status, 404, "{v}");
    assert!(v["detail"].as_str().unwrap().starts_with("Not Found"), "{v}");

    // No token, a wrong token, a foreign Origin: refused like every route.
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let url = d.url(&bank_path("b", "/memories/recall"));
    let r = http.post(&url).json(&json!({"query": "x"})).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let v: Value = r.json().await.unwrap();
    assert!(v["detail"].is_string() && v["error"]["code"] == "unauthorized", "both shapes before the routes ran: {v}");
    let r = http.post(&url).bearer_auth("wrong").json(&json!({"query": "x"})).send().await.unwrap();
    assert_eq!(r.status(), 401);
    // A method the route does not take.
    let (status, v) = d.req(reqwest::Method::DELETE, &bank_path("b", "/memories/recall"), None).await;
    assert_eq!(status, 405, "{v}");
    assert!(v["detail"].is_string() && v["error"]["code"] == "method_not_allowed", "{v}");
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

/// A mental model's content is what recall answers: a turn (or paragraph) two results hold is
/// shown once there too (review48 #1: a forked conversation's copied turns came twice).
#[tokio::test]
async fn a_mental_models_content_shows_a_paragraph_once() {
    let d = Daemon::start(LEXICAL);
    let rule = "The user prefers tabs over spaces in every Rust file, and rustfmt runs with hard_tabs = true.";
    let items = json!({"items": [
        {"content": format!("{rule}\n\nThe user also prefers short commit subjects."), "document_id": "fork"},
        {"content": rule, "document_id": "original"}
    ]});
    let (status, v) = d.post(&bank_path("prefs", "/memories"), items).await;
    assert_eq!(status, 200, "{v}");
    let model = json!({"id": "style", "name": "Style", "source_query": "what does the user prefer in Rust files?"});
    let (status, v) = d.post(&bank_path("prefs", "/mental-models"), model).await;
    assert_eq!(status, 200, "{v}");
    let mut content = String::new();
    for _ in 0..100 {
        let (_, v) = d.get(&bank_path("prefs", "/mental-models/style?detail=content")).await;
        if let Some(c) = v["content"].as_str().filter(|c| !c.is_empty()) {
            content = c.to_owned();
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(content.matches(rule).count(), 1, "{content}");
    assert!(content.contains("short commit subjects"), "{content}");
}

#[tokio::test]
async fn banks_and_mental_models_are_kept_and_computed_from_recall() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start_in(dir, LEXICAL);
    let (status, v) = d.req(reqwest::Method::PUT, &bank_path("omp", ""), Some(json!([]))).await;
    assert_eq!(status, 422, "an array is not a bank's fields: {v}");
    let (status, v) =
        d.req(reqwest::Method::PUT, &bank_path("omp", ""), Some(json!({"reflect_mission": "Help with Rust"}))).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v,
        json!({"bank_id": "omp", "name": "omp", "disposition": {"skepticism": 3, "literalism": 3, "empathy": 3},
               "mission": "Help with Rust", "background": "Help with Rust"})
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
    // An id a URL reads as a step of its path could never be read or deleted.
    for id in [".", ".."] {
        let bad = json!({"id": id, "name": "Dots", "source_query": "anything?"});
        let (status, v) = d.post(&bank_path("omp", "/mental-models"), bad).await;
        assert_eq!(status, 422, "{v}");
    }
    // Hindsight's bounds on the content's size: outside them, a clear 422 and nothing stored.
    for n in [0, 255, 8193] {
        let bad = json!({"id": format!("bad-{n}"), "name": "Bad", "source_query": "anything?", "max_tokens": n});
        let (status, v) = d.post(&bank_path("omp", "/mental-models"), bad).await;
        assert_eq!(status, 422, "{v}");
        assert!(v["error"]["message"].as_str().unwrap().contains("max_tokens must be between 256 and 8192"), "{v}");
        let (status, _) = d.get(&bank_path("omp", &format!("/mental-models/bad-{n}"))).await;
        assert_eq!(status, 404);
    }
    let (status, v) = d
        .req(
            reqwest::Method::PATCH,
            &bank_path("omp", "/mental-models/user-preferences"),
            Some(json!({"max_tokens": 0})),
        )
        .await;
    assert_eq!(status, 422, "{v}");
    // A blank or all-private query is refused as on create, and nothing changes (a name may be
    // empty, as Hindsight takes it).
    for patch in [json!({"source_query": ""}), json!({"source_query": "<private>x</private>"})] {
        let path = bank_path("omp", "/mental-models/user-preferences");
        let (status, v) = d.req(reqwest::Method::PATCH, &path, Some(patch.clone())).await;
        assert_eq!(status, 422, "{patch}: {v}");
    }
    let (_, v) = d.get(&bank_path("omp", "/mental-models/user-preferences?detail=full")).await;
    assert_eq!(v["max_tokens"], 500, "{v}");
    assert_eq!((&v["source_query"], &v["name"]), (&json!("what does the user prefer?"), &json!("User preferences")));

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
    assert_eq!((&v["total"], &v["limit"], &v["offset"]), (&json!(1), &json!(100), &json!(0)), "{v}");
    let (_, v) = d.get("/hindsight/v1/default/banks?q=OM&limit=5").await;
    assert_eq!((v["banks"].as_array().unwrap().len(), &v["total"], &v["limit"]), (1, &json!(1), &json!(5)), "{v}");
    let (_, v) = d.get("/hindsight/v1/default/banks?q=nothing-like-it").await;
    assert_eq!((v["banks"].as_array().unwrap().len(), &v["total"]), (0, &json!(0)), "{v}");
    let (status, v) = d.get("/hindsight/v1/default/banks?limit=-1").await;
    assert_eq!(status, 422, "{v}");

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

    // A forgotten memory leaves the model at once, and a clear leaves it empty: a model never
    // goes on serving what the user took out.
    let (_, v) = d.get("/v1/memories?bank=omp").await;
    let id = v["memories"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["content"].as_str().unwrap().contains("commit"))
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .expect("the memory is listed");
    let (status, v) = d.req(reqwest::Method::DELETE, &format!("/v1/memories/{id}?bank=omp"), None).await;
    assert_eq!(status, 200, "{v}");
    let (_, v) = d.get(&bank_path("omp", "/mental-models/user-preferences?detail=content")).await;
    let content = v["content"].as_str().unwrap();
    assert!(!content.contains("commit messages") && content.contains("tabs"), "{v}");
    let (status, v) = d.post("/v1/clear", json!({"all": true})).await;
    assert_eq!(status, 200, "{v}");
    let (_, v) = d.get(&bank_path("omp", "/mental-models/user-preferences?detail=content")).await;
    assert_eq!(v["content"], "", "{v}");

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
    let fields = [
        "content", "context", "metadata", "tag", "document", "doctag", "model", "trigger", "between", "across",
        "docless",
    ];
    let p = |field: &str| format!("<private>{}</private>", secret(field));
    let (status, v) = d
        .post(
            &bank_path("priv", "/memories"),
            json!({"items": [{"content": format!("visible fact {}", p("content")),
                              "context": format!("ctx {}", p("context")),
                              "metadata": {"session_id": "s", "note": p("metadata")},
                              "tags": ["project:x", p("tag")]}],
                   "document_tags": [p("doctag")], "async": false}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    // A document id is refused, not cleaned: two ids cleaned alike would replace each other.
    let with_id = json!({"items": [{"content": "another fact", "document_id": format!("doc-{}", p("document"))}]});
    let (status, v) = d.post(&bank_path("priv", "/memories"), with_id).await;
    assert_eq!(status, 422, "{v}");
    assert!(!v.to_string().contains(&secret("document")), "{v}");
    // The items of one document are read in order: a span one opens and a later one closes
    // hides the items between; an item of no document stands alone.
    let items = json!({"items": [{"content": "first item <private> opens", "document_id": "t"},
                                 {"content": "a fact of its own"},
                                 {"content": secret("between"), "document_id": " t ", "update_mode": "append"},
                                 {"content": "closes </private> the last item", "document_id": "t", "update_mode": "append"}],
                       "async": false});
    let (status, v) = d.post(&bank_path("priv", "/memories"), items).await;
    assert_eq!((status, v["items_count"].clone()), (200, json!(3)), "{v}");
    // An append goes on inside the spans the document's version before left open, request after
    // request; a replace starts outside them.
    for (content, mode) in [
        ("deploy notes <private> the staging password is".to_owned(), None),
        (secret("across"), Some("append")),
        ("closes </private> rotated monthly".to_owned(), Some("append")),
        ("after the close".to_owned(), Some("append")),
    ] {
        let item = json!({"content": content, "document_id": "u", "update_mode": mode});
        let (status, v) = d.post(&bank_path("priv", "/memories"), json!({"items": [item], "async": false})).await;
        assert_eq!(status, 200, "{v}");
    }
    let (_, v) = d.post(&bank_path("priv", "/memories/recall"), json!({"query": "after the close"})).await;
    assert!(v.to_string().contains("after the close"), "an append after the close is kept: {v}");
    // The items without a document are read in order too: a span split across two hides the
    // one between.
    let items = json!({"items": [{"content": "the prod key: <private>"}, {"content": secret("docless")},
                                 {"content": "</private> rotate monthly"}], "async": false});
    let (status, v) = d.post(&bank_path("priv", "/memories"), items).await;
    assert_eq!((status, v["items_count"].clone()), (200, json!(2)), "{v}");
    let (status, v) = d
        .post(
            &bank_path("priv", "/mental-models"),
            json!({"name": format!("m {}", p("model")), "source_query": "visible fact",
                   "trigger": {"refresh_cron": p("trigger"), "full_refresh_cron": p("trigger"),
                               "nested": {p("trigger"): {p("trigger"): "v"}}}}),
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

/// A document's spans are kept with memory off too: an append made after a switch to a store
/// goes on inside the span a retain made while off opened (it was stored in the clear).
#[tokio::test]
async fn a_span_opened_with_the_backend_off_hides_the_appends_after_a_switch() {
    let d = Daemon::start("[memory]\nbackend = \"off\"\n[local]\nembedder = \"off\"\n");
    let retain = |content: &str, mode: Option<&str>| json!({"items": [{"content": content, "document_id": "d", "update_mode": mode}], "async": false});
    let (status, v) = d.post(&bank_path("offspan", "/memories"), retain("Intro. <private> OFFCANARY1", None)).await;
    assert_eq!((status, v["items_count"].clone()), (200, json!(0)), "{v}");
    let config = std::fs::read_to_string(d.config_path()).unwrap().replace("backend = \"off\"", "backend = \"local\"");
    std::fs::write(d.config_path(), config).unwrap();
    let (status, v) = d.req(reqwest::Method::POST, "/v1/reload", None).await;
    assert_eq!(status, 200, "{v}");
    let (_, v) = d.post(&bank_path("offspan", "/memories"), retain("OFFCANARY2 goes on", Some("append"))).await;
    assert_eq!(v["items_count"], 0, "inside the span: {v}");
    let (_, v) =
        d.post(&bank_path("offspan", "/memories"), retain("OFFCANARY3 </private> grebe tail", Some("append"))).await;
    assert_eq!(v["items_count"], 1, "{v}");
    let (_, v) = d.post(&bank_path("offspan", "/memories/recall"), json!({"query": "grebe tail"})).await;
    let texts = v["results"].to_string();
    assert!(texts.contains("grebe tail") && !texts.contains("OFFCANARY"), "{v}");
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

/// An asynchronous retain with the client's `operation_id` is stored once, however often it is
/// sent (a retry after a lost answer), across a restart too; the id on another bank is a 409.
/// Content blocks are joined text, an image is refused whole, and `unset` is a timestamp.
#[tokio::test]
async fn a_retain_with_a_client_operation_id_is_stored_once_and_blocks_are_text() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start_in(dir, LEXICAL);
    let id = "8F14E45F-CEEA-467A-9575-4E1A8B1C2D3E";
    let first =
        json!({"items": [{"content": "The release train leaves on Thursdays."}], "async": true, "operation_id": id});
    let (status, v) = d.post(&bank_path("ops", "/memories"), first.clone()).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["operation_id"], id.to_ascii_lowercase(), "the id is the client's, as Hindsight writes it: {v}");
    d.kill();
    let d = Daemon::start_in(d.into_dir(), "");
    let mut resent = first.clone();
    resent["operation_id"] = json!(format!("{{{id}}}"));
    for body in [first, resent] {
        let (status, v) = d.post(&bank_path("ops", "/memories"), body).await;
        assert_eq!(
            (status, &v["operation_id"], &v["items_count"]),
            (200, &json!(id.to_ascii_lowercase()), &json!(1)),
            "{v}"
        );
    }
    // The same id with other items is answered as the first, as the Hindsight server answers
    // (checked against it in `answers_match_the_real_hindsight_server_field_by_field`).
    let other = json!({"items": [{"content": "A retry that carries other text."}], "async": true, "operation_id": id});
    let (status, v) = d.post(&bank_path("ops", "/memories"), other).await;
    assert_eq!((status, &v["items_count"]), (200, &json!(1)), "{v}");
    let (status, v) = d
        .post(&bank_path("other", "/memories"), json!({"items": [{"content": "x"}], "async": true, "operation_id": id}))
        .await;
    assert_eq!(status, 409, "{v}");
    assert!(v["detail"].as_str().unwrap_or_default().contains("already in use"), "{v}");
    let (status, v) =
        d.post(&bank_path("ops", "/memories"), json!({"items": [{"content": "x"}], "operation_id": "nope"})).await;
    assert_eq!(status, 422, "{v}");

    let blocks = json!({"items": [{"content": [{"type": "text", "text": "Click Deploy, "}, {"type": "text", "text": "then wait for green."}],
                                   "timestamp": "unset"}]});
    let (status, v) = d.post(&bank_path("ops", "/memories"), blocks).await;
    assert_eq!(status, 200, "{v}");
    let image = json!({"items": [{"content": [{"type": "text", "text": "The button:"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}]});
    let (status, v) = d.post(&bank_path("ops", "/memories"), image).await;
    assert_eq!(status, 400, "{v}");
    assert!(v["detail"].as_str().unwrap_or_default().contains("\"image\""), "{v}");
    for bad in [
        json!([]),
        json!([{"type": "video", "text": "x"}]),
        json!([{"type": "text"}]),
        json!({"type": "text", "text": "x"}),
    ] {
        let (status, v) = d.post(&bank_path("ops", "/memories"), json!({"items": [{"content": bad}]})).await;
        assert_eq!(status, 422, "{bad}: {v}");
    }

    d.post("/v1/flush", json!({})).await;
    let (_, v) = d.get("/v1/export?bank=ops").await;
    let mut kept: Vec<&str> =
        v["memories"].as_array().unwrap().iter().map(|m| m["content"].as_str().unwrap()).collect();
    kept.sort();
    assert_eq!(kept, ["Click Deploy, then wait for green.", "The release train leaves on Thursdays."]);
    let (_, v) = d.get("/v1/export?bank=other").await;
    assert_eq!(v["memories"], json!([]), "a refused id stores nothing: {v}");
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

/// The shape of `v`: where `peer` and `ours` differ field by field (a null matches anything: mneme
/// leaves null what it does not compute, e.g. entities), listed as `path: what`.
fn shape_diff(path: &str, peer: &Value, ours: &Value, out: &mut Vec<String>) {
    match (peer, ours) {
        (Value::Null, _) | (_, Value::Null) => {}
        // A memory's metadata is data (whatever was retained with it), not shape.
        (Value::Object(_), Value::Object(_)) if path.ends_with(".metadata") => {}
        (Value::Object(p), Value::Object(o)) => {
            for k in p.keys() {
                if !o.contains_key(k) {
                    out.push(format!("{path}.{k}: missing in mneme's answer"));
                }
            }
            for k in o.keys() {
                // mneme's own error object rides beside Hindsight's `detail`.
                let our_error = k == "error" && p.contains_key("detail");
                if !p.contains_key(k) && !our_error {
                    out.push(format!("{path}.{k}: not in Hindsight's answer"));
                }
            }
            for (k, pv) in p {
                if let Some(ov) = o.get(k) {
                    shape_diff(&format!("{path}.{k}"), pv, ov, out);
                }
            }
        }
        (Value::Array(p), Value::Array(o)) => {
            if let (Some(pf), Some(of)) = (p.first(), o.first()) {
                shape_diff(&format!("{path}[0]"), pf, of, out);
            }
        }
        (p, o) => {
            let kind = |v: &Value| match v {
                Value::Bool(_) => "bool",
                Value::Number(_) => "number",
                Value::String(_) => "string",
                _ => "other",
            };
            if kind(p) != kind(o) {
                out.push(format!("{path}: {} in Hindsight's answer, {} in mneme's", kind(p), kind(o)));
            }
        }
    }
}

/// A compat retain with `update_mode = "append"` adds to its document; without it, it replaces.
#[tokio::test]
async fn an_append_adds_to_its_document_and_a_plain_retain_replaces_it() {
    let d = Daemon::start(LEXICAL);
    let retain = |text: &str, mode: Option<&str>| {
        let mut item = json!({"content": text, "document_id": "notes"});
        if let Some(mode) = mode {
            item["update_mode"] = json!(mode);
        }
        json!({"items": [item]})
    };
    let texts = |v: &Value| -> Vec<String> {
        let mut t: Vec<String> =
            v["memories"].as_array().unwrap().iter().map(|m| m["content"].as_str().unwrap().to_owned()).collect();
        t.sort();
        t
    };
    for (text, mode) in [("walrus deploys on Fridays", None), ("narwhal tests run on bun", Some("append"))] {
        let (status, v) = d.post(&bank_path("app", "/memories"), retain(text, mode)).await;
        assert_eq!(status, 200, "{v}");
    }
    let (_, v) = d.get("/v1/export?bank=app").await;
    assert_eq!(texts(&v), ["narwhal tests run on bun", "walrus deploys on Fridays"], "appended: {v}");
    let (_, v) = d.post(&bank_path("app", "/memories"), retain("beluga warms the cache", Some("replace"))).await;
    assert_eq!(v["items_count"], 1, "{v}");
    let (_, v) = d.get("/v1/export?bank=app").await;
    assert_eq!(texts(&v), ["beluga warms the cache"], "replaced: {v}");
    // An append names its document; a mode Hindsight does not know is refused.
    let (status, v) =
        d.post(&bank_path("app", "/memories"), json!({"items": [{"content": "x", "update_mode": "append"}]})).await;
    assert_eq!(status, 400, "{v}");
    assert!(v["detail"].as_str().unwrap_or_default().contains("document_id"), "{v}");
    let (status, v) = d.post(&bank_path("app", "/memories"), retain("x", Some("merge"))).await;
    assert_eq!(status, 422, "{v}");
    let (_, v) = d.get("/v1/export?bank=app").await;
    assert_eq!(texts(&v), ["beluga warms the cache"], "nothing stored by the refused requests");
    // One request's items of a document are read as the server reads them: by the first that
    // names a mode (an append then an item of no mode, or the other way round, append; it
    // replaced the document's earlier version).
    let item = |text: &str, mode: Option<&str>| retain(text, mode)["items"][0].clone();
    for (n, modes) in [[Some("append"), None], [None, Some("append")]].into_iter().enumerate() {
        let items =
            json!({"items": [item(&format!("orca {n} one"), modes[0]), item(&format!("orca {n} two"), modes[1])]});
        let (status, v) = d.post(&bank_path("app", "/memories"), items).await;
        assert_eq!(status, 200, "{v}");
    }
    let (_, v) = d.get("/v1/export?bank=app").await;
    let kept = texts(&v).join(" | ");
    for text in ["beluga warms the cache", "orca 0 one", "orca 0 two", "orca 1 one", "orca 1 two"] {
        assert!(kept.contains(text), "{text}: {kept}");
    }
    let items = json!({"items": [item("seal replaces", Some("replace")), item("seal appends", Some("append"))]});
    d.post(&bank_path("app", "/memories"), items).await;
    let (_, v) = d.get("/v1/export?bank=app").await;
    assert_eq!(texts(&v).join(" | ").matches("orca").count(), 0, "the first named mode, replace: {v}");
}

/// The same requests against the real Hindsight 1.1.0 peer and against mneme: the same status
/// codes and answers of the same shape, field by field. (Reflect is left out: the local store
/// has no LLM, and says so with a 422.)
#[tokio::test]
async fn answers_match_the_real_hindsight_server_field_by_field() {
    let Some(peer) = common::hindsight_peer() else { return };
    let d = Daemon::start(LEXICAL);
    let bank = common::fresh("contract-api");
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    // A fresh id each run: the peer keeps it, and refuses it on another bank.
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let operation = format!("{:08x}-0000-4000-8000-{:012x}", std::process::id(), nanos & 0xffff_ffff_ffff);
    let model = json!({"id": "prefs", "name": "Preferences", "source_query": "what does the user prefer?",
                       "tags": ["project:x"], "max_tokens": 500, "trigger": {"refresh_after_consolidation": true}});
    let steps: Vec<(&str, &str, String, Option<Value>)> = vec![
        (
            "put bank",
            "PUT",
            String::new(),
            Some(json!({"reflect_mission": "Help with Rust", "retain_mission": "Keep decisions"})),
        ),
        ("no models", "GET", "/mental-models?detail=metadata".into(), None),
        ("create model", "POST", "/mental-models".into(), Some(model.clone())),
        ("create it again", "POST", "/mental-models".into(), Some(model)),
        (
            "async retain",
            "POST",
            "/memories".into(),
            Some(json!({"items": [{"content": "The user prefers tabs over spaces.", "tags": ["project:x"],
                        "metadata": {"session_id": "s1"}, "timestamp": "2026-01-02T03:04:05+01:00"}], "async": true})),
        ),
        (
            "sync retain",
            "POST",
            "/memories".into(),
            Some(json!({"items": [{"content": "The user prefers short commit messages.", "context": "chat",
                        "document_id": "doc-1", "tags": ["project:x"]}], "document_tags": ["team:core"]})),
        ),
        (
            "append",
            "POST",
            "/memories".into(),
            Some(json!({"items": [{"content": "The user prefers squash merges.", "document_id": "doc-1",
                        "update_mode": "append"}]})),
        ),
        (
            "append without a document",
            "POST",
            "/memories".into(),
            Some(json!({"items": [{"content": "x", "update_mode": "append"}]})),
        ),
        (
            "async retain with the client's id",
            "POST",
            "/memories".into(),
            Some(json!({"items": [{"content": "The user prefers rebase."}], "async": true, "operation_id": operation})),
        ),
        (
            "the same id again",
            "POST",
            "/memories".into(),
            Some(json!({"items": [{"content": "Other text."}], "async": true, "operation_id": operation})),
        ),
        ("not a uuid", "POST", "/memories".into(), Some(json!({"items": [{"content": "x"}], "operation_id": "nope"}))),
        (
            "text blocks, undated",
            "POST",
            "/memories".into(),
            Some(
                json!({"items": [{"content": [{"type": "text", "text": "The user prefers "}, {"type": "text", "text": "dark mode."}],
                        "timestamp": "unset"}]}),
            ),
        ),
        ("no blocks", "POST", "/memories".into(), Some(json!({"items": [{"content": []}]}))),
        ("no items", "POST", "/memories".into(), Some(json!({"items": []}))),
        ("blank item", "POST", "/memories".into(), Some(json!({"items": [{"content": "  "}]}))),
        (
            "bad timestamp",
            "POST",
            "/memories".into(),
            Some(json!({"items": [{"content": "x", "timestamp": "yesterday"}]})),
        ),
        (
            "recall",
            "POST",
            "/memories/recall".into(),
            Some(json!({"query": "what does the user prefer", "types": ["world", "experience"], "max_tokens": 1024,
                        "budget": "mid", "tags": ["project:x"], "tags_match": "any"})),
        ),
        ("blank recall", "POST", "/memories/recall".into(), Some(json!({"query": ""}))),
        (
            "recall, exact tags",
            "POST",
            "/memories/recall".into(),
            Some(json!({"query": "what does the user prefer", "tags": ["project:x"], "tags_match": "exact"})),
        ),
        ("recall, types empty", "POST", "/memories/recall".into(), Some(json!({"query": "prefer", "types": []}))),
        ("recall, no room", "POST", "/memories/recall".into(), Some(json!({"query": "prefer", "max_tokens": 0}))),
        ("patch mission", "PATCH", String::new(), Some(json!({"mission": "Keep it short"}))),
        // Both names given: the server keeps `mission` (review111 #1).
        (
            "patch mission and background",
            "PATCH",
            String::new(),
            Some(json!({"mission": "Mission wins", "background": "Background loses"})),
        ),
        (
            "flat disposition",
            "PATCH",
            String::new(),
            Some(json!({"disposition_skepticism": 5, "disposition_empathy": 1})),
        ),
        (
            "model without a name",
            "POST",
            "/mental-models".into(),
            Some(json!({"id": "unnamed", "name": "", "source_query": "what does the user prefer?"})),
        ),
        ("models with content", "GET", "/mental-models?detail=content".into(), None),
        ("models", "GET", "/mental-models".into(), None),
        ("one model", "GET", "/mental-models/prefs".into(), None),
        ("update model", "PATCH", "/mental-models/prefs".into(), Some(json!({"name": "User preferences"}))),
        ("refresh model", "POST", "/mental-models/prefs/refresh".into(), Some(json!({}))),
        ("history", "GET", "/mental-models/prefs/history".into(), None),
        ("delete model", "DELETE", "/mental-models/prefs".into(), None),
        ("deleted model", "GET", "/mental-models/prefs".into(), None),
        ("delete it again", "DELETE", "/mental-models/prefs".into(), None),
        ("unknown route", "GET", "/no-such-thing".into(), None),
    ];
    let mut diffs = Vec::new();
    for (name, method, rest, body) in steps {
        let method: reqwest::Method = method.parse().unwrap();
        let send = |url: String, token: Option<&str>| {
            let mut r = http.request(method.clone(), url);
            if let Some(t) = token {
                r = r.bearer_auth(t);
            }
            if let Some(b) = &body {
                r = r.json(b);
            }
            r.send()
        };
        let p = send(format!("{peer}/v1/default/banks/{bank}{rest}"), None).await.unwrap();
        let (p_status, p_body) = (p.status().as_u16(), p.json::<Value>().await.unwrap_or(Value::Null));
        let o = send(d.url(&bank_path(&bank, &rest)), Some(&d.token)).await.unwrap();
        let (o_status, o_body) = (o.status().as_u16(), o.json::<Value>().await.unwrap_or(Value::Null));
        println!("{name}: Hindsight {p_status}, mneme {o_status}");
        if p_status != o_status {
            diffs.push(format!("{name}: status {p_status} from Hindsight, {o_status} from mneme ({o_body})"));
            continue;
        }
        let mut found = Vec::new();
        // Nulls match anything inside an answer, not in place of one: no body, or not JSON.
        if o_body.is_null() && !p_body.is_null() {
            found.push("no JSON answer from mneme".to_owned());
        }
        shape_diff("", &p_body, &o_body, &mut found);
        diffs.extend(found.into_iter().map(|f| format!("{name}: {f}")));
        if name == "recall" {
            assert!(o_body["results"].as_array().is_some_and(|r| !r.is_empty()), "{o_body}");
            assert!(p_body["results"].as_array().is_some_and(|r| !r.is_empty()), "{p_body}");
        }
        if name.starts_with("recall, no") {
            assert_eq!((&p_body["results"], &o_body["results"]), (&json!([]), &json!([])), "{name}");
        }
        if name.starts_with("patch mission") {
            assert_eq!((&o_body["mission"], &o_body["background"]), (&p_body["mission"], &p_body["background"]));
        }
        if name == "flat disposition" {
            assert_eq!(o_body["disposition"], p_body["disposition"], "{o_body}");
            assert_eq!(o_body["disposition"]["skepticism"], 5, "{o_body}");
        }
    }
    // Bodies that are not JSON, or none.
    for raw in ["{\"query\":", ""] {
        let send = |url: String, token: Option<&str>| {
            let mut r = http.post(url).header("content-type", "application/json").body(raw);
            if let Some(t) = token {
                r = r.bearer_auth(t);
            }
            r.send()
        };
        let p = send(format!("{peer}/v1/default/banks/{bank}/memories/recall"), None).await.unwrap();
        let (p_status, p_body) = (p.status().as_u16(), p.json::<Value>().await.unwrap_or(Value::Null));
        let o = send(d.url(&bank_path(&bank, "/memories/recall")), Some(&d.token)).await.unwrap();
        let (o_status, o_body) = (o.status().as_u16(), o.json::<Value>().await.unwrap_or(Value::Null));
        println!("raw body {raw:?}: Hindsight {p_status} {p_body}, mneme {o_status}");
        if p_status != o_status || p_body["detail"].is_array() != o_body["detail"].is_array() {
            diffs.push(format!("raw body {raw:?}: Hindsight {p_status} {p_body}, mneme {o_status} {o_body}"));
        }
    }
    assert!(diffs.is_empty(), "mneme's Hindsight API differs from the server's:\n{}", diffs.join("\n"));
}

/// With `memory.backend = "hindsight"`, mneme is a durable buffer in front of the real server:
/// what a Hindsight client retains through mneme reaches the server, and recall comes from it.
#[tokio::test]
async fn with_the_hindsight_backend_retains_go_through_the_queue_to_the_server() {
    let Some(peer) = common::hindsight_peer() else { return };
    let bank = common::fresh("compat-fwd");
    common::chunk_bank(&peer, &bank).await;
    let d = Daemon::start(&format!("[memory]\nbackend = \"hindsight\"\n[hindsight]\napi_url = \"{peer}\"\n"));
    let (status, v) = d
        .post(
            &bank_path(&bank, "/memories"),
            json!({"items": [{"content": "Forwarded: the release train leaves on Thursdays.", "tags": ["project:fwd"],
                              "metadata": {"session_id": "omp-9"}}], "async": true}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    d.post("/v1/flush", json!({})).await;
    let texts = common::wait_bank(&peer, &bank, 1).await;
    assert_eq!(texts, vec!["Forwarded: the release train leaves on Thursdays.".to_owned()]);
    let (status, v) = d
        .post(
            &bank_path(&bank, "/memories/recall"),
            json!({"query": "when does the release train leave?", "tags": ["project:fwd"]}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert!(v["results"][0]["text"].as_str().unwrap_or_default().contains("Thursdays"), "{v}");
    assert!(v["results"][0]["id"].as_str().is_some_and(|s| !s.is_empty()), "{v}");
    // The server has an LLM: reflect is answered by it.
    let (status, v) = d.post(&bank_path(&bank, "/reflect"), json!({"query": "when do we release?"})).await;
    assert_eq!(status, 200, "{v}");
    assert!(v["text"].as_str().is_some_and(|t| !t.is_empty()), "{v}");
    // A profile set through mneme steers the server's reflect: it reaches the server (it was
    // kept in mneme alone, review59 #9).
    let profile =
        json!({"mission": "Always answer in French", "disposition": {"skepticism": 5, "literalism": 1, "empathy": 2}});
    let (status, v) = d.req(reqwest::Method::PUT, &bank_path(&bank, ""), Some(profile)).await;
    assert_eq!(status, 200, "{v}");
    let (status, v) =
        d.req(reqwest::Method::PATCH, &bank_path(&bank, ""), Some(json!({"disposition_empathy": 4}))).await;
    assert_eq!(status, 200, "{v}");
    let config: Value =
        reqwest::get(format!("{peer}/v1/default/banks/{bank}/config")).await.unwrap().json().await.unwrap();
    let config = &config["config"];
    assert_eq!(config["reflect_mission"], "Always answer in French", "{config}");
    assert_eq!(
        [&config["disposition_skepticism"], &config["disposition_literalism"], &config["disposition_empathy"]],
        [&json!(5), &json!(1), &json!(4)],
        "{config}"
    );
    // Two items of one document: the server refuses them in one asynchronous retain, so they go
    // in two, the second an append, and form the document (they were dead-lettered with a 400).
    let items = json!({"items": [
        {"content": "Runbook step one: drain the walrus queue.", "document_id": "runbook"},
        {"content": "Runbook step two: restart the narwhal workers.", "document_id": "runbook"},
    ], "async": true});
    let (status, v) = d.post(&bank_path(&bank, "/memories"), items).await;
    assert_eq!(status, 200, "{v}");
    let (_, v) = d.post("/v1/flush", json!({})).await;
    assert_eq!(v, json!({"delivered": 2, "failed": 0}));
    let text = common::wait_for_document(&peer, &bank, "runbook", &["walrus", "narwhal"]).await;
    assert!(text.find("walrus") < text.find("narwhal"), "{text:?}");
    let (_, v) = d.get("/v1/queue").await;
    assert_eq!(v["totals"]["dead"], 0, "{v}");
}

/// What a client retained asynchronously is recalled at once: the bank's queued retains are
/// delivered first, as a session's recall delivers its own (it took the queue's 5 s interval;
/// the server takes well under one: review59 #3).
#[tokio::test]
async fn an_asynchronous_retain_is_recalled_at_once() {
    let d = Daemon::start("[local]\nembedder = \"off\"\n");
    for (bank, session) in [("quick", None), ("quick", Some("omp-1"))] {
        let mut item = json!({"content": format!("the zanzibar marker of {session:?} is teal")});
        if let Some(s) = session {
            item["metadata"] = json!({"session_id": s});
        }
        let (status, v) = d.post(&bank_path(bank, "/memories"), json!({"items": [item], "async": true})).await;
        assert_eq!(status, 200, "{v}");
        let (status, v) = d.post(&bank_path(bank, "/memories/recall"), json!({"query": "zanzibar marker"})).await;
        assert_eq!(status, 200, "{v}");
        let wanted = format!("{session:?}");
        assert!(v["results"].as_array().unwrap().iter().any(|r| r["text"].as_str().unwrap().contains(&wanted)), "{v}");
    }
}

#[tokio::test]
async fn the_mental_model_list_filters_by_tags_and_pages() {
    let d = Daemon::start("");
    for (id, tags) in [("a", json!(["t1"])), ("b", json!(["t1", "t2"])), ("c", json!(["t2"])), ("d", json!([]))] {
        let model = json!({"id": id, "name": format!("model {id}"), "source_query": "anything?", "tags": tags});
        let (status, v) = d.post(&bank_path("hb", "/mental-models"), model).await;
        assert_eq!(status, 200, "{v}");
    }
    let ids = |v: &Value| -> Vec<String> {
        v["items"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap().to_owned()).collect()
    };
    let list = |query: &str| {
        let path = bank_path("hb", &format!("/mental-models{query}"));
        let d = &d;
        async move { d.get(&path).await }
    };
    let (status, v) = list("").await;
    assert_eq!(
        (status, ids(&v), &v["total"], &v["limit"], &v["offset"]),
        (200, vec!["a".into(), "b".into(), "c".into(), "d".into()], &json!(4), &json!(100), &json!(0))
    );
    let (_, v) = list("?limit=1&offset=1").await;
    assert_eq!(
        (ids(&v), &v["total"], &v["limit"], &v["offset"]),
        (vec!["b".to_owned()], &json!(4), &json!(1), &json!(1))
    );
    let (_, v) = list("?offset=10").await;
    assert_eq!((ids(&v), &v["total"]), (Vec::<String>::new(), &json!(4)));
    let (_, v) = list("?tags=t1").await;
    assert_eq!(ids(&v), ["a", "b"]);
    let (_, v) = list("?tags=t1&tags=t2").await;
    assert_eq!(ids(&v), ["a", "b", "c"]);
    let (_, v) = list("?tags=t1&tags=t2&tags_match=all").await;
    assert_eq!(ids(&v), ["b"]);
    let (_, v) = list("?tags=t1&tags_match=exact").await;
    assert_eq!((ids(&v), &v["total"]), (vec!["a".to_owned()], &json!(1)));
    let (_, v) = list("?tags=nomatch").await;
    assert_eq!((ids(&v), &v["total"]), (Vec::<String>::new(), &json!(0)));
    for bad in ["limit=abc", "limit=0", "limit=1001", "offset=-3", "tags_match=bogus", "detail=everything"] {
        let (status, v) = list(&format!("?{bad}")).await;
        let name = bad.split('=').next().unwrap();
        assert_eq!(status, 422, "{bad}: {v}");
        assert!(v["detail"].to_string().contains(name), "{bad}: {v}");
    }
}

/// A memory carries at most 100 tags, a mental model too: more is the client's error (150,000
/// held the daemon for minutes), said at once, and nothing is stored.
#[tokio::test]
async fn too_many_tags_are_refused() {
    let d = Daemon::start(LEXICAL);
    let tags: Vec<String> = (0..101).map(|i| format!("t{i}")).collect();
    let (status, v) =
        d.post(&bank_path("tagged", "/memories"), json!({"items": [{"content": "a fact", "tags": tags}]})).await;
    assert_eq!(status, 422, "as Hindsight answers a bad request: {v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("at most 100"), "{v}");
    let (status, v) = d
        .post(
            &bank_path("tagged", "/memories"),
            json!({"items": [{"content": "a fact", "tags": &tags[..60]}], "document_tags": &tags[60..]}),
        )
        .await;
    assert_eq!(status, 422, "document tags count too: {v}");
    let (status, v) = d
        .post(&bank_path("tagged", "/mental-models"), json!({"name": "m", "source_query": "facts", "tags": tags}))
        .await;
    assert_eq!(status, 422, "{v}");
    let memory = json!({"id": "m1", "bank": "tagged", "content": "a fact", "tags": tags,
        "created_at": "2026-01-01T00:00:00Z"});
    let (status, v) = d.post("/v1/import", json!({"memories": [memory]})).await;
    assert_eq!(status, 400, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("memories[0].tags"), "{v}");
    // 100 are fine.
    let (status, v) = d
        .post(&bank_path("tagged", "/memories"), json!({"items": [{"content": "a fact", "tags": &tags[..100]}]}))
        .await;
    assert_eq!(status, 200, "{v}");
    // A recall's tag groups filter every result as its tags do: bounded alike, leaves counted
    // wherever they are in the tree.
    let leaves: Vec<Value> = tags.iter().map(|t| json!({"tags": [t], "match": "any"})).collect();
    let recall_path = bank_path("tagged", "/memories/recall");
    let recall = |groups: Value| d.post(&recall_path, json!({"query": "fact", "tag_groups": groups}));
    let (status, v) = recall(json!([{"or": leaves}])).await;
    assert_eq!(status, 422, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("tag_groups name 101 tags"), "{v}");
    let (status, v) = recall(json!([{"or": &leaves[..100]}])).await;
    assert_eq!(status, 200, "{v}");
}

/// Ids a client chooses are stored as they are: a memory's or a document's id is bounded, and one
/// holding a `<private>` tag is refused by import as by the `/hindsight` API (import stored the
/// memories without their document and said nothing). An error quotes a long id cut.
#[tokio::test]
async fn long_and_private_ids_are_refused() {
    let d = Daemon::start(LEXICAL);
    let long = "d".repeat(1025);
    let memory = |id: &str, document: &str| json!({"id": id, "bank": "b", "content": "a fact", "document_id": document, "created_at": "2026-01-01T00:00:00Z"});
    for (m, field) in [
        (memory(&long, "doc"), "memories[0].id is longer than 1024"),
        (memory("m1", &long), "memories[0].document_id is longer than 1024"),
        (memory("m1", "runbook<private>v2</private>"), "memories[0].document_id may not contain <private>"),
    ] {
        let (status, v) = d.post("/v1/import", json!({"memories": [m]})).await;
        assert_eq!(status, 400, "{v}");
        assert!(v["error"]["message"].as_str().unwrap().contains(field), "{v}");
    }
    let (status, v) = d.post("/v1/import", json!({"memories": [memory(&"i".repeat(1024), &"d".repeat(1024))]})).await;
    assert_eq!(status, 200, "at the bound: {v}");
    let (status, v) =
        d.post(&bank_path("b", "/memories"), json!({"items": [{"content": "a fact", "document_id": long}]})).await;
    assert_eq!(status, 422, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("longer than 1024"), "{v}");
    let (status, v) = d.get(&format!("/v1/memories/{}", "x".repeat(5000))).await;
    assert_eq!(status, 404, "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.len() < 400 && message.contains("(5000 characters)"), "{message}");
    // A bank id within a Hindsight server's 192 bytes, and not past them (acknowledged, it was
    // dead-lettered for good by the hindsight backend).
    let item = json!({"items": [{"content": "a fact"}]});
    assert_eq!(d.post(&bank_path(&"k".repeat(192), "/memories"), item.clone()).await.0, 200);
    let (status, v) = d.post(&bank_path(&"k".repeat(193), "/memories"), item).await;
    assert_eq!(status, 422, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("1 to 192 bytes"), "{v}");
    let (status, v) = d
        .post(
            "/v1/import",
            json!({"memories": [{"id": "m2", "bank": "k".repeat(193), "content": "x",
        "created_at": "2026-01-01T00:00:00Z"}]}),
        )
        .await;
    assert_eq!(status, 400, "{v}");
}

/// A Hindsight server whose recall takes `delay` (and answers nothing).
async fn slow_recall_server(delay: Duration) -> String {
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri| async move {
        if uri.path().ends_with("/recall") {
            tokio::time::sleep(delay).await;
        }
        axum::Json(if uri.path().ends_with("/recall") { json!({"results": []}) } else { json!({}) })
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// A mental model's recompute takes a recall's time; what happens to the model meanwhile wins:
/// a delete is not undone by a refresh finishing after it, and of two creates of one id, one is
/// a conflict (both got 200, the second replacing the first).
#[tokio::test]
async fn a_model_deleted_during_its_refresh_stays_deleted() {
    let url = slow_recall_server(Duration::from_millis(600)).await;
    let d = Daemon::start(&format!("[memory]\nbackend = \"hindsight\"\n[hindsight]\napi_url = \"{url}\"\n"));
    let model = json!({"id": "m1", "name": "Prefs", "source_query": "what does the user prefer?"});
    let (models, refresh, one) = (
        bank_path("b", "/mental-models"),
        bank_path("b", "/mental-models/m1/refresh"),
        bank_path("b", "/mental-models/m1"),
    );
    let (first, second) = tokio::join!(d.post(&models, model.clone()), async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        d.post(&models, model.clone()).await
    });
    let mut statuses = [first.0, second.0];
    statuses.sort();
    assert_eq!(statuses, [200, 409], "{first:?} {second:?}");
    let (refreshed, deleted) = tokio::join!(d.post(&refresh, json!({})), async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        d.req(reqwest::Method::DELETE, &one, None).await
    });
    assert_eq!(deleted.0, 200, "{deleted:?}");
    // 404 when a slow machine let the delete in before the refresh read the model.
    assert!([200, 404].contains(&refreshed.0), "{refreshed:?}");
    let (status, v) = d.get(&one).await;
    assert_eq!(status, 404, "brought back: {v}");
}

/// A model's refresh that recalled a memory before it was forgotten, and finished after the
/// forget's own recompute, is not saved over it: the forgotten text came back in the model (in
/// the spool and in every client's prompt) until it was next computed.
#[tokio::test]
async fn a_refresh_that_recalled_a_forgotten_memory_does_not_bring_it_back() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let recalls = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = recalls.clone();
    // The second recall (the refresh) is slow and finds the memory; every other finds nothing.
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
        let counted = counted.clone();
        async move {
            if !uri.path().ends_with("/recall") {
                return axum::Json(json!({"success": true}));
            }
            if counted.fetch_add(1, Ordering::SeqCst) + 1 != 2 {
                return axum::Json(json!({"results": []}));
            }
            tokio::time::sleep(Duration::from_millis(800)).await;
            axum::Json(json!({"results": [{"id": "x", "text": "the deploy key is hunter2", "type": "world"}]}))
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let d = Daemon::start(&format!("[memory]\nbackend = \"hindsight\"\n[hindsight]\napi_url = \"{url}\"\n"));
    let model = json!({"id": "m1", "name": "Keys", "source_query": "what is the deploy key?"});
    let (status, v) = d.post(&bank_path("b", "/mental-models"), model).await;
    assert_eq!(status, 200, "{v}");
    let refresh = bank_path("b", "/mental-models/m1/refresh");
    let (refreshed, forgot) = tokio::join!(d.post(&refresh, json!({})), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        d.req(reqwest::Method::DELETE, "/v1/documents/d?bank=b", None).await
    });
    assert_eq!(refreshed.0, 200, "{refreshed:?}");
    assert_eq!(forgot.0, 200, "{forgot:?}");
    assert!(recalls.load(Ordering::SeqCst) >= 3, "the forget recomputed the model");
    let (status, v) = d.get(&bank_path("b", "/mental-models/m1?detail=full")).await;
    assert_eq!(status, 200, "{v}");
    assert!(!v.to_string().contains("hunter2"), "the forgotten text came back: {v}");
}

/// A mental model whose best memory is longer than its max_tokens holds that memory's window,
/// within the bound (asked for the whole budget, the window filled it, its line did not fit,
/// and the model was empty).
#[tokio::test]
async fn a_mental_model_holds_a_long_memorys_window() {
    let d = Daemon::start(LEXICAL);
    let long = format!("{} kubernetes {}", "д.".repeat(200), "д.".repeat(200));
    let (status, v) =
        d.post(&bank_path("mm", "/memories"), json!({"items": [{"content": long}], "async": false})).await;
    assert_eq!(status, 200, "{v}");
    let model = json!({"id": "k8s", "name": "k8s", "source_query": "kubernetes", "max_tokens": 256});
    let (status, v) = d.post(&bank_path("mm", "/mental-models"), model).await;
    assert_eq!(status, 200, "{v}");
    let (_, v) = d.get(&bank_path("mm", "/mental-models/k8s?detail=content")).await;
    let content = v["content"].as_str().unwrap_or_default();
    assert!(content.contains("kubernetes") && mneme_core::text::budget_units(content) <= 1024, "{v}");
}

/// A long `metadata.session_id` names its queue by a fingerprint: each queue's name is held in
/// memory for the daemon's life and listed by /v1/queue (60 KB ones grew the daemon by 160 MB).
#[tokio::test]
async fn a_long_client_session_id_names_its_queue_by_a_fingerprint() {
    let d = Daemon::start("[queue]\nflush_interval = \"1h\"\n");
    let long = "s".repeat(60_000);
    let item = json!({"content": "a fact from a long session", "metadata": {"session_id": long}});
    let (status, v) = d.post(&bank_path("lq", "/memories"), json!({"items": [item], "async": true})).await;
    assert_eq!(status, 200, "{v}");
    let (_, queue) = d.get("/v1/queue").await;
    let text = queue.to_string();
    assert!(text.len() < 10_000 && text.contains("hindsight:lq:#"), "{}", &text[..text.len().min(300)]);
    let (_, v) = d.post("/v1/flush", json!({})).await;
    assert_eq!(v["delivered"], 1, "{v}");
}

/// Two clients' versions of one document are stored in the order they were retained: each in
/// its own client's queue, the older version, queued by one, replaced the newer one another had
/// stored synchronously as soon as its queue's timer fired.
#[tokio::test]
async fn an_older_version_of_a_document_never_replaces_a_newer_one() {
    let d = Daemon::start(&format!("{LEXICAL}\n[queue]\nflush_interval = \"300ms\"\n"));
    let version = |text: &str, client: &str, is_async: bool| json!({"items": [{"content": text, "document_id": "shared-doc", "metadata": {"session_id": client}}], "async": is_async});
    let (status, _) =
        d.post(&bank_path("dv", "/memories"), version("version one of the puffin notes", "client-a", true)).await;
    assert_eq!(status, 200);
    let (status, _) =
        d.post(&bank_path("dv", "/memories"), version("version two of the puffin notes", "client-b", false)).await;
    assert_eq!(status, 200);
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    d.post("/v1/flush", json!({})).await;
    let (_, v) = d.get("/v1/export?bank=dv").await;
    let kept: Vec<&str> = v["memories"].as_array().unwrap().iter().map(|m| m["content"].as_str().unwrap()).collect();
    assert_eq!(kept, ["version two of the puffin notes"]);
}

/// A model renamed while a forget recomputes it keeps the recomputed content: the rename read
/// the model before the forget's recompute saved it, and saved that copy (quoting the forgotten
/// memory) over it. A race: each round renames in a loop around one forget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rename_racing_a_forget_does_not_bring_the_memory_back() {
    let d = std::sync::Arc::new(Daemon::start(""));
    for round in 0..10 {
        let word = format!("zqrename{round}x");
        let (status, v) = d
            .post(
                &bank_path("mneme", "/memories"),
                json!({"items": [{"content": format!("The {word} gateway deploys with cargo-dist")}], "async": false}),
            )
            .await;
        assert_eq!(status, 200, "{v}");
        let (_, v) = d.get("/v1/memories?bank=mneme&limit=100").await;
        let id =
            v["memories"].as_array().unwrap().iter().find(|m| m["content"].as_str().unwrap().contains(&word)).unwrap()
                ["id"]
                .as_str()
                .unwrap()
                .to_owned();
        let model = format!("race{round}");
        let (status, v) = d
            .post(
                &bank_path("mneme", "/mental-models"),
                json!({"id": model, "name": "gw", "source_query": format!("{word} gateway deploys")}),
            )
            .await;
        assert_eq!(status, 200, "{v}");
        let path = bank_path("mneme", &format!("/mental-models/{model}"));
        let (_, v) = d.get(&format!("{path}?detail=full")).await;
        assert!(v["content"].as_str().unwrap().contains(&word), "the model quotes it first: {v}");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let renames = {
            let (d, stop, path) = (d.clone(), stop.clone(), path.clone());
            tokio::spawn(async move {
                let mut n = 0;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    n += 1;
                    let body = json!({"name": format!("gateway {n}")});
                    let (status, v) = d.req(reqwest::Method::PATCH, &path, Some(body)).await;
                    assert_eq!(status, 200, "{v}");
                }
            })
        };
        tokio::time::sleep(Duration::from_millis(30)).await;
        let (status, v) = d.req(reqwest::Method::DELETE, &format!("/v1/memories/{id}"), None).await;
        assert_eq!(status, 200, "{v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        renames.await.unwrap();
        let (_, v) = d.get(&format!("{path}?detail=full")).await;
        let content = v["content"].as_str().unwrap();
        assert!(!content.contains(&word), "round {round}: the forgotten memory is back in the model: {v}");
    }
}

/// What a client written against the server relies on: `tag_groups` scope the results (they
/// were ignored: every project's memories came back), a document whose new version is all
/// private is gone, one result a memory (two passages of one came back under one id), dates
/// before 1970 and in the server's other forms are taken, and `/version` has its features.
#[tokio::test]
async fn groups_documents_ids_and_dates_as_the_server_reads_them() {
    let d = Daemon::start(LEXICAL);
    let retain = |items: Value| {
        let d = &d;
        async move {
            let (status, v) = d.post(&bank_path("hs", "/memories"), json!({ "items": items })).await;
            assert_eq!(status, 200, "{v}");
            v
        }
    };
    let recall = |body: Value| {
        let d = &d;
        async move {
            let (status, v) = d.post(&bank_path("hs", "/memories/recall"), body).await;
            assert_eq!(status, 200, "{v}");
            v["results"].as_array().unwrap().clone()
        }
    };
    let texts = |results: &[Value]| -> Vec<String> {
        let mut t: Vec<String> = results.iter().map(|r| r["text"].as_str().unwrap().to_owned()).collect();
        t.sort();
        t
    };
    retain(json!([
        {"content": "The otter pool alpha is cleaned on Mondays.", "tags": ["project:alpha"]},
        {"content": "The otter pool beta is cleaned on Fridays.", "tags": ["project:beta"]},
        {"content": "Every otter pool is cleaned weekly."}
    ]))
    .await;
    let only_alpha =
        json!({"query": "otter pool cleaned", "tag_groups": [{"tags": ["project:alpha"], "match": "all_strict"}]});
    assert_eq!(texts(&recall(only_alpha).await), ["The otter pool alpha is cleaned on Mondays."]);
    let not_beta = json!({"query": "otter pool cleaned", "tag_groups": [{"not": {"tags": ["project:beta"]}}]});
    assert_eq!(
        texts(&recall(not_beta).await),
        ["Every otter pool is cleaned weekly.", "The otter pool alpha is cleaned on Mondays."]
    );
    // A paragraph two memories hold is shown once, after the groups: the one they leave out does
    // not take it from the one they keep (review47 #2: the answer was empty).
    let rule = "The otter pool gate is opened with the keeper's badge on gate 7, never with the spare key.";
    retain(json!([
        {"content": format!("{rule}\n\nThe red keepers also hold the spare key, for the otter pool."), "tags": ["team:red"]},
        {"content": rule, "tags": ["team:blue"]}
    ]))
    .await;
    let gate = json!({"query": "which keepers hold the spare key of the otter pool gate? the red keepers?", "tag_groups": [{"not": {"tags": ["team:red"]}}]});
    let found = texts(&recall(gate).await);
    assert!(found.iter().any(|t| t == rule), "{found:?}");
    // A filter tag is read as a stored one: trimmed.
    let spaced = json!({"query": "otter pool cleaned", "tags": [" project:beta "], "tags_match": "all_strict"});
    assert_eq!(texts(&recall(spaced).await), ["The otter pool beta is cleaned on Fridays."]);

    retain(json!([{"content": "The otter vault code is 4417.", "document_id": "vault"}])).await;
    let v = retain(json!([{"content": "<private>the vault code changed</private>", "document_id": "vault"}])).await;
    assert_eq!(v["items_count"], 0, "{v}");
    assert!(recall(json!({"query": "otter vault code"})).await.iter().all(|r| r["document_id"] != "vault"));
    // The same by an asynchronous retain with the client's operation id; sent again after a
    // newer version, it is answered as the first time and forgets nothing.
    let op = "0b1c2d3e-4f50-4617-8293-a4b5c6d7e8f9";
    let private_version = json!({"items": [{"content": "<private>changed again</private>", "document_id": "vault"}],
        "async": true, "operation_id": op});
    retain(json!([{"content": "The otter vault code is 5528.", "document_id": "vault"}])).await;
    let (status, _) = d.post(&bank_path("hs", "/memories"), private_version.clone()).await;
    assert_eq!(status, 200);
    assert!(recall(json!({"query": "otter vault code"})).await.iter().all(|r| r["document_id"] != "vault"));
    retain(json!([{"content": "The otter vault code is 6639.", "document_id": "vault"}])).await;
    let (status, _) = d.post(&bank_path("hs", "/memories"), private_version).await;
    assert_eq!(status, 200);
    let kept = recall(json!({"query": "otter vault code"})).await;
    assert!(kept.iter().any(|r| r["text"] == "The otter vault code is 6639."), "{kept:?}");

    let long: String =
        (0..60).map(|i| format!("Line {i} of the otter handbook covers feeding and pool care. ")).collect();
    retain(json!([{"content": long, "document_id": "handbook"}, {"content": "Quokkas are not otters.", "document_id": "other"}])).await;
    let found = recall(json!({"query": "otter handbook feeding pool care", "max_tokens": 100000})).await;
    let mut ids: Vec<&str> = found.iter().map(|r| r["id"].as_str().unwrap()).collect();
    let n = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), n, "{found:?}");
    // Each document is a conversation of its own: the handbook lends the other none of its words,
    // and mneme's own stamp is not shown as the client's metadata.
    let quokka = recall(json!({"query": "quokkas"})).await;
    assert_eq!(texts(&quokka), ["Quokkas are not otters."]);
    assert!(quokka[0]["metadata"].get("session_id").is_none(), "{quokka:?}");
    let handbook = recall(json!({"query": "feeding"})).await;
    assert!(handbook.iter().all(|r| r["document_id"] == "handbook"), "{handbook:?}");

    for (given, stored) in
        [("1969-07-20T20:17:00Z", "1969-07-20T20:17:00.000Z"), ("2025-03-04T10:20", "2025-03-04T10:20:00.000Z")]
    {
        retain(json!([{"content": format!("The otter moon landing note {given}"), "timestamp": given}])).await;
        let found = recall(json!({"query": format!("otter moon landing note {given}")})).await;
        assert!(found.iter().any(|r| r["mentioned_at"] == stored), "{given}: {found:?}");
    }
    retain(json!([{"content": "An otter fact with no date.", "timestamp": "UNSET"}])).await;

    let (status, v) = d.get("/hindsight/version").await;
    assert_eq!(status, 200);
    assert_eq!(v["features"]["observations"], false, "{v}");
}

/// A document forgotten and made again by an append starts outside the spans its old version
/// left open (they were kept, and hid the new version's text); one not forgotten stays inside.
#[tokio::test]
async fn a_forgotten_document_made_again_by_an_append_is_not_private() {
    let d = Daemon::start(LEXICAL);
    let retain = |document: &str, content: &str, mode: Option<&str>| json!({"items": [{"content": content, "document_id": document, "update_mode": mode}], "async": false});
    for document in ["w", "v"] {
        let (status, v) =
            d.post(&bank_path("reopen", "/memories"), retain(document, "notes <private> opened", None)).await;
        assert_eq!(status, 200, "{v}");
    }
    let (status, v) = d.req(reqwest::Method::DELETE, "/v1/documents/w?bank=reopen", None).await;
    assert_eq!(status, 200, "{v}");
    for document in ["w", "v"] {
        let content = format!("grebe sighting {document}");
        let (_, v) = d.post(&bank_path("reopen", "/memories"), retain(document, &content, Some("append"))).await;
        let stored = if document == "w" { 1 } else { 0 };
        assert_eq!(v["items_count"], stored, "{document}: {v}");
    }
}

/// An async retain sent again under its operation id stores nothing and leaves the spans its
/// document is open in as they were (counted again, the close that followed left one open and
/// hid the rest of the document).
#[tokio::test]
async fn a_resent_operation_leaves_its_documents_spans_as_they_were() {
    let d = Daemon::start(LEXICAL);
    let operation = "8f14e45f-ceea-467a-9575-4e1a8b1c2d3e";
    let intro = json!({"items": [{"content": "intro", "document_id": "r"}], "async": false});
    assert_eq!(d.post(&bank_path("resent", "/memories"), intro).await.0, 200);
    let first = json!({"items": [{"content": "notes <private> opened", "document_id": "r", "update_mode": "append"}],
                       "async": true, "operation_id": operation});
    for _ in 0..2 {
        let (status, v) = d.post(&bank_path("resent", "/memories"), first.clone()).await;
        assert_eq!(status, 200, "{v}");
    }
    let close = json!({"items": [{"content": "closes </private> grebe visible", "document_id": "r",
                                  "update_mode": "append"}], "async": false});
    let (_, v) = d.post(&bank_path("resent", "/memories"), close).await;
    assert_eq!(v["items_count"], 1, "{v}");
}

/// A mental model's content is recalled as the Hindsight server refreshes one: a tagged model
/// matches its tags `all_strict` (a project's model takes no other project's memories, nor the
/// global ones), or by its trigger's `tags_match`, `tag_groups` and `fact_types`. Matched with
/// `any`, it took every untagged memory and every memory sharing one of its tags.
#[tokio::test]
async fn a_mental_models_content_keeps_to_its_tags_and_trigger() {
    let d = Daemon::start(LEXICAL);
    let item = |text: &str, tags: &[&str]| json!({"content": text, "tags": tags});
    let items = json!({"items": [
        item("Alpha widget uses redis caching", &["a", "b"]),
        item("Beta widget uses redis queues", &["a"]),
        item("Gamma widget uses redis streams", &["c"]),
        item("Delta widget uses redis untagged", &[]),
        {"content": "Epsilon widget uses redis in a transcript", "document_id": "t1"},
    ], "async": false});
    let (status, v) = d.post(&bank_path("iso", "/memories"), items).await;
    assert_eq!(status, 200, "{v}");
    let models = [
        ("ab", json!({"tags": ["a", "b"]}), vec!["Alpha"]),
        ("a", json!({"tags": ["a"]}), vec!["Alpha", "Beta"]),
        ("a-any", json!({"tags": ["a"], "trigger": {"tags_match": "any"}}), vec!["Alpha", "Beta", "Delta", "Epsilon"]),
        ("not-a", json!({"trigger": {"tag_groups": [{"not": {"tags": ["a"]}}]}}), vec!["Gamma", "Delta", "Epsilon"]),
        ("experience", json!({"trigger": {"fact_types": ["experience"]}}), vec!["Epsilon"]),
    ];
    for (id, fields, wanted) in models {
        let mut model = json!({"id": id, "name": id, "source_query": "widget redis", "max_tokens": 1000});
        for (k, v) in fields.as_object().unwrap() {
            model[k] = v.clone();
        }
        let (status, v) = d.post(&bank_path("iso", "/mental-models"), model).await;
        assert_eq!(status, 200, "{v}");
        let mut content = String::new();
        for _ in 0..50 {
            let (_, v) = d.get(&bank_path("iso", &format!("/mental-models/{id}?detail=full"))).await;
            content = v["content"].as_str().unwrap_or_default().to_owned();
            if !content.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut found: Vec<&str> = ["Alpha", "Beta", "Gamma", "Delta", "Epsilon"]
            .into_iter()
            .filter(|w| content.contains(&format!("{w} widget")))
            .collect();
        found.sort();
        let mut wanted = wanted;
        wanted.sort();
        assert_eq!(found, wanted, "{id}: {content}");
    }
}

/// A trigger whose filter mneme could not read is refused (422, as the server refuses a field
/// its API types otherwise), not stored and ignored, which took every project's memories into
/// the model; so is one naming more tags than a recall's filter takes, which left the model
/// never computed (review105 #2, #3). An update is checked as a create is.
#[tokio::test]
async fn a_mental_models_trigger_is_checked_as_a_recalls_filter_is() {
    let d = Daemon::start(LEXICAL);
    let many: Vec<String> = (0..101).map(|i| format!("t{i}")).collect();
    let leaves: Vec<Value> = (0..101).map(|i| json!({"tags": [format!("t{i}")]})).collect();
    let model = |trigger: Value| json!({"id": "m", "name": "m", "source_query": "widget", "trigger": trigger});
    for (trigger, said) in [
        (json!({"tag_groups": [{"tags": "project:alpha"}]}), "trigger.tag_groups must be a list"),
        (json!({"fact_types": ["wrld"]}), "trigger.fact_types must be"),
        (json!({"tags_match": "<private>x</private>"}), "trigger.tags_match must be"),
        (json!("not an object"), "trigger must be an object"),
        (json!({"tag_groups": [{"tags": many}]}), "name 101 tags"),
        (json!({"tag_groups": [{"or": leaves}]}), "name 101 tags"),
        (json!({"tag_groups": [{"tags": ["<private>p</private>"]}]}), "<private>"),
        (json!({"tag_groups": [{"tags": ["a"], "resolve": "banana"}]}), "trigger.tag_groups must be a list"),
        (json!({"mode": "sideways"}), "trigger.mode must be one of \"full\", \"delta\""),
        (
            json!({"min_refresh_interval_seconds": -5}),
            "trigger.min_refresh_interval_seconds must be an integer, at least 0",
        ),
        (json!({"keep_trace": "sure"}), "trigger.keep_trace must be true or false"),
        (json!({"budget": 7}), "trigger.budget must be one of"),
    ] {
        let (status, v) = d.post(&bank_path("tr", "/mental-models"), model(trigger.clone())).await;
        assert_eq!(status, 422, "{trigger}: {v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains(said), "{trigger}: {v}");
        assert!(!message.contains("wrld") && !message.contains("project:alpha") && !message.contains(">x<"), "{v}");
    }
    let (status, v) = d.get(&bank_path("tr", "/mental-models/m")).await;
    assert_eq!(status, 404, "nothing was stored: {v}");
    let fine = json!({"tag_groups": [{"tags": (0..100).map(|i| format!("t{i}")).collect::<Vec<_>>(), "resolve": "fuzzy"}],
        "fact_types": null, "mode": "delta", "budget": "high", "min_refresh_interval_seconds": 60, "refresh_cron": "0 3 * * *",
        "recall_max_tokens": 2048, "response_schema": {"type": "object"}, "keep_trace": false});
    let (status, v) = d.post(&bank_path("tr", "/mental-models"), model(fine)).await;
    assert_eq!(status, 200, "100 tags, and a null for a field not given: {v}");
    let update = json!({"trigger": {"fact_types": "world"}});
    let (status, v) = d.req(reqwest::Method::PATCH, &bank_path("tr", "/mental-models/m"), Some(update)).await;
    assert_eq!(status, 422, "{v}");
    let (_, v) = d.get(&bank_path("tr", "/mental-models/m?detail=full")).await;
    assert!(v["trigger"]["fact_types"].is_null(), "the refused update changed nothing: {v}");
}

/// A trigger's fields are read as Hindsight 1.1.0's server reads them (pydantic's lax mode,
/// measured against the real server): `3600.0`, `"3_600"` and `true` are integers, `"yes"` and
/// `1` booleans, kept in the type read; what the server refuses (a fraction, `"1e3"`, a boolean
/// word with blanks around it, null for a field with a default) is a 422.
#[tokio::test]
async fn a_mental_models_trigger_is_read_as_hindsight_reads_it() {
    let d = Daemon::start(LEXICAL);
    let model = |id: &str, trigger: Value| json!({"id": id, "name": id, "source_query": "widget", "trigger": trigger});
    for (i, (field, sent, read)) in [
        ("min_refresh_interval_seconds", json!(3600.0), json!(3600)),
        ("min_refresh_interval_seconds", json!(" 3_600.0 "), json!(3600)),
        ("min_refresh_interval_seconds", json!("+60"), json!(60)),
        ("min_refresh_interval_seconds", json!(true), json!(1)),
        ("recall_max_tokens", json!("-0"), json!(0)),
        ("refresh_after_consolidation", json!("Yes"), json!(true)),
        ("keep_trace", json!(0), json!(false)),
        ("include_chunks", json!(1.0), json!(true)),
        ("include_chunks", json!(null), json!(null)),
    ]
    .into_iter()
    .enumerate()
    {
        let id = format!("lax{i}");
        let (status, v) = d.post(&bank_path("lax", "/mental-models"), model(&id, json!({ field: sent }))).await;
        assert_eq!(status, 200, "{field}: {sent}: {v}");
        let (_, v) = d.get(&bank_path("lax", &format!("/mental-models/{id}?detail=full"))).await;
        assert_eq!(v["trigger"][field], read, "{field}: {sent}: {v}");
    }
    for (field, sent) in [
        ("min_refresh_interval_seconds", json!(3600.5)),
        ("min_refresh_interval_seconds", json!("1e3")),
        ("min_refresh_interval_seconds", json!("3600.")),
        ("min_refresh_interval_seconds", json!("")),
        ("min_refresh_interval_seconds", json!(1e20)),
        ("min_refresh_interval_seconds", json!("-1")),
        ("refresh_after_consolidation", json!(" yes ")),
        ("refresh_after_consolidation", json!(2)),
        ("refresh_after_consolidation", json!(null)),
        ("mode", json!(null)),
        ("keep_trace", json!("1.0")),
    ] {
        let (status, v) = d.post(&bank_path("lax", "/mental-models"), model("refused", json!({ field: sent }))).await;
        assert_eq!(status, 422, "{field}: {sent}: {v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(&format!("trigger.{field} must be")), "{v}");
    }
}

/// An id holding a `<private>` tag is refused saying so (422, as the server answers a field it
/// refuses), not blaming the `/` of `</private>` (review105 #4).
#[tokio::test]
async fn ids_with_private_tags_are_refused_saying_so() {
    let d = Daemon::start(LEXICAL);
    let item = json!({"items": [{"content": "a fact"}]});
    let (status, v) = d.post(&bank_path("%3Cprivate%3Ex%3C%2Fprivate%3E", "/memories"), item).await;
    assert_eq!(status, 422, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().starts_with("bank_id may not contain <private>"), "{v}");
    let model = json!({"id": "<private>x</private>", "name": "m", "source_query": "q"});
    let (status, v) = d.post(&bank_path("b", "/mental-models"), model).await;
    assert_eq!(status, 422, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().starts_with("id may not contain <private>"), "{v}");
    let item = json!({"items": [{"content": "a fact", "document_id": "doc<private>x</private>"}]});
    let (status, v) = d.post(&bank_path("b", "/memories"), item).await;
    assert_eq!(status, 422, "{v}");
}

/// A mneme whose Hindsight server is another mneme's `/hindsight`: a tool retain is a fact
/// there (`world`), found by a recall that keeps to facts, and a session's transcript an
/// `experience`. Every item of no document went as a document of its own and was taken for a
/// transcript (review111 #3); it now carries the loose-memory mark that says what it is.
#[tokio::test]
async fn a_mneme_in_front_of_another_mnemes_hindsight_api_keeps_facts_facts() {
    let server = Daemon::start(LEXICAL);
    let client = Daemon::start(&format!(
        "[memory]\nbackend = \"hindsight\"\n[hindsight]\napi_url = \"{}\"\napi_token = \"{}\"\n[recall]\ntypes = [\"world\"]\n",
        server.url("/hindsight"),
        server.token
    ));
    client.start_session("s1", "/p/quokka").await;
    let fact = json!({"items": [{"content": "We deploy the quokka service with cargo-dist"}]});
    assert_eq!(client.post("/v1/sessions/s1/retain", fact).await.0, 202);
    let turns = json!({"messages": [{"role": "user", "content": "how is the quokka service built?"},
                                    {"role": "assistant", "content": "The quokka service builds with nix."}],
                       "ends_session": true});
    let (status, v) = client.post("/v1/sessions/s1/agent-end", turns).await;
    assert_eq!(status, 200, "{v}");
    let (_, v) = client.post("/v1/flush", json!({})).await;
    assert_eq!(v["failed"], 0, "{v}");
    // The server's own queue (an asynchronous retain) delivers into its store.
    server.post("/v1/flush", json!({})).await;
    let out = server.cli().arg("export").output().unwrap();
    let stored: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let kind_of = |needle: &str| {
        let m = stored.iter().find(|m| m["content"].as_str().unwrap().contains(needle));
        m.map(|m| m["type"].clone()).unwrap_or_else(|| panic!("{needle} not stored: {stored:?}"))
    };
    assert_eq!(kind_of("cargo-dist"), "world");
    assert!(
        stored.iter().all(|m| m["metadata"].get("mneme_own_document").is_none()),
        "the mark is read, not kept: {stored:?}"
    );
    assert_eq!(kind_of("builds with nix"), "experience");
    // The client's recall keeps to facts (recall.types) and finds the tool retain.
    let (status, v) = client.post("/v1/sessions/s1/recall", json!({"query": "how do we deploy quokka?"})).await;
    assert_eq!(status, 200, "{v}");
    assert!(v.to_string().contains("cargo-dist"), "{v}");
}
