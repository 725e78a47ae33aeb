//! `<private>` spans never reach the disk or the log: retained through every path (HTTP tool
//! retains in content and context, automatic retain, MCP, the CLI, import), delivered, then the
//! raw bytes of every file in the storage dir (WAL files included) and the debug log are searched.

mod common;

use std::path::Path;

use common::Daemon;
use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::ServiceExt;
use serde_json::json;

/// Every secret is unique, so a hit names the path that leaked it.
fn secret(path: &str) -> String {
    format!("SECRET-{path}-{}", "q7x".repeat(3))
}

const PATHS: [&str; 20] = [
    "content",
    "context",
    "unclosed",
    "upper",
    "transcript",
    "transcript-unclosed",
    "crossing-open",
    "crossing-between",
    "crossing-close",
    "mcp",
    "cli",
    "import-content",
    "import-context",
    "import-metadata",
    "import-tag",
    "split-item",
    "prompt-split",
    "nested-inner",
    "nested-outer",
    "cut-tag",
];

/// Every file under `dir`, with its raw bytes.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files(&path));
        } else {
            out.push((path.display().to_string(), std::fs::read(&path).unwrap()));
        }
    }
    out
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[tokio::test]
async fn private_spans_reach_no_file_and_no_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("daemon.log");
    let d = Daemon::start_logged(
        dir,
        "[retain]\nevery_n_turns = 1\n[queue]\nflush_interval = \"100ms\"\n",
        &[("MNEME_LOG", "debug")],
        Some(&log),
    );
    d.start_session("s", "/p/privy").await;

    // Tool retains: content, context, another case, an unclosed span.
    let items = json!({"items": [
        {"content": format!("the build uses bazel <private>{}</private> remotely", secret("content")),
         "context": format!("ops <private>{}</private>", secret("context"))},
        {"content": format!("tabs not spaces <PRIVATE>{}</Private>", secret("upper"))},
        // Last: the items are read in order, and an unclosed span hides the items after it.
        {"content": format!("deploys need a VPN <private>{} and the rest", secret("unclosed"))},
    ]});
    let (status, v) = d.post("/v1/sessions/s/retain", items).await;
    assert_eq!(status, 202, "{v}");
    assert_eq!(v["queued"], 3, "{v}");

    // Automatic retain of a transcript.
    let messages = json!([
        {"role": "user", "content": format!("my key is <private>{}</private>, now fix the tests", secret("transcript"))},
        {"role": "assistant", "content": format!("Fixed. <private>{}", secret("transcript-unclosed"))},
        {"role": "user", "content": "thanks, the tests pass now"},
    ]);
    let (status, v) = d.post("/v1/sessions/s/agent-end", json!({"messages": messages})).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["retained"], 1, "{v}");
    // A span opened in one message and closed in a later one hides what lies between.
    d.start_session("c", "/p/privy").await;
    let messages = json!([
        {"role": "user", "content": format!("rotate the key <private>{}", secret("crossing-open"))},
        {"role": "assistant", "content": secret("crossing-between")},
        {"role": "user", "content": format!("{}</private> and say when it is rotated", secret("crossing-close"))},
        {"role": "assistant", "content": "Rotated: the crossing reply."},
    ]);
    let (status, v) = d.post("/v1/sessions/c/agent-end", json!({"messages": messages})).await;
    assert_eq!((status, &v["retained"]), (200, &json!(1)), "{v}");

    // A close tag whose opening tag was lost hides what precedes it: a span split across the
    // items of a document (the Hindsight API), a prompt sent apart from the message that opened
    // its span, a message cut through its opening tag; nested spans carried across messages.
    let split = json!({"items": [
        {"content": "notes <private>the key is", "document_id": "split-doc"},
        {"content": format!("{}</private> rotate monthly", secret("split-item")), "document_id": "split-doc",
         "update_mode": "append"},
    ]});
    let (status, v) = d.post("/hindsight/v1/default/banks/mneme/memories", split).await;
    assert!(status < 300, "{status} {v}");
    d.start_session("p", "/p/privy").await;
    let opened = json!([{"role": "user", "content": "my db password is <private>"}]);
    let prompt = format!("{}</private> now migrate", secret("prompt-split"));
    let (status, v) = d.post("/v1/sessions/p/agent-start", json!({"prompt": prompt, "messages": opened})).await;
    assert_eq!(status, 200, "{v}");
    let messages = json!([
        {"role": "user", "content": "<private> a <private> b"},
        {"role": "assistant", "content": format!("{} </private> {} </private> nested done",
            secret("nested-inner"), secret("nested-outer"))},
        {"role": "user", "content": format!("vate>{}</private> after the cut", secret("cut-tag"))},
    ]);
    let (status, v) = d.post("/v1/sessions/p/agent-end", json!({"messages": messages})).await;
    assert_eq!((status, &v["retained"]), (200, &json!(1)), "{v}");
    // A prompt inside a span its history left open: the session keeps it until the turn ends
    // (in the spool), and a client without replies (opencode) never ends it.
    d.start_session("q", "/p/privy").await;
    let opened =
        json!([{"role": "user", "content": "my creds follow <private>"}, {"role": "assistant", "content": "ok"}]);
    let prompt = format!("password={}", secret("prompt-inside"));
    let (status, v) = d.post("/v1/sessions/q/agent-start", json!({"prompt": prompt, "messages": opened})).await;
    assert_eq!(status, 200, "{v}");

    // MCP.
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(d.url("/mcp")).auth_header(d.token.clone()),
    );
    let client = ClientConfig::default().serve(transport).await.expect("initialize");
    let args = json!({"content": format!("mcp fact <private>{}</private>", secret("mcp")), "session_id": "s"});
    client
        .call_tool(CallToolRequestParams::new("retain").with_arguments(serde_json::from_value(args).unwrap()))
        .await
        .unwrap();

    // The CLI.
    let out = d
        .cli()
        .args(["retain", "--session", "s"])
        .arg(format!("cli fact <private>{}</private>", secret("cli")))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // Import.
    let memory = json!({
        "id": "imported-1", "bank": "mneme", "content": format!("imported fact <private>{}</private>", secret("import-content")),
        "context": format!("<private>{}</private>", secret("import-context")),
        "tags": ["project:privy", format!("<private>{}</private>", secret("import-tag"))],
        "metadata": {"note": format!("x <private>{}</private>", secret("import-metadata"))},
        "type": "world", "created_at": "2026-01-01T00:00:00Z"
    });
    let only_private = json!({"id": "imported-2", "bank": "mneme", "content": "<private>all of it</private>",
        "created_at": "2026-01-01T00:00:00Z"});
    let (status, v) = d.post("/v1/import", json!({"memories": [memory, only_private]})).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!((v["received"].as_u64(), v["imported"].as_u64(), v["skipped"].as_u64()), (Some(2), Some(1), Some(1)));

    let (_, v) = d.post("/v1/flush", json!({})).await;
    assert_eq!(v["failed"], 0, "{v}");
    // What is kept is still there: only the spans went.
    let (_, v) = d.post("/v1/sessions/s/recall", json!({"query": "bazel remotely"})).await;
    assert!(v["message"].as_str().unwrap().contains("the build uses bazel  remotely"), "{v}");
    let (_, v) = d.post("/v1/sessions/s/recall", json!({"query": "fix the tests pass"})).await;
    let message = v["message"].as_str().unwrap();
    assert!(message.contains("my key is , now fix the tests"), "{v}");
    // The assistant left its span open: the conversation after it stays hidden (fail closed).
    assert!(!message.contains("thanks, the tests pass now"), "{v}");
    let (_, v) = d.post("/v1/sessions/c/recall", json!({"query": "rotated crossing reply"})).await;
    let message = v["message"].as_str().unwrap();
    assert!(message.contains("rotate the key") && message.contains("and say when it is rotated"), "{v}");

    // The cut tag's close has no opening tag in the transcript: what precedes it is hidden, in
    // its message and in the messages before it, as in a single text.
    let (_, v) = d.post("/v1/sessions/p/recall", json!({"query": "nested done after the cut"})).await;
    let message = v["message"].as_str().unwrap();
    assert!(!message.contains("nested done") && message.contains("after the cut"), "{v}");
    let (_, v) = d.post("/v1/sessions/p/recall", json!({"query": "notes rotate monthly"})).await;
    assert!(v["message"].as_str().unwrap().contains("rotate monthly"), "{v}");

    // While the daemon runs (WAL files as they are) and after it stopped.
    let data = d.data();
    let check = |when: &str| {
        let all = files(&data);
        // A running daemon has its WAL files; a clean stop may checkpoint them into the
        // databases (searched too) and remove them.
        if when == "running" {
            assert!(all.iter().any(|(p, _)| p.ends_with("spool.db-wal")), "{when}: the WAL files are searched too");
        }
        for (path, bytes) in &all {
            assert!(!contains(bytes, "SECRET-"), "{when}: a secret is in {path}");
        }
    };
    check("running");
    let mut d = d;
    d.stop();
    check("stopped");
    let log = std::fs::read(&log).unwrap();
    assert!(contains(&log, "DEBUG"), "the daemon logged at debug level");
    for path in PATHS {
        assert!(!contains(&log, &secret(path)), "the log holds the {path} secret");
    }
}

/// A Hindsight server that answers every request (no memories, an empty reflection) and keeps
/// what it was sent: what a real server could log or store.
async fn recording_hindsight() -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use axum::body::Bytes;
    use axum::http::Uri;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = seen.clone();
    let app = axum::Router::new().fallback(move |uri: Uri, body: Bytes| {
        let kept = kept.clone();
        async move {
            kept.lock().unwrap().push(format!("{uri} {}", String::from_utf8_lossy(&body)));
            let path = uri.path().to_owned();
            axum::Json(if path.ends_with("/recall") {
                // What another client of the server stored with its private span.
                json!({"results": [{"id": "held-1", "type": "world",
                    "text": format!("the deploy key is kept in the vault <private>{}</private> by ops", secret("server-held"))},
                    // Fields the server makes, written by another of its clients.
                    {"id": format!("<private>{}</private>", secret("server-held")),
                     "type": format!("<private>{}</private>", secret("server-held")),
                     "mentioned_at": format!("<private>{}</private>", secret("server-held")),
                     "text": "the deploy key rotates monthly"}]})
            } else if path.ends_with("/reflect") {
                json!({"text": "nothing to say"})
            } else {
                json!({})
            })
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

#[tokio::test]
async fn recall_and_reflect_queries_reach_no_backend_with_private_spans() {
    let (url, seen) = recording_hindsight().await;
    let d = Daemon::start(&format!("[memory]\nbackend = \"hindsight\"\n[hindsight]\napi_url = \"{url}\"\n"));
    d.start_session("s", "/p/privy").await;
    let ask = |path: &str| format!("where is the deploy key <private>{}</private> kept", secret(path));
    let (status, v) = d.post("/v1/sessions/s/recall", json!({"query": ask("recall-tool")})).await;
    assert_eq!(status, 200);
    // A private span the server holds is not passed on: the rest of the memory is.
    assert!(v["message"].as_str().unwrap().contains("kept in the vault  by ops"), "{v}");
    assert!(!v.to_string().contains(&secret("server-held")), "{v}");
    let (status, _) = d
        .post(
            "/v1/sessions/s/reflect",
            json!({"query": ask("reflect-tool"), "context": format!("ctx <private>{}</private>", secret("reflect-context"))}),
        )
        .await;
    assert_eq!(status, 200);
    let (status, v) = d.post("/v1/sessions/s/agent-start", json!({"prompt": ask("first-turn")})).await;
    assert_eq!(status, 200);
    assert!(!v.to_string().contains(&secret("server-held")), "{v}");
    let (status, _) = d.post("/v1/search", json!({"query": ask("search")})).await;
    assert_eq!(status, 200);
    let (status, v) =
        d.post("/hindsight/v1/default/banks/mneme/memories/recall", json!({"query": ask("api-recall")})).await;
    assert_eq!(status, 200);
    assert!(v.to_string().contains("rotates monthly") && !v.to_string().contains(&secret("server-held")), "{v}");
    let (status, _) = d.post("/hindsight/v1/default/banks/mneme/reflect", json!({"query": ask("api-reflect")})).await;
    assert_eq!(status, 200);
    // Nothing but private text is refused, not sent.
    let (status, v) = d.post("/v1/sessions/s/recall", json!({"query": "<private>only this</private>"})).await;
    assert_eq!(status, 400, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("nothing was asked"), "{v}");

    let seen = seen.lock().unwrap().clone();
    let asked: Vec<&String> = seen.iter().filter(|r| r.contains("/recall") || r.contains("/reflect")).collect();
    assert_eq!(asked.len(), 6, "every query reached the server once: {asked:#?}");
    for r in &asked {
        assert!(r.contains("where is the deploy key"), "the rest of the query is asked: {r}");
    }
    for path in ["recall-tool", "reflect-tool", "reflect-context", "first-turn", "search", "api-recall", "api-reflect"]
    {
        assert!(!seen.iter().any(|r| r.contains(&secret(path))), "{path} leaked to the server: {seen:#?}");
    }
    assert!(!seen.iter().any(|r| r.contains("only this")), "{seen:#?}");
    // Nor are they kept here (the first turn's prompt waits in the session for its reply).
    d.post("/v1/flush", json!({})).await;
    for (file, bytes) in files(d.dir.path()) {
        for path in
            ["recall-tool", "reflect-tool", "reflect-context", "first-turn", "search", "api-recall", "server-held"]
        {
            assert!(!contains(&bytes, &secret(path)), "{path} was written to {file}");
        }
    }
}

/// A server (or a proxy before it) that says what it was sent, the token in its refusal: the
/// token is never repeated in what mneme answers, logs or notices.
#[tokio::test]
async fn a_refusal_that_repeats_the_token_does_not_pass_it_on() {
    use axum::http::{HeaderMap, StatusCode};
    let app = axum::Router::new().fallback(|headers: HeaderMap| async move {
        let sent = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
        (StatusCode::FORBIDDEN, axum::Json(json!({"detail": format!("forbidden for {sent}")})))
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let token = "TOKSECRET-q7xq7xq7x";
    let log = tempfile::NamedTempFile::new().unwrap();
    let config =
        format!("[memory]\nbackend = \"hindsight\"\n[hindsight]\napi_url = \"{url}\"\napi_token = \"{token}\"\n");
    let d = Daemon::start_logged(tempfile::tempdir().unwrap(), &config, &[("MNEME_LOG", "debug")], Some(log.path()));
    d.start_session("s", "/p/forbidden").await;
    let (status, v) = d.post("/v1/sessions/s/recall", json!({"query": "where is the deploy key"})).await;
    assert_eq!(status, 503, "{v}");
    assert!(v.to_string().contains("forbidden for Bearer ****") && !v.to_string().contains(token), "{v}");
    let (_, v) = d.post("/v1/sessions/s/retain", json!({"items": [{"content": "a fact"}]})).await;
    assert!(!v.to_string().contains(token), "{v}");
    d.post("/v1/flush", json!({})).await;
    let (_, notices) = d.get("/v1/notices").await;
    assert!(!notices.to_string().contains(token), "{notices}");
    assert!(!std::fs::read_to_string(log.path()).unwrap().contains(token), "the log");
}

/// Identifiers are stored and shown as they are, so one holding a `<private>` tag is refused
/// (cutting it would change what it names); free text beside them loses its spans; and nothing
/// of either reaches a file or the log, not even through the MCP library's own logging.
#[tokio::test]
async fn private_text_in_identifiers_is_refused_and_reaches_no_file_and_no_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("daemon.log");
    let d = Daemon::start_logged(dir, "", &[("MNEME_LOG", "debug")], Some(&log));
    let refused = |v: &serde_json::Value| v["error"]["message"].as_str().unwrap_or_default().contains("<private>");

    let session = |fields: serde_json::Value| {
        let mut body = json!({"session_id": "plain", "cwd": "/p/ids"});
        body.as_object_mut().unwrap().extend(fields.as_object().unwrap().clone());
        body
    };
    for (what, fields) in [
        ("session id", json!({"session_id": format!("sid<private>{}", secret("session-id"))})),
        ("session id, other case", json!({"session_id": format!("sid<PRIVATE x=1>{}", secret("session-id-case"))})),
        ("parent", json!({"parent_session_id": format!("p<private>{}</private>", secret("parent"))})),
        ("cwd", json!({"cwd": format!("/p/<private>{}</private>proj", secret("cwd"))})),
        ("tools", json!({"tools": {"recall": format!("<private>{}</private>rc", secret("tools"))}})),
    ] {
        let (status, v) = d.post("/v1/sessions", session(fields)).await;
        assert_eq!(status, 400, "{what}: {v}");
        assert!(refused(&v) && !v.to_string().contains("SECRET-"), "{what}: {v}");
    }
    let (status, v) = d
        .post("/v1/sessions", session(json!({"agent": format!("coder <private>{}</private>", secret("agent"))})))
        .await;
    assert_eq!(status, 200, "an agent name is free text: its span goes, the session starts: {v}");

    for (what, memory) in [
        ("id", json!({"id": format!("imp<private>{}", secret("import-id")), "bank": "mneme"})),
        ("bank", json!({"id": "imp-2", "bank": format!("bk<private>{}", secret("import-bank"))})),
    ] {
        let mut m = memory;
        m.as_object_mut()
            .unwrap()
            .extend([("content".to_owned(), json!("c")), ("created_at".to_owned(), json!("2026-01-01T00:00:00Z"))]);
        let (status, v) = d.post("/v1/import", json!({"memories": [m]})).await;
        assert_eq!(status, 400, "import {what}: {v}");
        assert!(refused(&v), "import {what}: {v}");
    }

    // Values a client's error would have repeated: an enum's, a cursor.
    let (status, v) = d
        .post(
            "/hindsight/v1/default/banks/hb/memories/recall",
            json!({"query": "x", "budget": format!("<private>{}</private>", secret("budget"))}),
        )
        .await;
    assert!((400..500).contains(&status) && !v.to_string().contains("SECRET-"), "budget: {v}");
    let memory = json!({"id": "imp-3", "bank": "mneme", "content": "c", "created_at": "2026-01-01T00:00:00Z",
        "type": format!("<private>{}</private>", secret("import-type"))});
    let (status, v) = d.post("/v1/import", json!({"memories": [memory]})).await;
    assert!((400..500).contains(&status) && !v.to_string().contains("SECRET-"), "type: {v}");
    let cursor = format!("%3Cprivate%3E{}", secret("cursor"));
    let (status, v) = d.get(&format!("/v1/export?cursor={cursor}")).await;
    assert!((400..500).contains(&status) && !v.to_string().contains("SECRET-"), "cursor: {v}");

    // The Hindsight API: a bank id in the path, a mental model's id.
    let bank = format!("bk%3Cprivate%3E{}", secret("hs-bank"));
    for (method, path, body) in [
        (
            reqwest::Method::POST,
            format!("/hindsight/v1/default/banks/{bank}/memories"),
            json!({"items": [{"content": "x"}]}),
        ),
        (reqwest::Method::PUT, format!("/hindsight/v1/default/banks/{bank}"), json!({})),
        (
            reqwest::Method::POST,
            "/hindsight/v1/default/banks/hb/mental-models".to_owned(),
            json!({"id": format!("mm<private>{}", secret("model-id")), "name": "n", "source_query": "q"}),
        ),
    ] {
        let (status, v) = d.req(method.clone(), &path, Some(body)).await;
        assert!((400..500).contains(&status), "{method} {path}: {status} {v}");
        assert!(!v.to_string().contains("SECRET-"), "{method} {path}: {v}");
    }

    // Looking up, listing or forgetting by such a name: refused, the name not repeated.
    let id = format!("m%3Cprivate%3E{}%3C%2Fprivate%3E", secret("lookup"));
    for (method, path, body) in [
        (reqwest::Method::GET, format!("/v1/memories/{id}"), None),
        (reqwest::Method::DELETE, format!("/v1/memories/{id}"), None),
        (reqwest::Method::DELETE, format!("/v1/documents/{id}?bank=mneme"), None),
        (reqwest::Method::GET, format!("/v1/memories?bank={id}"), None),
        (reqwest::Method::GET, format!("/v1/export?bank={id}"), None),
        (
            reqwest::Method::POST,
            "/v1/search".to_owned(),
            Some(json!({"query": "q", "bank": format!("b<private>{}", secret("lookup"))})),
        ),
    ] {
        let (status, v) = d.req(method.clone(), &path, body).await;
        assert_eq!(status, 400, "{method} {path}: {v}");
        assert!(refused(&v) && !v.to_string().contains("SECRET-"), "{method} {path}: {v}");
    }
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let path = format!("/hindsight/v1/default/banks/hb/mental-models/{id}");
        let (status, v) = d.req(method.clone(), &path, None).await;
        assert_eq!(status, 404, "{method} {path}: {v}");
        assert!(!v.to_string().contains("SECRET-"), "{method} {path}: {v}");
    }

    // MCP: the client's name (rmcp logs the client's `initialize`) and a session header.
    let headers = std::collections::HashMap::from([(
        reqwest::header::HeaderName::from_static("x-mneme-session"),
        reqwest::header::HeaderValue::from_str(&format!("hs<private>{}", secret("mcp-session"))).unwrap(),
    )]);
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(d.url("/mcp"))
            .auth_header(d.token.clone())
            .custom_headers(headers),
    );
    let mut info = ClientConfig::default();
    info.client_info.name = format!("<private>{}</private>", secret("mcp-client"));
    let client = info.serve(transport).await.expect("initialize");
    let r = client
        .call_tool(
            CallToolRequestParams::new("retain")
                .with_arguments(serde_json::from_value(json!({"content": "a fact"})).unwrap()),
        )
        .await;
    assert!(format!("{r:?}").contains("unknown session"), "{r:?}");
    let _ = client.cancel().await;

    let data = d.data();
    let mut d = d;
    d.stop();
    for (path, bytes) in files(&data) {
        assert!(!contains(&bytes, "SECRET-"), "a secret is in {path}");
    }
    let log = std::fs::read(&log).unwrap();
    assert!(contains(&log, "DEBUG"), "the daemon logged at debug level");
    assert!(!contains(&log, "SECRET-"), "the log holds a secret: {}", String::from_utf8_lossy(&log));
}

#[tokio::test]
async fn an_imported_memory_needs_a_real_date() {
    let d = Daemon::start("");
    for at in ["notadate", "2026-13-45T99:00:00Z", "yesterday", "0001-01-01T00:00:00+01:00"] {
        let m = json!({"id": "d-1", "bank": "mneme", "content": "dated fact", "created_at": at});
        let (status, v) = d.post("/v1/import", json!({"memories": [m]})).await;
        assert_eq!(status, 400, "{at}: {v}");
        assert!(v["error"]["message"].as_str().unwrap().contains("memories[0].created_at"), "{at}: {v}");
    }
    // An offset, and no date at all (what a Hindsight server gives a memory it has no date for),
    // empty or null (as an export writes its other empty fields).
    for (i, at) in [json!("2026-01-02T03:04:05.123+01:00"), json!(""), json!(null)].iter().enumerate() {
        let m =
            json!({"id": format!("d-ok-{i}"), "bank": "mneme", "content": format!("dated fact {i}"), "created_at": at});
        let (status, v) = d.post("/v1/import", json!({"memories": [m]})).await;
        assert_eq!((status, &v["imported"]), (200, &json!(1)), "{at}: {v}");
    }
    // Stored as every date is: RFC 3339 UTC with milliseconds; none is the time of the import.
    let (_, v) = d.get("/v1/memories/d-ok-0?bank=mneme").await;
    assert_eq!(v["memory"]["created_at"], "2026-01-02T02:04:05.123Z", "{v}");
    let (_, v) = d.get("/v1/memories/d-ok-1?bank=mneme").await;
    let at = v["memory"]["created_at"].as_str().unwrap_or_default().to_owned();
    assert!(at.starts_with("20") && at.ends_with('Z') && at.len() == 24, "{v}");
}

#[tokio::test]
async fn ids_a_client_chose_cannot_forge_log_lines_or_leak_into_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("daemon.log");
    let d = Daemon::start_logged(dir, "", &[("MNEME_LOG", "debug")], Some(&log));
    // A memory whose id holds a line break and an escape sequence, forgotten: the notice quotes it.
    let id = "forge\nERROR FORGED-LINE \u{1b}[2J";
    let memory =
        json!({"id": id, "bank": "mneme", "content": "a note to forget", "created_at": "2026-01-01T00:00:00Z"});
    let (status, v) = d.post("/v1/import", json!({"memories": [memory]})).await;
    assert_eq!(status, 200, "{v}");
    let path = format!("/v1/memories/{}", urlencoding(id));
    let (status, v) = d.req(reqwest::Method::DELETE, &path, None).await;
    assert_eq!(status, 200, "{v}");
    // An MCP request whose JSON-RPC id holds private text, refused by the MCP library.
    let mcp = |body: serde_json::Value, session: Option<&str>| {
        let mut r = d
            .http
            .post(d.url("/mcp"))
            .bearer_auth(&d.token)
            .header("accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(s) = session {
            r = r.header("mcp-session-id", s);
        }
        r.send()
    };
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
        "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let r = mcp(init, None).await.unwrap();
    let session = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let _ = r.text().await;
    let _ = mcp(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}), Some(&session)).await.unwrap();
    let odd = json!({"jsonrpc": "2.0", "id": "<private>SECRET-RPCID</private>", "method": "no/such/method"});
    let _ = mcp(odd, Some(&session)).await.unwrap().text().await;
    let mut d = d;
    d.stop();
    let log = String::from_utf8_lossy(&std::fs::read(&log).unwrap()).into_owned();
    assert!(log.contains("FORGED-LINE"), "the notice was logged");
    assert!(!log.lines().any(|l| l.starts_with("ERROR FORGED-LINE")), "a forged line: {log}");
    assert!(!log.contains('\u{1b}'), "an escape sequence reached the log");
    assert!(!log.contains("SECRET-RPCID"), "the JSON-RPC id reached the log");
}

fn urlencoding(s: &str) -> String {
    s.bytes().map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") }).collect()
}

/// What is forgotten or cleared leaves no readable trace in any of the daemon's files: the
/// store's and the spool's logs included (the spool's kept the delivered text in old frames).
#[tokio::test]
async fn forgotten_and_cleared_text_is_in_no_file() {
    let d = Daemon::start("[queue]\nflush_interval = \"1h\"\n");
    d.start_session("s", "/tmp/forgetful").await;
    let retain = |text: &'static str| d.post("/v1/sessions/s/retain", json!({"items": [{"content": text}]}));
    let (status, _) = retain("the door code is FORGOTTEN-7731").await;
    assert_eq!(status, 202);
    let (_, v) = d.post("/v1/flush", json!({})).await;
    assert_eq!(v["delivered"], 1, "{v}");
    let (_, listed) = d.get("/v1/memories?limit=10").await;
    let id = listed["memories"][0]["id"].as_str().unwrap().to_owned();
    // Another session of the project has it in its instructions and its first-turn block, which
    // it keeps (saved in the spool) and serves with every prompt.
    d.start_session("t", "/tmp/forgetful").await;
    let (_, v) = d.post("/v1/sessions/t/agent-start", json!({"prompt": "what is the door code?"})).await;
    assert!(v.to_string().contains("FORGOTTEN-7731"), "recalled: {v}");
    let (_, v) = d.get("/v1/sessions/t/instructions").await;
    assert!(v.to_string().contains("FORGOTTEN-7731"), "in the instructions: {v}");
    let gone = d.http.delete(d.url(&format!("/v1/memories/{id}"))).bearer_auth(&d.token).send().await.unwrap();
    assert_eq!(gone.status(), 200);
    let (_, v) = d.get("/v1/sessions/t/instructions").await;
    assert!(!v.to_string().contains("FORGOTTEN-7731"), "still served: {v}");
    for (path, bytes) in files(&d.data()) {
        assert!(!contains(&bytes, "FORGOTTEN-7731"), "forgotten text is in {path}");
    }
    // Cleared: delivered and still queued alike.
    assert_eq!(retain("the vault code is CLEARED-4412").await.0, 202);
    let (_, v) = d.post("/v1/flush", json!({})).await;
    assert_eq!(v["delivered"], 1, "{v}");
    assert_eq!(retain("the safe code is QUEUED-9905").await.0, 202);
    let (status, v) = d.post("/v1/clear", json!({"all": true})).await;
    assert_eq!(status, 200, "{v}");
    for (path, bytes) in files(&d.data()) {
        for text in ["CLEARED-4412", "QUEUED-9905"] {
            assert!(!contains(&bytes, text), "cleared text {text} is in {path}");
        }
    }
}

/// A value refused for its type or form is not repeated when it holds a `<private>` span, on
/// every route that quotes what it refuses; also when the quoting escapes the tag (serde writes a
/// tab as `\t`, and `<private\tx>` no longer read as a tag in the message).
#[tokio::test]
async fn refused_values_holding_private_spans_are_not_repeated() {
    let d = Daemon::start("");
    d.start_session("s", "/p/refused").await;
    let hidden = |n: usize| format!("<private>{}</private>", secret(&format!("refused-{n}")));
    let cases: Vec<(reqwest::Method, String, Option<serde_json::Value>)> = vec![
        (reqwest::Method::POST, "/v1/flush".into(), Some(json!({"wait": hidden(1)}))),
        (reqwest::Method::POST, "/v1/clear".into(), Some(json!({"all": hidden(2)}))),
        (reqwest::Method::POST, "/v1/sessions/s/retain".into(), Some(json!({"items": hidden(3)}))),
        (
            reqwest::Method::POST,
            "/v1/sessions/s/retain".into(),
            Some(json!({"items": format!("<private\tx>{}</private>", secret("refused-tab"))})),
        ),
        (
            reqwest::Method::POST,
            "/v1/search".into(),
            Some(json!({"query": "x", "max_tokens": format!("<private\nx>{}", secret("refused-newline"))})),
        ),
        (reqwest::Method::PUT, "/hindsight/v1/default/banks/b".into(), Some(json!({"disposition": hidden(4)}))),
        // A value hidden by a span an earlier value opens, with no tag of its own.
        (
            reqwest::Method::POST,
            "/v1/sessions/s/retain".into(),
            Some(
                json!({"items": [{"content": "my key: <private>"}, secret("refused-carried"), {"content": "</private> ok"}]}),
            ),
        ),
        (
            reqwest::Method::POST,
            "/v1/sessions/s/agent-end".into(),
            Some(json!({"messages": [{"role": "user", "content": "my key: <private>"}, secret("refused-message")]})),
        ),
        (
            reqwest::Method::POST,
            "/hindsight/v1/default/banks/b/memories".into(),
            Some(json!({"items": [{"content": "my key: \u{3c}private>"}, secret("refused-item")]})),
        ),
        (
            reqwest::Method::GET,
            format!("/hindsight/v1/default/banks/b/mental-models?detail={}", urlencoding(&hidden(5))),
            None,
        ),
    ];
    // A header's value too, where the answer names it.
    let r = d
        .http
        .get(d.url("/v1/health"))
        .header("content-encoding", format!("<private>{}</private>", secret("encoding")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 415);
    let body = r.text().await.unwrap();
    assert!(!body.contains("SECRET-"), "{body}");
    for (method, path, body) in cases {
        let (status, v) = d.req(method, &path, body).await;
        assert!((400..500).contains(&status), "{path}: {status} {v}");
        let message = v["error"]["message"].as_str().unwrap_or_else(|| panic!("{path}: {v}"));
        assert!(!v.to_string().contains("SECRET-"), "{path}: {v}");
        assert!(message.contains("not repeated"), "{path}: {message}");
    }
}

/// So when the tags are escaped (`\u003cprivate\u003e`) and the body also holds half an emoji
/// (`\ud83d`): the body as sent is no JSON serde reads, so the escaped tags went unseen, and the
/// error quoted the value the span hides (review51 #5).
#[tokio::test]
async fn a_refused_value_in_an_escaped_span_is_not_repeated_beside_half_an_emoji() {
    let d = Daemon::start("[local]\nembedder = \"off\"\n");
    d.start_session("s", "/p/refused").await;
    let hidden = secret("escaped-span");
    for tail in ["", " \\ud83d"] {
        let body = format!(
            r#"{{"items": [{{"content": "\u003cprivate\u003e the vault password follows"}}, "{hidden}", {{"content": "\u003c/private\u003e that was it{tail}"}}]}}"#
        );
        let r = d
            .http
            .post(d.url("/v1/sessions/s/retain"))
            .bearer_auth(&d.token)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 422, "{tail:?}");
        let text = r.text().await.unwrap();
        assert!(!text.contains("SECRET-") && text.contains("not repeated"), "{tail:?}: {text}");
    }
}

/// A filter tag holding a private span is refused, not sent to the backend (a server that may
/// log what it is asked), on every route that filters by tags.
#[tokio::test]
async fn filter_tags_holding_private_spans_are_refused() {
    let d = Daemon::start("");
    let tag = format!("<private>{}</private>", secret("filter-tag"));
    let cases: Vec<(reqwest::Method, String, Option<serde_json::Value>)> = vec![
        (reqwest::Method::POST, "/v1/search".into(), Some(json!({"query": "deploy", "tags": [tag]}))),
        (reqwest::Method::GET, format!("/v1/memories?tags={}", urlencoding(&tag)), None),
        (
            reqwest::Method::POST,
            "/hindsight/v1/default/banks/b/memories/recall".into(),
            Some(json!({"query": "deploy", "tags": [tag]})),
        ),
        (
            reqwest::Method::POST,
            "/hindsight/v1/default/banks/b/reflect".into(),
            Some(json!({"query": "deploy", "tags": [tag]})),
        ),
    ];
    for (method, path, body) in cases {
        let (status, v) = d.req(method, &path, body).await;
        assert!((400..500).contains(&status), "{path}: {status} {v}");
        assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains("tags")), "{path}: {v}");
        assert!(!v.to_string().contains("SECRET-"), "{path}: {v}");
    }
}

/// A first-turn recall that was asked before a forget and answered after it is not kept: its
/// block may quote what was forgotten, and a session keeps its block (serving it with every
/// prompt, saving it in the spool).
#[tokio::test]
async fn a_recall_overtaken_by_a_forget_is_not_kept() {
    // A Hindsight server whose recall takes 800 ms and finds the memory.
    let app = axum::Router::new().fallback(|uri: axum::http::Uri| async move {
        if uri.path().ends_with("/recall") {
            tokio::time::sleep(std::time::Duration::from_millis(800)).await;
            return axum::Json(
                json!({"results": [{"id": "x", "text": "the door code is OVERTAKEN-5521", "type": "world"}]}),
            );
        }
        axum::Json(json!({"success": true}))
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let d = Daemon::start(&format!("[memory]\nbackend = \"hindsight\"\n[hindsight]\napi_url = \"{url}\"\n"));
    d.start_session("s", "/p/overtaken").await;
    let (started, forgot) =
        tokio::join!(d.post("/v1/sessions/s/agent-start", json!({"prompt": "what is the door code?"})), async {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            d.req(reqwest::Method::DELETE, "/v1/documents/d?bank=mneme", None).await
        });
    assert_eq!(started.0, 200, "{:?}", started);
    assert_eq!(forgot.0, 200, "{:?}", forgot);
    let (_, v) = d.get("/v1/sessions/s/instructions").await;
    assert!(!v.to_string().contains("OVERTAKEN-5521"), "kept: {v}");
    // A clear of another session of the same scope, likewise (it counted as no forget).
    d.start_session("t", "/p/overtaken").await;
    d.start_session("u", "/p/overtaken").await;
    let (started, cleared) =
        tokio::join!(d.post("/v1/sessions/t/agent-start", json!({"prompt": "what is the door code?"})), async {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            d.post("/v1/clear", json!({"session_id": "u"})).await
        });
    assert_eq!((started.0, cleared.0), (200, 200), "{started:?} {cleared:?}");
    let (_, v) = d.get("/v1/sessions/t/instructions").await;
    assert!(!v.to_string().contains("OVERTAKEN-5521"), "kept after the clear: {v}");
}

/// A daemon retaining every turn, the embedder off, with session `id` started.
async fn every_turn_daemon(id: &str) -> Daemon {
    let d = Daemon::start("[retain]\nevery_n_turns = 1\n[local]\nembedder = \"off\"\n");
    d.start_session(id, &format!("/tmp/{id}-alone")).await;
    d
}

/// One turn of session `id` from a client that sends each turn alone: its prompt at the start,
/// its reply at the end, and no history.
async fn turn_alone(d: &Daemon, id: &str, prompt: &str, reply: &str, last: bool) {
    let (status, v) =
        d.post(&format!("/v1/sessions/{id}/agent-start"), json!({"prompt": prompt, "messages": []})).await;
    assert_eq!(status, 200, "{v}");
    let end = json!({"messages": [], "reply": reply, "ends_session": last});
    let (status, v) = d.post(&format!("/v1/sessions/{id}/agent-end"), end).await;
    assert_eq!(status, 200, "{v}");
}

/// A span opened in one turn's prompt and closed in a later turn's, by a client that sends each
/// turn as its prompt and its reply (no history): the prompt was kept cleaned, without its
/// closing tag, so its turn and every later one were read inside the span and never retained
/// (review80 #1). Also a prompt that closes one of two spans: the rest stays hidden until closed.
#[tokio::test]
async fn a_span_a_later_prompt_closes_ends_there_for_a_prompt_and_reply_client() {
    let d = every_turn_daemon("s1").await;
    let turn = |prompt, reply, last| turn_alone(&d, "s1", prompt, reply, last);
    turn("please remember <private>my password is HUNTER-2207", "Understood.", false).await;
    turn("that was all </private> now: how do we deploy?", "We deploy with cargo-dist.", false).await;
    turn("and <private>keys <private>nested-SECRET-1", "Noted.", false).await;
    turn("first one </private> still-SECRET-2", "Still inside.", false).await;
    turn("done </private> which database do we use?", "PostgreSQL 16.", true).await;
    let (_, v) = d.post("/v1/flush", json!({})).await;
    assert_eq!(v["failed"], 0, "{v}");
    let (_, v) = d.get("/v1/export").await;
    let stored = v.to_string();
    for kept in ["please remember", "how do we deploy?", "cargo-dist", "which database do we use?", "PostgreSQL 16"] {
        assert!(stored.contains(kept), "{kept} not stored: {stored}");
    }
    for hidden in ["HUNTER-2207", "Understood", "nested-SECRET-1", "still-SECRET-2", "Still inside", "Noted"] {
        assert!(!stored.contains(hidden), "{hidden} stored: {stored}");
    }
    for (path, bytes) in files(&d.data()) {
        for hidden in ["HUNTER-2207", "nested-SECRET-1", "still-SECRET-2"] {
            assert!(!contains(&bytes, hidden), "{hidden} is in {path}");
        }
    }
}

/// A session mixing whole histories and turns sent alone (the Claude Code Stop hook sends one
/// when it cannot read the transcript), with a span opened in a whole history's turn and closed
/// in a later one's: the close ends the span, and the turns after it are retained. The turn sent
/// alone inside the span began a part of its own, from which the next whole history was read:
/// the span was counted twice, its close closed one of two, and every later turn was stored as
/// nothing (review84 #2). Nothing inside the span is stored.
#[tokio::test]
async fn a_span_closed_in_a_whole_history_after_a_turn_sent_alone_ends_there() {
    let d = every_turn_daemon("w1").await;
    let m = |role: &str, text: &str| json!({"role": role, "content": text});
    let whole = |prompt: &'static str, history: Vec<serde_json::Value>, reply: &'static str, last: bool| {
        let d = &d;
        async move {
            let start = json!({"prompt": prompt, "messages": history});
            let (status, v) = d.post("/v1/sessions/w1/agent-start", start).await;
            assert_eq!(status, 200, "{v}");
            let mut history = history;
            history.push(json!({"role": "user", "content": prompt}));
            history.push(json!({"role": "assistant", "content": reply}));
            let end = json!({"messages": history, "ends_session": last});
            let (status, v) = d.post("/v1/sessions/w1/agent-end", end).await;
            assert_eq!(status, 200, "{v}");
        }
    };
    let p1 = "alpha topic <private> MIXED-SECRET-1 hidden";
    let p3 = "MIXED-SECRET-3 more </private> public three";
    whole(p1, vec![], "MIXED-SECRET-1b answer", false).await;
    turn_alone(&d, "w1", "MIXED-SECRET-2 still inside", "MIXED-SECRET-2b reply", false).await;
    let two = vec![
        m("user", p1),
        m("assistant", "MIXED-SECRET-1b answer"),
        m("user", "MIXED-SECRET-2 still inside"),
        m("assistant", "MIXED-SECRET-2b reply"),
    ];
    whole(p3, two.clone(), "reply three", false).await;
    turn_alone(&d, "w1", "public four", "reply four", false).await;
    let mut four = two;
    four.extend([m("user", p3), m("assistant", "reply three"), m("user", "public four"), m("assistant", "reply four")]);
    whole("public five", four, "reply five", true).await;
    let (_, v) = d.post("/v1/flush", json!({})).await;
    assert_eq!(v["failed"], 0, "{v}");
    let (_, v) = d.get("/v1/export?limit=100").await;
    let stored = v.to_string();
    for kept in ["alpha topic", "public three", "reply three", "public four", "reply four", "public five", "reply five"]
    {
        assert_eq!(stored.matches(kept).count(), 1, "{kept} stored once: {stored}");
    }
    assert!(!stored.contains("MIXED-SECRET"), "{stored}");
    for (path, bytes) in files(&d.data()) {
        assert!(!contains(&bytes, "MIXED-SECRET"), "in {path}");
    }
}

/// A turn sent alone (prompt, then the reply with no history) whose prompt is a slash command is
/// retained as its turn: left out as a transcript's command is, the reply had no prompt and was
/// never stored (review83 #4). Its private arguments are not.
#[tokio::test]
async fn a_slash_command_sent_alone_is_retained_without_its_private_arguments() {
    let d = every_turn_daemon("c1").await;
    let turn = |prompt, reply, last| turn_alone(&d, "c1", prompt, reply, last);
    turn("how is the parser?", "It is fine.", false).await;
    turn("/review the parser", "Review: the parser leaks file handles in parse_block.", false).await;
    turn("/deploy <private>CMD-SECRET-77</private> staging", "Deployed to staging.", false).await;
    turn("thanks", "You are welcome.", true).await;
    let (_, v) = d.post("/v1/flush", json!({})).await;
    assert_eq!(v["failed"], 0, "{v}");
    let (_, v) = d.get("/v1/export").await;
    let stored = v.to_string();
    for kept in ["/review the parser", "leaks file handles", "Deployed to staging", "You are welcome"] {
        assert_eq!(stored.matches(kept).count(), 1, "{kept}: {stored}");
    }
    assert!(!stored.contains("CMD-SECRET-77"), "{stored}");
    for (path, bytes) in files(&d.data()) {
        assert!(!contains(&bytes, "CMD-SECRET-77"), "in {path}");
    }
}

/// `MNEME_LOG` naming the MCP library (`rmcp=debug`, the obvious way to debug an MCP client, or
/// a span of its) does not bring its logging of requests as sent, `<private>` spans included:
/// it is held at error, and the daemon says so at its start (review113 #5).
#[tokio::test]
async fn naming_the_mcp_library_in_mneme_log_logs_no_private_text() {
    for asked in ["debug,rmcp=trace", "info,[serve_inner]=trace"] {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("daemon.log");
        let mut d = Daemon::start_logged(dir, "", &[("MNEME_LOG", asked)], Some(&log));
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(d.url("/mcp")).auth_header(d.token.clone()),
        );
        let mut info = ClientConfig::default();
        info.client_info.name = "<private>SECRET-client</private>".into();
        let client = info.serve(transport).await.expect("initialize");
        // Refused (no such session) after rmcp read it: the request is what it logs.
        let args = json!({"content": "mcp fact <private>SECRET-tool</private>", "session_id": "s"});
        let r = client
            .call_tool(CallToolRequestParams::new("retain").with_arguments(serde_json::from_value(args).unwrap()))
            .await;
        assert!(format!("{r:?}").contains("unknown session"), "{r:?}");
        let _ = client.cancel().await;
        d.stop();
        let log = std::fs::read_to_string(&log).unwrap();
        assert!(log.contains("INFO"), "{asked}: the daemon logged: {log}");
        assert!(!log.contains("SECRET-"), "{asked}: the log holds a secret: {log}");
        if asked.contains("rmcp") {
            assert!(log.contains("whose logs are held at error whatever is asked"), "{asked}: {log}");
        }
    }
}
