//! A full disk, for real: the storage dir is a small tmpfs that the test fills up. While it is
//! full a retain gets 507 (never a 202 for what is not on disk) and one notice says so; once
//! space returns, retains are accepted again by themselves, and every retain acknowledged before,
//! during or after is delivered exactly once (the local store on the same disk included).
//!
//! Mounting needs root (CI runs as root); elsewhere the test says why it cannot run.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Daemon;
use futures_util::StreamExt;
use serde_json::{json, Value};

/// A tmpfs mounted for the test's life.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Result<Tmpfs, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not running as root, so no tmpfs can be mounted".into());
        }
        std::fs::create_dir_all(at).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "tmpfs"])
            .arg(at)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!("mount failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        Ok(Tmpfs(at.to_owned()))
    }
}

impl Tmpfs {
    /// [`Tmpfs::mount`], or `None` with the reason printed where a tmpfs cannot be mounted (not
    /// root); under CI that fails the test.
    fn mount_or_skip(at: &Path, size: &str) -> Option<Tmpfs> {
        match Tmpfs::mount(at, size) {
            Ok(m) => Some(m),
            Err(reason) => {
                assert!(std::env::var("CI").is_err(), "the disk-full test must run under CI: {reason}");
                println!("disk-full test skipped: {reason}");
                None
            }
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Writes zeros into `path` until the file system says it is full.
fn fill(path: &Path) {
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![0u8; 64 * 1024];
    while f.write_all(&chunk).is_ok() {}
    let small = [0u8; 512];
    while f.write_all(&small).is_ok() {}
    let _ = f.sync_all();
}

fn content(phase: &str, i: usize) -> String {
    // Large enough that the spool's log has to grow for each one.
    format!("{phase} memory {i}: {}.", "the quick brown fox jumps over the lazy dog ".repeat(120))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_clearly_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let Some(_mount) = Tmpfs::mount_or_skip(&dir.path().join("data"), "6m") else { return };
    let mut d =
        Daemon::start_in(dir, "[queue]\nflush_interval = \"100ms\"\nretry_initial = \"100ms\"\nretry_max = \"1s\"\n");
    d.start_session("s", "/p/full").await;
    let notices = Arc::new(Mutex::new(Vec::<Value>::new()));
    let stream = d.http.get(d.url("/v1/notices/stream")).bearer_auth(&d.token).send().await.unwrap();
    let seen = notices.clone();
    tokio::spawn(async move {
        let mut body = stream.bytes_stream();
        let mut buf = String::new();
        while let Some(Ok(chunk)) = body.next().await {
            buf.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buf.find("\n\n") {
                let event: String = buf.drain(..end + 2).collect();
                for line in event.lines().filter_map(|l| l.strip_prefix("data:")) {
                    if let Ok(v) = serde_json::from_str(line.trim()) {
                        seen.lock().unwrap().push(v);
                    }
                }
            }
        }
    });
    let retain = |text: String| {
        let req = d.http.post(d.url("/v1/sessions/s/retain")).bearer_auth(&d.token);
        async move {
            let r = req.json(&json!({"items": [{"content": text}]})).send().await.unwrap();
            let retry_after = r.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
            (r.status().as_u16(), retry_after, r.json::<Value>().await.unwrap())
        }
    };
    let mut acked = Vec::new();
    for i in 0..20 {
        let text = content("before", i);
        let (status, _, v) = retain(text.clone()).await;
        assert_eq!(status, 202, "{v}");
        acked.push(text);
    }

    fill(&d.data().join("filler"));
    // A session's start is refused as a retain is, and raises the notice (the CLI and the hooks
    // start one before each retain: they were refused with no notice).
    let (status, v) = d.post("/v1/sessions", json!({"session_id": "s2", "cwd": "/p/other"})).await;
    match status {
        507 => {
            assert_eq!(v["error"]["code"], "storage_full", "{v}");
            let raised = Instant::now();
            while !notices.lock().unwrap().iter().any(|n| n["message"].as_str().unwrap().contains("spool is full")) {
                assert!(raised.elapsed() < Duration::from_secs(5), "no notice for a session refused on a full disk");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        // It fit after all (SQLite reused log space).
        200 => {}
        other => panic!("a session's start on a full disk answered {other}: {v}"),
    }
    let mut refused = 0;
    for i in 0..30 {
        let text = content("during", i);
        let (status, retry_after, v) = retain(text.clone()).await;
        match status {
            // It fit after all (SQLite reused log space): acknowledged, so it must be delivered.
            202 => acked.push(text),
            507 => {
                assert_eq!(v["error"]["code"], "storage_full", "{v}");
                assert!(v["error"]["message"].as_str().unwrap().contains("nothing was stored"), "{v}");
                assert!(retry_after.is_some(), "a 507 says when to retry");
                refused += 1;
            }
            other => panic!("a full disk answered {other}: {v}"),
        }
    }
    assert!(refused >= 20, "only {refused} of 30 retains were refused on a full disk");
    // The first turn's recall is never an error to the agent (it answered 507: the session's
    // record could not be saved).
    let (status, v) = d.post("/v1/sessions/s/agent-start", json!({"prompt": "what did we do before?"})).await;
    assert_eq!(status, 200, "{v}");
    // Nor are its instructions.
    let (status, v) = d.get("/v1/sessions/s/instructions").await;
    assert_eq!(status, 200, "{v}");

    // The notice can be read while the disk is full (it could be stored only once there was
    // room, so `mneme notices` said "No notices." or answered the read with a 507).
    let (status, list) = d.get("/v1/notices?after=0").await;
    assert_eq!(status, 200, "{list}");
    assert!(list.to_string().contains("disk holding the spool is full"), "{list}");

    std::fs::remove_file(d.data().join("filler")).unwrap();
    let back = Instant::now();
    let mut accepted_again = None;
    while back.elapsed() < Duration::from_secs(10) {
        let text = content("after", 0);
        if let (202, _, _) = retain(text.clone()).await {
            acked.push(text);
            accepted_again = Some(back.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let accepted_again = accepted_again.expect("retains are accepted again within 10 s of space returning");
    println!("disk full: {refused} of 30 refused with 507; accepted again {accepted_again:?} after space returned");
    for i in 1..20 {
        let text = content("after", i);
        let (status, _, v) = retain(text.clone()).await;
        assert_eq!(status, 202, "{v}");
        acked.push(text);
    }

    // Everything acknowledged is delivered: explicit flushes until the spool is empty.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, v) = d.post("/v1/flush", json!({})).await;
        let (_, st) = d.get("/v1/status").await;
        if st["queue"]["spooled"] == 0 {
            assert_eq!(st["queue"]["dead"], 0, "nothing went to the dead letters: {st}");
            break;
        }
        assert!(Instant::now() < deadline, "still spooled after 30 s: {st} (last flush {v})");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await; // the last notices reach the stream
    let seen = notices.lock().unwrap().clone();
    let full: Vec<&Value> =
        seen.iter().filter(|n| n["message"].as_str().unwrap().contains("disk holding the spool is full")).collect();
    assert_eq!(full.len(), 1, "one notice for the episode: {seen:#?}");
    assert_eq!(full[0]["level"], "error");
    assert!(
        seen.iter().any(|n| n["message"].as_str().unwrap().contains("room on the disk again")),
        "a notice says retains are accepted again: {seen:#?}"
    );
    // The notice the full spool could not store was stored once there was room.
    let (_, list) = d.get("/v1/notices?after=0").await;
    assert!(list.to_string().contains("disk holding the spool is full"), "{list}");

    let db = d.data().join("memories.db");
    d.stop();
    let conn = rusqlite::Connection::open(&db).unwrap();
    let mut stmt = conn.prepare("SELECT count(*) FROM memories WHERE content = ?").unwrap();
    let wrong: Vec<(usize, i64)> = acked
        .iter()
        .enumerate()
        .map(|(i, c)| (i, stmt.query_row([c], |r| r.get(0)).unwrap()))
        .filter(|(_, n)| *n != 1)
        .collect();
    assert!(wrong.is_empty(), "acknowledged retains not stored exactly once (index, count): {wrong:?}");
    println!("disk full: all {} acknowledged retains stored exactly once", acked.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_under_the_local_store_keeps_deliveries_spooled_without_dead_letters() {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("store");
    let Some(_mount) = Tmpfs::mount_or_skip(&store_dir, "2m") else { return };
    // Few attempts: a full disk must not use them up.
    let config = format!(
        "[local]\npath = \"{}\"\n[queue]\nbatch_size = 1000\nflush_interval = \"1h\"\nmax_attempts = 2\nretry_initial = \"100ms\"\n",
        store_dir.join("memories.db").display()
    );
    let mut d = Daemon::start_in(dir, &config);
    d.start_session("s", "/p/full").await;
    fill(&store_dir.join("filler"));
    let mut acked = Vec::new();
    for i in 0..20 {
        let text = content("spooled", i);
        let (status, v) = d.post("/v1/sessions/s/retain", json!({"items": [{"content": text}]})).await;
        assert_eq!(status, 202, "the spool's disk has room: {v}");
        acked.push(text);
    }
    for attempt in 0..4 {
        let (_, v) = d.post("/v1/flush", json!({})).await;
        assert_eq!(v["delivered"], 0, "attempt {attempt}: {v}");
        assert_eq!(v["failed"], 20, "attempt {attempt}: {v}");
        let (_, st) = d.get("/v1/status").await;
        assert_eq!((st["queue"]["spooled"].as_u64(), st["queue"]["dead"].as_u64()), (Some(20), Some(0)), "{st}");
    }
    let (_, list) = d.get("/v1/notices?after=0").await;
    let failures: Vec<&Value> = list["notices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["message"].as_str().unwrap().starts_with("Memory retention failed for 20 memories"))
        .collect();
    assert_eq!(failures.len(), 1, "one notice for the outage: {list}");
    assert!(failures[0]["message"].as_str().unwrap().contains("full"), "{list}");

    std::fs::remove_file(store_dir.join("filler")).unwrap();
    let (_, v) = d.post("/v1/flush", json!({})).await;
    assert_eq!((v["delivered"].as_u64(), v["failed"].as_u64()), (Some(20), Some(0)), "{v}");
    let db = store_dir.join("memories.db");
    d.stop();
    let conn = rusqlite::Connection::open(&db).unwrap();
    for text in &acked {
        let n: i64 = conn.query_row("SELECT count(*) FROM memories WHERE content = ?", [text], |r| r.get(0)).unwrap();
        assert_eq!(n, 1);
    }
}

/// Bytes the file system holding `path` has free.
fn free_bytes(path: &Path) -> u64 {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `c` is a valid C string and `stat` a plain struct statvfs fills in.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut stat) }, 0);
    stat.f_bavail as u64 * stat.f_frsize as u64
}

/// Fills the file system holding `filler` (a file in it, written anew) up to `free_kib` KiB.
fn fill_leaving(filler: &Path, free_kib: u64) {
    let _ = std::fs::remove_file(filler);
    let mut f = std::fs::File::create(filler).unwrap();
    let room = free_bytes(filler.parent().unwrap()).saturating_sub(free_kib * 1024);
    let chunk = vec![0u8; 64 * 1024];
    let mut written = 0u64;
    while written < room {
        let n = chunk.len().min((room - written) as usize);
        if f.write_all(&chunk[..n]).is_err() {
            break;
        }
        written += n as u64;
    }
    let _ = f.sync_all();
}

/// The files under `dir` whose bytes hold `marker`.
fn files_holding(dir: &Path, marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let Ok(bytes) = std::fs::read(entry.path()) else { continue };
        if bytes.windows(marker.len()).any(|w| w == marker.as_bytes()) {
            found.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    found
}

/// A forget answered on a nearly full disk leaves the forgotten text in no file once there is
/// room again: the spool's log, which the forget could not empty then, is emptied as soon as
/// it can be (it kept the delivered item's text until the next forget or a restart).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forget_on_a_full_disk_leaves_its_text_nowhere_once_there_is_room() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let Some(_mount) = Tmpfs::mount_or_skip(&data, "8m") else { return };
    let d = Daemon::start_in(dir, "[queue]\nflush_interval = \"100ms\"\n");
    d.start_session("s", "/p/full").await;
    const MARKER: &str = "fdmarker9911";
    let items =
        json!({"items": [{"content": format!("full disk secret {MARKER} must vanish")}, {"content": "another"}]});
    assert_eq!(d.post("/v1/sessions/s/retain", items).await.0, 202);
    d.post("/v1/flush", json!({})).await;
    let (_, list) = d.get("/v1/memories").await;
    let id =
        list["memories"].as_array().unwrap().iter().find(|m| m["content"].as_str().unwrap().contains(MARKER)).unwrap()
            ["id"]
            .as_str()
            .unwrap()
            .to_owned();
    let filler = data.join("filler");
    let mut forgotten = false;
    // The forget is refused (507) with too little room, and done with enough for the store's
    // transaction but not the spool's log: the room where that happens is found by trying.
    for free_kib in [8u64, 16, 24, 32, 48, 64, 96, 128, 192, 256] {
        fill_leaving(&filler, free_kib);
        let r =
            d.http.delete(d.url(&format!("/v1/memories/{id}?bank=mneme"))).bearer_auth(&d.token).send().await.unwrap();
        if r.status().as_u16() == 200 {
            forgotten = true;
            break;
        }
    }
    assert!(forgotten, "the forget was refused with up to 256 KiB free");
    std::fs::remove_file(&filler).unwrap();
    let room_again = Instant::now();
    loop {
        let left = files_holding(&data, MARKER);
        if left.is_empty() {
            break;
        }
        assert!(room_again.elapsed() < Duration::from_secs(10), "forgotten text left in {left:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A clear on a nearly full disk either deletes nothing and says so (507), or deletes and says
/// how many: it answered 507 "nothing was stored … try again" after deleting every memory (a
/// session's record it could not save after the deletion), and the retry said "Deleted 0".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clear_on_a_full_disk_says_what_it_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let Some(_mount) = Tmpfs::mount_or_skip(&data, "8m") else { return };
    let d = Daemon::start_in(dir, "[queue]\nflush_interval = \"100ms\"\n");
    let filler = data.join("filler");
    let stored = || async {
        let (_, list) = d.get("/v1/memories").await;
        list["memories"].as_array().unwrap().len()
    };
    // Sessions whose records the clear saves again after the deletion: pages of the spool's
    // log to write when the store's deletion has taken the room.
    for n in 0..40 {
        d.start_session(&format!("s{n}"), &format!("/p/full/{}", "project-".repeat(20))).await;
    }
    let items = json!({"items": [{"content": "clear me one"}, {"content": "clear me two"}]});
    assert_eq!(d.post("/v1/sessions/s0/retain", items).await.0, 202);
    d.post("/v1/flush", json!({})).await;
    // The store settles (its vectors written) before the disk fills.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = stored().await;
    assert_eq!(before, 2);
    // The room where the store's deletion fits and the rest does not is found by trying, from
    // too little room up, until the clear is done.
    let mut cleared = false;
    for free_kib in (8u64..=256).step_by(4) {
        fill_leaving(&filler, free_kib);
        let (status, v) = d.post("/v1/clear", json!({"all": true})).await;
        std::fs::remove_file(&filler).unwrap();
        let after = stored().await;
        match status {
            507 => assert_eq!(after, before, "{free_kib} KiB free: 507 after deleting: {v}"),
            200 => {
                assert_eq!((v["deleted"].as_u64(), after), (Some(2), 0), "{free_kib} KiB free: {v}");
                cleared = true;
                break;
            }
            other => panic!("{free_kib} KiB free: {other} {v}"),
        }
    }
    assert!(cleared, "no clear was done with up to 256 KiB free");
}

/// Sets the process's file-size limit (`ulimit -f`) to `bytes` (`None`: no limit).
fn limit_file_size(pid: u32, bytes: Option<u64>) {
    let limit = bytes.unwrap_or(libc::RLIM_INFINITY);
    let new = libc::rlimit { rlim_cur: limit, rlim_max: libc::RLIM_INFINITY };
    // SAFETY: prlimit reads the struct passed in and writes nothing (the old limit is not asked).
    let done = unsafe { libc::prlimit(pid as libc::pid_t, libc::RLIMIT_FSIZE, &new, std::ptr::null_mut()) };
    assert_eq!(done, 0, "prlimit: {}", std::io::Error::last_os_error());
}

/// A write past the file-size limit (`ulimit -f`) is a failed write the daemon answers, not a
/// SIGXFSZ that killed it: retains are refused while it lasts, and every one acknowledged is
/// delivered once the limit is lifted.
#[tokio::test]
async fn a_file_size_limit_refuses_retains_instead_of_killing_the_daemon() {
    let mut d = Daemon::start("[local]\nembedder = \"off\"\n[queue]\nflush_interval = \"1h\"\n");
    d.start_session("s", "/p/fsize").await;
    let pid = d.child.as_ref().unwrap().id();
    limit_file_size(pid, Some(600 * 1024));
    let pad = "x".repeat(2700);
    let mut acknowledged = 0;
    let refused = loop {
        let item = json!({"items": [{"content": format!("fsize-{acknowledged} {pad}")}]});
        let (status, v) = d.post("/v1/sessions/s/retain", item).await;
        if status != 202 {
            break (status, v);
        }
        acknowledged += 1;
        assert!(acknowledged < 2000, "the limit was never reached");
    };
    assert!(matches!(refused.0, 503 | 507), "{refused:?}");
    assert!(d.child.as_mut().unwrap().try_wait().unwrap().is_none(), "the daemon died");
    let (status, _) = d.get("/v1/health").await;
    assert_eq!(status, 200);
    limit_file_size(pid, None);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, flushed) = d.post("/v1/flush", json!({})).await;
        let (_, status) = d.get("/v1/status").await;
        if status["queue"]["pending"] == 0 && flushed["failed"] == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "not delivered: {flushed} {status}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let export = d.cli().args(["export"]).output().unwrap();
    let text = String::from_utf8_lossy(&export.stdout);
    for i in 0..acknowledged {
        assert!(text.contains(&format!("fsize-{i} ")), "acknowledged retain {i} is lost");
    }
    d.stop();
}

/// A first start on a disk with a few KiB free fails (it says to free some space), and leaves
/// no empty database file behind: SQLite made the file and could not write its first page, and
/// every later start, with room again, took the empty file for one emptied under mneme and was
/// refused, saying what it held was gone (review112 #4). Tried at several sizes left free, as
/// each fails at another step.
#[test]
fn a_first_start_on_a_full_disk_leaves_nothing_that_blocks_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let Some(_mount) = Tmpfs::mount_or_skip(&dir.path().join("small"), "4m") else { return };
    let filler = dir.path().join("small/filler");
    let start = |root: &Path| {
        let mut child = Command::new(common::bin())
            .args(["serve", "--config"])
            .arg(root.join("config.toml"))
            .env("MNEME_LOG", "error")
            .envs(common::env_for(root))
            .env("MNEME_LOCAL__EMBEDDER", "off")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let began = Instant::now();
        while child.try_wait().unwrap().is_none() && began.elapsed() < Duration::from_secs(3) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    for free_kib in [4, 8, 12, 24, 48, 64, 96] {
        let root = dir.path().join(format!("small/{free_kib}"));
        std::fs::create_dir_all(&root).unwrap();
        fill_leaving(&filler, free_kib);
        let said = start(&root);
        for name in ["spool.db", "memories.db"] {
            let path = root.join("data").join(name);
            let empty = std::fs::metadata(&path).is_ok_and(|m| m.len() == 0);
            assert!(!empty, "{free_kib} KiB free: {name} left empty ({said})");
        }
        std::fs::remove_file(&filler).unwrap();
        let said = start(&root);
        assert!(!said.contains("empty (0 bytes)"), "{free_kib} KiB free, then room: {said}");
        let _ = std::fs::remove_dir_all(&root);
    }
}

/// Killed on a full disk with many sessions' retains waiting, the daemon starts again on the
/// still-full disk (answering 507) and delivers them all once there is room: the start read the
/// sessions kept in the spool in the same transaction as the deliveries it resumed, whose commit
/// failed on the full disk and failed the read, and the start with it (review116 #3: a service
/// manager's restarts gave up before the disk had room).
#[tokio::test]
async fn a_restart_on_a_full_disk_with_sessions_waiting_starts_and_delivers_later() {
    let dir = tempfile::tempdir().unwrap();
    let Some(_mount) = Tmpfs::mount_or_skip(&dir.path().join("data"), "8m") else { return };
    let config = "[local]\nembedder = \"off\"\n[queue]\nflush_interval = \"1h\"\nbatch_size = 1000\nretry_initial = \"100ms\"\nretry_max = \"1s\"\n";
    let mut d = Daemon::start_in(dir, config);
    for k in 0..60 {
        let id = format!("s{k}");
        let (status, v) = d.post("/v1/sessions", json!({"session_id": id, "cwd": "/tmp"})).await;
        assert_eq!(status, 200, "{v}");
        let (status, v) = d
            .post(&format!("/v1/sessions/{id}/retain"), json!({"items": [{"content": format!("waiting fact {k}")}]}))
            .await;
        assert_eq!(status, 202, "{v}");
    }
    fill(&d.data().join("filler"));
    d.kill();
    // (`start_in` fails the test if the daemon does not start.) Retried at each debounce once
    // there is room.
    let d = Daemon::start_in(d.into_dir(), &config.replace("\"1h\"", "\"200ms\""));
    let (status, v) = d.post("/v1/sessions/s1/retain", json!({"items": [{"content": "on the full disk"}]})).await;
    assert_eq!(status, 507, "{v}");
    std::fs::remove_file(d.data().join("filler")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, status) = d.get("/v1/status").await;
        if status["backend"]["memories"] == 60 {
            break;
        }
        assert!(Instant::now() < deadline, "not delivered once there is room: {status}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A file made immutable (`chattr +i`) for the test's life: writes to it fail with EPERM, as a
/// failing disk's do with EIO.
struct Immutable(PathBuf);

impl Immutable {
    fn set_or_skip(path: &Path) -> Option<Immutable> {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let set = root && Command::new("chattr").arg("+i").arg(path).status().is_ok_and(|s| s.success());
        if !set {
            assert!(std::env::var("CI").is_err(), "the I/O error test must run under CI (root, chattr)");
            println!("I/O error test skipped: not root, or no chattr");
            return None;
        }
        Some(Immutable(path.to_owned()))
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").arg(&self.0).status();
    }
}

/// A spool write failing for a reason of the disk (an I/O error, a file made read-only): the
/// retain is refused (503), and one notice names the file and what to check; one more says when
/// writes succeed again. The answer said "spool: disk I/O error", naming no file, and nothing
/// was noticed (review116 #4).
#[tokio::test]
async fn a_spool_that_cannot_be_written_is_told_with_its_path_once() {
    let d = Daemon::start("[local]\nembedder = \"off\"\n");
    d.start_session("s", "/p/io").await;
    let (status, _) = d.post("/v1/sessions/s/retain", json!({"items": [{"content": "first"}]})).await;
    assert_eq!(status, 202);
    let wal = d.data().join("spool.db-wal");
    let Some(immutable) = Immutable::set_or_skip(&wal) else { return };
    for _ in 0..3 {
        let (status, v) = d.post("/v1/sessions/s/retain", json!({"items": [{"content": "refused"}]})).await;
        assert_eq!(status, 503, "{v}");
    }
    let (_, v) = d.get("/v1/notices?after=0").await;
    let told: Vec<&str> = v["notices"].as_array().unwrap().iter().filter_map(|n| n["message"].as_str()).collect();
    let failing: Vec<&&str> = told.iter().filter(|m| m.contains("cannot be written")).collect();
    assert_eq!(failing.len(), 1, "{told:?}");
    assert!(failing[0].contains(&d.data().join("spool.db").display().to_string()), "{told:?}");
    drop(immutable);
    let (status, v) = d.post("/v1/sessions/s/retain", json!({"items": [{"content": "accepted again"}]})).await;
    assert_eq!(status, 202, "{v}");
    let (_, v) = d.get("/v1/notices?after=0").await;
    assert!(v.to_string().contains("The spool can be written again"), "{v}");
}

/// The spool deleted under the daemon on a full disk: its write-back cannot be done until there
/// is room, and a retain refused meanwhile is told so with a 507 and a notice of the full disk,
/// not "retry in a moment" with a 503 (review117 #5). With room again it is written back with
/// what waited in it, and retains are accepted.
#[tokio::test]
async fn a_spool_deleted_on_a_full_disk_is_refused_as_full_until_there_is_room() {
    let dir = tempfile::tempdir().unwrap();
    let Some(_mount) = Tmpfs::mount_or_skip(&dir.path().join("data"), "8m") else { return };
    let config = "[local]\nembedder = \"off\"\n[queue]\nflush_interval = \"1h\"\n";
    let mut d = Daemon::start_in(dir, config);
    d.start_session("s", "/p/full-gone").await;
    let (status, v) = d.post("/v1/sessions/s/retain", json!({"items": [{"content": "waiting FULLGONE-1"}]})).await;
    assert_eq!(status, 202, "{v}");
    fill(&d.data().join("filler"));
    std::fs::remove_file(d.data().join("spool.db")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let refused = loop {
        let (status, v) = d.post("/v1/sessions/s/retain", json!({"items": [{"content": "refused"}]})).await;
        assert!(status == 503 || status == 507, "{status} {v}");
        if status == 507 {
            break v;
        }
        assert!(Instant::now() < deadline, "never told the disk is full: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(refused["error"]["code"], "storage_full", "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("disk is full"), "{refused}");
    let (_, v) = d.get("/v1/notices?after=0").await;
    assert!(v.to_string().contains("The disk holding the spool is full"), "{v}");
    std::fs::remove_file(d.data().join("filler")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, v) = d.post("/v1/sessions/s/retain", json!({"items": [{"content": "accepted FULLGONE-2"}]})).await;
        if status == 202 {
            break;
        }
        assert!(Instant::now() < deadline, "not accepted again with room: {status} {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, v) = d.get("/v1/notices?after=0").await;
    assert!(v.to_string().contains("There is room on the disk again"), "{v}");
    d.kill();
    let d = Daemon::start_in(d.into_dir(), config);
    let (status, v) = d.post("/v1/flush", json!({})).await;
    assert_eq!(status, 200, "{v}");
    let (_, v) = d.post("/v1/search", json!({"query": "FULLGONE", "limit": 10})).await;
    for marker in ["FULLGONE-1", "FULLGONE-2"] {
        assert!(v.to_string().contains(marker), "{marker} lost: {v}");
    }
}
