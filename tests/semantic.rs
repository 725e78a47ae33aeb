//! Semantic recall through the daemon: on by default with the built-in model (nothing to set
//! up), progress in `/v1/status` and `/metrics`; an `openai` embedder that cannot be reached
//! leaves recall to BM25 with one notice; a half-configured one is refused naming the key.

mod common;

use std::time::{Duration, Instant};

use common::Daemon;
use serde_json::{json, Value};

async fn wait_embedded(d: &Daemon) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, v) = d.get("/v1/status").await;
        let e = v["backend"]["embedding"].clone();
        if e["state"] == "ready"
            && e["embedded"] == e["passages"]
            && e["banks_measuring"] == 0
            && e["passages"].as_u64() > Some(0)
        {
            return e;
        }
        assert!(Instant::now() < deadline, "not embedded: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

async fn metrics(d: &Daemon) -> String {
    d.http.get(d.url("/metrics")).bearer_auth(&d.token).send().await.unwrap().text().await.unwrap()
}

#[tokio::test]
async fn the_default_daemon_recalls_by_meaning() {
    let d = Daemon::start("");
    let cwd = tempfile::tempdir().unwrap();
    d.start_session("s1", cwd.path().to_str().unwrap()).await;
    let items: Vec<Value> = [
        "We deploy with cargo-dist.",
        "Use tabs, not spaces, in the Makefile.",
        "The staging database is reset every Sunday night.",
        "Alice owns the billing service.",
        "Integration tests need Docker running locally.",
    ]
    .iter()
    .map(|t| json!({"content": t}))
    .collect();
    d.post("/v1/sessions/s1/retain", json!({"items": items})).await;
    d.post("/v1/flush", json!({})).await;
    let e = wait_embedded(&d).await;
    assert_eq!(e["model"], "builtin:all-MiniLM-L6-v2-int8");
    assert_eq!(e["embedded"], 5);
    let (_, v) = d.post("/v1/sessions/s1/recall", json!({"query": "how do we ship a release?"})).await;
    assert_eq!(v["results"][0]["text"], "We deploy with cargo-dist.", "{v}");
    let m = metrics(&d).await;
    for line in [
        "mneme_embedding_passages 5",
        "mneme_embedding_embedded 5",
        "mneme_embedding_ready 1",
        "mneme_embedding_banks_measuring 0",
    ] {
        assert!(m.lines().any(|l| l == line), "{line} not in\n{m}");
    }
    let out = d.cli().arg("status").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("semantic: ready (builtin:all-MiniLM-L6-v2-int8), 5 of 5 passages embedded (100%)"),
        "{text}"
    );
}

#[tokio::test]
async fn an_unreachable_embedder_leaves_recall_to_bm25_with_one_notice() {
    // A port nothing listens on.
    let refusing = common::refusing_port();
    let closed = refusing.addr;
    let d = Daemon::start(&format!(
        "[local]\nembedder = \"openai\"\nembedding_url = \"http://bob:hunter2@{closed}/v1\"\nembedding_model = \"nomic-embed-text\"\nembedding_api_key = \"sk-very-secret\"\n"
    ));
    let cwd = tempfile::tempdir().unwrap();
    d.start_session("s1", cwd.path().to_str().unwrap()).await;
    let (status, _) = d
        .post("/v1/sessions/s1/retain", json!({"items": [{"content": "The walrus service listens on port 7070"}]}))
        .await;
    assert_eq!(status, 202);
    let (_, flushed) = d.post("/v1/flush", json!({})).await;
    assert_eq!(flushed, json!({"delivered": 1, "failed": 0}));
    for _ in 0..3 {
        let (status, v) = d.post("/v1/sessions/s1/recall", json!({"query": "which port does walrus use?"})).await;
        assert_eq!(status, 200);
        assert_eq!(v["results"][0]["text"], "The walrus service listens on port 7070", "{v}");
    }
    // The embedding thread finds the endpoint down on its own time (under load, after the
    // recalls above): wait for it to say so.
    let mut v = d.get("/v1/status").await.1;
    for _ in 0..100 {
        if v["backend"]["embedding"]["state"] == "unavailable" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        v = d.get("/v1/status").await.1;
    }
    let e = &v["backend"]["embedding"];
    assert_eq!(e["state"], "unavailable", "{v}");
    assert_eq!(e["embedded"], 0);
    let (_, v) = d.get("/v1/notices?after=0").await;
    let about: Vec<&Value> = v["notices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["message"].as_str().unwrap().contains("semantic recall"))
        .collect();
    assert_eq!(about.len(), 1, "one notice for the outage: {v}");
    assert_eq!(about[0]["level"], "warning");
    assert!(!v.to_string().contains("sk-very-secret"));
    assert!(metrics(&d).await.lines().any(|l| l == "mneme_embedding_ready 0"));
    // doctor says so too (it said "All is well." with the endpoint refusing every request).
    let doctor = d.cli().arg("doctor").output().unwrap();
    let said = String::from_utf8_lossy(&doctor.stdout);
    assert_eq!(doctor.status.code(), Some(1), "{said}");
    assert!(said.contains("semantic recall is unavailable") && !said.contains("sk-very-secret"), "{said}");
    // Neither the key nor a password in the URL is shown or stored (the model id is stored).
    let (_, status) = d.get("/v1/status").await;
    let cli = d.cli().arg("status").output().unwrap();
    let shown = format!("{v}{status}{}", String::from_utf8_lossy(&cli.stdout));
    assert!(shown.contains(&format!("http://{closed}/v1/embeddings")), "{shown}");
    for secret in ["hunter2", "bob", "sk-very-secret"] {
        assert!(!shown.contains(secret), "{secret} shown: {shown}");
    }
    for entry in walk(d.dir.path()).into_iter().filter(|p| !p.ends_with("config.toml")) {
        let bytes = std::fs::read(&entry).unwrap();
        assert!(!bytes.windows(7).any(|w| w == b"hunter2"), "the password is in {}", entry.display());
    }
}

/// One outage is told once though the store is reopened during it (a thesaurus edit, a timeout
/// raised), and switching the embedder off closes it: each reopen told it again, and the last
/// notice stayed a warning for an embedder no longer in use (review121 #1).
#[tokio::test]
async fn an_outage_is_told_once_across_reopens_and_closed_by_a_switch() {
    let refusing = common::refusing_port();
    let base = format!(
        "[local]\nembedder = \"openai\"\nembedding_url = \"http://{}/v1\"\nembedding_model = \"m\"\n",
        refusing.addr
    );
    let d = Daemon::start(&base);
    d.cli().args(["retain", "The walrus service listens on port 7070"]).assert().success();
    d.cli().arg("flush").assert().success();
    let outage_notices = |v: &Value| {
        let notices = v["notices"].as_array().unwrap();
        notices.iter().filter(|n| n["message"].as_str().unwrap().contains("semantic recall is unavailable")).count()
    };
    let told_within_10_s = |needle: &'static str| {
        let d = &d;
        async move {
            for _ in 0..100 {
                let (_, v) = d.get("/v1/notices?after=0").await;
                if v.to_string().contains(needle) {
                    return v;
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            panic!("never told {needle:?}: {:?}", d.get("/v1/notices?after=0").await.1);
        }
    };
    told_within_10_s("semantic recall is unavailable").await;
    for timeout in ["20s", "25s"] {
        std::fs::write(d.config_path(), format!("{base}embedding_timeout = \"{timeout}\"\n")).unwrap();
        d.cli().arg("reload").assert().success();
        // The store reopened finds the endpoint down again.
        for _ in 0..100 {
            if d.get("/v1/status").await.1["backend"]["embedding"]["state"] == "unavailable" {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    let (_, v) = d.get("/v1/notices?after=0").await;
    assert_eq!(outage_notices(&v), 1, "one outage, told once: {v}");
    // A switch refused for a store that cannot be opened leaves the outage as told
    // (review123 #3: closed before the store was opened).
    let garbage = d.dir.path().join("garbage.db");
    std::fs::write(&garbage, "not a database, and long enough to be read as one's header, surely").unwrap();
    let refused = format!("[local]\nembedder = \"off\"\npath = {:?}\n", garbage.display().to_string());
    std::fs::write(d.config_path(), refused).unwrap();
    d.cli().arg("reload").assert().failure();
    let (_, v) = d.get("/v1/notices?after=0").await;
    assert!(!v.to_string().contains("no longer applies"), "closed by a refused switch: {v}");
    std::fs::write(d.config_path(), "[local]\nembedder = \"off\"\n").unwrap();
    d.cli().arg("reload").assert().success();
    let v = told_within_10_s("no longer applies").await;
    let last = v["notices"].as_array().unwrap().iter().rfind(|n| n["source"] == "local").unwrap().clone();
    assert_eq!(last["level"], "info", "the outage's last word is its end: {v}");
}

/// SIGTERM ends the daemon after its drain even while a question's vector is still asked of an
/// endpoint that hangs: the process waited for that call's own timeout (29 s of a 30 s
/// `embedding_timeout`, after "mneme stopped").
#[tokio::test]
async fn a_hung_question_does_not_hold_the_daemon_past_its_drain() {
    let hung = common::never_answering().await;
    let mut d = Daemon::start(&format!(
        "[local]\nembedder = \"openai\"\nembedding_url = \"http://{hung}/v1\"\nembedding_model = \"m\"\nembedding_timeout = \"60s\"\n"
    ));
    // The embedder loaded first, so that the search asks it (and hangs on it) for the question.
    for _ in 0..100 {
        if d.get("/v1/status").await.1["backend"]["embedding"]["state"] == "ready" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let t = std::time::Instant::now();
    let (status, _) = d.post("/v1/search", json!({"query": "which port does walrus use?"})).await;
    assert_eq!(status, 200);
    assert!(t.elapsed() >= std::time::Duration::from_millis(900), "the question was not asked of the endpoint");
    let t = std::time::Instant::now();
    let stopped = d.stop();
    assert!(stopped.success(), "{stopped:?}");
    assert!(t.elapsed() < std::time::Duration::from_secs(15), "stopped after {:?}", t.elapsed());
}

/// What an endpoint says is shown by doctor with its control characters escaped, as status
/// shows it (an escape sequence in a 401's body reached the terminal).
#[tokio::test]
async fn doctor_shows_an_endpoints_words_escaped() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0; 65536];
                let _ = s.read(&mut buf).await;
                let body = "denied \u{1b}[2J\u{1b}[31mRED";
                let answer = format!(
                    "HTTP/1.1 401 Unauthorized\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(answer.as_bytes()).await;
            });
        }
    });
    let d = Daemon::start(&format!(
        "[local]\nembedder = \"openai\"\nembedding_url = \"http://{addr}/v1\"\nembedding_model = \"m\"\n"
    ));
    d.cli().args(["retain", "the walrus listens on 7070"]).assert().success();
    d.cli().arg("flush").assert().success();
    let mut said = String::new();
    for _ in 0..100 {
        let doctor = d.cli().arg("doctor").output().unwrap();
        said = String::from_utf8_lossy(&doctor.stdout).into_owned();
        if said.contains("semantic recall is unavailable") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(said.contains("semantic recall is unavailable") && said.contains("RED"), "{said}");
    assert!(!said.contains('\u{1b}'), "{said:?}");
}

#[test]
fn an_openai_embedder_without_its_url_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "[local]\nembedder = \"openai\"\nembedding_model = \"m\"\n").unwrap();
    let out = std::process::Command::new(common::bin())
        .args(["serve", "--config"])
        .arg(&config)
        .envs(common::env_for(dir.path()))
        .env("MNEME_LOG", "error")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "a config error: {text}");
    assert!(
        text.contains("local.embedder") && text.contains("local.embedding_url") && text.contains("line 2"),
        "{text}"
    );
}

/// A stop during the backfill closes the embedding thread's connection before the writer's, so
/// the writer's close is the last and checkpoints the log: it was left behind, megabytes after
/// an import (review70 #2), which a log lost afterwards would have taken with the writes in it.
#[tokio::test]
async fn a_stop_during_the_backfill_leaves_no_log() {
    let mut d = Daemon::start("");
    let lines: String = (0..2000)
        .map(|i| {
            json!({"id": format!("m{i}"), "bank": "mneme", "content": format!("note {i} about the heron parser and its {i} tokens"), "created_at": "2026-01-01T00:00:00Z"})
                .to_string()
                + "\n"
        })
        .collect();
    let out = d.cli().args(["import", "-"]).write_stdin(lines).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let e = d.get("/v1/status").await.1["backend"]["embedding"].clone();
        if e["state"] == "ready" && e["embedded"].as_u64() > Some(0) {
            assert!(e["embedded"].as_u64() < e["passages"].as_u64(), "the backfill is through already: {e}");
            break;
        }
        assert!(Instant::now() < deadline, "no backfill: {e}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(d.stop().success());
    let wal = d.data().join("memories.db-wal");
    assert!(std::fs::metadata(&wal).map_or(true, |m| m.len() == 0), "{} was left", wal.display());
}

/// With `recall.timeout` under a second, an endpoint that hangs still leaves every recall to
/// BM25 within it: the query's vector is awaited half the recall's wait at most. Awaited for the
/// whole second, the words' answer was ready and the caller had given up: a 503 and no memory
/// block for the agent (review104 #1).
#[tokio::test]
async fn a_hung_endpoint_leaves_a_short_recall_timeout_to_bm25() {
    let hung = common::never_answering().await;
    let d = Daemon::start(&format!(
        "[recall]\ntimeout = \"300ms\"\n[local]\nembedder = \"openai\"\nembedding_url = \"http://{hung}/v1\"\nembedding_model = \"m\"\nembedding_timeout = \"60s\"\n"
    ));
    d.start_session("s", "/tmp/walrus").await;
    let item = json!({"items": [{"content": "We deploy the walrus service with cargo-dist"}]});
    let (status, v) = d.post("/v1/sessions/s/retain", item).await;
    assert!(status < 300, "{v}");
    d.post("/v1/flush", json!({})).await;
    // A 200 is an answer within `recall.timeout` (past it, the search is a 503).
    for round in 0..3 {
        let (status, v) = d.post("/v1/search", json!({"query": "how do we deploy walrus?"})).await;
        assert_eq!(status, 200, "round {round}: {v}");
        assert!(v["results"][0]["text"].as_str().unwrap_or_default().contains("cargo-dist"), "round {round}: {v}");
    }
    d.start_session("s2", "/tmp/walrus").await;
    let (status, v) = d
        .post(
            "/v1/sessions/s2/agent-start",
            json!({"prompt": "how do we deploy walrus?",
            "messages": [{"role": "user", "content": "how do we deploy walrus?"}]}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert!(v["inject"].as_str().unwrap_or_default().contains("cargo-dist"), "{v}");
}
