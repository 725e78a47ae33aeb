//! Export / import, migrate between stores, and doctor.

mod common;

use common::Daemon;
use serde_json::{json, Value};

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

async fn seed(d: &Daemon, n: usize) {
    d.start_session("s", "/p/transfer").await;
    let items: Vec<Value> = (0..n)
        .map(|i| json!({"content": format!("transfer memory {i} about lemurs"), "context": format!("ctx{i}")}))
        .collect();
    let (status, _) = d.post("/v1/sessions/s/retain", json!({ "items": items })).await;
    assert_eq!(status, 202);
    // An experience with a document id, from automatic retain.
    let msgs: Vec<Value> = (0..3)
        .flat_map(|i| {
            vec![
                json!({"role": "user", "content": format!("lemur question {i}")}),
                json!({"role": "assistant", "content": "answer"}),
            ]
        })
        .collect();
    d.post("/v1/sessions/s/agent-end", json!({ "messages": msgs })).await;
    let (_, v) = d.post("/v1/flush", json!({})).await;
    assert_eq!(v["failed"], 0);
}

/// An export over a file the configuration runs on (the store, the spool, the token, the config
/// file) is refused, the file left as it was: renamed into place, it replaced the running
/// daemon's store, which then could not start again (review115 #3).
#[tokio::test]
async fn an_export_over_the_daemons_own_files_is_refused() {
    let d = Daemon::start("[local]\nembedder = \"off\"\n");
    seed(&d, 2).await;
    let targets = [d.data().join("memories.db"), d.data().join("spool.db"), d.data().join("token"), d.config_path()];
    for target in targets {
        let before = std::fs::read(&target).unwrap();
        let out = d.cli().args(["export", "-o"]).arg(&target).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{}: {err}", target.display());
        assert!(err.contains("which mneme runs on"), "{}: {err}", target.display());
        assert_eq!(std::fs::read(&target).unwrap(), before, "{} left as it was", target.display());
    }
    // Through a link to it, too.
    let link = d.data().parent().unwrap().join("backup.jsonl");
    std::os::unix::fs::symlink(d.data().join("memories.db"), &link).unwrap();
    let out = d.cli().args(["export", "-o"]).arg(&link).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let (_, status) = d.get("/v1/status").await;
    assert_eq!(status["backend"]["healthy"], true, "{status}");
}

#[tokio::test]
async fn export_then_import_is_lossless_and_idempotent() {
    let a = Daemon::start("");
    seed(&a, 20).await;
    let file = a.dir.path().join("export.jsonl");
    // An export that fails leaves an earlier file of that name as it was (it was emptied first).
    std::fs::write(&file, "an earlier backup\n").unwrap();
    let out = a.cli().args(["export", "--bank", "<private>x</private>", "--output"]).arg(&file).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "an earlier backup\n");
    assert_eq!(
        std::fs::read_dir(a.dir.path())
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().contains("partial"))
            .count(),
        0
    );
    // Nor does one whose output names a folder: the whole copy is not left beside it.
    let folder = a.dir.path().join("backups");
    std::fs::create_dir(&folder).unwrap();
    let out = a.cli().args(["export", "--output"]).arg(&folder).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let partials = |dir: &std::path::Path| {
        std::fs::read_dir(dir)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().contains("partial"))
            .count()
    };
    assert_eq!(partials(a.dir.path()), 0);
    let out = a.cli().args(["export", "--output"]).arg(&file).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "memories are private: {mode:o}");
    let exported = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<Value> = exported.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 21);
    let first = &lines[0];
    for key in ["id", "bank", "content", "context", "tags", "metadata", "document_id", "type", "created_at"] {
        assert!(first.get(key).is_some(), "{key} missing in {first}");
    }
    assert_eq!(first["tags"], json!(["project:transfer"]));
    assert_eq!(first["metadata"]["session_id"], "s");
    assert!(lines.iter().any(|l| l["type"] == "experience" && l["document_id"] == "s"));

    let b = Daemon::start("");
    let out = b.cli().arg("import").arg(&file).output().unwrap();
    assert_eq!(
        stdout(&out).trim(),
        "Imported 21 of 21 memories (0 already there).",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = b.cli().arg("import").arg(&file).output().unwrap();
    assert_eq!(stdout(&out).trim(), "Imported 0 of 21 memories (21 already there).");
    let again = b.cli().arg("export").output().unwrap();
    assert_eq!(stdout(&again), exported, "a round trip is lossless");

    // A memory with nothing but private text is skipped, and the CLI says so.
    let private = a.dir.path().join("private.jsonl");
    let mut line: Value = lines[0].clone();
    line["id"] = json!("private-only");
    line["content"] = json!("<private>the deploy key is hunter2</private>");
    std::fs::write(&private, format!("{line}\n{}\n", exported.lines().next().unwrap())).unwrap();
    let out = b.cli().arg("import").arg(&private).output().unwrap();
    assert_eq!(
        stdout(&out).trim(),
        "Imported 0 of 2 memories (1 already there; 1 skipped: nothing but private text).",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = b.cli().args(["--json", "import"]).arg(&private).output().unwrap();
    let v: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(v, json!({"received": 2, "imported": 0, "skipped": 1}));

    // A bad line imports nothing and names the line.
    let bad = a.dir.path().join("bad.jsonl");
    std::fs::write(&bad, format!("{}\n{{\"oops\": 1}}\n", exported.lines().next().unwrap())).unwrap();
    let out = b.cli().arg("import").arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.jsonl:2"));
    // Its error does not repeat a value of a line that holds private text.
    for line in [
        r#"{"id":"m1","bank":"mneme","content":"x","type":"<private>SECRET-TYPE</private>"}"#,
        r#"{"id":"m2","bank":"mneme","content":"x <private>","tags":"SECRET-TAGS"}"#,
    ] {
        std::fs::write(&bad, format!("{line}\n")).unwrap();
        for json in [false, true] {
            let out =
                b.cli().args(if json { vec!["--json", "import"] } else { vec!["import"] }).arg(&bad).output().unwrap();
            assert_eq!(out.status.code(), Some(1));
            let said = format!("{}{}", String::from_utf8_lossy(&out.stderr), stdout(&out));
            assert!(said.contains("bad.jsonl:1") && !said.contains("SECRET"), "{said}");
        }
    }
    // A line that is not UTF-8 is named too.
    let mut bytes = format!("{}\n", exported.lines().next().unwrap()).into_bytes();
    bytes.extend_from_slice(b"{\"id\": \"\xff\"}\n");
    std::fs::write(&bad, bytes).unwrap();
    let out = b.cli().arg("import").arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("bad.jsonl:2: not UTF-8"), "{said}");
}

/// Writes `lines` to `file` and imports it with the CLI; what it said, once it succeeded.
fn import_lines(d: &Daemon, file: &std::path::Path, lines: &[String]) -> String {
    std::fs::write(file, lines.join("\n")).unwrap();
    let out = d.cli().arg("import").arg(file).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    stdout(&out).trim().to_owned()
}

/// `mneme import` keeps each request within the daemon's body limit: memories that fit one by
/// one are all imported, and one that cannot fit is named (file and line) before anything is sent.
#[tokio::test]
async fn import_requests_stay_within_the_body_limit() {
    let d = Daemon::start("[server]\nmax_body_bytes = 65536\n[local]\nembedder = \"off\"\n");
    let memory = |i: usize, size: usize| {
        json!({"id": format!("big-{i}"), "bank": "mneme", "content": format!("note {i}: {}", "lemur ".repeat(size / 6)),
               "created_at": "2026-01-01T00:00:00Z"})
    };
    let file = d.dir.path().join("big.jsonl");
    let lines: Vec<String> = (0..5).map(|i| memory(i, 27_000).to_string()).collect();
    // An editor's byte-order mark before the first line is not part of it.
    std::fs::write(&file, format!("\u{feff}{}\n", lines.join("\n"))).unwrap();
    let out = d.cli().arg("import").arg(&file).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout(&out).trim(), "Imported 5 of 5 memories (0 already there).");

    let too_big = d.dir.path().join("too-big.jsonl");
    std::fs::write(&too_big, format!("{}\n{}\n", memory(7, 1_000), memory(8, 140_000))).unwrap();
    let out = d.cli().arg("import").arg(&too_big).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("too-big.jsonl: the memory on line 2") && err.contains("server.max_body_bytes = 65536"),
        "{err}"
    );
    let (_, v) = d.get("/v1/memories/big-7").await;
    assert_eq!(v["error"]["code"], "not_found", "nothing was imported: {v}");

    // What the daemon would refuse is named by its line, before anything is sent.
    let bad_date = d.dir.path().join("bad-date.jsonl");
    let mut late = memory(9, 100);
    late["created_at"] = json!("yesterday");
    std::fs::write(&bad_date, format!("{}\n{}\n{late}\n", memory(10, 100), memory(11, 100))).unwrap();
    let out = d.cli().arg("import").arg(&bad_date).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("bad-date.jsonl:3: created_at must be an ISO 8601 date-time"), "{err}");
    // A week date with a letter of several bytes where its week's digits are: refused too, by
    // the CLI and by the daemon (cut inside the letter, it panicked: exit 101, a 500; review77 #1).
    late["created_at"] = json!("2025Waé");
    std::fs::write(&bad_date, format!("{late}\n")).unwrap();
    let out = d.cli().arg("import").arg(&bad_date).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("created_at must be an ISO 8601 date-time"), "{err}");
    let (status, v) = d.post("/v1/import", json!({ "memories": [late.clone()] })).await;
    assert!(status == 400 || status == 422, "{status} {v}");
    // A long one is quoted cut (it was repeated whole: 600 KB of error for a 600 KB date).
    late["created_at"] = json!("大".repeat(5_000));
    std::fs::write(&bad_date, format!("{late}\n")).unwrap();
    let out = d.cli().arg("import").arg(&bad_date).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.len() < 1_000 && err.contains("(5000 characters)"), "{err}");
    // Half an emoji (`\ud83d`: a text cut by UTF-16 units) is read as U+FFFD, as the daemon's
    // import reads it: the file was refused whole.
    let half = d.dir.path().join("half.jsonl");
    let line = memory(12, 100).to_string().replace("note 12", r"note \ud83d 12");
    assert_eq!(import_lines(&d, &half, &[line]), "Imported 1 of 1 memories (0 already there).");
    let (_, v) = d.get("/v1/memories/big-12").await;
    assert!(v["memory"]["content"].as_str().is_some_and(|c| c.starts_with("note \u{fffd} 12")), "{v}");
    let (_, v) = d.get("/v1/memories/big-10").await;
    assert_eq!(v["error"]["code"], "not_found", "nothing was imported: {v}");

    // A document larger than a request (grown by appends), each of its memories within one:
    // the local store takes it in parts, which join it (review39 #2: a backup of it did not
    // restore with the settings that wrote it).
    let grown = d.dir.path().join("grown.jsonl");
    let lines: Vec<String> = (20..23)
        .map(|i| {
            let mut m = memory(i, 27_000);
            m["document_id"] = json!("BOOK");
            m.to_string()
        })
        .collect();
    assert_eq!(import_lines(&d, &grown, &lines), "Imported 3 of 3 memories (0 already there).");
    let (_, v) = d.get("/v1/export?bank=mneme&limit=1000").await;
    let book: Vec<&Value> = v["memories"].as_array().unwrap().iter().filter(|m| m["document_id"] == "BOOK").collect();
    assert_eq!(book.len(), 3, "{v}");

    // A private span one part opens and a later part closes hides what lies between: each part
    // was cleaned alone, and the second stored its memories in clear (review43 #1).
    let spanned = d.dir.path().join("spanned.jsonl");
    let lines: Vec<String> = (30..35)
        .map(|i| {
            let mut m = memory(i, 27_000);
            m["document_id"] = json!("SPANNED");
            let text = m["content"].as_str().unwrap().to_owned();
            m["content"] = json!(match i {
                30 => format!("{text} <private>OPENED-30"),
                34 => format!("SECRET-34</private> {text}"),
                _ => format!("SECRET-{i} {text}"),
            });
            m.to_string()
        })
        .collect();
    assert_eq!(
        import_lines(&d, &spanned, &lines),
        "Imported 2 of 5 memories (0 already there; 3 skipped: nothing but private text)."
    );
    let (_, v) = d.get("/v1/export?bank=mneme&limit=1000").await;
    let text = v.to_string();
    assert!(!text.contains("SECRET-") && !text.contains("OPENED-30"), "{v}");
    let kept: Vec<&Value> =
        v["memories"].as_array().unwrap().iter().filter(|m| m["document_id"] == "SPANNED").collect();
    assert_eq!(kept.len(), 2, "the memory that opens the span and the one that closes it, cleaned: {v}");
}

#[tokio::test]
async fn migrate_local_to_hindsight_resumes_and_stores_nothing_twice() {
    let Some(url) = common::hindsight_peer() else { return };
    let bank = common::fresh("migrate");
    common::chunk_bank(&url, &bank).await;
    let d = Daemon::start(&format!("[memory]\nbank_id = \"{bank}\"\n[hindsight]\napi_url = \"{url}\"\n"));
    seed(&d, 30).await;

    // Interrupted after 10 (as a crash or Ctrl-C would leave it), then resumed.
    let out = d.cli().args(["migrate", "--from", "local", "--to", "hindsight", "--limit", "10"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout(&out).contains("Copied 10 memories") && stdout(&out).contains("again to continue"),
        "{}",
        stdout(&out)
    );
    assert!(d.data().join("migrate-local-to-hindsight.json").exists());
    let out = d.cli().args(["migrate", "--from", "local", "--to", "hindsight"]).output().unwrap();
    assert_eq!(stdout(&out).trim(), "Copied 21 memories from local to hindsight (resumed after 10); done.");
    assert!(!d.data().join("migrate-local-to-hindsight.json").exists());
    let texts = common::wait_bank(&url, &bank, 31).await;
    assert_eq!(texts.len(), 31, "{texts:?}");
    // A second full run stores nothing twice.
    let out = d.cli().args(["migrate", "--from", "local", "--to", "hindsight"]).output().unwrap();
    assert!(stdout(&out).contains("Copied 31 memories"), "{}", stdout(&out));
    let again = common::wait_bank(&url, &bank, 31).await;
    assert_eq!(again, texts);

    // And back: a fresh local store gets the bank's memories, once however often it runs.
    let back = tempfile::tempdir().unwrap();
    let config = back.path().join("config.toml");
    std::fs::write(&config, format!("[memory]\nbank_id = \"{bank}\"\n[hindsight]\napi_url = \"{url}\"\n")).unwrap();
    for _ in 0..2 {
        let out = assert_cmd::Command::new(common::bin())
            .args(["migrate", "--from", "hindsight", "--to", "local"])
            .env("MNEME_CONFIG", &config)
            .env("MNEME_STORAGE__DIR", back.path().join("data"))
            .output()
            .unwrap();
        assert!(
            stdout(&out).contains("Copied 31 memories from hindsight to local"),
            "{}{}",
            stdout(&out),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let conn = rusqlite::Connection::open(back.path().join("data/memories.db")).unwrap();
    let n: i64 = conn.query_row("SELECT count(*) FROM memories", [], |r| r.get(0)).unwrap();
    assert_eq!(n, 31);
    // The memories of no document come back as such (they went as documents of their own).
    let loose: i64 =
        conn.query_row("SELECT count(*) FROM memories WHERE document_id IS NULL", [], |r| r.get(0)).unwrap();
    assert_eq!(loose, 30);
    // From that store to Hindsight again: each goes back to the document it was, none twice.
    let out = assert_cmd::Command::new(common::bin())
        .args(["migrate", "--from", "local", "--to", "hindsight"])
        .env("MNEME_CONFIG", &config)
        .env("MNEME_STORAGE__DIR", back.path().join("data"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(common::wait_bank(&url, &bank, 31).await, texts, "a round trip added copies on the server");
    // And back into the store they came from: each found there, none added a second time.
    let out = d.cli().args(["migrate", "--from", "hindsight", "--to", "local"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let conn = rusqlite::Connection::open(d.data().join("memories.db")).unwrap();
    let n: i64 = conn.query_row("SELECT count(*) FROM memories", [], |r| r.get(0)).unwrap();
    assert_eq!(n, 31, "a round trip through Hindsight added copies");

    // Switch the daemon to hindsight: recall finds the migrated memories.
    std::fs::write(
        d.config_path(),
        format!("[memory]\nbackend = \"hindsight\"\nbank_id = \"{bank}\"\n[hindsight]\napi_url = \"{url}\"\n"),
    )
    .unwrap();
    let (status, v) = d.req(reqwest::Method::POST, "/v1/reload", None).await;
    assert_eq!(status, 200, "{v}");
    let (_, v) = d.post("/v1/sessions/s/recall", json!({"query": "transfer memory 7 lemurs"})).await;
    assert!(v["results"].as_array().unwrap().iter().any(|r| r["text"] == "transfer memory 7 about lemurs"), "{v}");
}

#[tokio::test]
async fn doctor_says_what_is_wrong_and_what_to_do() {
    let mut d = Daemon::start("");
    let out = d.cli().arg("doctor").output().unwrap();
    assert!(out.status.success(), "{}", stdout(&out));
    assert!(stdout(&out).contains("All is well.") && stdout(&out).contains("backend local is healthy"));
    // A bad edit of the config: said, and the rest still checked with its [server] and [storage]
    // (the daemon goes on with its last good file; it checked nothing else).
    let config = d.dir.path().join("config.toml");
    let good = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{good}\n[queue]\nbatch_size = \"x\"\n")).unwrap();
    let out = d.cli().arg("doctor").output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(stdout(&out).contains("queue.batch_size") && stdout(&out).contains("has mode 600"), "{}", stdout(&out));
    std::fs::write(&config, good).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(d.data().join("token"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = d.cli().arg("doctor").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("FAIL token") && stdout(&out).contains("chmod 600"), "{}", stdout(&out));
    // Stopped (SIGSTOP): it holds its storage and does not answer. Doctor says so, leaves the
    // spool it holds alone, and does not hang.
    let pid = d.child.as_ref().unwrap().id();
    common::unsafe_kill(pid, "STOP");
    let out = d.cli().arg("doctor").timeout(std::time::Duration::from_secs(30)).output().unwrap();
    common::unsafe_kill(pid, "CONT");
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(stdout(&out).contains(&format!("kill -CONT {pid}")), "{}", stdout(&out));
    assert!(!stdout(&out).contains("FAIL spool"), "{}", stdout(&out));
    d.stop();
    let out = d.cli().args(["--json", "doctor"]).output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert!(v["checks"].as_array().unwrap().iter().any(|c| c["check"].as_str().unwrap().contains("not running")));
}

#[tokio::test]
async fn migrate_keeps_a_document_whole_across_pages_and_requests() {
    // 190 memories, then a document of 20 (one /hindsight retain): the document runs across
    // migrate's page of 200 and the backend's request of 100. Hindsight stores a document as what
    // one request holds of it, so a split document would keep only its last part.
    let Some(url) = common::hindsight_peer() else { return };
    let bank = common::fresh("migrate-doc");
    common::chunk_bank(&url, &bank).await;
    let d = Daemon::start(&format!("[memory]\nbank_id = \"{bank}\"\n[hindsight]\napi_url = \"{url}\"\n"));
    seed(&d, 190 - 1).await;
    let parts: Vec<Value> = (0..20)
        .map(|i| json!({"content": format!("okapi runbook part {i} of the deploy"), "document_id": "runbook"}))
        .collect();
    let (status, v) = d.post(&format!("/hindsight/v1/default/banks/{bank}/memories"), json!({"items": parts})).await;
    assert_eq!(status, 200, "{v}");
    // 250 memories later, a part appended to it: the store keeps it with the document, far from
    // the rest by sequence (sent apart, the part alone replaced the 20 on the server).
    let loose: Vec<Value> = (0..250).map(|i| json!({"content": format!("unrelated note {i} about lunch")})).collect();
    let (status, v) = d.post(&format!("/hindsight/v1/default/banks/{bank}/memories"), json!({"items": loose})).await;
    assert_eq!(status, 200, "{v}");
    let appended = json!({"items": [{"content": "okapi runbook part 20 of the deploy", "document_id": "runbook", "update_mode": "append"}]});
    let (status, v) = d.post(&format!("/hindsight/v1/default/banks/{bank}/memories"), appended).await;
    assert_eq!(status, 200, "{v}");
    let out = d.cli().args(["migrate", "--from", "local", "--to", "hindsight"]).output().unwrap();
    let said = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    assert_eq!(said.trim(), "Copied 461 memories from local to hindsight; done.");
    let http = reqwest::Client::new();
    let mut text = String::new();
    for _ in 0..240 {
        let res = http.get(format!("{url}/v1/default/banks/{bank}/documents/runbook")).send().await.unwrap();
        if res.status().is_success() {
            let v: Value = res.json().await.unwrap();
            text = v["original_text"].as_str().unwrap_or_default().to_owned();
            if text.contains("part 19 of") && text.contains("part 20 of") {
                break;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    for i in 0..=20 {
        assert!(text.contains(&format!("okapi runbook part {i} of the deploy")), "part {i} kept: {text:?}");
    }
}

/// Another mneme (another storage dir) on the port this config names: doctor says so, and checks
/// this config's spool itself instead of calling it "open in the running daemon".
#[tokio::test]
async fn doctor_tells_another_configs_daemon_on_the_port_from_this_ones() {
    let other = Daemon::start("");
    let mut mine = Daemon::start("");
    mine.stop(); // its spool exists; its daemon is gone
    let out = mine.cli().env("MNEME_SERVER__LISTEN", &other.addr).arg("doctor").output().unwrap();
    let said = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!("FAIL a daemon answers on {}, but none runs on this config's storage dir", other.addr)),
        "{said}"
    );
    assert!(said.contains("server.listen of its own"), "{said}");
    assert!(said.contains("spool") && said.contains("is sound"), "its own spool is checked: {said}");
    assert!(!said.contains("open in the running daemon"), "{said}");
    let out = other.cli().arg("doctor").output().unwrap();
    assert!(out.status.success() && stdout(&out).contains("open in the running daemon"), "{}", stdout(&out));
}

/// Forwards every request to the Hindsight peer at `peer`; the first time a bank list is asked
/// for from offset 200, it first deletes `doomed` documents (ones the copy has read): the bank
/// changing under a copy, at a moment the real server cannot be made to pick.
async fn changing_proxy(peer: String, bank: String, doomed: Vec<String>) -> String {
    use axum::body::Bytes;
    use axum::http::{HeaderMap, Method, StatusCode, Uri};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let fired = Arc::new(AtomicBool::new(false));
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let handler = move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
        let (peer, bank, doomed, fired, http) =
            (peer.clone(), bank.clone(), doomed.clone(), fired.clone(), http.clone());
        async move {
            let query = uri.query().unwrap_or_default();
            if uri.path().ends_with("/memories/list")
                && query.split('&').any(|p| p == "offset=200")
                && !fired.swap(true, Ordering::SeqCst)
            {
                for doc in &doomed {
                    let url = format!("{peer}/v1/default/banks/{bank}/documents/{doc}");
                    // The server's own maintenance of the bank, run after the store, can deadlock
                    // a delete in its database (a 500 "deadlock detected"): tried again.
                    let mut status = StatusCode::INTERNAL_SERVER_ERROR;
                    for _ in 0..10 {
                        status =
                            StatusCode::from_u16(http.delete(&url).send().await.unwrap().status().as_u16()).unwrap();
                        if !status.is_server_error() {
                            break;
                        }
                        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                    }
                    assert!(status.is_success(), "deleting {doc}: {status}");
                }
            }
            let mut req = http.request(method, format!("{peer}{uri}")).body(body);
            if let Some(t) = headers.get("content-type") {
                req = req.header("content-type", t);
            }
            let res = req.send().await.unwrap();
            let status = StatusCode::from_u16(res.status().as_u16()).unwrap();
            (status, [("content-type", "application/json")], res.bytes().await.unwrap())
        }
    };
    let app = axum::Router::new().fallback(handler);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// Hindsight lists a bank by offset, newest first. Memories deleted from the part a copy has read
/// move the rest forward, and the next page skips as many; the copy reads the bank again and
/// copies what it skipped (before, 5 of 450 were silently left behind).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_from_hindsight_copies_what_a_change_during_the_copy_made_it_skip() {
    let Some(url) = common::hindsight_peer() else { return };
    let bank = common::fresh("migrate-shift");
    common::chunk_bank(&url, &bank).await;
    // 450 memories, each its own document, dated a second apart: the list is newest first.
    let items: Vec<Value> = (0..450)
        .map(|i| {
            json!({"content": format!("shifting memory number {i} about the kestrel build"), "document_id": format!("d{i:03}"),
                   "timestamp": format!("2026-01-01T{:02}:{:02}:{:02}Z", i / 3600, i / 60 % 60, i % 60)})
        })
        .collect();
    store_on_peer(&url, &bank, items).await;
    // The five newest are on the first page the copy reads; they go before it reads the second.
    let doomed: Vec<String> = (445..450).map(|i| format!("d{i:03}")).collect();
    let proxy = changing_proxy(url.clone(), bank.clone(), doomed).await;

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, format!("[memory]\nbank_id = \"{bank}\"\n[hindsight]\napi_url = \"{proxy}\"\n")).unwrap();
    let out = run_with(config, &["migrate", "--from", "hindsight", "--to", "local"]).await;
    let said = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{said}");
    assert_eq!(
        said.trim(),
        "Copied 445 memories from hindsight to local, and 5 more the bank's list had moved past while it changed (found by reading it again); done."
    );
    let conn = rusqlite::Connection::open(dir.path().join("data/memories.db")).unwrap();
    let n: i64 = conn.query_row("SELECT count(*) FROM memories", [], |r| r.get(0)).unwrap();
    assert_eq!(n, 450, "every memory the bank held when the copy began");
}

/// A copy from Hindsight cut (`--limit`, or a kill) and run again until it is done copies every
/// document whole. Hindsight lists a bank newest first, so the documents a cut falls across had
/// their newest memories copied by the run before; the resumed run took those for a newer version
/// the target holds, and left the rest of each out for good (review43 #2).
#[tokio::test]
async fn a_cut_migrate_from_hindsight_copies_the_documents_across_each_cut_whole() {
    let Some(url) = common::hindsight_peer() else { return };
    let bank = common::fresh("migrate-cut");
    common::chunk_bank(&url, &bank).await;
    // 24 documents of ten memories, part p of each dated second p: the list runs through every
    // document's part 9, then every part 8, and so on (past a page of 200).
    for d in 0..24 {
        let items: Vec<Value> = (0..10)
            .map(|p| {
                json!({"content": format!("document {d} part {p} about the wombat{d}x{p} service"),
                       "document_id": format!("doc-{d}"), "timestamp": format!("2026-01-01T00:00:{p:02}Z")})
            })
            .collect();
        post_to_peer(&url, &bank, items).await;
    }
    let held = common::bank_texts(&url, &bank).await;
    assert_eq!(held.len(), 240);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    let settings =
        format!("[memory]\nbank_id = \"{bank}\"\n[local]\nembedder = \"off\"\n[hindsight]\napi_url = \"{url}\"\n");
    std::fs::write(&config, settings).unwrap();
    // A client went on writing document 11 on the target after a live switch: its version stays.
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let local = mneme_local::LocalBackend::open(&mneme_local::LocalConfig::lexical(data.join("memories.db"))).unwrap();
    let rewritten = mneme_core::MemoryItem {
        document_id: Some("doc-11".into()),
        ..mneme_core::MemoryItem::new(
            "client-1",
            "document 11 as the client wrote it after the switch",
            "2026-06-01T00:00:00Z",
        )
    };
    let batch = mneme_core::RetainBatch { id: "client".into(), items: vec![rewritten] };
    mneme_core::MemoryBackend::retain(&local, &mneme_core::Scope { bank: bank.clone(), tags: vec![] }, &batch)
        .await
        .unwrap();
    drop(local);
    let mut expected: Vec<String> = held.iter().filter(|t| !t.starts_with("document 11 ")).cloned().collect();
    expected.push("document 11 as the client wrote it after the switch".into());
    expected.sort();
    // After the first run (which cut documents), a client appends to one of them on the target:
    // the target's document is still this copy, and its rest is copied (review47 #3: it was
    // called newer, and 9 of its 10 memories never came).
    let mut appended_once = false;
    let append = |data: &std::path::Path| {
        let local =
            mneme_local::LocalBackend::open(&mneme_local::LocalConfig::lexical(data.join("memories.db"))).unwrap();
        let line = mneme_core::MemoryItem {
            document_id: Some("doc-5".into()),
            append: true,
            ..mneme_core::MemoryItem::new("client-2", "document 5 appended by the client", "2026-06-01T00:00:00Z")
        };
        let batch = mneme_core::RetainBatch { id: "client-2".into(), items: vec![line] };
        (local, batch)
    };
    expected.push("document 5 appended by the client".into());
    expected.sort();
    // Copied in runs of 35, then once more whole (pages of 200) once it is done, with nothing
    // written between: only document 11 is called newer, once a run however many pages it spans
    // (it was counted once a page), and the second time no document the first copied is (its
    // memories on the page before were taken for a newer version of it: review46 #1).
    for limit in [Some("35"), None] {
        let mut said = String::new();
        for _ in 0..10 {
            let mut args = vec!["migrate", "--from", "hindsight", "--to", "local"];
            args.extend(limit.map(|l| ["--limit", l]).into_iter().flatten());
            let out = run_args(config.clone(), args).await;
            let run = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
            assert!(out.status.success(), "{run}");
            let newer = run.matches("newer version").count();
            assert!(newer == 0 || run.contains("newer version of its document)"), "limit {limit:?}: {run}");
            said.push_str(&run);
            if run.contains("done") {
                break;
            }
            if !appended_once {
                appended_once = true;
                let (local, batch) = append(&data);
                let scope = mneme_core::Scope { bank: bank.clone(), tags: vec![] };
                mneme_core::MemoryBackend::retain(&local, &scope, &batch).await.unwrap();
            }
        }
        assert!(said.contains("done"), "{said}");
        let conn = rusqlite::Connection::open(data.join("memories.db")).unwrap();
        let mut stmt = conn.prepare("SELECT content FROM memories").unwrap();
        let mut copied: Vec<String> = stmt.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect();
        copied.sort();
        assert_eq!(copied, expected, "limit {limit:?}: {said}");
    }
}

/// Memories another client of the Hindsight server wrote wholly inside `<private>` spans are
/// left out of a migrate and an export, and counted: a page of them came back empty and ended
/// the copy there, with the rest of the bank unread.
#[tokio::test]
async fn a_page_of_private_memories_does_not_end_a_migrate_or_an_export() {
    let Some(url) = common::hindsight_peer() else { return };
    let bank = common::fresh("migrate-private");
    common::chunk_bank(&url, &bank).await;
    // The newest 250 (a page and more of the copy's 200) are private; the 10 oldest are not.
    let items: Vec<Value> = (0..260)
        .map(|i| {
            let content = if i < 10 {
                format!("plain memory {i} about the heron release")
            } else {
                format!("<private>hunter2 secret {i}</private>")
            };
            json!({"content": content, "document_id": format!("p{i:03}"),
                   "timestamp": format!("2026-01-01T{:02}:{:02}:{:02}Z", i / 3600, i / 60 % 60, i % 60)})
        })
        .collect();
    store_on_peer(&url, &bank, items).await;

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, format!("[memory]\nbank_id = \"{bank}\"\n[hindsight]\napi_url = \"{url}\"\n")).unwrap();
    let out = run_with(config, &["--json", "migrate", "--from", "hindsight", "--to", "local"]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["copied"].as_u64(), v["skipped"].as_u64(), v["finished"].as_bool()),
        (Some(260), Some(250), Some(true)),
        "{v}"
    );
    let conn = rusqlite::Connection::open(dir.path().join("data/memories.db")).unwrap();
    let n: i64 = conn.query_row("SELECT count(*) FROM memories", [], |r| r.get(0)).unwrap();
    assert_eq!(n, 10);
    let all: Vec<String> = conn
        .prepare("SELECT content FROM memories")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(all.iter().all(|c| c.contains("heron")), "{all:?}");
    // An export through a daemon on that bank writes the ten, and nothing private.
    let d = Daemon::start(&format!(
        "[memory]\nbackend = \"hindsight\"\nbank_id = \"{bank}\"\n[hindsight]\napi_url = \"{url}\"\n"
    ));
    let file = d.dir.path().join("export.jsonl");
    let out = d.cli().args(["export", "--bank", &bank, "-o"]).arg(&file).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let written = std::fs::read_to_string(&file).unwrap();
    assert_eq!(written.lines().count(), 10, "{written}");
    assert!(!written.contains("hunter2"), "{written}");
}

/// Stores `items` on the peer's `bank` directly (as another client of the server would), and
/// waits until it lists them.
async fn store_on_peer(url: &str, bank: &str, items: Vec<Value>) {
    let n = items.len();
    post_to_peer(url, bank, items).await;
    assert_eq!(common::bank_texts(url, bank).await.len(), n);
}

/// Retains `items` straight into the peer's bank, in one request, and waits for it.
async fn post_to_peer(url: &str, bank: &str, items: Vec<Value>) {
    let res = reqwest::Client::new()
        .post(format!("{url}/v1/default/banks/{bank}/memories"))
        .json(&json!({"items": items, "async": false}))
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success(), "{}", res.text().await.unwrap());
}

/// [`run_with`] of arguments made at run time.
async fn run_args(config: std::path::PathBuf, args: Vec<&'static str>) -> std::process::Output {
    run_with(config, args.leak()).await
}

/// Runs the CLI with `config`, its storage in a `data` folder beside it, without a daemon.
async fn run_with(config: std::path::PathBuf, args: &'static [&'static str]) -> std::process::Output {
    tokio::task::spawn_blocking(move || {
        assert_cmd::Command::new(common::bin())
            .args(args)
            .env("MNEME_CONFIG", &config)
            .env("MNEME_STORAGE__DIR", config.parent().unwrap().join("data"))
            .env("MNEME_LOG", "error")
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

/// Under `per-project` scoping every project has a bank of its own (`{bank}-{project}`): a
/// migrate from Hindsight without `--bank` copies each bank of this configuration, and no other.
#[tokio::test]
async fn migrate_from_hindsight_copies_every_project_bank() {
    let Some(url) = common::hindsight_peer() else { return };
    let bank = common::fresh("migrate-projects");
    for (b, word) in [(format!("{bank}-kestrel"), "kestrel"), (format!("{bank}-osprey"), "osprey")] {
        common::chunk_bank(&url, &b).await;
        let items: Vec<Value> = (0..3)
            .map(|i| json!({"content": format!("{word} project note {i}"), "document_id": format!("{word}{i}")}))
            .collect();
        store_on_peer(&url, &b, items).await;
    }
    let other = common::fresh("not-ours");
    common::chunk_bank(&url, &other).await;
    store_on_peer(&url, &other, vec![json!({"content": "another tool's memory", "document_id": "x"})]).await;

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!("[memory]\nbank_id = \"{bank}\"\nscoping = \"per-project\"\n[hindsight]\napi_url = \"{url}\"\n"),
    )
    .unwrap();
    let out = run_with(config.clone(), &["migrate", "--from", "hindsight", "--to", "local"]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said = stdout(&out);
    assert!(said.contains(&format!("Bank {bank}-kestrel: Copied 3 memories")), "{said}");
    assert!(said.contains(&format!("Bank {bank}-osprey: Copied 3 memories")), "{said}");
    let conn = rusqlite::Connection::open(dir.path().join("data/memories.db")).unwrap();
    let mut banks: Vec<(String, i64)> = conn
        .prepare("SELECT bank, count(*) FROM memories GROUP BY bank ORDER BY bank")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    banks.sort();
    assert_eq!(banks, [(format!("{bank}-kestrel"), 3), (format!("{bank}-osprey"), 3)]);
    // Run again: each bank found copied, nothing twice.
    let out = run_with(config, &["--json", "migrate", "--from", "hindsight", "--to", "local"]).await;
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((v["banks"].as_u64(), v["finished"].as_bool()), (Some(3), Some(true)), "{v}");
    let n: i64 = conn.query_row("SELECT count(*) FROM memories", [], |r| r.get(0)).unwrap();
    assert_eq!(n, 6);
    // `--limit` bounds the run, not each bank.
    let fresh = tempfile::tempdir().unwrap();
    let config = fresh.path().join("config.toml");
    std::fs::write(
        &config,
        format!("[memory]\nbank_id = \"{bank}\"\nscoping = \"per-project\"\n[hindsight]\napi_url = \"{url}\"\n"),
    )
    .unwrap();
    let out = run_with(config, &["--json", "migrate", "--from", "hindsight", "--to", "local", "--limit", "4"]).await;
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((v["copied"].as_u64(), v["finished"].as_bool()), (Some(4), Some(false)), "{v}");
}

/// Hindsight lists a bank newest first: a document copied back keeps its parts in the order
/// they were stored (they came back the other way round, and sent on again made a document
/// whose text ran backwards).
#[tokio::test]
async fn a_document_copied_from_hindsight_keeps_the_order_of_its_parts() {
    let Some(url) = common::hindsight_peer() else { return };
    let bank = common::fresh("migrate-order");
    common::chunk_bank(&url, &bank).await;
    let parts: Vec<Value> = (0..4)
        .map(|i| {
            json!({"content": format!("part {i} of the plover notes"), "document_id": "plover",
                   "timestamp": format!("2026-03-0{}T10:00:00Z", i + 1)})
        })
        .collect();
    store_on_peer(&url, &bank, parts).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, format!("[memory]\nbank_id = \"{bank}\"\n[hindsight]\napi_url = \"{url}\"\n")).unwrap();
    let out = run_with(config, &["migrate", "--from", "hindsight", "--to", "local"]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let conn = rusqlite::Connection::open(dir.path().join("data/memories.db")).unwrap();
    let order: Vec<String> = conn
        .prepare("SELECT content FROM memories WHERE document_id = 'plover' ORDER BY seq")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let want: Vec<String> = (0..4).map(|i| format!("part {i} of the plover notes")).collect();
    assert_eq!(order, want);
    // `mneme export` from a daemon on Hindsight writes them in that order too.
    let d = Daemon::start(&format!(
        "[memory]\nbackend = \"hindsight\"\nbank_id = \"{bank}\"\n[hindsight]\napi_url = \"{url}\"\n"
    ));
    let out = d.cli().args(["export", "--bank", &bank]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let written: Vec<String> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["content"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(written, want);
}

/// The partial files of exports in a folder.
struct Partial(std::path::PathBuf);

impl Partial {
    fn exists(&self) -> bool {
        std::fs::read_dir(&self.0).unwrap().any(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.starts_with(".backup.jsonl.") && name.ends_with(".partial")
        })
    }
}

/// `export -o` writes to what its path is: a FIFO or a device as it is (it was replaced by a
/// regular file, its reader given nothing), a symlink's target (the link kept); through a file
/// of its own, never one already there (a `FILE.partial` symlink had the export write over the
/// file it named, and two exports to one name wrote into each other).
#[tokio::test]
async fn an_export_goes_where_its_path_leads() {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let a = Daemon::start("[local]\nembedder = \"off\"\n");
    seed(&a, 3).await;
    let dir = a.dir.path();
    let whole = a.cli().arg("export").output().unwrap().stdout;
    let n = String::from_utf8(whole).unwrap().lines().count();
    assert!(n >= 3);
    let export_to = |path: &std::path::Path| {
        let out = a.cli().args(["export", "-o"]).arg(path).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    // A FIFO: its reader gets the lines, and it stays a FIFO.
    let fifo = dir.join("fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
    };
    export_to(&fifo);
    assert_eq!(reader.join().unwrap().lines().count(), n);
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    // A symlink: its target replaced, the link kept.
    let target = dir.join("real.jsonl");
    std::fs::write(&target, "old\n").unwrap();
    let link = dir.join("link.jsonl");
    std::os::unix::fs::symlink("real.jsonl", &link).unwrap();
    export_to(&link);
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read_to_string(&target).unwrap().lines().count(), n);
    assert_eq!(std::fs::metadata(&target).unwrap().permissions().mode() & 0o777, 0o600);
    // A `FILE.partial` already there (a link to another file) is neither written nor removed.
    let victim = dir.join("victim.txt");
    std::fs::write(&victim, "mine\n").unwrap();
    std::os::unix::fs::symlink(&victim, dir.join("out.jsonl.partial")).unwrap();
    export_to(&dir.join("out.jsonl"));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "mine\n");
    assert!(std::fs::symlink_metadata(dir.join("out.jsonl.partial")).is_ok());
    assert_eq!(std::fs::metadata(dir.join("out.jsonl")).unwrap().permissions().mode() & 0o777, 0o600);
    // A folder is refused before anything is exported; so is a symlink loop (the shell's `>`
    // refuses it too).
    let out = a.cli().args(["export", "-o"]).arg(dir).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("it is a folder"));
    std::os::unix::fs::symlink("loop-b", dir.join("loop-a")).unwrap();
    std::os::unix::fs::symlink("loop-a", dir.join("loop-b")).unwrap();
    let out = a.cli().args(["export", "-o"]).arg(dir.join("loop-a")).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("symbolic links"));
    assert!(std::fs::symlink_metadata(dir.join("loop-a")).unwrap().file_type().is_symlink());
    // `-o /dev/stdout` with standard output appended to a file (`>> file`): added to it, the
    // file kept (it was replaced whole, its earlier lines lost, through /proc/self/fd/1).
    let kept = dir.join("kept.jsonl");
    std::fs::write(&kept, "earlier line\n").unwrap();
    let appended = std::fs::OpenOptions::new().append(true).open(&kept).unwrap();
    let status = a.command().args(["export", "-o", "/dev/stdout"]).stdout(appended).status().unwrap();
    assert!(status.success());
    let text = std::fs::read_to_string(&kept).unwrap();
    assert!(text.starts_with("earlier line\n") && text.lines().count() == n + 1, "{text}");
    // Through a link of one's own to /dev/stdout, and with --json (no count among the lines).
    std::os::unix::fs::symlink("/dev/stdout", dir.join("out-link")).unwrap();
    let appended = std::fs::OpenOptions::new().append(true).open(&kept).unwrap();
    let status =
        a.command().args(["--json", "export", "-o"]).arg(dir.join("out-link")).stdout(appended).status().unwrap();
    assert!(status.success());
    let text = std::fs::read_to_string(&kept).unwrap();
    assert!(text.starts_with("earlier line\n") && text.lines().count() == 2 * n + 1, "{text}");
    assert!(!text.contains("\"exported\""), "{text}");
    // `-o /dev/stderr 2> file`: the lines, then the count, none written over.
    let err_file = dir.join("err.txt");
    let status = a
        .command()
        .args(["export", "-o", "/dev/stderr"])
        .stderr(std::fs::File::create(&err_file).unwrap())
        .status()
        .unwrap();
    assert!(status.success());
    let text = std::fs::read_to_string(&err_file).unwrap();
    assert_eq!(text.lines().filter(|l| l.starts_with('{')).count(), n, "{text}");
    assert!(text.trim_end().ends_with("to /dev/stderr."), "{text}");
    // A FIFO nobody reads: the export waits in its open, and Ctrl-C still ends it.
    let lonely = dir.join("lonely");
    assert!(std::process::Command::new("mkfifo").arg(&lonely).status().unwrap().success());
    let mut cmd = a.command();
    cmd.args(["export", "-o"]).arg(&lonely);
    // SAFETY: signal() in the child before exec; it cannot fail. Ctrl-C as from a terminal: a
    // shell that ran the tests in the background left SIGINT ignored, and an ignored signal stays
    // ignored across exec (the export then waited on its FIFO for good).
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut waiting = cmd.spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    common::unsafe_kill(waiting.id(), "INT");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while waiting.try_wait().unwrap().is_none() {
        assert!(std::time::Instant::now() < until, "Ctrl-C did not end an export waiting on a FIFO");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// An export stopped part-way (Ctrl-C) leaves no partial copy of the memories beside the file,
/// and the file as it was. The daemon is paused (SIGSTOP) once the partial file exists, so the
/// export is surely under way when it is interrupted.
#[tokio::test]
async fn an_interrupted_export_leaves_no_partial_copy() {
    let mut a = Daemon::start("[local]\nembedder = \"off\"\n");
    seed(&a, 2000).await;
    let file = a.dir.path().join("backup.jsonl");
    // The export's own file beside it: `.backup.jsonl.<unique>.partial`.
    let folder = a.dir.path().to_path_buf();
    let partial = Partial(folder);
    std::fs::write(&file, "an earlier backup\n").unwrap();
    let daemon = a.child.as_ref().unwrap().id();
    let mut caught = false;
    for _ in 0..20 {
        let mut cli =
            a.command().args(["export", "--output"]).arg(&file).stderr(std::process::Stdio::piped()).spawn().unwrap();
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !partial.exists() && cli.try_wait().unwrap().is_none() && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        common::unsafe_kill(daemon, "STOP");
        if !partial.exists() {
            // Done before it could be paused: again.
            common::unsafe_kill(daemon, "CONT");
            cli.wait().unwrap();
            std::fs::write(&file, "an earlier backup\n").unwrap();
            continue;
        }
        common::unsafe_kill(cli.id(), "INT");
        let out = cli.wait_with_output().unwrap();
        common::unsafe_kill(daemon, "CONT");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("stopped by Ctrl-C"), "{err}");
        assert!(!partial.exists(), "a partial copy of the memories was left");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "an earlier backup\n");
        caught = true;
        break;
    }
    assert!(caught, "every export finished before it could be paused");
    a.stop();
}

/// An export to standard output that the daemon's end cuts short says it is incomplete, and how
/// many memories came out before: it said only why it failed, and a backup redirected to a file
/// kept part of one (review57 #2). Here the CLI waits on a full pipe inside its first page while
/// the daemon is killed; the page's rest is read, and the next page's request fails.
#[tokio::test]
async fn an_export_to_standard_output_cut_short_says_it_is_incomplete() {
    use std::io::Read;
    let mut a = Daemon::start("[local]\nembedder = \"off\"\n");
    let fact = |i: usize| format!("exported fact {i} {}", "x".repeat(300));
    let items: Vec<Value> = (0..2500).map(|i| json!({"content": fact(i)})).collect();
    a.start_session("s", "/p/transfer").await;
    let (status, _) = a.post("/v1/sessions/s/retain", json!({ "items": items })).await;
    assert_eq!(status, 202);
    let (_, v) = a.post("/v1/flush", json!({})).await;
    assert_eq!(v["failed"], 0);
    let mut cli = a
        .command()
        .args(["--json", "export"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A page of 1,000 memories of 300 bytes does not fit in a pipe: the CLI waits on it.
    let mut out = cli.stdout.take().unwrap();
    let mut first = vec![0u8; 1024];
    out.read_exact(&mut first).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    a.kill();
    let mut rest = Vec::new();
    out.read_to_end(&mut rest).unwrap();
    let output = cli.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{err}");
    let written = first.len() + rest.len();
    let all = [first, rest].concat();
    let lines = all.iter().filter(|&&b| b == b'\n').count();
    assert!(lines > 0 && lines < 2500, "{lines} lines, {written} bytes: {err}");
    let said = format!("the export is incomplete: {lines} memories were written before that");
    assert!(err.contains(&said), "{said:?} not in: {err}");
    // With --json, the error is no line of the export (an import refused the whole file).
    let all = String::from_utf8_lossy(&all).into_owned();
    assert!(!all.contains("\"error\""), "{}", &all[all.len().saturating_sub(300)..]);
}

/// An export whose output refuses its writes (a full disk; here /dev/full) does not claim the
/// memories it buffered reached it (review60 #5).
#[tokio::test]
async fn an_export_to_a_full_output_claims_no_exact_count() {
    let a = Daemon::start("[local]\nembedder = \"off\"\n");
    seed(&a, 200).await;
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    let out = a.command().args(["export"]).stdout(full).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("the export is incomplete: at most") && err.contains("perhaps cut"), "{err}");
}

/// An import stopped part-way (here: the daemon killed once the first requests are stored)
/// says how much of the file was imported before it and that the same command finishes it: it
/// said only why it failed, beside other errors that say "nothing was imported".
#[tokio::test]
async fn an_import_stopped_part_way_says_what_it_did() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("many.jsonl");
    let lines: Vec<String> = (0..6000)
        .map(|i| {
            json!({"id": format!("m{i}"), "bank": "b", "content": format!("imported fact {i} {}", "x".repeat(200)),
                   "created_at": "2026-01-01T00:00:00Z"})
            .to_string()
        })
        .collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    for _ in 0..10 {
        let a = Daemon::start("[local]\nembedder = \"off\"\n");
        let cli = a
            .command()
            .args(["import"])
            .arg(&file)
            .stderr(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Once the first request is stored, the daemon goes.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::time::Instant::now() < until {
            let (_, v) = a.get("/v1/export?limit=1&bank=b").await;
            if v["memories"].as_array().is_some_and(|m| !m.is_empty()) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        common::unsafe_kill(a.child.as_ref().unwrap().id(), "KILL");
        let out = cli.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.success() || err.contains("nothing was imported") {
            continue; // done before the daemon went, or stopped in its first request: again
        }
        assert!(err.contains("of the file's 6000 memories were imported before that"), "{err}");
        assert!(err.contains("the same command again imports the rest"), "{err}");
        return;
    }
    panic!("every import finished before the daemon could be stopped");
}

/// A misspelt `--bank` is refused naming the banks there are: export wrote nothing and exit 0,
/// migrate said "Copied 0 memories …; done" (CLI review, LOW 1). A forget in the wrong bank
/// names the bank it looked in.
#[tokio::test]
async fn a_bank_that_holds_nothing_is_refused_by_name() {
    let d = Daemon::start("[local]\nembedder = \"off\"\n[hindsight]\napi_url = \"http://127.0.0.1:9\"\n");
    seed(&d, 2).await;
    let (_, v) = d.post("/v1/flush", json!({})).await;
    assert_eq!(v["failed"], 0, "{v}");
    let bank = d.get("/v1/banks").await.1["banks"][0]["bank"].as_str().unwrap().to_owned();
    let out = d.cli().args(["export", "--bank", "wrok"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no bank \"wrok\" holds memories") && err.contains(&bank), "{err}");
    assert!(out.stdout.is_empty());
    let out = d.cli().args(["export", "--bank", &bank]).output().unwrap();
    assert!(out.status.success() && !out.stdout.is_empty());
    let out = d.cli().args(["migrate", "--from", "local", "--to", "hindsight", "--bank", "wrok"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no bank \"wrok\" in local") && err.contains("nothing was copied"), "{err}");
    let id =
        d.get(&format!("/v1/export?limit=1&bank={bank}")).await.1["memories"][0]["id"].as_str().unwrap().to_owned();
    // A blank bank is no bank (the daemon reads it as every bank).
    let out = d.cli().args(["export", "--bank", " "]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("names no bank") && out.stdout.is_empty());
    let out = d.cli().args(["forget", &id, "--bank", "wrok"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("in bank \"wrok\" of the local store"), "{err}");
}

/// An import to Hindsight counts what it sent: the memories left out (nothing but private text)
/// were counted as sent too ("Sent 3 memories … 1 skipped" for 2 sent).
#[tokio::test]
async fn an_import_to_hindsight_counts_only_what_it_sent() {
    let Some(url) = common::hindsight_peer() else { return };
    let bank = common::fresh("sent");
    common::chunk_bank(&url, &bank).await;
    let d = Daemon::start(&format!(
        "[memory]\nbackend = \"hindsight\"\nbank_id = \"{bank}\"\n[hindsight]\napi_url = \"{url}\"\n"
    ));
    let file = d.dir.path().join("three.jsonl");
    let lines: Vec<String> = ["sent one", "<private>all of it</private>", "sent two"]
        .iter()
        .enumerate()
        .map(|(i, c)| {
            json!({"id": format!("m{i}"), "bank": bank, "content": c, "created_at": "2026-01-01T00:00:00Z"}).to_string()
        })
        .collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    let out = d.cli().arg("import").arg(&file).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout(&out).contains("Sent 2 memories to the backend; 1 skipped"), "{}", stdout(&out));
}

/// `mneme export -o` into a folder every user may write to (/tmp) does not write through a link
/// or a FIFO another user made there: the link replaced the file it named (the user's own
/// `~/.profile`), and the FIFO's maker read every memory (review50 #5). Needs root, to make
/// them as another user.
#[tokio::test]
async fn an_export_does_not_write_through_what_another_user_planted() {
    use std::os::unix::fs::PermissionsExt;
    // SAFETY: geteuid(2) cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to make files as another user");
        return;
    }
    let d = Daemon::start("[local]\nembedder = \"off\"\n");
    seed(&d, 3).await;
    let shared = d.dir.path().join("tmp");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let own = d.dir.path().join("profile");
    std::fs::write(&own, "export PATH=/usr/bin\n").unwrap();
    let link = shared.join("backup.jsonl");
    std::os::unix::fs::symlink(&own, &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
    let fifo = shared.join("pipe.jsonl");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    std::os::unix::fs::chown(&fifo, Some(65534), Some(65534)).unwrap();
    for planted in [&link, &fifo] {
        let out =
            d.cli().args(["export", "-o"]).arg(planted).timeout(std::time::Duration::from_secs(20)).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("another user (uid 65534) made in") && err.contains("not written through"), "{err}");
    }
    // A link of that user's to a folder of its own, named as a folder of the path (review52 #3),
    // and a FIFO of that user's in a folder every user may write to that is not sticky
    // (review52 #5).
    let theirs = d.dir.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    let trap = theirs.join("out.jsonl");
    assert!(std::process::Command::new("mkfifo").arg(&trap).status().unwrap().success());
    std::os::unix::fs::chown(&trap, Some(65534), Some(65534)).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    let folder_link = shared.join("backups");
    std::os::unix::fs::symlink(&theirs, &folder_link).unwrap();
    std::os::unix::fs::lchown(&folder_link, Some(65534), Some(65534)).unwrap();
    let open_folder = d.dir.path().join("drop");
    std::fs::create_dir(&open_folder).unwrap();
    std::fs::set_permissions(&open_folder, std::fs::Permissions::from_mode(0o777)).unwrap();
    let open_fifo = open_folder.join("out.jsonl");
    assert!(std::process::Command::new("mkfifo").arg(&open_fifo).status().unwrap().success());
    std::os::unix::fs::chown(&open_fifo, Some(65534), Some(65534)).unwrap();
    for planted in [folder_link.join("out.jsonl"), open_fifo] {
        let out =
            d.cli().args(["export", "-o"]).arg(&planted).timeout(std::time::Duration::from_secs(20)).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{}: {err}", planted.display());
        assert!(err.contains("another user (uid 65534) made in") && err.contains("not written through"), "{err}");
    }
    // A link of that user's naming this process's own standard error (review53 #4): refused,
    // not written to the descriptor.
    let to_stderr = shared.join("errors.jsonl");
    std::os::unix::fs::symlink("/dev/stderr", &to_stderr).unwrap();
    std::os::unix::fs::lchown(&to_stderr, Some(65534), Some(65534)).unwrap();
    let out = d.cli().args(["export", "-o"]).arg(&to_stderr).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("another user (uid 65534) made in") && !err.contains("\"content\""), "{err}");
    // A name ending in '/' names a folder: none is there, and no file is made under the name
    // (review53 #6).
    let missing = d.dir.path().join("backups");
    let out = d.cli().args(["export", "-o"]).arg(format!("{}/", missing.display())).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!missing.exists());
    assert_eq!(std::fs::read_to_string(&own).unwrap(), "export PATH=/usr/bin\n");
    // One's own link there is followed, as before.
    std::os::unix::fs::lchown(&link, Some(0), Some(0)).unwrap();
    let out = d.cli().args(["export", "-o"]).arg(&link).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::read_to_string(&own).unwrap().starts_with("{\""), "the export replaced it");
}

/// Two lines giving one id (in one bank) to two memories are refused, naming both lines: the
/// second was taken for the first already there, and lost while the import counted it "already
/// there" (review106 #1). The same memory twice is fine; so is one id in two banks. The API
/// refuses such a request too.
#[tokio::test]
async fn an_id_given_to_two_memories_is_refused_and_nothing_imported() {
    let d = Daemon::start("[local]\nembedder = \"off\"\n");
    let line = |id: &str, bank: &str, content: &str| {
        json!({"id": id, "bank": bank, "content": content, "created_at": "2024-01-01T00:00:00Z"}).to_string()
    };
    let file = d.dir.path().join("reused.jsonl");
    let lines = [
        line("X1", "b", "alpha version of the note"),
        line("X2", "b", "another note"),
        line("X1", "b", "beta version of the note"),
    ];
    std::fs::write(&file, lines.join("\n")).unwrap();
    let out = d.cli().arg("import").arg(&file).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("reused.jsonl:3: the id of line 1") && err.contains("Nothing was imported"), "{err}");
    assert_eq!(d.get("/v1/export").await.1["memories"], json!([]), "nothing was imported");
    let fine = [line("X1", "b", "alpha"), line("X1", "b", "alpha"), line("X1", "c", "alpha in another bank")];
    let said = import_lines(&d, &file, &fine);
    assert_eq!(said, "Imported 2 of 3 memories (1 already there).");
    let memories = json!([{"id": "Y", "bank": "b", "content": "one", "created_at": "2024-01-01T00:00:00Z"},
        {"id": "Y", "bank": "b", "content": "two", "created_at": "2024-01-01T00:00:00Z"}]);
    let (status, v) = d.post("/v1/import", json!({"memories": memories})).await;
    assert_eq!(status, 400, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().starts_with("memories[1].id is memories[0]'s"), "{v}");
}

/// A memory retained just under `server.max_body_bytes` is exported to a line a little over it
/// (its id, bank and dates), and a daemon with the same config imports it: an import may be 64
/// KiB over the bound. The file was refused whole (review106 #6).
#[tokio::test]
async fn a_backup_of_what_a_daemon_accepted_imports_under_the_same_config() {
    let config = "[server]\nmax_body_bytes = 8192\n[local]\nembedder = \"off\"\n";
    let a = Daemon::start(config);
    a.start_session("s", "/p/backup").await;
    let content = format!("a long note {}", "lemur ".repeat(1_330));
    let body = json!({"items": [{"content": content, "tags": ["kept"]}]});
    assert!(body.to_string().len() > 8_000 && body.to_string().len() < 8_192);
    let (status, v) = a.post("/v1/sessions/s/retain", body).await;
    assert_eq!(status, 202, "{v}");
    a.post("/v1/flush", json!({})).await;
    let file = a.dir.path().join("backup.jsonl");
    let out = a.cli().args(["export", "-o"]).arg(&file).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let line = std::fs::read_to_string(&file).unwrap();
    assert!(line.trim_end().len() > 8_192, "the exported line is over the bound: {}", line.len());
    let b = Daemon::start(config);
    // Said in its health answer: a CLI sizes its import requests by it, and by
    // `max_body_bytes` for a daemon that does not say it (review110 #1).
    let health = b.http.get(b.url("/v1/health")).send().await.unwrap().json::<Value>().await.unwrap();
    assert_eq!(
        (health["max_body_bytes"].as_u64(), health["max_import_bytes"].as_u64()),
        (Some(8_192), Some(8_192 + 65_536))
    );
    let out = b.cli().arg("import").arg(&file).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout(&out).trim(), "Imported 1 of 1 memories (0 already there).");
    // The route's own bound is the room past it: a request over both is refused at once.
    let memory = json!({"id": "m", "bank": "mneme", "content": "x".repeat(8_192 + 65_536), "created_at": "2026-01-01T00:00:00Z"});
    let (status, v) = b.post("/v1/import", json!({"memories": [memory]})).await;
    assert_eq!(status, 413, "{v}");
}

/// An export's cursor names the store it was read from: read on after a reload switched
/// `local.path`, it is refused (409), where the export went on in the new store and a backup
/// mixed two stores; a reload that keeps the store keeps the cursor good. An import's answer
/// names the store that took it, so the CLI can tell an import split between two (review115 #1).
#[tokio::test]
async fn an_export_read_on_across_a_switch_of_store_is_refused() {
    let base = "[local]\nembedder = \"off\"\n";
    let d = Daemon::start(base);
    seed(&d, 3).await;
    let (status, first) = d.get("/v1/export?limit=1").await;
    assert_eq!(status, 200, "{first}");
    let page_store = first["store"].as_str().expect("a page names its store").to_owned();
    let next = first["next"].as_str().expect("more pages").to_owned();
    let (_, imported) = d
        .post("/v1/import", json!({"memories": [{"id": "i1", "bank": "mneme", "content": "imported first", "created_at": "2026-12-01T00:00:00Z"}]}))
        .await;
    let store_a = imported["store"].as_str().expect("the store is named").to_owned();
    // A reload that keeps the store: the cursor reads on.
    std::fs::write(d.config_path(), format!("{base}[recall]\nmax_tokens = 900\n")).unwrap();
    assert_eq!(d.post("/v1/reload", json!({})).await.0, 200);
    let (status, v) = d.get(&format!("/v1/export?limit=1&cursor={next}")).await;
    assert_eq!(status, 200, "{v}");
    // Another store.
    let other = d.data().parent().unwrap().join("other.db");
    std::fs::write(d.config_path(), format!("[local]\nembedder = \"off\"\npath = \"{}\"\n", other.display())).unwrap();
    let (status, v) = d.post("/v1/reload", json!({})).await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = d.get(&format!("/v1/export?limit=1&cursor={next}")).await;
    assert_eq!(status, 409, "{v}");
    assert_eq!(v["error"]["code"], "store_changed", "{v}");
    let (_, imported) = d
        .post("/v1/import", json!({"memories": [{"id": "i2", "bank": "mneme", "content": "imported second", "created_at": "2026-12-01T00:00:00Z"}]}))
        .await;
    assert_ne!(imported["store"].as_str().unwrap(), store_a, "{imported}");
    assert_eq!(page_store, store_a, "an export's page and an import name a store alike");
    // A pass begun again without a cursor (as a Hindsight export's do) names the new store:
    // the CLI stops on it (review118 #3).
    let (_, again) = d.get("/v1/export?limit=1").await;
    assert_ne!(again["store"].as_str().unwrap(), page_store, "{again}");
}

/// `mneme export -o` refuses the store the running daemon has open even where this command's
/// config names another (the daemon's from its environment, a reload it refused, a typo that
/// made the command pass over `[local]`): the export replaced the live store (review118 #2).
#[tokio::test]
async fn an_export_over_the_store_the_daemon_has_open_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = dir.path().join("elsewhere.db");
    let d = Daemon::start_with_env(
        dir,
        "[local]\nembedder = \"off\"\n",
        &[("MNEME_LOCAL__PATH", elsewhere.to_str().unwrap())],
    );
    seed(&d, 2).await;
    assert!(elsewhere.exists());
    let before = std::fs::read(&elsewhere).unwrap();
    let out = d.cli().args(["export", "-o"]).arg(&elsewhere).env_remove("MNEME_LOCAL__PATH").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("which mneme runs on"), "{err}");
    assert_eq!(std::fs::read(&elsewhere).unwrap(), before, "left as it was");
}
