//! A storage file that cannot be used stops `mneme serve` with its full path and what to do, never
//! a panic; `mneme doctor` reports the same.

mod common;

use std::path::Path;
use std::process::{Command, Output};

fn run(dir: &Path, args: &[&str]) -> Output {
    Command::new(common::bin())
        .args(args)
        .env("MNEME_CONFIG", dir.join("config.toml"))
        .env("MNEME_LOG", "error")
        .envs(common::env_for(dir))
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// `mneme serve`, which is to refuse to start: one that starts instead is stopped after 20 s
/// (the test then fails on its exit, instead of waiting for it for ever).
fn serve(dir: &Path) -> Output {
    bounded(dir, &["serve"])
}

/// `mneme ARGS`, stopped after 20 s if it has not ended (a start that should have been refused,
/// an open that waits).
fn bounded(dir: &Path, args: &[&str]) -> Output {
    use std::process::Stdio;
    let child = Command::new(common::bin())
        .args(args)
        .env("MNEME_CONFIG", dir.join("config.toml"))
        .env("MNEME_LOG", "error")
        .envs(common::env_for(dir))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (done, waited) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        if waited.recv_timeout(std::time::Duration::from_secs(20)).is_err() {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
        }
    });
    let out = child.wait_with_output().unwrap();
    let _ = done.send(());
    out
}

/// `serve` refuses to start naming `path` and `hints`; `doctor` fails naming them too.
fn refused(dir: &Path, path: &Path, hints: &[&str]) {
    let serve = serve(dir);
    let out = text(&serve);
    assert_eq!(serve.status.code(), Some(1), "{out}");
    assert!(!out.contains("panicked"), "{out}");
    assert!(out.contains(&path.display().to_string()), "serve names {}: {out}", path.display());
    for hint in hints {
        assert!(out.contains(hint), "serve says {hint:?}: {out}");
    }
    let doctor = bounded(dir, &["doctor"]);
    let out = text(&doctor);
    assert_eq!(doctor.status.code(), Some(1), "{out}");
    assert!(
        out.contains(&path.display().to_string()) && out.contains("FAIL"),
        "doctor names {}: {out}",
        path.display()
    );
    for hint in hints {
        assert!(out.contains(hint), "doctor says {hint:?}: {out}");
    }
}

fn data_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    dir
}

#[test]
fn a_garbage_spool_is_named_with_what_to_do() {
    let dir = data_dir();
    let spool = dir.path().join("data/spool.db");
    std::fs::write(&spool, vec![0x5a; 8192]).unwrap();
    refused(dir.path(), &spool, &["not a database", "mv ", "spool.db.broken", "mneme doctor"]);
}

#[test]
fn a_garbage_local_store_is_named_with_what_to_do() {
    let dir = data_dir();
    let store = dir.path().join("data/memories.db");
    std::fs::write(&store, b"SQLite format 3\0 but not really, just some text".repeat(100)).unwrap();
    refused(dir.path(), &store, &["memories.db.broken", ".recover", "mneme doctor"]);
}

/// A spool or a store truncated to 0 bytes is refused, not taken for a new, empty one: what it
/// held (retains acknowledged and queued, every memory) was dropped without a word, and doctor
/// called it sound.
#[test]
fn an_emptied_spool_or_store_is_refused_not_started_afresh() {
    for name in ["spool.db", "memories.db"] {
        let dir = data_dir();
        let file = dir.path().join("data").join(name);
        std::fs::write(&file, b"").unwrap();
        refused(dir.path(), &file, &["empty (0 bytes)", "truncated", &format!("{name}.broken")]);
        assert_eq!(std::fs::metadata(&file).unwrap().len(), 0, "{name} left as it was");
    }
}

/// A spool's log without its database (the database deleted under a daemon killed before it
/// wrote it back): refused, naming the log, and the log kept. SQLite made a new database there
/// and dropped the log, with the acknowledged retains in it (review116 #2).
#[test]
fn a_spool_log_without_its_database_is_refused_and_kept() {
    let dir = data_dir();
    let spool = dir.path().join("data/spool.db");
    let wal = dir.path().join("data/spool.db-wal");
    let log = b"log frames that hold acknowledged retains".repeat(100);
    std::fs::write(&wal, &log).unwrap();
    refused(dir.path(), &spool, &["without the database", "spool.db-wal.broken"]);
    assert_eq!(std::fs::read(&wal).unwrap(), log, "the log is kept");
    assert!(!spool.exists(), "no new database made beside it");
}

/// A spool or a store emptied, or its header overwritten, beside the log that holds its last
/// commits (its usual state after a crash, and a store's after a clean stop): refused without
/// SQLite opening it, so that the log is kept. SQLite deletes the log of a database of no pages
/// when it opens it: the daemon started empty and healthy, every acknowledged retain (or every
/// memory) gone.
#[test]
fn a_damaged_spool_or_store_keeps_its_log() {
    let log = b"log frames that hold the last commits".repeat(100);
    for name in ["spool.db", "memories.db"] {
        for (damage, hint) in [(&b""[..], "empty (0 bytes)"), (&[0x5a; 8192][..], "not a database")] {
            let dir = data_dir();
            let file = dir.path().join("data").join(name);
            let wal = dir.path().join("data").join(format!("{name}-wal"));
            std::fs::write(&file, damage).unwrap();
            std::fs::write(&wal, &log).unwrap();
            refused(dir.path(), &file, &[hint, "-wal", &format!("{name}.broken")]);
            assert_eq!(std::fs::read(&wal).unwrap(), log, "{name} ({hint}): its log is kept");
            assert_eq!(std::fs::read(&file).unwrap(), damage, "{name} ({hint}) left as it was");
        }
    }
}

#[test]
fn a_token_that_cannot_be_read_is_named_with_what_to_do() {
    let dir = data_dir();
    let token = dir.path().join("data/token");
    std::fs::write(&token, [0xff, 0xfe, 0x00, 0x01]).unwrap();
    refused(dir.path(), &token, &["not text", "rm "]);
    std::fs::remove_file(&token).unwrap();
    std::fs::create_dir(&token).unwrap(); // a folder where the token should be
    refused(dir.path(), &token, &["it is a folder", "rm "]);
    // A token someone else could have chosen: a link (here to a world-readable file) ...
    std::fs::remove_dir(&token).unwrap();
    let planted = dir.path().join("planted");
    std::fs::write(&planted, "attacker-chosen-token-1234").unwrap();
    std::os::unix::fs::symlink(&planted, &token).unwrap();
    refused(dir.path(), &token, &["symbolic link", "rm "]);
    // ... or a file of another user's (as root only: nobody else may give a file away).
    std::fs::remove_file(&token).unwrap();
    std::fs::write(&token, "attacker-chosen-token-1234").unwrap();
    match std::os::unix::fs::chown(&token, Some(65534), Some(65534)) {
        Ok(()) => refused(dir.path(), &token, &["another user (uid 65534)", "rm "]),
        Err(e) => assert!(std::env::var("CI").is_err(), "this case must run under CI (as root): {e}"),
    }
}

#[test]
fn a_storage_dir_others_may_write_in_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = data_dir();
    let data = dir.path().join("data");
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o777)).unwrap();
    // The daemon refuses it, and doctor says the same (it checked only that others could read).
    refused(dir.path(), &data, &["others may write in it (mode 777)"]);
    assert!(!data.join("token").exists(), "nothing was written there");
}

/// A config file another user may change is not read: that user chose `hindsight.api_url`, and
/// the daemon sent the Hindsight token there (review52 #6). Refused by `serve` and
/// `config check`, and by doctor; a hook or command goes on without it, as with a file it cannot
/// read. Every user may write it, or in its folder (not sticky); as root, another user's file.
#[test]
fn a_config_another_user_may_change_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    let dir = data_dir();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "[memory]\nbackend = \"off\"\n").unwrap();
    mode(&config, 0o666);
    let mut cases = vec![("every user may write it: mode 666", false)];
    // SAFETY: geteuid(2) cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        cases.push(("it belongs to another user (uid 65534)", true));
    }
    cases.push(("every user may write in its folder", false));
    for (why, theirs) in cases {
        mode(&config, if why.contains("mode 666") { 0o666 } else { 0o644 });
        mode(dir.path(), if why.contains("its folder") { 0o777 } else { 0o700 });
        if theirs {
            std::os::unix::fs::chown(&config, Some(65534), Some(65534)).unwrap();
        } else {
            std::os::unix::fs::chown(&config, Some(unsafe { libc::geteuid() }), None).unwrap();
        }
        for args in [&["serve"][..], &["config", "check"]] {
            let out = bounded(dir.path(), args);
            let said = text(&out);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {said}");
            assert!(said.contains("another user may change it") && said.contains(why), "{args:?}: {said}");
        }
        let doctor = text(&run(dir.path(), &["doctor"]));
        assert!(doctor.contains("another user may change it"), "{doctor}");
        // Its advice is not to fix keys, and it says what the rest was checked with (review53 #5).
        assert!(
            doctor.contains("with the defaults and the environment") && !doctor.contains("fix the keys"),
            "{doctor}"
        );
    }
    mode(dir.path(), 0o700);
    mode(&config, 0o644);
    // SAFETY: geteuid(2) cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    // In a folder of another user's (who may swap it for a file of theirs between a look and a
    // read), or reached through a link of theirs in a chain of links (review53 #2, #3).
    let theirs = dir.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::fs::write(theirs.join("config.toml"), "[memory]\nbackend = \"off\"\n").unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    std::fs::remove_file(&config).unwrap();
    std::os::unix::fs::symlink(theirs.join("config.toml"), &config).unwrap();
    let out = bounded(dir.path(), &["config", "check"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("belongs to another user (uid 65534)"), "{}", text(&out));
    let mine = dir.path().join("mine.toml");
    std::fs::write(&mine, "[memory]\nbackend = \"off\"\n").unwrap();
    let middle = dir.path().join("middle.toml");
    std::os::unix::fs::symlink(&mine, &middle).unwrap();
    std::os::unix::fs::lchown(&middle, Some(65534), Some(65534)).unwrap();
    std::fs::remove_file(&config).unwrap();
    std::os::unix::fs::symlink(&middle, &config).unwrap();
    let out = bounded(dir.path(), &["config", "check"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("a symbolic link another user (uid 65534) made"), "{}", text(&out));
    // One's own links to one's own file are read.
    std::os::unix::fs::lchown(&middle, Some(0), Some(0)).unwrap();
    let out = bounded(dir.path(), &["config", "check"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

#[test]
fn a_storage_dir_that_is_a_file_and_a_bad_config_are_named() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("data"), "not a folder").unwrap();
    refused(dir.path(), &dir.path().join("data"), &["it is not a folder"]);

    let dir = data_dir();
    std::fs::write(dir.path().join("config.toml"), "[queue]\nbatch_size = \"many\"\n").unwrap();
    let serve = run(dir.path(), &["serve"]);
    let out = text(&serve);
    assert_eq!(serve.status.code(), Some(2), "{out}");
    assert!(out.contains("config.toml") && out.contains("line 2") && out.contains("queue.batch_size"), "{out}");
    assert!(!out.contains("panicked"), "{out}");
}

/// A spool with a damaged page among its queued items stops the daemon with its path and what
/// to do: started anyway, the retains it had acknowledged would never be delivered.
#[tokio::test]
async fn a_spool_whose_queued_items_cannot_be_read_stops_the_daemon() {
    // Retains held in the spool: the backend is a Hindsight server that is not there.
    let mut d =
        common::Daemon::start("[memory]\nbackend = \"hindsight\"\n[hindsight]\napi_url = \"http://127.0.0.1:9\"\n");
    d.start_session("s", "/p/damaged").await;
    for i in 0..40 {
        let items: Vec<serde_json::Value> = (0..50)
            .map(|j| serde_json::json!({"content": format!("queued fact {i}-{j} {}", "x".repeat(600))}))
            .collect();
        let (status, v) = d.post("/v1/sessions/s/retain", serde_json::json!({"items": items})).await;
        assert_eq!(status, 202, "{v}");
    }
    d.stop();
    let spool = d.data().join("spool.db");
    // One leaf page of the queued items, overwritten (found with SQLite's dbstat, which Python's
    // build has); the header, the schema and the sessions are left alone.
    let find = "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); \
        p=[r[0] for r in c.execute(\"SELECT pageno FROM dbstat WHERE name='items' AND pagetype='leaf' ORDER BY pageno\")]; \
        print(p[len(p)//2], c.execute('PRAGMA page_size').fetchone()[0])";
    let found = Command::new("python3").args(["-c", find]).arg(&spool).output().unwrap();
    let found = String::from_utf8_lossy(&found.stdout).to_string();
    let (page, size) = found.trim().split_once(' ').unwrap_or_else(|| panic!("dbstat: {found:?}"));
    let (page, size): (usize, usize) = (page.parse().unwrap(), size.parse().unwrap());
    let mut bytes = std::fs::read(&spool).unwrap();
    bytes[(page - 1) * size..page * size].fill(0x5a);
    std::fs::write(&spool, &bytes).unwrap();
    let dir = d.dir.path().to_owned();
    let mut child = Command::new(common::bin())
        .args(["serve"])
        .env("MNEME_CONFIG", dir.join("config.toml"))
        .env("MNEME_LOG", "error")
        .envs(common::env_for(&dir))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > std::time::Duration::from_secs(15) {
            let _ = child.kill();
            panic!("the daemon started on a spool it cannot read");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let out = text(&child.wait_with_output().unwrap());
    assert_eq!(status.code(), Some(1), "{out}");
    assert!(out.contains(&spool.display().to_string()) && out.contains("mv "), "{out}");
}

/// A FIFO in place of the spool, the store or the token is refused, naming it: opening one
/// waits for a writer, and `serve` and `doctor` waited for ever.
#[test]
fn a_fifo_in_place_of_a_storage_file_is_refused_not_waited_on() {
    for name in ["spool.db", "memories.db", "token"] {
        let dir = data_dir();
        let file = dir.path().join("data").join(name);
        let made = Command::new("mkfifo").arg(&file).status().unwrap();
        assert!(made.success());
        refused(dir.path(), &file, &["not a regular file"]);
    }
}
