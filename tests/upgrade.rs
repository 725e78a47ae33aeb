//! Opening a store of an earlier schema: the daemon's start upgrades it (waiting for another
//! process upgrading it, through a SIGHUP, saying so), and `mneme migrate` beside a running
//! daemon does not (review76).

mod common;

use std::path::Path;
use std::time::Duration;

use common::Daemon;
use mneme_local::Thesaurus;
use serde_json::json;

/// A store of schema 9 (the steps since are the same for any store, so this one is one of them).
fn at_schema_9(db: &std::path::Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    conn.pragma_update(None, "user_version", 9).unwrap();
    conn
}

fn user_version(db: &std::path::Path) -> i64 {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap()
}

/// A daemon with one memory in its store, stopped: its folder.
async fn stopped_with_a_memory() -> tempfile::TempDir {
    let d = Daemon::start("");
    d.start_session("s", "/p/upgrade").await;
    let items = json!({"items": [{"content": "the zorp widget handles reconnects"}]});
    let (status, v) = d.post("/v1/sessions/s/retain", items).await;
    assert_eq!(status, 202, "{v}");
    let (status, v) = d.post("/v1/flush", json!({})).await;
    assert_eq!(status, 200, "{v}");
    d.into_dir()
}

/// A start that finds another process writing its store of an earlier schema (upgrading it)
/// waits for it instead of failing after 5 s as "database is locked, move it aside" (review76
/// #3); meanwhile the CLI says it is starting, not "not running: start it" (#2), and a SIGHUP
/// does not kill it (#4). The log says the store is upgraded.
#[tokio::test]
async fn a_start_waits_for_another_process_upgrading_its_store() {
    let dir = stopped_with_a_memory().await;
    let db = dir.path().join("data/memories.db");
    let other = at_schema_9(&db);
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let log = dir.path().join("serve.log");
    let (config, env) = (dir.path().join("config.toml"), common::env_for(dir.path()));
    let pid_path = dir.path().join("data/mneme.pid");
    let meanwhile = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        let status = std::process::Command::new(common::bin())
            .arg("status")
            .env("MNEME_CONFIG", &config)
            .envs(env)
            .output()
            .unwrap();
        let doctor = std::process::Command::new(common::bin())
            .arg("doctor")
            .env("MNEME_CONFIG", &config)
            .envs(common::env_for(config.parent().unwrap()))
            .output()
            .unwrap();
        let doctor = String::from_utf8_lossy(&doctor.stdout).into_owned();
        assert!(doctor.contains("may be starting") && !doctor.contains("`mneme doctor` says more"), "{doctor}");
        let pid: u32 = std::fs::read_to_string(&pid_path).unwrap().lines().next().unwrap().trim().parse().unwrap();
        common::unsafe_kill(pid, "HUP");
        // Past the store's usual 5 s wait for a lock.
        std::thread::sleep(Duration::from_millis(5000));
        other.execute_batch("COMMIT").unwrap();
        String::from_utf8_lossy(&status.stderr).into_owned()
    });
    let config = dir.path().join("config.toml");
    let d = Daemon::serve(dir, &config, &[("MNEME_LOG", "info")], Some(&log));
    let status = meanwhile.join().unwrap();
    assert!(status.contains("may be starting") && !status.contains("start it with"), "{status}");
    let (code, v) = d.get("/v1/memories").await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["memories"][0]["content"], "the zorp widget handles reconnects", "{v}");
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains("upgrading the local store") && log.contains("from schema 9"), "{log}");
    assert!(log.contains("SIGHUP while mneme starts"), "{log}");
    assert_eq!(user_version(&db), mneme_local::schema::VERSION as i64);
}

/// `mneme migrate` beside a running daemon, perhaps an earlier mneme's, leaves its store's
/// schema alone: upgraded under that daemon, what it then wrote was indexed the earlier way into
/// a store marked upgraded, and it could not start on its store again (review76 #1). With no
/// daemon running, migrate upgrades the store as a start would.
#[tokio::test]
async fn migrate_beside_a_running_daemon_leaves_its_store_alone() {
    let dir = stopped_with_a_memory().await;
    let data = dir.path().join("data");
    let db = data.join("memories.db");
    drop(at_schema_9(&db));
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "[hindsight]\napi_url = \"http://127.0.0.1:9\"\n").unwrap();
    let migrate = || {
        std::process::Command::new(common::bin())
            .args(["migrate", "--from", "local", "--to", "hindsight"])
            .env("MNEME_CONFIG", &config)
            .envs(common::env_for(dir.path()))
            .env("MNEME_LOG", "error")
            .output()
            .unwrap()
    };
    // The daemon's single-instance lock, as a running daemon holds it.
    let pidfile = std::fs::OpenOptions::new().read(true).write(true).open(data.join("mneme.pid")).unwrap();
    pidfile.lock().unwrap();
    let out = migrate();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("older than this mneme") && said.contains("restart it with this one first"), "{said}");
    assert_eq!(user_version(&db), 9, "{said}");
    drop(pidfile);
    // No daemon: the store is upgraded (the copy then fails on the unreachable server).
    let out = migrate();
    assert!(!out.status.success());
    assert_eq!(user_version(&db), mneme_local::schema::VERSION as i64, "{}", String::from_utf8_lossy(&out.stderr));
}

/// Memory turned on live (`off` → `local`) over a store that takes a while to open (another
/// process upgrading it): a retain meanwhile waits in the spool for it, instead of "Memory is
/// off: nothing was stored", and `mneme reload` waiting for the switch says it switched, not
/// "unchanged" (review76 #5).
#[tokio::test]
async fn a_retain_while_memory_is_turned_on_waits_for_the_store() {
    let dir = stopped_with_a_memory().await;
    let db = dir.path().join("data/memories.db");
    let config = dir.path().join("config.toml");
    let retain = "[retain]\nevery_n_turns = 1\nmode = \"full-session\"\n";
    let d = Daemon::start_in(dir, &format!("[memory]\nbackend = \"off\"\n{retain}"));
    d.start_session("s2", "/p/upgrade").await;
    let other = at_schema_9(&db);
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    std::fs::write(&config, format!("[memory]\nbackend = \"local\"\n{retain}")).unwrap();
    // The watcher reads the file and starts opening the store, which waits for the lock.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (status, v) = d.get("/v1/status").await;
    assert_eq!(v["backend"]["backend"], "off", "still opening: {status} {v}");
    let items = json!({"items": [{"content": "the grebe indexer batches its writes"}]});
    let (status, v) = d.post("/v1/sessions/s2/retain", items).await;
    assert_eq!((status, &v["queued"]), (202, &json!(1)), "{v}");
    // And a turn of the session, as the agents' hooks send it (review78 #1: passed over).
    let turn = json!({"messages": [
        {"role": "user", "content": "where does the heron service keep its queue?"},
        {"role": "assistant", "content": "The heron service keeps its queue in Redis stream heron-jobs."},
    ]});
    let (status, v) = d.post("/v1/sessions/s2/agent-end", turn).await;
    assert_eq!(status, 200, "{v}");
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1000));
        other.execute_batch("COMMIT").unwrap();
    });
    let mut reload = d.command();
    let reload = tokio::task::spawn_blocking(move || reload.arg("reload").output()).await.unwrap().unwrap();
    release.join().unwrap();
    let said = String::from_utf8_lossy(&reload.stdout).into_owned();
    assert!(said.contains("Switched the memory backend from off to local"), "{said}");
    let (_, v) = d.post("/v1/flush", json!({})).await;
    assert_eq!(v["failed"], 0, "{v}");
    let (_, v) = d.get("/v1/memories").await;
    let texts: Vec<&str> = v["memories"].as_array().unwrap().iter().filter_map(|m| m["content"].as_str()).collect();
    assert!(texts.contains(&"the grebe indexer batches its writes"), "{texts:?}");
    assert!(texts.iter().any(|t| t.contains("Redis stream heron-jobs")), "{texts:?}");
    // The turn kept meanwhile began the session's conversation in the store it waited for: the
    // next turn goes on with it, not into a second part (review79 #2).
    let turn = json!({"messages": [
        {"role": "user", "content": "where does the heron service keep its queue?"},
        {"role": "assistant", "content": "The heron service keeps its queue in Redis stream heron-jobs."},
        {"role": "user", "content": "and where are its dead letters?"},
        {"role": "assistant", "content": "In the heron-dead stream, trimmed after a week."},
    ]});
    let (status, v) = d.post("/v1/sessions/s2/agent-end", turn).await;
    assert_eq!(status, 200, "{v}");
    let (_, v) = d.post("/v1/flush", json!({})).await;
    assert_eq!(v["failed"], 0, "{v}");
    let (_, v) = d.get("/v1/memories").await;
    let documents: Vec<&str> =
        v["memories"].as_array().unwrap().iter().filter_map(|m| m["document_id"].as_str()).collect();
    assert!(documents.iter().any(|d| d.starts_with("s2")), "{v}");
    assert!(documents.iter().all(|d| !d.contains("part")), "{documents:?}");
}

/// Starts a daemon on `dir` (its config `config`) while another process holds the write lock of
/// its store of schema 9, as a process upgrading it would: `edit` is made during the start, and
/// the lock let go after it. Returns the daemon once it serves.
fn started_with_an_edit_meanwhile(
    dir: tempfile::TempDir,
    config: &Path,
    edit: impl FnOnce() + Send + 'static,
) -> Daemon {
    let other = at_schema_9(&dir.path().join("data/memories.db"));
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let meanwhile = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        edit();
        std::thread::sleep(Duration::from_millis(1000));
        other.execute_batch("COMMIT").unwrap();
    });
    let d = Daemon::serve(dir, config, &[], None);
    meanwhile.join().unwrap();
    d
}

/// What `read` gives once it is `wanted` (polled for 5 s), or the last it gave.
async fn once<T: PartialEq, F: std::future::Future<Output = T>>(wanted: T, read: impl Fn() -> F) -> T {
    let mut got = read().await;
    for _ in 0..50 {
        if got == wanted {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        got = read().await;
    }
    got
}

/// An edit of the config made while the daemon opens its store (waiting here for another process
/// upgrading it) is applied once it serves: the watch began after it, and it was never read
/// (review78 #5).
#[tokio::test]
async fn an_edit_made_while_the_daemon_starts_is_applied() {
    let dir = stopped_with_a_memory().await;
    let config = dir.path().join("config.toml");
    let edited = config.clone();
    let d = started_with_an_edit_meanwhile(dir, &config, move || {
        std::fs::write(&edited, "[memory]\nbackend = \"off\"\n").unwrap();
    });
    let backend = once(json!("off"), || async { d.get("/v1/status").await.1["backend"]["backend"].clone() }).await;
    assert_eq!(backend, "off");
}

/// So is an edit of the thesaurus file the config names (review79 #1: only the config's own
/// text was read again).
#[tokio::test]
async fn a_thesaurus_edit_made_while_the_daemon_starts_is_applied() {
    let dir = stopped_with_a_memory().await;
    let (config, thesaurus) = (dir.path().join("config.toml"), dir.path().join("words.txt"));
    std::fs::write(&thesaurus, "kiwi papaya\n").unwrap();
    std::fs::write(&config, format!("[local]\nthesaurus_file = {:?}\n", thesaurus.display().to_string())).unwrap();
    let d = started_with_an_edit_meanwhile(dir, &config, move || {
        std::fs::write(&thesaurus, "kiwi papaya\nmango guava\n").unwrap();
    });
    let at_start = Thesaurus::with_lines(true, "kiwi papaya\n").unwrap().words() as u64;
    let words =
        once(Some(at_start + 2), || async { d.get("/v1/status").await.1["backend"]["thesaurus_words"].as_u64() }).await;
    assert_eq!(words, Some(at_start + 2), "mango and guava");
}
