//! The daemon with `memory.backend = "hindsight"`, end to end against the real Hindsight peer.

mod common;

use std::time::Duration;

use common::{bank_texts, chunk_bank, fresh, hindsight_peer as peer, wait_bank, Daemon};
use serde_json::json;

fn config(url: &str, bank: &str, extra: &str) -> String {
    format!("[memory]\nbackend = \"hindsight\"\nbank_id = \"{bank}\"\n[hindsight]\napi_url = \"{url}\"\n{extra}")
}

#[tokio::test]
async fn retain_recall_reflect_compaction_and_clear_through_the_daemon() {
    let Some(url) = peer() else { return };
    let bank = fresh("e2e");
    chunk_bank(&url, &bank).await;
    let d = Daemon::start(&config(&url, &bank, ""));
    let (_, st) = d.get("/v1/status").await;
    assert_eq!(st["backend"]["backend"], "hindsight");
    assert_eq!(st["backend"]["healthy"], true, "{st}");
    assert_eq!(st["backend"]["version"], "1.1.0");
    d.start_session("s1", "/work/Narwhal").await;
    let (status, v) = d
        .post(
            "/v1/sessions/s1/retain",
            json!({"items": [
                {"content": "The narwhal service deploys through the canary ring"},
                {"content": "Narwhal integration tests need the fixtures volume", "context": "testing"}
            ]}),
        )
        .await;
    assert_eq!(status, 202, "{v}");
    let (_, v) = d.post("/v1/flush", json!({"session_id": "s1"})).await;
    assert_eq!(v, json!({"delivered": 2, "failed": 0}));
    let texts = wait_bank(&url, &bank, 2).await;
    assert_eq!(
        texts,
        vec![
            "Narwhal integration tests need the fixtures volume",
            "The narwhal service deploys through the canary ring"
        ]
    );

    let (_, v) = d.post("/v1/sessions/s1/recall", json!({"query": "how does narwhal deploy?"})).await;
    assert!(v["message"].as_str().unwrap().starts_with("Found "), "{v}");
    assert!(v["results"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["text"] == "The narwhal service deploys through the canary ring"));
    assert!(v["results"][0]["tags"].as_array().unwrap().contains(&json!("project:narwhal")), "{v}");

    let (_, v) = d.post("/v1/sessions/s1/agent-start", json!({"prompt": "narwhal deploys?"})).await;
    assert!(v["inject"].as_str().unwrap().contains("canary ring"), "{v}");
    let (_, v) = d.post("/v1/sessions/s1/reflect", json!({"query": "How does narwhal deploy?"})).await;
    assert!(!v["text"].as_str().unwrap().is_empty(), "{v}");
    let (_, v) = d
        .post(
            "/v1/sessions/s1/compaction",
            json!({"messages": [{"role": "user", "content": "what about narwhal fixtures?"}]}),
        )
        .await;
    assert!(v["context"].as_str().unwrap().contains("fixtures volume"), "{v}");

    let (_, v) = d.post("/v1/clear", json!({"session_id": "s1"})).await;
    assert!(v["message"].as_str().unwrap().contains("were kept"), "{v}");
    assert_eq!(bank_texts(&url, &bank).await.len(), 2);
    let (_, v) = d.post("/v1/clear", json!({"session_id": "s1", "remote": true})).await;
    assert!(v["message"].as_str().unwrap().contains("Deleted"), "{v}");
    assert!(bank_texts(&url, &bank).await.is_empty());
}

#[tokio::test]
async fn per_project_scoping_writes_to_the_projects_bank() {
    let Some(url) = peer() else { return };
    let base = fresh("scoped");
    chunk_bank(&url, &format!("{base}-otter")).await;
    let d = Daemon::start(&config(&url, &base, "").replace("[hindsight]", "scoping = \"per-project\"\n[hindsight]"));
    let v = d.start_session("s", "/src/Otter").await;
    assert_eq!(v["scope"], json!({"bank": format!("{base}-otter"), "tags": []}));
    d.post("/v1/sessions/s/retain", json!({"items": [{"content": "otter uses sqlite"}]})).await;
    d.post("/v1/flush", json!({})).await;
    assert_eq!(wait_bank(&url, &format!("{base}-otter"), 1).await, vec!["otter uses sqlite"]);
    // Clearing everything on the server clears every project's bank, not the base bank alone.
    chunk_bank(&url, &format!("{base}-beaver")).await;
    d.start_session("t", "/src/Beaver").await;
    d.post("/v1/sessions/t/retain", json!({"items": [{"content": "beaver uses postgres"}]})).await;
    d.post("/v1/flush", json!({})).await;
    assert_eq!(wait_bank(&url, &format!("{base}-beaver"), 1).await, vec!["beaver uses postgres"]);
    // An export without --bank holds every project's bank, as the clear below deletes them: it
    // held the base bank alone, and a backup taken first missed them all (review64 #12).
    // With the file's [memory] broken since (the daemon runs on its last good one), the banks are
    // the daemon's, not the defaults the command falls back to (review67 #5).
    let good = std::fs::read_to_string(d.config_path()).unwrap();
    std::fs::write(d.config_path(), good.replace("[hindsight]", "a_typo = 1\n[hindsight]")).unwrap();
    let out = d.cli().args(["export"]).output().unwrap();
    let exported = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for fact in ["otter uses sqlite", "beaver uses postgres"] {
        assert!(exported.contains(fact), "{fact} not exported: {exported}");
    }
    let (status, v) = d.post("/v1/clear", json!({"all": true, "remote": true})).await;
    assert_eq!(status, 200, "{v}");
    for project in ["otter", "beaver"] {
        assert!(bank_texts(&url, &format!("{base}-{project}")).await.is_empty(), "{project}: {v}");
        assert!(v["message"].as_str().unwrap().contains(&format!("{base}-{project}")), "{v}");
    }
}

/// Forwards 127.0.0.1:`port` to `target` once started: the server "comes back".
async fn forward(listener: tokio::net::TcpListener, target: String) {
    loop {
        let Ok((mut inbound, _)) = listener.accept().await else { return };
        let target = target.clone();
        tokio::spawn(async move {
            if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_down_at_start_gets_everything_once_when_it_returns() {
    let Some(url) = peer() else { return };
    let bank = fresh("outage");
    chunk_bank(&url, &bank).await;
    // A port with nothing behind it yet.
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = probe.local_addr().unwrap();
    drop(probe);
    let extra = "[queue]\nretry_initial = \"200ms\"\nretry_max = \"1s\"\nflush_interval = \"100ms\"\n";
    let d = Daemon::start(&config(&format!("http://{addr}"), &bank, extra));
    let (_, st) = d.get("/v1/status").await;
    assert_eq!(st["backend"]["healthy"], false, "{st}");
    assert!(st["backend"]["detail"].as_str().unwrap().contains("unreachable"), "{st}");
    for s in ["a", "b"] {
        d.start_session(s, "/p/outage").await;
        for i in 0..3 {
            let (status, _) = d
                .post(
                    &format!("/v1/sessions/{s}/retain"),
                    json!({"items": [{"content": format!("outage item {s}{i}")}]}),
                )
                .await;
            assert_eq!(status, 202);
        }
    }
    let (_, v) = d.post("/v1/flush", json!({})).await;
    assert!(v["failed"].as_u64().unwrap() > 0, "{v}");
    tokio::time::sleep(Duration::from_secs(2)).await; // several retries fail meanwhile
    let (_, v) = d.get("/v1/notices").await;
    let warnings = v["notices"].as_array().unwrap().iter().filter(|n| n["level"] == "warning").count();
    assert_eq!(warnings, 1, "one notice per outage: {v}");

    // The server comes back on that address.
    let target = url.trim_start_matches("http://").to_owned();
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    tokio::spawn(forward(listener, target));
    let mut spooled = u64::MAX;
    for _ in 0..100 {
        let (_, st) = d.get("/v1/status").await;
        spooled = st["queue"]["spooled"].as_u64().unwrap();
        if spooled == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(spooled, 0);
    let texts = wait_bank(&url, &bank, 6).await;
    let want: Vec<String> = ["a0", "a1", "a2", "b0", "b1", "b2"].iter().map(|s| format!("outage item {s}")).collect();
    assert_eq!(texts, want, "every item exactly once");
    let (_, v) = d.get("/v1/notices").await;
    assert!(v["notices"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n["level"] == "info" && n["message"].as_str().unwrap().contains("reachable again")));
}

#[tokio::test]
async fn the_token_stays_secret_even_at_debug_level() {
    let Some(url) = peer() else { return };
    let token = "tok-9f8e7d6c5b4a-never-print";
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stderr.log");
    let work = tempfile::tempdir().unwrap();
    let d = Daemon::start_logged(
        work,
        &config(&url, &fresh("secret"), "debug = true\n"),
        &[("HINDSIGHT_API_TOKEN", token), ("MNEME_LOG", "debug")],
        Some(&log),
    );
    d.start_session("s", "/x/secret").await;
    d.post("/v1/sessions/s/retain", json!({"items": [{"content": "something"}]})).await;
    d.post("/v1/flush", json!({})).await;
    d.post("/v1/sessions/s/recall", json!({"query": "something"})).await;
    let (_, st) = d.get("/v1/status").await;
    assert!(!st.to_string().contains(token));
    let out = d.cli().args(["--json", "status"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains(token));
    drop(d);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("DEBUG"), "debug logging was on");
    assert!(logged.contains("retain: POST"), "requests were logged");
    assert!(!logged.contains(token), "the token leaked into the log");
}

#[tokio::test]
async fn the_web_views_routes_list_show_and_forget_documents_on_hindsight() {
    let Some(url) = peer() else { return };
    let bank = fresh("e2e-browse");
    chunk_bank(&url, &bank).await;
    let d = Daemon::start(&config(&url, &bank, ""));
    let memories = json!({"memories": [
        {"id": "a", "bank": bank, "content": "The heron queue drains every minute", "document_id": "doc-heron", "created_at": "2026-01-01T00:00:00Z"},
        {"id": "b", "bank": bank, "content": "The ibis cache holds ten thousand keys", "document_id": "doc-ibis", "created_at": "2026-01-01T00:00:01Z"}
    ]});
    let (status, v) = d.post("/v1/import", memories.clone()).await;
    assert_eq!(status, 200, "{v}");
    wait_bank(&url, &bank, 2).await;

    // No bank named: Hindsight lists the configured one.
    let (status, page) = d.get("/v1/memories").await;
    assert_eq!(status, 200, "{page}");
    let listed = page["memories"].as_array().unwrap();
    assert_eq!(listed.len(), 2, "{page}");
    let heron = listed.iter().find(|m| m["content"] == "The heron queue drains every minute").expect("heron").clone();
    let id = heron["id"].as_str().unwrap();
    let (status, detail) = d.get(&format!("/v1/memories/{id}")).await;
    assert_eq!(status, 200, "{detail}");
    assert_eq!(detail["memory"]["document_id"], "doc-heron");
    let (_, banks) = d.get("/v1/banks").await;
    assert!(banks["banks"].as_array().unwrap().iter().any(|b| b["bank"] == bank.as_str()), "{banks}");

    let (status, v) = d.req(reqwest::Method::DELETE, &format!("/v1/memories/{id}"), None).await;
    assert_eq!(status, 422, "Hindsight 1.1 deletes documents, not single units: {v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("document"), "{v}");
    let (status, v) = d.req(reqwest::Method::DELETE, &format!("/v1/documents/doc-heron?bank={bank}"), None).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(bank_texts(&url, &bank).await, ["The ibis cache holds ten thousand keys"]);
    let (status, _) = d.req(reqwest::Method::DELETE, &format!("/v1/documents/doc-heron?bank={bank}"), None).await;
    assert_eq!(status, 404);
    let (_, found) = d.post("/v1/search", json!({"query": "ibis cache size"})).await;
    assert!(
        found["results"].as_array().unwrap().iter().any(|r| r["text"] == "The ibis cache holds ten thousand keys"),
        "{found}"
    );

    // The backup imported again restores what was forgotten, whichever of its documents it was.
    let (status, v) = d.post("/v1/import", memories.clone()).await;
    assert_eq!(status, 200, "{v}");
    wait_bank(&url, &bank, 2).await;
    let (status, v) = d.req(reqwest::Method::DELETE, &format!("/v1/documents/doc-ibis?bank={bank}"), None).await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = d.post("/v1/import", memories).await;
    assert_eq!(status, 200, "{v}");
    let mut texts = wait_bank(&url, &bank, 2).await;
    texts.sort();
    assert_eq!(texts, ["The heron queue drains every minute", "The ibis cache holds ten thousand keys"]);
}

/// A forget of a session's document while the server is down drops its queued version and
/// answers 503, and the session forgets its conversation as after any forget: its next turn
/// starts a part of its own, and the forgotten turns never reach the server once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forget_refused_by_a_server_down_still_forgets_the_sessions_conversation() {
    let Some(url) = peer() else { return };
    let bank = fresh("forgetdown");
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = probe.local_addr().unwrap();
    drop(probe);
    let extra = "[queue]\nretry_initial = \"200ms\"\nretry_max = \"1s\"\nflush_interval = \"100ms\"\n\
                 [retain]\nevery_n_turns = 1\nmode = \"full-session\"\n";
    let d = Daemon::start(&config(&format!("http://{addr}"), &bank, extra));
    d.start_session("s", "/p/forgetdown").await;
    let turns = |n: usize| -> Vec<serde_json::Value> {
        (0..n)
            .flat_map(|i| {
                [
                    json!({"role": "user", "content": format!("question {i} about the heron")}),
                    json!({"role": "assistant", "content": format!("answer {i}")}),
                ]
            })
            .collect()
    };
    let (status, _) = d.post("/v1/sessions/s/agent-end", json!({"messages": turns(2), "wait": false})).await;
    assert_eq!(status, 200);
    let (status, v) = d.req(reqwest::Method::DELETE, &format!("/v1/documents/s?bank={bank}"), None).await;
    assert_eq!(status, 503, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("queued"), "{v}");
    let (status, _) = d.post("/v1/sessions/s/agent-end", json!({"messages": turns(3), "wait": false})).await;
    assert_eq!(status, 200);

    let target = url.trim_start_matches("http://").to_owned();
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    tokio::spawn(forward(listener, target));
    let (_, v) = d.post("/v1/flush", json!({})).await;
    assert_eq!(v["failed"], 0, "{v}");
    let texts = wait_bank(&url, &bank, 1).await.join("\n");
    assert!(texts.contains("question 2 about the heron"), "the turn after the forget is stored: {texts}");
    for forgotten in ["question 0 about the heron", "question 1 about the heron"] {
        assert!(!texts.contains(forgotten), "{forgotten} was forgotten: {texts}");
    }
}

/// A proxy to the real server that refuses (422, for good) every retain naming `refused` while
/// `refusing` is set: a fault the real server cannot give on demand for one document of a batch.
async fn refusing_proxy(
    target: String,
    refused: &'static str,
    refusing: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> String {
    proxy(target, move |method, _path, body| {
        let names_it = String::from_utf8_lossy(body).contains(&format!("\"document_id\":\"{refused}\""));
        let refuses = method == axum::http::Method::POST && refusing.load(std::sync::atomic::Ordering::SeqCst);
        (refuses && names_it).then(|| {
            let detail =
                r#"{"detail": [{"loc": ["body", "items", 0], "msg": "refused by the test", "type": "value_error"}]}"#;
            (axum::http::StatusCode::UNPROCESSABLE_ENTITY, detail.to_owned())
        })
    })
    .await
}

/// A proxy to `target` (a real Hindsight server) that answers what `fault` says instead of
/// forwarding, for the faults the real server cannot be made to give on demand.
async fn proxy(
    target: String,
    fault: impl Fn(&axum::http::Method, &str, &[u8]) -> Option<(axum::http::StatusCode, String)>
        + Clone
        + Send
        + Sync
        + 'static,
) -> String {
    use axum::body::Bytes;
    use axum::http::{Method, StatusCode, Uri};
    let client = reqwest::Client::new();
    let app = axum::Router::new().fallback(move |method: Method, uri: Uri, body: Bytes| {
        let (client, target, fault) = (client.clone(), target.clone(), fault.clone());
        async move {
            if let Some((status, detail)) = fault(&method, uri.path(), &body) {
                return (status, [("content-type", "application/json")], detail);
            }
            let url = format!("{target}{}", uri.path_and_query().map_or("", |p| p.as_str()));
            let sent =
                client.request(method, url).header("content-type", "application/json").body(body).send().await.unwrap();
            let status = StatusCode::from_u16(sent.status().as_u16()).unwrap();
            (status, [("content-type", "application/json")], sent.text().await.unwrap())
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// A batch refused for good after one of its parts was stored: that part is delivered, not a
/// dead letter. Dead-lettered whole, `mneme retry` after an append to the document sent the
/// stored part again, as an append under another name, and the server stored it twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_stored_before_its_batch_failed_is_not_stored_again() {
    let Some(url) = peer() else { return };
    let bank = fresh("partly");
    chunk_bank(&url, &bank).await;
    let refusing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let proxy = refusing_proxy(url.clone(), "docE", refusing.clone()).await;
    let d = Daemon::start(&config(&proxy, &bank, "[queue]\nflush_interval = \"100ms\"\n"));
    let memories = format!("/hindsight/v1/default/banks/{bank}/memories");
    let both = json!({"items": [{"content": "AAA the first text of document D", "document_id": "docD"},
                                {"content": "BBB document E", "document_id": "docE"}], "async": true});
    assert_eq!(d.post(&memories, both).await.0, 200);
    let (_, v) = d.post("/v1/flush", json!({})).await;
    assert_eq!((&v["delivered"], &v["failed"]), (&json!(1), &json!(1)), "docD is delivered: {v}");
    let (_, v) = d.get("/v1/status").await;
    assert_eq!(v["queue"]["dead"], 1, "only docE is a dead letter: {v}");
    let append = json!({"items": [{"content": "CCC appended to D", "document_id": "docD", "update_mode": "append"}],
                        "async": true});
    assert_eq!(d.post(&memories, append).await.0, 200);
    let (_, v) = d.post("/v1/flush", json!({})).await;
    assert_eq!(v["failed"], 0, "{v}");
    refusing.store(false, std::sync::atomic::Ordering::SeqCst);
    d.cli().arg("retry").assert().success();
    let (_, v) = d.post("/v1/flush", json!({})).await;
    assert_eq!(v["failed"], 0, "{v}");
    let document = |id: &'static str| {
        let (url, bank) = (url.clone(), bank.clone());
        async move {
            let v: serde_json::Value = reqwest::get(format!("{url}/v1/default/banks/{bank}/documents/{id}"))
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            v["original_text"].as_str().unwrap_or_default().to_owned()
        }
    };
    assert_eq!(document("docD").await, "AAA the first text of document D\nCCC appended to D");
    assert_eq!(document("docE").await, "BBB document E");
}

/// A clear of every bank whose server fails on one of them clears the others all the same, says
/// which it cleared and which not, and the sessions of the banks cleared go on after it. Taken for
/// a clear that did nothing (a bare "backend unavailable", no notice), a session's next turn
/// stored the cleared conversation again (review88 #6).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clear_of_every_bank_that_fails_on_one_says_what_it_cleared() {
    let Some(url) = peer() else { return };
    let base = fresh("partclear");
    let (otter, beaver) = (format!("{base}-otter"), format!("{base}-beaver"));
    chunk_bank(&url, &otter).await;
    chunk_bank(&url, &beaver).await;
    let failing = format!("/banks/{beaver}/");
    let proxy = proxy(url.clone(), move |method, path, _| {
        (method == axum::http::Method::DELETE && path.contains(&failing))
            .then(|| (axum::http::StatusCode::INTERNAL_SERVER_ERROR, r#"{"detail": "boom"}"#.to_owned()))
    })
    .await;
    let config = config(&proxy, &base, "[retain]\nevery_n_turns = 1\n");
    let d = Daemon::start(&config.replace("[hindsight]", "scoping = \"per-project\"\n[hindsight]"));
    d.start_session("s", "/src/Otter").await;
    d.start_session("t", "/src/Beaver").await;
    let turn = |n: &str| {
        [
            json!({"role": "user", "content": format!("otter turn {n}")}),
            json!({"role": "assistant", "content": format!("reply {n}")}),
        ]
    };
    let one: Vec<_> = turn("one CLEARED-7").into_iter().collect();
    assert_eq!(d.post("/v1/sessions/s/agent-end", json!({"messages": one})).await.0, 200);
    d.post("/v1/sessions/t/retain", json!({"items": [{"content": "beaver uses postgres"}]})).await;
    d.post("/v1/flush", json!({})).await;
    assert_eq!(wait_bank(&url, &beaver, 1).await, vec!["beaver uses postgres"]);
    let document = |id: &'static str| {
        let (url, otter) = (url.clone(), otter.clone());
        async move {
            let r = reqwest::get(format!("{url}/v1/default/banks/{otter}/documents/{id}")).await.unwrap();
            let v: serde_json::Value = r.json().await.unwrap_or_default();
            v["original_text"].as_str().unwrap_or_default().to_owned()
        }
    };
    for _ in 0..100 {
        if !document("s").await.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(document("s").await.contains("CLEARED-7"));

    let (status, v) = d.post("/v1/clear", json!({"all": true, "remote": true})).await;
    assert_eq!(status, 503, "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("{otter:?}")) && message.contains(&format!("Not cleared: {beaver:?}")),
        "{message}"
    );
    let (_, n) = d.get("/v1/notices?limit=100").await;
    assert!(n.to_string().contains("Clear: the backend failed"), "{n}");
    assert_eq!(document("s").await, "", "the otter bank was cleared");
    assert_eq!(bank_texts(&url, &beaver).await, vec!["beaver uses postgres"], "the beaver bank was not");

    // The session of the bank cleared goes on after the clear: its next turn alone.
    let mut two = one;
    two.extend(turn("two"));
    assert_eq!(d.post("/v1/sessions/s/agent-end", json!({"messages": two})).await.0, 200);
    d.post("/v1/flush", json!({})).await;
    for _ in 0..100 {
        if !document("s-part2").await.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(document("s-part2").await.contains("otter turn two"));
    assert_eq!(document("s").await, "", "the cleared turn stored again");
}

/// A clear while the server is down drops what is queued all the same: the answer and a notice
/// say so, rather than a bare "backend unavailable" read as if nothing had been cleared
/// (review82 #4). Needs no server: the port refuses connections.
#[tokio::test]
async fn a_clear_while_the_server_is_down_says_what_it_dropped() {
    let refusing = common::refusing_port();
    let d =
        Daemon::start(&config(&format!("http://{}", refusing.addr), "downclear", "[queue]\nflush_interval = \"1h\"\n"));
    d.start_session("b", "/p/downclear").await;
    let (status, v) = d.post("/v1/sessions/b/retain", json!({"items": [{"content": "queued while down"}]})).await;
    assert_eq!(status, 202, "{v}");
    let (status, v) = d.post("/v1/clear", json!({"session_id": "b", "remote": true})).await;
    assert_eq!(status, 503, "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("1 queued memory was dropped before it was stored"), "{message}");
    let (_, st) = d.get("/v1/status").await;
    assert_eq!(st["queue"]["spooled"], 0, "{st}");
    let (_, n) = d.get("/v1/notices?limit=100").await;
    assert!(n.to_string().contains("queued memory was dropped"), "{n}");
    // Counted, so that enqueued = delivered + dead + discarded + pending (review85 #2).
    let metrics = d.http.get(d.url("/metrics")).bearer_auth(&d.token).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("\nmneme_items_discarded_total 1\n"), "{metrics}");
}
