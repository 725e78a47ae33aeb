//! Live configuration: edits to the watched config file and `POST /v1/reload`.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::Daemon;
use serde_json::{json, Value};

/// What the spool holds once it is empty, or after `polls` looks 50 ms apart.
async fn spooled_after(d: &Daemon, polls: usize) -> u64 {
    let mut spooled = 1;
    for _ in 0..polls {
        spooled = d.get("/v1/status").await.1["queue"]["spooled"].as_u64().unwrap();
        if spooled == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    spooled
}

async fn notices(d: &Daemon) -> Vec<Value> {
    d.get("/v1/notices?limit=1000").await.1["notices"].as_array().unwrap().clone()
}

async fn wait_for_notice(d: &Daemon, needle: &str) -> Value {
    for _ in 0..100 {
        if let Some(n) = notices(d).await.into_iter().find(|n| n["message"].as_str().unwrap().contains(needle)) {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no notice containing {needle:?}: {:?}", notices(d).await);
}

/// A config file replaced by one another user owns is not applied: that user chose where the
/// daemon sends its memories and the Hindsight token, and the reload applied it by itself
/// (review52 #6). Needs root, to make the file another user's.
#[tokio::test]
async fn a_config_another_user_made_is_not_applied() {
    // SAFETY: geteuid(2) cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to make a file another user's");
        return;
    }
    let d = Daemon::start("[local]\nembedder = \"off\"\n");
    let theirs = d.dir.path().join("theirs.toml");
    std::fs::write(&theirs, "[memory]\nbackend = \"off\"\n").unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    std::fs::rename(&theirs, d.config_path()).unwrap();
    let n = wait_for_notice(&d, "Config change not applied").await;
    assert!(n["message"].as_str().unwrap().contains("another user may change it"), "{n}");
    let (_, status) = d.get("/v1/status").await;
    assert_eq!(status["backend"]["backend"], "local", "{status}");
}

#[tokio::test]
async fn an_invalid_edit_is_reported_and_the_daemon_keeps_serving() {
    let d = Daemon::start("[queue]\nbatch_size = 16\n");
    d.start_session("s", "/p/x").await;
    std::fs::write(d.config_path(), "[queue]\nbatch_size = 16\n\n[memory]\nbackend = \"cloud\"\n").unwrap();
    let n = wait_for_notice(&d, "Config change not applied").await;
    assert_eq!(n["level"], "error");
    // One edit, one notice: reading the file to check it is not another change.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let refused =
        notices(&d).await.into_iter().filter(|n| n["message"].as_str().unwrap().contains("not applied")).count();
    assert_eq!(refused, 1, "{:?}", notices(&d).await);
    assert!(n["message"].as_str().unwrap().contains("line 5: memory.backend"), "{n}");
    let (status, v) = d.post("/v1/sessions/s/retain", json!({"items": [{"content": "still served"}]})).await;
    assert_eq!(status, 202, "{v}");
    let (status, v) = d.req(reqwest::Method::POST, "/v1/reload", None).await;
    assert_eq!(status, 422);
    assert_eq!(v["error"]["code"], "invalid_config");
    assert_eq!(
        v["error"]["errors"][0],
        json!({"key": "memory.backend", "line": 5, "message": v["error"]["errors"][0]["message"]})
    );
    let (_, st) = d.get("/v1/status").await;
    assert_eq!(st["backend"]["backend"], "local");
    // The CLI says the same, once (its own read of the file is not told as well), exit 2.
    let out = d.cli().arg("reload").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(said.matches("line 5: memory.backend").count(), 1, "{said}");
    assert!(!said.contains("going on"), "{said}");
    // The other commands, and the hooks, still reach the daemon (it runs on its last good
    // config), telling the problem: a hook that gave up would lose the turn.
    let out = d.cli().arg("status").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 5: memory.backend"));
    let event = json!({"hook_event_name": "SessionStart", "session_id": "hk", "cwd": "/p/x", "source": "startup"});
    let out = d.cli().args(["hook", "claude-code"]).write_stdin(event.to_string()).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("additionalContext"), "{out:?}");
    // So do the MCP server's headers (without them the agent loses mneme's tools) and an import.
    let out = d
        .cli()
        .args(["hook", "claude-code", "--mcp-headers"])
        .env("CLAUDE_PROJECT_DIR", "/srv/josé/app")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("Bearer {}", d.token)), "{out:?}");
    // A path that is not ASCII goes percent-encoded (a fetch client cannot send it as it is).
    let headers: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(headers["X-Mneme-Cwd"], "%2Fsrv%2Fjos%C3%A9%2Fapp", "{headers}");
    let file = d.dir.path().join("import.jsonl");
    let line = json!({"id": "imported-1", "bank": "mneme", "content": "imported on a bad config", "tags": [],
        "kind": "world", "created_at": "2026-01-01T00:00:00Z", "metadata": {}});
    std::fs::write(&file, format!("{line}\n")).unwrap();
    let out = d.cli().arg("import").arg(&file).output().unwrap();
    assert!(out.status.success(), "{out:?}");
}

#[tokio::test]
async fn tuning_applies_without_a_swap_and_restart_only_keys_are_reported() {
    let d = Daemon::start("");
    std::fs::write(d.config_path(), "[queue]\nbatch_size = 2\n[recall]\nmax_tokens = 64\n").unwrap();
    let (status, v) = d.req(reqwest::Method::POST, "/v1/reload", None).await;
    assert_eq!(
        (status, &v),
        (200, &json!({"backend": "local", "changed": false, "previous_backend": "local", "restart_needed": []}))
    );
    // batch_size 2 now: two retains flush at once.
    d.start_session("s", "/p/y").await;
    d.post("/v1/sessions/s/retain", json!({"items": [{"content": "one"}, {"content": "two"}]})).await;
    assert_eq!(spooled_after(&d, 50).await, 0, "the new batch_size applied");
    // A local setting reopens the same backend, and the notice says so.
    std::fs::write(d.config_path(), "[local]\nthesaurus = false\n").unwrap();
    let (_, v) = d.req(reqwest::Method::POST, "/v1/reload", None).await;
    assert_eq!((&v["backend"], &v["changed"]), (&json!("local"), &json!(true)), "{v}");
    wait_for_notice(&d, "the local backend's settings changed; it was reopened with them").await;
    std::fs::write(d.config_path(), "[server]\nmax_body_bytes = 9999\n").unwrap();
    let (_, v) = d.req(reqwest::Method::POST, "/v1/reload", None).await;
    // The key is named (review73 #6: it said "server").
    assert_eq!(v["restart_needed"], json!(["server.max_body_bytes"]));
    wait_for_notice(&d, "server.max_body_bytes changed in").await;
    wait_for_notice(&d, "restart mneme to apply it").await;
    d.cli().arg("reload").assert().success();
    // Told once: the file watcher's reload and `mneme reload` each told it (review109).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let told = notices(&d).await;
    let told = told.iter().filter(|n| n["message"].as_str().unwrap().contains("server.max_body_bytes changed in"));
    assert_eq!(told.count(), 1, "{:?}", notices(&d).await);
    // Two keys: "apply them" (review98 #4).
    std::fs::write(d.config_path(), "[server]\nmax_body_bytes = 9999\n[queue]\nsync = \"normal\"\n").unwrap();
    let (_, v) = d.req(reqwest::Method::POST, "/v1/reload", None).await;
    assert_eq!(v["restart_needed"], json!(["server.max_body_bytes", "queue.sync"]), "{v}");
    wait_for_notice(&d, "server.max_body_bytes and queue.sync changed in").await;
    wait_for_notice(&d, "restart mneme to apply them").await;
    // A config file that disappears does not switch everything back to the defaults.
    std::fs::write(d.config_path(), "[memory]\nbackend = \"off\"\n").unwrap();
    assert_eq!(d.req(reqwest::Method::POST, "/v1/reload", None).await.1["backend"], "off");
    std::fs::remove_file(d.config_path()).unwrap();
    let (status, v) = d.req(reqwest::Method::POST, "/v1/reload", None).await;
    assert_eq!((status, &v["backend"]), (200, &json!("off")), "{v}");
    wait_for_notice(&d, "is gone or empty; the running configuration stays").await;
    assert_eq!(d.get("/v1/status").await.1["config_exists"], false, "the status says what is there now");
    // Nor does one emptied by an editor before it writes it again.
    std::fs::write(d.config_path(), "").unwrap();
    let (status, v) = d.req(reqwest::Method::POST, "/v1/reload", None).await;
    assert_eq!((status, &v["backend"]), (200, &json!("off")), "{v}");
    assert!(v["not_read"].as_str().unwrap().contains("the running configuration stays"), "{v}");
    // And `mneme reload` says so, rather than "Reloaded the configuration".
    let out = d.cli().arg("reload").output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("is gone or empty") && !said.contains("Reloaded"), "{said}");
    // A config that is a FIFO (nothing writes it) is refused, and the daemon goes on answering.
    std::fs::remove_file(d.config_path()).unwrap();
    let made = std::process::Command::new("mkfifo").arg(d.config_path()).status().unwrap();
    assert!(made.success());
    let (status, v) = d.req(reqwest::Method::POST, "/v1/reload", None).await;
    assert_eq!(status, 422, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("not a regular file"), "{v}");
    assert_eq!(d.get("/v1/health").await.0, 200);
    // So does the watcher, which reads it after its own reload for the thesaurus file it names
    // (review79 #4: it waited for a writer for good, and the daemon answered nothing).
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let health = d.http.get(d.url("/v1/health")).timeout(std::time::Duration::from_secs(5)).send().await;
    assert_eq!(health.map(|r| r.status().as_u16()).ok(), Some(200));
    // A comment alone means all defaults.
    std::fs::remove_file(d.config_path()).unwrap();
    std::fs::write(d.config_path(), "# defaults\n").unwrap();
    assert_eq!(d.req(reqwest::Method::POST, "/v1/reload", None).await.1["backend"], "local");
}

/// Streams retains from a client while the test edits the config; returns the acknowledged ones.
fn stream_retains(d: &Daemon, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<Vec<String>> {
    let (http, url, token) = (d.http.clone(), d.url("/v1/sessions/w/retain"), d.token.clone());
    tokio::spawn(async move {
        let mut acked = Vec::new();
        let mut i = 0;
        while !stop.load(Ordering::Relaxed) {
            let content = format!("switch stream item {i}");
            let r = http
                .post(&url)
                .bearer_auth(&token)
                .json(&json!({"items": [{"content": content}]}))
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let v: Value = r.json().await.unwrap();
            match status {
                202 => acked.push(content),
                200 => assert_eq!(v["queued"], 0, "{v}"), // memory off: nothing acknowledged
                other => panic!("unexpected {other}: {v}"),
            }
            i += 1;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        acked
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_backends_while_retains_stream_in_loses_nothing() {
    // Without the peer (outside CI) the switch to hindsight is left out.
    let hindsight = common::hindsight_peer();
    let bank = common::fresh("switch");
    if let Some(url) = &hindsight {
        common::chunk_bank(url, &bank).await;
    }
    let base = format!("[memory]\nbank_id = \"{bank}\"\nscoping = \"global\"\n[queue]\nflush_interval = \"200ms\"\n");
    let d = Daemon::start(&base);
    d.start_session("w", "/p/switch").await;
    let stop = Arc::new(AtomicBool::new(false));
    let streamer = stream_retains(&d, stop.clone());
    let switches: Vec<(&str, &str)> = if hindsight.is_some() {
        vec![("local", "off"), ("off", "local"), ("local", "hindsight")]
    } else {
        vec![("local", "off"), ("off", "local")]
    };
    for (from, to) in &switches {
        tokio::time::sleep(Duration::from_millis(600)).await;
        let extra = match (&hindsight, *to) {
            (Some(url), "hindsight") => format!("[hindsight]\napi_url = \"{url}\"\n"),
            _ => String::new(),
        };
        let text = base.replacen("[memory]\n", &format!("[memory]\nbackend = \"{to}\"\n"), 1) + &extra;
        std::fs::write(d.config_path(), text).unwrap();
        let n = wait_for_notice(&d, &format!("memory backend switched from {from} to {to}")).await;
        assert_eq!(n["level"], "info");
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    stop.store(true, Ordering::Relaxed);
    let acked = streamer.await.unwrap();
    assert!(acked.len() > 50, "only {} acknowledged", acked.len());
    let (_, v) = d.post("/v1/flush", json!({})).await;
    assert_eq!(v["failed"], 0, "{v}");
    assert_eq!(d.get("/v1/status").await.1["queue"]["spooled"], 0);

    // Every acknowledged retain is in exactly one store.
    let db = d.data().join("memories.db");
    let remote: Vec<String> = match &hindsight {
        Some(url) => {
            let mut texts = Vec::new();
            let mut last = 0;
            for _ in 0..60 {
                texts = common::bank_texts(url, &bank).await;
                let local: usize = acked.iter().filter(|c| common::stored_count(&db, c) > 0).count();
                if local + texts.len() >= acked.len() && texts.len() == last {
                    break;
                }
                last = texts.len();
                tokio::time::sleep(Duration::from_millis(1000)).await;
            }
            texts
        }
        None => Vec::new(),
    };
    let mut wrong = Vec::new();
    for c in &acked {
        let n = common::stored_count(&db, c) as usize + remote.iter().filter(|t| *t == c).count();
        if n != 1 {
            wrong.push((c.clone(), n));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} not stored exactly once: {:?}",
        wrong.len(),
        acked.len(),
        &wrong[..wrong.len().min(5)]
    );
}

#[tokio::test]
async fn a_thesaurus_file_applies_on_reload_and_a_bad_line_is_refused() {
    let base = "[local]\nembedder = \"off\"\n";
    let d = Daemon::start(base);
    let cwd = tempfile::tempdir().unwrap();
    d.start_session("s", cwd.path().to_str().unwrap()).await;
    let (status, v) =
        d.post("/v1/sessions/s/retain", json!({"items": [{"content": "The storefront runs on kubernetes."}]})).await;
    assert_eq!(status, 202, "{v}");
    d.post("/v1/flush", json!({"wait": true})).await;
    let recalled = |q: &'static str| {
        let d = &d;
        async move {
            let (status, v) = d.post("/v1/sessions/s/recall", json!({"query": q})).await;
            assert_eq!(status, 200, "{v}");
            v["results"].as_array().unwrap().len()
        }
    };
    assert_eq!(recalled("orchard").await, 0, "not a word the store or the built-in list knows");

    // The user's own line, next to the config: applied by a reload.
    let words = d.config_path().with_file_name("words.txt");
    std::fs::write(&words, "# our project's words\norchard > storefront\n").unwrap();
    std::fs::write(d.config_path(), format!("{base}thesaurus_file = \"words.txt\"\n")).unwrap();
    let (status, v) = d.req(reqwest::Method::POST, "/v1/reload", None).await;
    assert_eq!((status, &v["backend"]), (200, &json!("local")), "{v}");
    assert_eq!(recalled("orchard").await, 1);
    // Status says which list is in force.
    let (_, st) = d.get("/v1/status").await;
    let file = words.display().to_string();
    assert_eq!(st["thesaurus"], json!({"builtin": true, "file": file}), "{st}");
    let with_file = st["backend"]["thesaurus_words"].as_u64().unwrap();
    assert!(with_file > 1000, "{st}");
    let out = d.cli().arg("status").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("thesaurus: the built-in list and {file} ({with_file} words")), "{text}");

    // An edit of the file with a bad line is refused, naming the file and its line; the
    // running thesaurus stays.
    std::fs::write(&words, "orchard > storefront\nci/cd pipeline\n").unwrap();
    let (status, v) = d.req(reqwest::Method::POST, "/v1/reload", None).await;
    assert_eq!(status, 422, "{v}");
    let error = &v["error"]["errors"][0];
    assert_eq!((&error["key"], &error["line"]), (&json!("local.thesaurus_file"), &json!(3)), "{v}");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("words.txt: line 2: \"ci/cd\" is not one word"), "{message}");
    assert_eq!(recalled("orchard").await, 1);

    // Turning the built-in list and the file off: words alone.
    std::fs::write(d.config_path(), format!("{base}thesaurus = false\n")).unwrap();
    let (status, v) = d.req(reqwest::Method::POST, "/v1/reload", None).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(recalled("orchard").await, 0);
    assert_eq!(recalled("kubernetes").await, 1);
    let (_, st) = d.get("/v1/status").await;
    assert_eq!(
        (&st["thesaurus"], &st["backend"]["thesaurus_words"]),
        (&json!({"builtin": false, "file": null}), &json!(0))
    );
    let out = d.cli().arg("status").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("thesaurus: off (0 words"));
}

#[tokio::test]
async fn an_edit_of_the_thesaurus_file_applies_like_one_of_the_config() {
    // The file in a folder of its own, named from the start.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("vocab")).unwrap();
    let words = dir.path().join("vocab/words.txt");
    std::fs::write(&words, "k8s kubernetes\n").unwrap();
    let d = Daemon::start_in(dir, "[local]\nembedder = \"off\"\nthesaurus_file = \"vocab/words.txt\"\n");
    let cwd = tempfile::tempdir().unwrap();
    d.start_session("s", cwd.path().to_str().unwrap()).await;
    d.post("/v1/sessions/s/retain", json!({"items": [{"content": "The storefront runs on kubernetes."}]})).await;
    d.post("/v1/flush", json!({"wait": true})).await;
    let found = |q: &'static str| {
        let d = &d;
        async move { d.post("/v1/sessions/s/recall", json!({"query": q})).await.1["results"].as_array().unwrap().len() }
    };
    assert_eq!(found("k8s").await, 1);
    assert_eq!(found("orchard").await, 0);
    // No reload asked for: the daemon sees the edit.
    std::fs::write(&words, "k8s kubernetes\norchard > storefront\n").unwrap();
    for _ in 0..100 {
        if found("orchard").await == 1 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the edit of {} was not applied: {:?}", words.display(), notices(&d).await);
}

/// A secret added live to a config file others may read is said, as at the start (review73 #3:
/// applied without a word; only `config check`, doctor and the start said it).
#[tokio::test]
async fn a_secret_added_live_to_a_file_others_may_read_is_said() {
    use std::os::unix::fs::PermissionsExt;
    let d = Daemon::start("");
    let config = std::fs::read_to_string(d.config_path()).unwrap();
    std::fs::write(d.config_path(), format!("{config}\n[hindsight]\napi_token = \"hs_live_secret_42\"\n")).unwrap();
    std::fs::set_permissions(d.config_path(), std::fs::Permissions::from_mode(0o644)).unwrap();
    let (status, _) = d.req(reqwest::Method::POST, "/v1/reload", None).await;
    assert_eq!(status, 200);
    let n = wait_for_notice(&d, "holds hindsight.api_token and others may read it").await;
    assert!(!n.to_string().contains("hs_live_secret_42"), "{n}");
}

/// An edit refused for the thesaurus file it names (a bad line, or a file not there yet) is
/// applied once that file is fixed, without another edit of the config: the file named was not
/// watched until it was in force (review73 #1).
#[tokio::test]
async fn an_edit_refused_for_its_thesaurus_file_applies_when_the_file_is_fixed() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start_in(
        dir,
        "[local]
embedder = \"off\"\n",
    );
    let vocab = d.dir.path().join("vocab");
    std::fs::create_dir(&vocab).unwrap();
    let words = vocab.join("words.txt");
    std::fs::write(&words, "orchard >\n").unwrap(); // a bad line
    let config = std::fs::read_to_string(d.config_path()).unwrap();
    let edited = config.replace("[local]\n", "[local]\nthesaurus_file = \"vocab/words.txt\"\n");
    assert_ne!(edited, config);
    std::fs::write(d.config_path(), edited).unwrap();
    wait_for_notice(&d, "words.txt").await;
    async fn words_in_force(d: &Daemon) -> String {
        d.get("/v1/status").await.1["thesaurus"].to_string()
    }
    assert!(!words_in_force(&d).await.contains("words.txt"), "refused: {}", words_in_force(&d).await);
    std::fs::write(&words, "orchard > storefront\n").unwrap();
    for _ in 0..100 {
        if words_in_force(&d).await.contains("words.txt") {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the fixed {} was not applied: {:?} {}", words.display(), notices(&d).await, words_in_force(&d).await);
}

/// The same for a thesaurus file in folders that do not exist yet, two deep: made after the edit,
/// they are seen from the nearest folder that exists (review74 #2: never applied).
#[tokio::test]
async fn an_edit_refused_for_a_thesaurus_file_in_folders_not_there_yet_applies_when_they_are_made() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start_in(dir, "[local]\nembedder = \"off\"\n");
    let config = std::fs::read_to_string(d.config_path()).unwrap();
    let edited = config.replace("[local]\n", "[local]\nthesaurus_file = \"th/x/thes.txt\"\n");
    std::fs::write(d.config_path(), edited).unwrap();
    wait_for_notice(&d, "thes.txt").await;
    let folder = d.dir.path().join("th/x");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("thes.txt"), "zorgle cargodist\n").unwrap();
    for _ in 0..100 {
        if d.get("/v1/status").await.1["thesaurus"].to_string().contains("thes.txt") {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the file made in new folders was not applied: {:?}", notices(&d).await);
}

/// A config kept as a symlink (as dotfile managers keep it): an edit to the file it points at is
/// applied like any other.
#[tokio::test]
async fn an_edit_through_a_symlinked_config_is_applied() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = dir.path().join("dotfiles");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let target = elsewhere.join("mneme.toml");
    std::fs::write(&target, "[queue]\nbatch_size = 16\n").unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join("config.toml")).unwrap();
    let d = Daemon::start_in(dir, "");
    std::fs::write(&target, "[queue]\nbatch_size = 16\n[memory]\nbackend = \"off\"\n").unwrap();
    wait_for_notice(&d, "memory backend switched from local to off").await;
    let (_, st) = d.get("/v1/status").await;
    assert_eq!(st["backend"]["backend"], "off", "{st}");
}

/// A config reached through a chain of links (a dotfile manager's own layer of links): the link
/// in the middle pointed at another file changes the config, and is applied. Only the file at
/// the chain's end was watched: the daemon kept the old settings until `mneme reload`.
#[tokio::test]
async fn a_middle_link_of_a_symlinked_config_pointed_elsewhere_is_applied() {
    let dir = tempfile::tempdir().unwrap();
    let dots = dir.path().join("dots");
    std::fs::create_dir_all(dots.join("a")).unwrap();
    std::fs::create_dir_all(dots.join("b")).unwrap();
    std::fs::write(dots.join("a/real.toml"), "[queue]\nbatch_size = 16\n").unwrap();
    std::fs::write(dots.join("b/other.toml"), "[queue]\nbatch_size = 16\n[memory]\nbackend = \"off\"\n").unwrap();
    std::os::unix::fs::symlink("a/real.toml", dots.join("mid.toml")).unwrap();
    std::os::unix::fs::symlink("dots/mid.toml", dir.path().join("config.toml")).unwrap();
    let d = Daemon::start_in(dir, "");
    let dots = d.dir.path().join("dots");
    // `ln -sfn`: a new link renamed over the old one.
    std::os::unix::fs::symlink("b/other.toml", dots.join("mid.toml.new")).unwrap();
    std::fs::rename(dots.join("mid.toml.new"), dots.join("mid.toml")).unwrap();
    wait_for_notice(&d, "memory backend switched from local to off").await;
}

#[tokio::test]
async fn a_config_folder_replaced_whole_is_watched_again() {
    let dir = tempfile::tempdir().unwrap();
    let dotfiles = dir.path().join("dotfiles");
    std::fs::create_dir_all(&dotfiles).unwrap();
    std::fs::write(dotfiles.join("mneme.toml"), "[queue]\nbatch_size = 16\n").unwrap();
    std::os::unix::fs::symlink(dotfiles.join("mneme.toml"), dir.path().join("config.toml")).unwrap();
    let d = Daemon::start_in(dir, "");
    let root = d.dir.path().to_owned();
    // A dotfile manager (or `rm -rf` and a copy) replaces the folder the config lives in.
    std::fs::rename(root.join("dotfiles"), root.join("dotfiles.old")).unwrap();
    std::fs::create_dir_all(root.join("dotfiles")).unwrap();
    std::fs::write(root.join("dotfiles/mneme.toml"), "[queue]\nbatch_size = 16\n[memory]\nbackend = \"off\"\n")
        .unwrap();
    wait_for_notice(&d, "memory backend switched from local to off").await;
    // And edits in the new folder keep applying.
    tokio::time::sleep(Duration::from_millis(500)).await;
    std::fs::write(root.join("dotfiles/mneme.toml"), "[queue]\nbatch_size = 16\n").unwrap();
    wait_for_notice(&d, "memory backend switched from off to local").await;
}

/// `hindsight.api_url` pointed at this daemon's own `/hindsight` (a tempting mistake after
/// setting up a Hindsight client against mneme): every retain went round for ever. Now it is a
/// delivery the backend refuses, said once, and the status says why.
#[tokio::test]
async fn a_hindsight_backend_pointed_at_its_own_daemon_says_so_and_loops_not() {
    let d = Daemon::start("[queue]\nflush_interval = \"1h\"\nmax_attempts = 2\n");
    let own = d.url("/hindsight");
    std::fs::write(
        d.config_path(),
        // With its own token (through HINDSIGHT_API_TOKEN, say), so the loop gets past the guard.
        format!(
            "[queue]\nflush_interval = \"1h\"\nmax_attempts = 2\n[memory]\nbackend = \"hindsight\"\n[hindsight]\napi_url = \"{own}\"\napi_token = \"{}\"\n",
            d.token
        ),
    )
    .unwrap();
    wait_for_notice(&d, "memory backend switched from local to hindsight").await;
    d.start_session("s", "/p/loop").await;
    let (status, _) = d.post("/v1/sessions/s/retain", json!({"items": [{"content": "round and round"}]})).await;
    assert_eq!(status, 202);
    let (_, flushed) = d.post("/v1/flush", json!({})).await;
    assert_eq!(flushed["failed"], 1, "{flushed}");
    wait_for_notice(&d, "is this mneme's own /hindsight API").await;
    let (_, status) = d.get("/v1/status").await;
    assert_eq!(status["queue"]["dead"], 1, "{status}");
    assert_eq!(status["queue"]["spooled"], 0, "nothing went round into its own spool: {status}");
    assert!(status.to_string().contains("own /hindsight API"), "{status}");
    let (_, flushed) = d.post("/v1/flush", json!({})).await;
    assert_eq!(flushed["failed"], 0, "{flushed}");
    let (_, status) = d.get("/v1/status").await;
    assert_eq!(status["queue"]["dead"], 1, "one dead letter, not one more every flush: {status}");
}

/// A session keeps its instructions' recent memories (the agent's prompt cache) until the
/// backend is switched: then the new one's are asked, not the old one's shown on.
#[tokio::test]
async fn the_instructions_follow_a_switch_to_another_store() {
    let d = Daemon::start("");
    d.start_session("s", "/p/switch").await;
    d.post("/v1/sessions/s/retain", json!({"items": [{"content": "the old store holds this"}]})).await;
    d.post("/v1/flush", json!({})).await;
    let (_, v) = d.get("/v1/sessions/s/instructions").await;
    assert!(v["markdown"].as_str().unwrap().contains("the old store holds this"), "{v}");
    let other = d.dir.path().join("other.db");
    std::fs::write(d.config_path(), format!("[local]\npath = {:?}\n", other.display().to_string())).unwrap();
    // The CLI says what the reload did: the same backend, reopened (not "switched").
    let out = d.cli().arg("reload").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "Reopened the local backend with its new settings.\n");
    let (_, v) = d.get("/v1/sessions/s/instructions").await;
    assert!(!v["markdown"].as_str().unwrap().contains("the old store holds this"), "{v}");
}

/// The same store reopened with other settings (a thesaurus edit, an embedder's timeout) holds
/// the same memories: a live session's instructions stay as they were asked, as they do when
/// more is stored, and each agent keeps its prompt cache (review121 #4: asked again at every
/// such reload).
#[tokio::test]
async fn the_instructions_stay_when_the_same_store_is_reopened() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("words.txt"), "k8s kubernetes\n").unwrap();
    let base = "[local]\nembedder = \"off\"\nthesaurus_file = \"words.txt\"\n";
    let d = Daemon::start_in(dir, base);
    d.start_session("s", "/p/reopen").await;
    d.post("/v1/sessions/s/retain", json!({"items": [{"content": "the first fact is kept"}]})).await;
    d.post("/v1/flush", json!({})).await;
    let (_, asked) = d.get("/v1/sessions/s/instructions").await;
    assert!(asked["markdown"].as_str().unwrap().contains("the first fact is kept"), "{asked}");
    d.post("/v1/sessions/s/retain", json!({"items": [{"content": "a second fact came later"}]})).await;
    d.post("/v1/flush", json!({})).await;
    std::fs::write(d.dir.path().join("words.txt"), "k8s kubernetes\norchard > storefront\n").unwrap();
    std::fs::write(d.config_path(), format!("{base}embedding_timeout = \"20s\"\n")).unwrap();
    let out = d.cli().arg("reload").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    wait_for_notice(&d, "reopened with them").await;
    let (_, v) = d.get("/v1/sessions/s/instructions").await;
    assert_eq!(v["markdown"], asked["markdown"], "asked again for a store reopened");
}

/// A session's conversation across a switch to another store: what it retained stays in the
/// old store, and its next turns go to the new one in a part of their own, as after a move to
/// another bank. It went on under the same document, and the new store was given the whole
/// conversation again: every turn before the switch was in both (review37 #2). With the
/// default cadence, the turns the old store had not been given yet (the pending tail) go there.
#[tokio::test]
async fn a_sessions_conversation_does_not_follow_it_to_another_store() {
    let d = Daemon::start("[local]\nembedder = \"off\"\n");
    d.start_session("s", "/p/switch").await;
    let turn = |n: usize| {
        (0..n)
            .flat_map(|i| {
                [
                    json!({"role": "user", "content": format!("question {i} TURN-{i}")}),
                    json!({"role": "assistant", "content": format!("answer {i}")}),
                ]
            })
            .collect::<Vec<_>>()
    };
    for n in 1..=2 {
        let (status, v) = d.post("/v1/sessions/s/agent-end", json!({ "messages": turn(n) })).await;
        assert_eq!(status, 200, "{v}");
    }
    let exported = |d: &Daemon| String::from_utf8_lossy(&d.cli().arg("export").output().unwrap().stdout).into_owned();
    let first = d.dir.path().join("data").join("memories.db");
    let other = d.dir.path().join("other.db");
    let config =
        |path: &std::path::Path| format!("[local]\nembedder = \"off\"\npath = {:?}\n", path.display().to_string());
    std::fs::write(d.config_path(), config(&other)).unwrap();
    assert!(d.cli().arg("reload").output().unwrap().status.success());
    let end = json!({ "messages": turn(3), "ends_session": true });
    let (status, v) = d.post("/v1/sessions/s/agent-end", end).await;
    assert_eq!(status, 200, "{v}");
    d.post("/v1/flush", json!({})).await;
    let in_other = exported(&d);
    assert!(in_other.contains("TURN-2") && !in_other.contains("TURN-0") && !in_other.contains("TURN-1"), "{in_other}");
    std::fs::write(d.config_path(), config(&first)).unwrap();
    assert!(d.cli().arg("reload").output().unwrap().status.success());
    let in_first = exported(&d);
    for t in ["TURN-0", "TURN-1"] {
        assert_eq!(in_first.matches(t).count(), 1, "{t}: {in_first}");
    }
    assert!(!in_first.contains("TURN-2"), "{in_first}");
}

/// A first run has no config folder: creating it and the file later is picked up as any edit
/// (the README: "Edit the config file: the daemon watches it").
#[tokio::test]
async fn a_config_whose_folder_is_made_after_the_start_is_watched() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("home/.config/mneme/config.toml");
    let d = Daemon::serve(dir, &config, &[], None);
    let (_, st) = d.get("/v1/status").await;
    assert_eq!(st["backend"]["backend"], "local");
    // Give the watcher a moment to be set up, then make the folders one at a time.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let home = d.dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    std::fs::write(&config, "[memory]\nbackend = \"off\"\n").unwrap();
    let n = wait_for_notice(&d, "memory backend switched").await;
    assert!(n["message"].as_str().unwrap().contains("from local to off"), "{n}");
}

/// A valid file whose backend will not open is the daemon refusing (exit 1), not an invalid
/// config (exit 2): the file needs no mending.
#[tokio::test]
async fn a_backend_that_will_not_open_is_not_an_invalid_config() {
    let d = Daemon::start("");
    // A folder where the store's file would be: the file is valid, the store cannot open.
    let folder = d.dir.path().join("a-folder");
    std::fs::create_dir(&folder).unwrap();
    std::fs::write(d.config_path(), format!("[local]\npath = {:?}\n", folder.display().to_string())).unwrap();
    let (status, v) = d.req(reqwest::Method::POST, "/v1/reload", None).await;
    assert_eq!((status, v["error"]["code"].as_str()), (422, Some("backend_unavailable")), "{v}");
    let out = d.cli().arg("reload").output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("invalid config"), "{out:?}");
}

/// A store that will not open met by a running daemon's switch: the advice is to save the
/// config again or reload once it is mended, not to start a daemon that runs.
#[tokio::test]
async fn a_failed_switch_advises_a_reload_not_a_start() {
    let d = Daemon::start("");
    let damaged = d.dir.path().join("damaged.db");
    std::fs::write(&damaged, vec![b'x'; 8192]).unwrap();
    std::fs::write(d.config_path(), format!("[local]\npath = {:?}\n", damaged.display().to_string())).unwrap();
    let (status, v) = d.req(reqwest::Method::POST, "/v1/reload", None).await;
    let message = v["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert_eq!(status, 422, "{v}");
    assert!(message.contains("mneme reload") && !message.contains("start mneme"), "{message}");
    let notice = wait_for_notice(&d, "Cannot switch to the local backend").await;
    assert!(!notice["message"].as_str().unwrap().contains("start mneme"), "{notice}");
}

/// Items queued under a long `flush_interval` go out on the new one once a reload cuts it, not
/// an hour later.
#[tokio::test]
async fn a_cut_flush_interval_reaches_what_is_already_queued() {
    let d = Daemon::start("[queue]\nflush_interval = \"1h\"\n");
    d.start_session("s", "/p/slow").await;
    let (status, v) = d.post("/v1/sessions/s/retain", json!({"items": [{"content": "queued for an hour"}]})).await;
    assert_eq!(status, 202, "{v}");
    std::fs::write(d.config_path(), "[queue]\nflush_interval = \"200ms\"\n").unwrap();
    let (status, v) = d.req(reqwest::Method::POST, "/v1/reload", None).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(spooled_after(&d, 100).await, 0, "delivered on the new interval");
}

/// A bank changed while mneme was down applies to the sessions it kept: clients start a session
/// once, and a kept session went on writing to the old bank.
#[tokio::test]
async fn a_bank_changed_while_mneme_was_down_applies_to_the_sessions_kept() {
    let config = |bank: &str| format!("[memory]\nbank_id = \"{bank}\"\nscoping = \"global\"\n");
    let d = Daemon::start(&config("before"));
    d.start_session("s", "/p/app").await;
    let d = Daemon::start_in(d.into_dir(), &config("after"));
    let (status, v) = d.post("/v1/sessions/s/retain", json!({"items": [{"content": "the kite flies at noon"}]})).await;
    assert_eq!(status, 202, "{v}");
    let (_, v) = d.post("/v1/flush", json!({})).await;
    assert_eq!(v["delivered"], 1, "{v}");
    let (_, v) = d.get("/v1/memories?bank=after").await;
    assert_eq!(v["memories"].as_array().unwrap().len(), 1, "in the new bank: {v}");
    let (_, v) = d.get("/v1/memories?bank=before").await;
    assert_eq!(v["memories"], json!([]), "{v}");
}

/// A reload that moves sessions keeps each in the project it was started in: a git checkout
/// whose folder is no longer one (a worktree removed since) does not move it to another tag.
#[tokio::test]
async fn a_rescoped_session_keeps_the_project_it_started_in() {
    let repo = tempfile::tempdir().unwrap();
    let checkout = repo.path().join("Kestrel");
    std::fs::create_dir_all(checkout.join(".git")).unwrap();
    std::fs::create_dir_all(checkout.join("src")).unwrap();
    let d = Daemon::start("[memory]\nbank_id = \"one\"\n");
    let v = d.start_session("s", checkout.join("src").to_str().unwrap()).await;
    assert_eq!(v["scope"]["tags"], json!(["project:kestrel"]), "{v}");
    std::fs::remove_dir(checkout.join(".git")).unwrap();
    std::fs::write(d.config_path(), "[memory]\nbank_id = \"two\"\n").unwrap();
    let (status, v) = d.req(reqwest::Method::POST, "/v1/reload", None).await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = d.post("/v1/sessions/s/retain", json!({"items": [{"content": "the heron nests"}]})).await;
    assert_eq!(status, 202, "{v}");
    d.post("/v1/flush", json!({})).await;
    let (_, v) = d.get("/v1/memories?bank=two").await;
    assert_eq!(v["memories"][0]["tags"], json!(["project:kestrel"]), "{v}");
}

/// SIGHUP re-reads the config, as daemons do; its default action stopped mneme with no drain (a
/// closed terminal, or `kill -HUP` meant as "reload").
#[tokio::test]
async fn sighup_reloads_instead_of_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("daemon.log");
    let mut d = Daemon::start_logged(dir, "", &[("MNEME_LOG", "info")], Some(&log));
    let pid = d.child.as_ref().unwrap().id();
    common::unsafe_kill(pid, "HUP");
    // The file did not change, so no watcher set this reload off: the log says SIGHUP did.
    let sent = std::time::Instant::now();
    while !std::fs::read_to_string(&log).unwrap_or_default().contains("SIGHUP: reloading") {
        assert!(sent.elapsed() < Duration::from_secs(10), "no reload: {}", std::fs::read_to_string(&log).unwrap());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(d.child.as_mut().unwrap().try_wait().unwrap().is_none(), "still running");
    let (status, v) = d.get("/v1/status").await;
    assert_eq!(status, 200, "{v}");
}

/// A new `storage.dir` needs a restart, and the start on the new folder opens its spool only:
/// the notice says how many retains wait in the old one and what to do before restarting (they
/// waited there, unsaid).
#[tokio::test]
async fn a_new_storage_dir_says_what_the_old_spool_still_holds() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config =
        |at: &std::path::Path| format!("[storage]\ndir = \"{}\"\n[queue]\nflush_interval = \"1h\"\n", at.display());
    // The harness sets the storage dir from the environment; an empty value is ignored, so the
    // file's is the one in force.
    let d = Daemon::start_with_env(dir, &config(&data), &[("MNEME_STORAGE__DIR", "")]);
    d.start_session("s", "/p/moving").await;
    let (status, _) = d.post("/v1/sessions/s/retain", json!({"items": [{"content": "waits in the old spool"}]})).await;
    assert_eq!(status, 202);
    std::fs::write(d.config_path(), config(&d.dir.path().join("elsewhere"))).unwrap();
    let (status, v) = d.req(reqwest::Method::POST, "/v1/reload", None).await;
    assert_eq!((status, &v["restart_needed"]), (200, &json!(["storage.dir"])), "{v}");
    let n = wait_for_notice(&d, "still in the spool").await;
    let message = n["message"].as_str().unwrap();
    assert!(message.contains("1 retain is still") && message.contains("mneme flush"), "{message}");
    // The local store in the old folder does not move with it: said (review73 #5).
    let store = data.join("memories.db");
    assert!(message.contains(&format!("The local store {} stays where it is", store.display())), "{message}");
    assert!(message.contains("move the store's files"), "{message}");
    // And the CLI, which reads the token where the file now says, reaches this daemon to do it:
    // the token is lent to the new folder (it could not, and said to restart).
    let out = d.cli().env("MNEME_STORAGE__DIR", "").arg("flush").output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains("Delivered 1 memory"),
        "{said} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // And `doctor` says what runs where, and what to do: not "another mneme's".
    let out = d.cli().env("MNEME_STORAGE__DIR", "").arg("doctor").output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("storage.dir was changed after it started") && !said.contains("another mneme"), "{said}");
}

/// A new `storage.dir` that already holds a store (a folder an earlier mneme used): the notice
/// does not advise moving the files there, which would replace it (review74 #3).
#[tokio::test]
async fn a_new_storage_dir_holding_a_store_is_not_advised_a_move() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let used = dir.path().join("used");
    std::fs::create_dir(&used).unwrap();
    std::fs::write(used.join("memories.db"), b"").unwrap();
    let config = |at: &std::path::Path| format!("[storage]\ndir = \"{}\"\n", at.display());
    let d = Daemon::start_with_env(dir, &config(&data), &[("MNEME_STORAGE__DIR", "")]);
    std::fs::write(d.config_path(), config(&used)).unwrap();
    let (status, _) = d.req(reqwest::Method::POST, "/v1/reload", None).await;
    assert_eq!(status, 200);
    let n = wait_for_notice(&d, "storage.dir changed").await;
    let message = n["message"].as_str().unwrap();
    assert!(message.contains("a store already there") && message.contains("mneme export"), "{message}");
    assert!(!message.contains("move the store's files"), "{message}");
}

/// `mneme reload` typed right after `storage.dir` was edited reaches the daemon: it waits a
/// moment for the token the daemon's watcher lends the new folder (it failed, the token "kept
/// elsewhere", until the watcher had reloaded).
#[tokio::test]
async fn a_reload_typed_right_after_a_storage_dir_edit_reaches_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // A port of its own: with port 0 only the pidfile says where a daemon listens, and a
    // command finds none in the new folder before it could wait for the token.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = |at: &std::path::Path| {
        format!("[server]\nlisten = \"127.0.0.1:{port}\"\n[storage]\ndir = \"{}\"\n", at.display())
    };
    let env = [("MNEME_STORAGE__DIR", ""), ("MNEME_SERVER__LISTEN", "")];
    let d = Daemon::start_with_env(dir, &config(&data), &env);
    std::fs::write(d.config_path(), config(&d.dir.path().join("moved"))).unwrap();
    let out = d.cli().envs(env).arg("reload").output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && said.contains("Restart mneme to apply storage.dir"), "{said} {err}");
}

/// A flush with memory off says what it keeps spooled (it said "Delivered 0 memories, 0 failed."
/// and exited 0, the items still queued).
#[tokio::test]
async fn a_flush_with_memory_off_says_what_it_keeps() {
    // Queued while a Hindsight server is down, then memory switched off.
    let down = "[queue]\nflush_interval = \"1h\"\nshutdown_grace = \"1s\"\n[memory]\nbackend = \"hindsight\"\n[hindsight]\napi_url = \"http://127.0.0.1:9\"\n";
    let d = Daemon::start(down);
    d.start_session("s", "/p/held").await;
    let (status, v) = d.post("/v1/sessions/s/retain", json!({"items": [{"content": "kept for later"}]})).await;
    assert_eq!(status, 202, "{v}");
    std::fs::write(d.config_path(), "[queue]\nflush_interval = \"1h\"\n[memory]\nbackend = \"off\"\n").unwrap();
    assert_eq!(d.req(reqwest::Method::POST, "/v1/reload", None).await.1["backend"], "off");
    let (_, v) = d.post("/v1/flush", json!({})).await;
    assert_eq!((&v["delivered"], &v["held"]), (&json!(0), &json!(1)), "{v}");
    let out = d.cli().arg("flush").output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("1 memory kept spooled"), "{said}");
    std::fs::write(d.config_path(), "[queue]\nflush_interval = \"1h\"\n").unwrap();
    d.req(reqwest::Method::POST, "/v1/reload", None).await;
    let (_, v) = d.post("/v1/flush", json!({})).await;
    assert!(v.get("held").is_none(), "no held field when none: {v}");
    assert_eq!(d.get("/v1/status").await.1["queue"]["spooled"], 0, "delivered once a backend stores");
}

/// An environment override of a key the file sets hides every edit of it: a reload says so (an
/// edit of memory.backend under MNEME_MEMORY__BACKEND changed nothing, without a word), and so
/// does `config check`.
#[tokio::test]
async fn an_override_hiding_an_edited_key_is_told() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start_with_env(dir, "", &[("MNEME_MEMORY__BACKEND", "off")]);
    std::fs::write(d.config_path(), "[queue]\nbatch_size = 16\n[memory]\nbackend = \"local\"\n").unwrap();
    let (_, v) = d.req(reqwest::Method::POST, "/v1/reload", None).await;
    assert_eq!(v["backend"], "off", "{v}");
    wait_for_notice(&d, "MNEME_MEMORY__BACKEND overrides memory.backend (line 4 of the file)").await;
    // Told once a file: reloads and saves of the same text do not say it again (a review saw
    // 38 of the same notice in a minute)...
    async fn told(d: &Daemon) -> usize {
        notices(d).await.into_iter().filter(|n| n["message"].as_str().unwrap().contains("overrides")).count()
    }
    for _ in 0..3 {
        d.req(reqwest::Method::POST, "/v1/reload", None).await;
        std::fs::write(d.config_path(), "[queue]\nbatch_size = 16\n[memory]\nbackend = \"local\"\n").unwrap();
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(told(&d).await, 1);
    // ...and an edit of the file says it again: a reload is when the user looks.
    std::fs::write(d.config_path(), "[queue]\nbatch_size = 32\n[memory]\nbackend = \"local\"\n").unwrap();
    d.req(reqwest::Method::POST, "/v1/reload", None).await;
    assert_eq!(told(&d).await, 2);
    // A daemon started on such a file tells it at its start: a reload of the same file does not
    // tell it again.
    drop(d);
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start_with_env(dir, "[memory]\nbackend = \"local\"\n", &[("MNEME_MEMORY__BACKEND", "off")]);
    assert_eq!(told(&d).await, 1);
    d.req(reqwest::Method::POST, "/v1/reload", None).await;
    assert_eq!(told(&d).await, 1);
    let out = d.cli().args(["config", "check"]).env("MNEME_MEMORY__BACKEND", "off").output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("MNEME_MEMORY__BACKEND overrides memory.backend"), "{said}");
}

/// A daemon on a Hindsight server that never answers (its retains hang for two minutes), flushing
/// every `flush_interval`, with `text` retained in session `s1`.
async fn hung_hindsight_daemon(flush_interval: &str, text: &str) -> Daemon {
    let addr = common::never_answering().await;
    let d = Daemon::start(&format!(
        "[memory]\nbackend = \"hindsight\"\n[hindsight]\napi_url = \"http://{addr}\"\nretain_timeout = \"120s\"\n\
         [queue]\nflush_interval = \"{flush_interval}\"\nshutdown_grace = \"1s\"\n[local]\nembedder = \"off\"\n"
    ));
    d.start_session("s1", "/p/hung").await;
    let (status, v) = d.post("/v1/sessions/s1/retain", json!({"items": [{"content": text}]})).await;
    assert_eq!(status, 202, "{v}");
    d
}

/// A flush whose own delivery hangs on the old backend when a switch comes says what became of
/// the batch: delivered to the new backend, not failed (review37 #3: "1 memory could not be
/// delivered", exit 1, while it was delivered moments later).
#[tokio::test]
async fn a_flush_under_way_at_a_switch_counts_what_the_new_backend_took() {
    let d = hung_hindsight_daemon("1h", "flushed at the switch").await;
    let waiting = {
        let (http, url, token) = (d.http.clone(), d.url("/v1/flush"), d.token.clone());
        tokio::spawn(async move {
            let sent = http.post(url).bearer_auth(token).json(&json!({"wait": true})).send().await.unwrap();
            sent.json::<Value>().await.unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let config =
        std::fs::read_to_string(d.config_path()).unwrap().replace("backend = \"hindsight\"", "backend = \"local\"");
    std::fs::write(d.config_path(), config).unwrap();
    let (status, v) = d.req(reqwest::Method::POST, "/v1/reload", None).await;
    assert_eq!(status, 200, "{v}");
    let report = tokio::time::timeout(Duration::from_secs(15), waiting).await.unwrap().unwrap();
    assert_eq!((report["delivered"].as_u64(), report["failed"].as_u64()), (Some(1), Some(0)), "{report}");
    assert_eq!(common::stored_count(&d.data().join("memories.db"), "flushed at the switch"), 1);
}

/// A delivery still running on the old backend when the switch's drain runs out of its grace
/// stops, and its batch goes to the new backend: a Hindsight server that never answered held
/// the batch, and every flush of its queue, until `retain_timeout` (here two minutes).
#[tokio::test]
async fn a_delivery_hung_on_the_old_backend_goes_to_the_new_one_after_the_grace() {
    let d = hung_hindsight_daemon("200ms", "hung on the old backend").await;
    // Its delivery is under way, and hangs.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let config =
        std::fs::read_to_string(d.config_path()).unwrap().replace("backend = \"hindsight\"", "backend = \"local\"");
    std::fs::write(d.config_path(), config).unwrap();
    let started = std::time::Instant::now();
    let (status, v) = d.req(reqwest::Method::POST, "/v1/reload", None).await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = d.post("/v1/flush", json!({})).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(spooled_after(&d, 100).await, 0, "still spooled");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(15), "the switch and the flush took {took:?}");
    assert_eq!(common::stored_count(&d.data().join("memories.db"), "hung on the old backend"), 1);
}

/// A `retain.idle_after` lowered by a reload applies at once: the sweep waited out the interval
/// the old value set (a minute for the default 15 minutes) before it looked again (review37).
#[tokio::test]
async fn a_lowered_idle_after_retains_idle_sessions_at_once() {
    let config = |idle: &str| format!("[retain]\nevery_n_turns = 4\nidle_after = \"{idle}\"\n");
    let d = Daemon::start(&config("1h"));
    d.start_session("s", "/p/idle").await;
    let turn = json!({"messages": [
        {"role": "user", "content": "where do the release notes live?"},
        {"role": "assistant", "content": "In docs/CHANGELOG.md, one section a release."}
    ]});
    let (status, v) = d.post("/v1/sessions/s/agent-end", turn).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(d.get("/v1/status").await.1["queue"]["pending"], 0, "one turn of four: kept as the pending tail");
    // Idle for a second before the reload, so the new value finds it idle at once.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    std::fs::write(d.config_path(), config("1s")).unwrap();
    let (status, v) = d.req(reqwest::Method::POST, "/v1/reload", None).await;
    assert_eq!(status, 200, "{v}");
    let mut found = false;
    for _ in 0..100 {
        let out = d.cli().arg("export").output().unwrap();
        if String::from_utf8_lossy(&out.stdout).contains("docs/CHANGELOG.md") {
            found = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(found, "the idle session's turn was retained within 10 s of the reload");
}

/// A switch to another local store whose drain runs out of its grace while a batch is being
/// written to the old one stores that batch once: the old store's writer commits what it was
/// given, so the delivery is awaited, not given to the new store too (review106 #2: a batch of
/// 256 in both stores). Several graces, as where the grace ends in a delivery is the machine's.
#[tokio::test]
async fn a_switch_past_its_grace_stores_a_local_batch_under_way_once() {
    for grace in ["20ms", "150ms", "60ms"] {
        let settings = |store: &str| {
            format!(
                "[local]\nembedder = \"off\"\npath = \"{store}\"\n[queue]\nbatch_size = 100000\nflush_interval = \"1h\"\nmax_batch = 256\nshutdown_grace = \"{grace}\"\n"
            )
        };
        let dir = tempfile::tempdir().unwrap();
        let (old, new) = (dir.path().join("old.db"), dir.path().join("new.db"));
        let mut d = Daemon::start_in(dir, &settings(old.to_str().unwrap()));
        d.start_session("s", "/p/switch").await;
        let filler = "filler words here ".repeat(40);
        let texts: Vec<String> = (0..2000).map(|i| format!("item {i} {}", filler.trim())).collect();
        for chunk in texts.chunks(100) {
            let items: Vec<Value> = chunk.iter().map(|t| json!({"content": t})).collect();
            let (status, v) = d.post("/v1/sessions/s/retain", json!({"items": items})).await;
            assert_eq!(status, 202, "{v}");
        }
        let config = std::fs::read_to_string(d.config_path()).unwrap().replace("old.db", "new.db");
        std::fs::write(d.config_path(), config).unwrap();
        let (status, v) = d.req(reqwest::Method::POST, "/v1/reload", None).await;
        assert_eq!(status, 200, "{v}");
        let (status, v) = d.post("/v1/flush", json!({"wait": true})).await;
        assert_eq!(status, 200, "{v}");
        assert!(d.stop().success());
        let contents = |db: &std::path::Path| -> std::collections::HashSet<String> {
            let conn = rusqlite::Connection::open(db).unwrap();
            let mut stmt = conn.prepare("SELECT content FROM memories").unwrap();
            stmt.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
        };
        let (in_old, in_new) = (contents(&old), contents(&new));
        let both = texts.iter().filter(|t| in_old.contains(*t) && in_new.contains(*t)).count();
        let lost = texts.iter().filter(|t| !in_old.contains(*t) && !in_new.contains(*t)).count();
        assert_eq!(
            (both, lost),
            (0, 0),
            "grace {grace}: {} in the old store, {} in the new",
            in_old.len(),
            in_new.len()
        );
    }
}

/// A refused edit (a bad value, a file emptied) is told once: the watcher's reload and the
/// `mneme reload` that follows it each told it, and every reload after (review115 #5); the
/// caller still hears it each time. Told again once a reload has loaded in between.
#[tokio::test]
async fn a_refused_edit_is_told_once_until_a_reload_loads() {
    let d = Daemon::start("[local]\nembedder = \"off\"\n");
    async fn told(d: &Daemon, what: &str) -> usize {
        notices(d).await.into_iter().filter(|n| n["message"].as_str().unwrap().contains(what)).count()
    }
    let bad = "[local]\nembedder = \"off\"\n[queue]\nbatch_size = \"many\"\n";
    std::fs::write(d.config_path(), bad).unwrap();
    for _ in 0..3 {
        let (status, v) = d.req(reqwest::Method::POST, "/v1/reload", None).await;
        assert_eq!(status, 422, "the caller hears it every time: {v}");
    }
    tokio::time::sleep(Duration::from_millis(1200)).await; // the watcher's reload too
    assert_eq!(told(&d, "Config change not applied").await, 1);
    std::fs::write(d.config_path(), "").unwrap();
    for _ in 0..2 {
        d.req(reqwest::Method::POST, "/v1/reload", None).await;
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(told(&d, "is gone or empty").await, 1);
    // Loaded in between: the same bad edit is news again.
    std::fs::write(d.config_path(), "[local]\nembedder = \"off\"\n").unwrap();
    assert_eq!(d.req(reqwest::Method::POST, "/v1/reload", None).await.0, 200);
    std::fs::write(d.config_path(), bad).unwrap();
    d.req(reqwest::Method::POST, "/v1/reload", None).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(told(&d, "Config change not applied").await, 2);
}

/// A switch refused because the new store cannot be opened is told once too, until a reload
/// applies (review118 #4: a notice at every reload).
#[tokio::test]
async fn a_store_that_cannot_be_opened_is_told_once_until_a_reload_applies() {
    let d = Daemon::start("[local]\nembedder = \"off\"\n");
    let folder = d.data().parent().unwrap().join("a-folder.db");
    std::fs::create_dir(&folder).unwrap();
    std::fs::write(d.config_path(), format!("[local]\nembedder = \"off\"\npath = \"{}\"\n", folder.display())).unwrap();
    for _ in 0..3 {
        let (status, v) = d.req(reqwest::Method::POST, "/v1/reload", None).await;
        assert_ne!(status, 200, "{v}");
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let told =
        notices(&d).await.into_iter().filter(|n| n["message"].as_str().unwrap().contains("Cannot switch")).count();
    assert_eq!(told, 1);
}
