//! Nothing acknowledged is lost: a real daemon is SIGKILLed three times in a row while four
//! clients stream retains (each restart delivering what the last run left while the next stream
//! runs); after the last restart every retain that got a 202 is in the store exactly once.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Daemon;
use serde_json::json;

/// Streams retains from [`CLIENTS`] clients until `want` are acknowledged, then SIGKILLs the
/// daemon mid-stream. Returns what was acknowledged.
async fn stream_then_kill(d: &mut Daemon, round: usize, want: usize) -> Vec<String> {
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let (http, url, token) = (d.http.clone(), d.url(&format!("/v1/sessions/client-{c}/retain")), d.token.clone());
        let (acked, stop) = (acked.clone(), stop.clone());
        clients.push(tokio::spawn(async move {
            for i in 0..100_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let content = format!("round {round} client {c} durable item {i}");
                let sent =
                    http.post(&url).bearer_auth(&token).json(&json!({"items": [{"content": content}]})).send().await;
                match sent {
                    Ok(r) if r.status() == 202 => acked.lock().unwrap().push(content),
                    Ok(r) => panic!("unexpected status {}", r.status()),
                    Err(_) => break, // the daemon is gone
                }
            }
        }));
    }
    // Let a good stream build up, then kill without warning.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while acked.lock().unwrap().len() < want && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    d.kill();
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 500, "round {round}: only {} retains acknowledged before the kill", acked.len());
    acked
}

const CLIENTS: usize = 4;
const ROUNDS: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_sigkills_mid_stream_lose_no_acknowledged_retain() {
    // Short intervals so deliveries are in flight when a kill lands.
    let config = "[queue]\nflush_interval = \"50ms\"\nbatch_size = 8\n";
    let mut d = Daemon::start(config);
    for c in 0..CLIENTS {
        d.start_session(&format!("client-{c}"), &format!("/work/proj{c}")).await;
    }
    let mut acked = Vec::new();
    for round in 0..ROUNDS {
        if round > 0 {
            // Killed right after the last round's stream: whatever it left spooled is being
            // delivered while this round streams (sessions are remembered across restarts).
            d = Daemon::start_in(d.into_dir(), "");
        }
        acked.extend(stream_then_kill(&mut d, round, 1500).await);
    }

    let db = d.data().join("memories.db");
    let d = Daemon::start_in(d.into_dir(), "");
    let (status, report) = d.post("/v1/flush", json!({})).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["failed"], 0, "{report}");
    let (_, st) = d.get("/v1/status").await;
    assert_eq!(st["queue"]["spooled"], 0, "{st}");
    let _dir = d.into_dir(); // stops the daemon, keeps the files

    let conn = rusqlite::Connection::open(&db).unwrap();
    let mut lost = Vec::new();
    let mut stmt = conn.prepare("SELECT count(*) FROM memories WHERE content = ?").unwrap();
    for content in &acked {
        let n: i64 = stmt.query_row([content], |r| r.get(0)).unwrap();
        if n != 1 {
            lost.push((content.clone(), n));
        }
    }
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged retains not stored exactly once: {:?}",
        lost.len(),
        acked.len(),
        &lost[..lost.len().min(10)]
    );
    let dupes: i64 = conn
        .query_row(
            "SELECT count(*) FROM (SELECT content FROM memories GROUP BY bank, content HAVING count(*) > 1)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(dupes, 0);
    println!(
        "durability: {} acknowledged retains over {ROUNDS} SIGKILLs, all stored exactly once after the last restart",
        acked.len()
    );
}

/// A spool file deleted under the running daemon: the retain that finds it gone is refused
/// (503, a notice), since it would go into a file no start reads; the daemon writes the spool
/// back to its path at once and goes on in it, so later retains are accepted, and a crash then
/// loses nothing: before, everything acknowledged lived in the deleted file until a graceful
/// stop wrote it back, and a kill lost it all (review116 #2).
#[tokio::test]
async fn a_spool_deleted_under_the_daemon_is_written_back_at_once_and_a_crash_keeps_it() {
    let config = "[local]\nembedder = \"off\"\n[queue]\nflush_interval = \"1h\"\n";
    let mut d = Daemon::start(config);
    d.start_session("s", "/p/gone").await;
    retain_acknowledged(&d, "acknowledged before GONE-1").await;
    for name in ["spool.db", "spool.db-wal", "spool.db-shm"] {
        let _ = std::fs::remove_file(d.data().join(name));
    }
    // Refused if the retain looks before the writer has written the file back (it looks every
    // 100 ms), saying what happens; accepted if after.
    let (status, v) = d.post("/v1/sessions/s/retain", json!({"items": [{"content": "after GONE-2"}]})).await;
    match status {
        503 => {
            let message = v["error"]["message"].as_str().unwrap();
            assert!(message.contains("was deleted") && message.contains("writes it back"), "{v}");
        }
        202 => {}
        _ => panic!("{status}: {v}"),
    }
    // Its end is told without waiting for a retain (review123 #7: the refusal's notice stayed
    // the last word until one came).
    told_within_5_s(&d, "written back to its path").await;
    accepted_again_within_10_s(&d, "acknowledged after GONE-3").await;
    assert!(d.data().join("spool.db").exists(), "written back");
    // What `/hindsight` keeps in the spool (a bank's profile) is kept in the file written back.
    let (status, v) =
        d.req(reqwest::Method::PUT, "/hindsight/v1/default/banks/gone", Some(json!({"mission": "kept KEPT-4"}))).await;
    assert_eq!(status, 200, "{v}");
    let (_, notices) = d.get("/v1/notices?after=0").await;
    assert!(notices.to_string().contains("spool file") && notices.to_string().contains("was deleted"), "{notices}");
    assert!(notices.to_string().contains("written back to its path"), "{notices}");
    d.kill();
    let d = Daemon::start_in(d.into_dir(), config);
    found_within_10_s(&d, "acknowledged before GONE-1", "GONE-1").await;
    found_within_10_s(&d, "acknowledged after GONE-3", "GONE-3").await;
    let (_, bank) = d.get("/hindsight/v1/default/banks").await;
    assert!(bank.to_string().contains("KEPT-4"), "{bank}");
}

/// The whole storage dir removed under the running daemon (an `rm -rf`) while retains wait (the
/// backend down): the folder is made again, private, and the spool written back into it at once.
/// The restart the refusal advised began on a new, empty spool, and a crash before it lost the
/// waiting retains too (review116 #1).
#[tokio::test]
async fn a_storage_dir_removed_under_the_daemon_keeps_what_waits_through_a_crash() {
    let mut d = Daemon::start(BACKEND_DOWN);
    d.start_session("s", "/p/removed").await;
    for i in 1..=3 {
        retain_acknowledged(&d, &format!("waiting REMOVED-{i}")).await;
    }
    std::fs::remove_dir_all(d.data()).unwrap();
    // Written back by the writer's own look, with no retain to notice it.
    within_5_s("the spool written back", || d.data().join("spool.db").exists()).await;
    // Told, though no retain was refused for it: a log line only before (review117 #4).
    let written_back = |v: &serde_json::Value| {
        let notices = v["notices"].as_array().unwrap();
        notices.iter().filter(|n| n["message"].as_str().unwrap().contains("written back to its path")).count()
    };
    told_within_5_s(&d, "written back to its path").await;
    accepted_again_within_10_s(&d, "waiting REMOVED-4").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(written_back(&d.get("/v1/notices?after=0").await.1), 1, "told once");
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode();
    assert_eq!(mode(&d.data()) & 0o077, 0, "the folder made again is private");
    assert_eq!(mode(&d.data().join("spool.db")) & 0o077, 0);
    d.kill();
    let d = Daemon::start_in(d.into_dir(), "[local]\nembedder = \"off\"\n");
    for i in 1..=4 {
        found_within_10_s(&d, &format!("waiting REMOVED-{i}"), &format!("REMOVED-{i}")).await;
    }
}

/// The token and the pidfile removed with the storage dir are written back while the daemon
/// runs: the CLI finds and reaches it again, and a second `mneme serve` on the folder is still
/// refused. Neither came back until a restart, and a second daemon took a lock nobody held
/// (review117 #2).
#[tokio::test]
async fn a_storage_dir_removed_under_the_daemon_gets_its_token_and_pidfile_back() {
    let d = Daemon::start("[local]\nembedder = \"off\"\n");
    std::fs::remove_dir_all(d.data()).unwrap();
    let (token, pidfile) = (d.data().join("token"), d.data().join("mneme.pid"));
    within_5_s("the token and the pidfile written back", || token.exists() && pidfile.exists()).await;
    assert_eq!(std::fs::read_to_string(&token).unwrap().trim(), d.token, "the token the daemon runs with");
    let pid = d.child.as_ref().unwrap().id();
    assert_eq!(std::fs::read_to_string(&pidfile).unwrap(), format!("{pid}\n{}\n", d.addr));
    use std::os::unix::fs::PermissionsExt;
    for file in [&token, &pidfile] {
        assert_eq!(std::fs::metadata(file).unwrap().permissions().mode() & 0o077, 0, "{}", file.display());
    }
    let status = d.cli().args(["--json", "status"]).output().unwrap();
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let mut second = d
        .command()
        .arg("serve")
        .env("MNEME_LOG", "error")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while second.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = second.kill();
            panic!("a second daemon started on the folder");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let out = second.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("another mneme daemon (pid {pid})")), "{err}");
    assert_eq!(std::fs::read_to_string(&token).unwrap().trim(), d.token, "the second start left the token alone");
    // Another token left in its place (a second start while the files were gone, that then
    // stopped) is the running daemon's again (review123 #1: the CLI was refused until a restart).
    std::fs::write(&token, "0".repeat(64)).unwrap();
    within_5_s("the daemon's token back", || std::fs::read_to_string(&token).unwrap().trim() == d.token).await;
    // A folder put in its place that a start would refuse (others may write in it) is not
    // written into (review123 #4), until it is made private.
    std::fs::remove_dir_all(d.data()).unwrap();
    std::fs::create_dir(d.data()).unwrap();
    std::fs::set_permissions(d.data(), std::fs::Permissions::from_mode(0o777)).unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let written: Vec<_> = std::fs::read_dir(d.data()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(written.is_empty(), "written into a folder others may write in: {written:?}");
    std::fs::set_permissions(d.data(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let all_back = || token.exists() && pidfile.exists() && d.data().join("spool.db").exists();
    within_5_s("the files written back once the folder is private", all_back).await;
}

/// The storage dir replaced by a plain file under the running daemon: the spool in it is gone
/// as if deleted, so retains are refused (503) rather than acknowledged into the deleted file,
/// which a kill then lost (review123 #5: taken for healthy); with the file removed, the spool
/// is written back and nothing acknowledged is lost through a crash.
#[tokio::test]
async fn a_storage_dir_replaced_by_a_file_refuses_retains_until_it_is_back() {
    let mut d = Daemon::start(BACKEND_DOWN);
    d.start_session("s", "/p/replaced").await;
    retain_acknowledged(&d, "waiting BYFILE-1").await;
    std::fs::remove_dir_all(d.data()).unwrap();
    std::fs::write(d.data(), "not a folder").unwrap();
    let (status, v) = d.post("/v1/sessions/s/retain", json!({"items": [{"content": "refused BYFILE-X"}]})).await;
    assert_eq!(status, 503, "{v}");
    std::fs::remove_file(d.data()).unwrap();
    accepted_again_within_10_s(&d, "waiting BYFILE-2").await;
    d.kill();
    let d = Daemon::start_in(d.into_dir(), "[local]\nembedder = \"off\"\n");
    for i in 1..=2 {
        found_within_10_s(&d, &format!("waiting BYFILE-{i}"), &format!("BYFILE-{i}")).await;
    }
}

/// Waits until `ready` holds, for 5 s at most (failing the test, saying it waited for `what`).
async fn within_5_s(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !ready() {
        assert!(std::time::Instant::now() < deadline, "waited 5 s for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until a notice holds `needle`, for 5 s at most.
async fn told_within_5_s(d: &Daemon, needle: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (_, notices) = d.get("/v1/notices?after=0").await;
        if notices.to_string().contains(needle) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{needle:?} not told: {notices}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A daemon whose backend (a Hindsight server on a port nothing listens on) is down, so what
/// is retained waits in the spool.
const BACKEND_DOWN: &str = "[memory]\nbackend = \"hindsight\"\n[hindsight]\napi_url = \"http://127.0.0.1:9\"\n[local]\nembedder = \"off\"\n[queue]\nflush_interval = \"1h\"\n";

/// Retains `text`, trying again (after a 503) until it is acknowledged, for 10 s at most.
async fn accepted_again_within_10_s(d: &Daemon, text: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, v) = d.post("/v1/sessions/s/retain", json!({"items": [{"content": text}]})).await;
        if status == 202 {
            return;
        }
        assert_eq!(status, 503, "{v}");
        assert!(std::time::Instant::now() < deadline, "retains are still refused: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The local store's file deleted under the running daemon: deliveries are refused as an
/// outage (status unhealthy, saying so), so what is acknowledged stays in the spool and reaches
/// the store after a restart. Written to the deleted file, retains were acknowledged, reported
/// delivered and lost at the restart, with a healthy status and no notice.
#[tokio::test]
async fn a_store_deleted_under_the_daemon_keeps_what_is_acknowledged_for_the_next_start() {
    let config = "[local]\nembedder = \"off\"\n[queue]\nflush_interval = \"1h\"\n";
    let mut d = Daemon::start(config);
    d.start_session("s", "/p/gone").await;
    retain_acknowledged(&d, "stored before GONE-1").await;
    let flushed = flush(&d).await;
    assert_eq!(flushed["delivered"], 1, "{flushed}");
    for name in ["memories.db", "memories.db-wal", "memories.db-shm"] {
        let _ = std::fs::remove_file(d.data().join(name));
    }
    retain_acknowledged(&d, "acknowledged after GONE-2").await;
    let flushed = flush(&d).await;
    assert_eq!(flushed["delivered"], 0, "not into the deleted file: {flushed}");
    let (_, status) = d.get("/v1/status").await;
    assert_eq!(status["backend"]["healthy"], false, "{status}");
    assert!(status.to_string().contains("was deleted while mneme had it open"), "{status}");
    assert!(!d.data().join("memories.db").exists(), "no new, empty store made meanwhile");
    let (_, notices) = d.get("/v1/notices?after=0").await;
    assert!(notices.to_string().contains("was deleted while mneme had it open"), "{notices}");
    d.stop();
    let d = Daemon::start_in(d.into_dir(), config);
    found_within_10_s(&d, "acknowledged after GONE-2", "GONE-2").await;
}

/// Retains `text` in session `s`, asserting it was acknowledged.
async fn retain_acknowledged(d: &Daemon, text: &str) {
    let (status, v) = d.post("/v1/sessions/s/retain", json!({"items": [{"content": text}]})).await;
    assert_eq!(status, 202, "{v}");
}

/// Delivers what is queued now; the flush's report (`delivered`, `failed`).
async fn flush(d: &Daemon) -> serde_json::Value {
    d.post("/v1/flush", json!({})).await.1
}

/// Retains `text` and delivers it, asserting both.
async fn retain_and_flush(d: &Daemon, text: &str) {
    retain_acknowledged(d, text).await;
    let flushed = flush(d).await;
    assert_eq!(flushed["failed"], 0, "{flushed}");
}

/// Waits until a search for `query` finds `needle` (delivered), failing after 10 s.
async fn found_within_10_s(d: &Daemon, query: &str, needle: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, found) = d.post("/v1/search", json!({ "query": query })).await;
        if found.to_string().contains(needle) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "what was acknowledged is not delivered: {found}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `mneme doctor` beside a running daemon leaves its store's log alone: the daemon read the
/// store's header through a descriptor of its own at each reader's open, and closing it gave up
/// the process's locks on the file, SQLite's included. Doctor's connection then took itself for
/// the last and deleted the log the daemon went on writing to: what was delivered after it was
/// lost at a crash, though acknowledged, delivered and recalled.
#[tokio::test]
async fn doctor_beside_the_daemon_keeps_the_stores_log_and_a_crash_loses_nothing() {
    let config = "[local]\nembedder = \"off\"\n";
    let mut d = Daemon::start(config);
    d.start_session("s", "/p/doctor").await;
    retain_and_flush(&d, "delivered before the doctor DOC-1").await;
    // Readers open (a status, a search), then the doctor reads every file.
    d.get("/v1/status").await;
    d.post("/v1/search", json!({"query": "doctor"})).await;
    let out = d.cli().arg("doctor").output().unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains("panicked"), "{out:?}");
    assert!(d.data().join("memories.db-wal").exists(), "the doctor deleted the store's log");
    for text in ["delivered after the doctor DOC-2", "delivered after the doctor DOC-3"] {
        retain_and_flush(&d, text).await;
    }
    d.kill();
    let d = Daemon::start_in(d.into_dir(), config);
    for needle in ["DOC-1", "DOC-2", "DOC-3"] {
        found_within_10_s(&d, &format!("delivered doctor {needle}"), needle).await;
    }
}

/// A write-ahead log deleted under the daemon is noticed as its database file would be: SQLite
/// goes on writing to the deleted log, and every commit in it is gone at the next start. The
/// spool's: retains are refused (503). The store's: deliveries stay in the queue (status
/// unhealthy), and reach the store after a restart.
#[tokio::test]
async fn a_log_deleted_under_the_daemon_is_noticed() {
    let config = "[local]\nembedder = \"off\"\n[queue]\nflush_interval = \"1h\"\n";
    let mut d = Daemon::start(config);
    d.start_session("s", "/p/log").await;
    retain_acknowledged(&d, "before LOG-1").await;
    std::fs::remove_file(d.data().join("spool.db-wal")).unwrap();
    // The writer looks every 100 ms: the log's commits are put into the file and the spool
    // opened again, with a log of its own, with no retain to notice it. A kill then keeps them
    // (it lost every commit in the deleted log: review116 #2).
    tokio::time::sleep(Duration::from_millis(500)).await;
    d.kill();
    let mut d = Daemon::start_in(d.into_dir(), config);
    found_within_10_s(&d, "before LOG-1", "LOG-1").await;
    // Deleted again under the new start, a retain at once: refused while the log is gone (the
    // retains look every 100 ms too), else accepted into the file's new log; either way later
    // retains are accepted and a kill keeps them all.
    std::fs::remove_file(d.data().join("spool.db-wal")).unwrap();
    let (status, v) = d.post("/v1/sessions/s/retain", json!({"items": [{"content": "after LOG-2"}]})).await;
    assert!(status == 202 || status == 503, "{status}: {v}");
    if status == 503 {
        assert!(v["error"]["message"].as_str().unwrap().contains("write-ahead log"), "{v}");
    }
    accepted_again_within_10_s(&d, "after LOG-5").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    d.kill();
    let d = Daemon::start_in(d.into_dir(), config);
    found_within_10_s(&d, "after LOG-5", "LOG-5").await;
    if status == 202 {
        found_within_10_s(&d, "after LOG-2", "LOG-2").await;
    }
    drop(d);

    let mut d = Daemon::start(config);
    d.start_session("s", "/p/log").await;
    retain_acknowledged(&d, "stored LOG-3").await;
    let flushed = flush(&d).await;
    assert_eq!(flushed["delivered"], 1, "{flushed}");
    std::fs::remove_file(d.data().join("memories.db-wal")).unwrap();
    retain_acknowledged(&d, "acknowledged LOG-4").await;
    let flushed = flush(&d).await;
    assert_eq!(flushed["delivered"], 0, "not into the deleted log: {flushed}");
    let (_, status) = d.get("/v1/status").await;
    assert!(status.to_string().contains("lost its write-ahead log"), "{status}");
    d.stop();
    let d = Daemon::start_in(d.into_dir(), config);
    found_within_10_s(&d, "acknowledged LOG-4", "LOG-4").await;
}

/// The spool's file emptied in place under the daemon (truncated to 0 bytes): retains are
/// refused (503) from then on, saying so, instead of acknowledged into a file no start can read
/// (review106 #5: 202s, then a spool mneme refused to open).
#[tokio::test]
async fn a_spool_emptied_under_the_daemon_refuses_retains() {
    let d = Daemon::start("[local]\nembedder = \"off\"\n[queue]\nflush_interval = \"1h\"\n");
    d.start_session("s", "/p/emptied").await;
    retain_acknowledged(&d, "before EMPTIED-1").await;
    let flushed = flush(&d).await;
    assert_eq!(flushed["delivered"], 1, "{flushed}");
    let spool = d.data().join("spool.db");
    assert!(std::fs::metadata(&spool).unwrap().len() > 0, "the spool holds its pages");
    retain_acknowledged(&d, "seen holding EMPTIED-2").await;
    std::fs::OpenOptions::new().write(true).open(&spool).unwrap().set_len(0).unwrap();
    let (status, v) = d.post("/v1/sessions/s/retain", json!({"items": [{"content": "after EMPTIED-3"}]})).await;
    assert_eq!(status, 503, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("was emptied"), "{v}");
}
