//! The CLI through `assert_cmd`, against a real daemon process.

mod common;

use common::Daemon;
use serde_json::Value;

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn retain_flush_recall_status_and_clear() {
    let d = Daemon::start("[queue]\nflush_interval = \"1h\"\n");
    let work = tempfile::tempdir().unwrap();
    d.cli()
        .current_dir(work.path())
        .args(["retain", "--context", "build", "We ship with cargo-dist"])
        .assert()
        .success()
        .stdout("1 memory queued.\n");
    d.cli()
        .current_dir(work.path())
        .args(["retain", "-"])
        .write_stdin("The release branch is trunk\n")
        .assert()
        .success();
    let out = d.cli().args(["--json", "status"]).output().unwrap();
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["queue"]["pending"], 2);
    d.cli().arg("flush").assert().success().stdout("Delivered 2 memories, 0 failed.\n");
    let out = d.cli().current_dir(work.path()).args(["recall", "how do we ship?"]).output().unwrap();
    assert!(out.status.success());
    assert!(stdout(&out).contains("- We ship with cargo-dist [world]"), "{}", stdout(&out));
    // `-` reads the question from standard input, as retain reads the memory.
    let out =
        d.cli().current_dir(work.path()).args(["recall", "-"]).write_stdin("which release branch?\n").output().unwrap();
    assert!(stdout(&out).contains("- The release branch is trunk"), "{}", stdout(&out));
    let out = d.cli().arg("status").output().unwrap();
    let text = stdout(&out);
    assert!(text.contains("backend:  local (healthy), 2 memories"), "{text}");
    assert!(text.contains("queue:    0 pending, 0 in flight, 0 dead"), "{text}");
    d.cli().args(["clear", "--all"]).assert().failure().stderr(predicates_contains("--yes"));
    // Unconfirmed, a remote clear of everything says which server banks it would delete.
    d.cli().args(["clear", "--all", "--remote"]).assert().failure().stderr(predicates_contains("`{bank}-…`"));
    // `--here` clears this folder's project: another folder's memory stays.
    let elsewhere = tempfile::tempdir().unwrap();
    d.cli().current_dir(elsewhere.path()).args(["retain", "Another project deploys by hand"]).assert().success();
    d.cli().arg("flush").assert().success();
    d.cli()
        .current_dir(elsewhere.path())
        .args(["clear", "--here", "--yes"])
        .assert()
        .success()
        .stdout("Deleted 1 memory from the local store.\n");
    d.cli().args(["clear", "--here", "--all", "--yes"]).assert().failure();
    d.cli().args(["clear", "--all", "--yes"]).assert().success().stdout("Deleted 2 memories from the local store.\n");
    d.cli().arg("retry").assert().success().stdout("Re-queued 0 dead letters.\n");
    let out = d.cli().arg("notices").output().unwrap();
    assert!(
        stdout(&out).starts_with("#1 ") && stdout(&out).contains("info    [local] Deleted 2 memories"),
        "{}",
        stdout(&out)
    );
}

/// Read your own writes: a recall delivers what its session retained first, however long the
/// debounce; another folder's session keeps its queue.
#[test]
fn a_recall_finds_what_its_session_just_retained() {
    let d = Daemon::start("[queue]\nflush_interval = \"1h\"\n");
    let (work, elsewhere) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    d.cli().current_dir(work.path()).args(["retain", "We ship with cargo-dist"]).assert().success();
    d.cli().current_dir(elsewhere.path()).args(["retain", "Elsewhere deploys by hand"]).assert().success();
    let out = d.cli().current_dir(work.path()).args(["recall", "how do we ship?"]).output().unwrap();
    assert!(stdout(&out).contains("- We ship with cargo-dist [world]"), "{}", stdout(&out));
    let out = d.cli().args(["--json", "status"]).output().unwrap();
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["queue"]["pending"], 1, "the other folder's retain waits for its debounce: {status}");
}

/// A command run in a folder deleted under the shell is the folder's project's (the shell's
/// PWD), not the project of no folder: `clear --here` there deleted "/"'s memories ("unknown",
/// every MCP retain made without a cwd) and kept the folder's own.
#[test]
fn a_command_in_a_folder_deleted_under_the_shell_is_the_folders_project() {
    let d = Daemon::start("[local]\nembedder = \"off\"\n");
    let root = tempfile::tempdir().unwrap();
    let project = root.path().join("proj");
    std::fs::create_dir_all(project.join(".git")).unwrap();
    d.cli().current_dir(&project).args(["retain", "proj deploys with helm"]).assert().success();
    d.cli().current_dir("/").args(["retain", "a fact of no folder"]).assert().success();
    d.cli().arg("flush").assert().success();
    let gone = project.join("gone");
    std::fs::create_dir(&gone).unwrap();
    let out = std::process::Command::new("bash")
        .args(["-c", r#"cd "$1" && rmdir "$1" && exec "$2" clear --here --yes"#, "_"])
        .arg(&gone)
        .arg(common::bin())
        .env("MNEME_CONFIG", d.config_path())
        .envs(common::env_for(d.dir.path()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let out = d.cli().arg("export").output().unwrap();
    let exported = stdout(&out);
    assert!(!exported.contains("proj deploys with helm"), "{exported}");
    assert!(exported.contains("a fact of no folder"), "{exported}");
}

/// Under global scoping a folder has no project: `--here` would clear the whole bank, and is
/// refused for `--all`. Also in a folder named as the bank's name ends (`team-backend` and a
/// folder `backend`), which looked per-project to the CLI: it deleted every memory of the bank.
#[test]
fn clear_here_under_global_scoping_is_refused() {
    let config = "[memory]\nscoping = \"global\"\nbank_id = \"backend\"\nbank_id_prefix = \"team\"\n\
                  [local]\nembedder = \"off\"\n";
    let d = Daemon::start(config);
    d.cli().args(["retain", "A global fact"]).assert().success();
    d.cli().arg("flush").assert().success();
    let parent = tempfile::tempdir().unwrap();
    let named_as_the_bank = parent.path().join("backend");
    std::fs::create_dir(&named_as_the_bank).unwrap();
    for folder in [d.dir.path(), named_as_the_bank.as_path()] {
        let refused = d.cli().current_dir(folder).args(["clear", "--here", "--yes"]).assert().failure();
        refused.stderr(predicates_contains("--all"));
    }
    let out = d.cli().args(["--json", "status"]).output().unwrap();
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["backend"]["memories"], 1, "{status}");
}

/// The CLI with `config` and the storage dir `data`, bounded to 20 s.
fn cli_on(config: &std::path::Path, data: &std::path::Path, args: &[&str]) -> std::process::Output {
    assert_cmd::Command::new(common::bin())
        .env("MNEME_CONFIG", config)
        .env("MNEME_STORAGE__DIR", data)
        .args(args)
        .timeout(std::time::Duration::from_secs(20))
        .output()
        .unwrap()
}

fn predicates_contains(s: &'static str) -> impl predicates_core::Predicate<[u8]> {
    struct Contains(&'static str);
    impl predicates_core::reflection::PredicateReflection for Contains {}
    impl std::fmt::Display for Contains {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "contains {:?}", self.0)
        }
    }
    impl predicates_core::Predicate<[u8]> for Contains {
        fn eval(&self, v: &[u8]) -> bool {
            String::from_utf8_lossy(v).contains(self.0)
        }
    }
    Contains(s)
}

/// After `storage.dir` is changed under a running daemon (a restart applies it), the CLI says
/// which dir it looked at and what to do: it said the daemon "is not running at 127.0.0.1:0",
/// or, on the daemon's own port, only that a token file was missing.
#[test]
fn a_storage_dir_changed_under_a_running_daemon_is_said() {
    let d = Daemon::start("[local]\nembedder = \"off\"\n");
    let moved = d.dir.path().join("moved");
    // Listening on port 0, as the test daemons do: only a pidfile says where a daemon listens.
    let out = d.cli().env("MNEME_STORAGE__DIR", &moved).arg("status").output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("no mneme daemon is running on the storage dir {}", moved.display())), "{err}");
    assert!(err.contains("storage.dir was changed") && err.contains("restarted"), "{err}");
    // On the daemon's own address it answers, but its token is not in the new dir.
    let out =
        d.cli().env("MNEME_STORAGE__DIR", &moved).env("MNEME_SERVER__LISTEN", &d.addr).arg("status").output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("keeps its token elsewhere") && err.contains("storage.dir was changed"), "{err}");
    // A token file emptied since is said to be, not taken for another daemon's (review88 #4).
    let token = d.dir.path().join("data").join("token");
    let kept = std::fs::read(&token).unwrap();
    std::fs::write(&token, "").unwrap();
    let out = d.cli().arg("status").output().unwrap();
    let doctor = d.cli().arg("doctor").output().unwrap();
    std::fs::write(&token, kept).unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is empty") && err.contains("restart"), "{err}");
    // `mneme doctor` the same, once: not "no token, start the daemon" beside it (review89 #4).
    let said = String::from_utf8_lossy(&doctor.stdout);
    assert!(said.contains("is empty") && !said.contains("no token at") && !said.contains("mneme version"), "{said}");
}

/// A config that is a FIFO (no writer) is read by no command: with no daemon to reach, `status`
/// said the file was not a regular file, then opened it again for its "not running" message and
/// waited for a writer for ever.
#[test]
fn a_config_that_is_a_fifo_is_never_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    let made = std::process::Command::new("mkfifo").arg(&config).status().unwrap();
    assert!(made.success());
    for args in [vec!["status"], vec!["retain", "x"]] {
        let out = assert_cmd::Command::new(common::bin())
            .env("MNEME_CONFIG", &config)
            .env("MNEME_SERVER__LISTEN", "127.0.0.1:9")
            .env("MNEME_STORAGE__DIR", dir.path().join("data"))
            .args(&args)
            .timeout(std::time::Duration::from_secs(20))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(3), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("not a regular file") && err.contains("not running"), "{err}");
    }
}

/// A FIFO in place of the token or the pidfile is read by no command: opening one waits for a
/// writer, and `status` and Claude Code's MCP headers helper waited for ever.
#[test]
fn a_fifo_token_or_pidfile_is_never_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    for name in ["token", "mneme.pid"] {
        assert!(std::process::Command::new("mkfifo").arg(data.join(name)).status().unwrap().success());
    }
    for args in [vec!["status"], vec!["hook", "claude-code", "--mcp-headers"]] {
        let out = assert_cmd::Command::new(common::bin())
            .env("MNEME_CONFIG", dir.path().join("none.toml"))
            .env("MNEME_SERVER__LISTEN", "127.0.0.1:9")
            .env("MNEME_STORAGE__DIR", &data)
            .args(&args)
            .timeout(std::time::Duration::from_secs(20))
            .output()
            .unwrap();
        assert!(out.status.code().is_some_and(|c| c != 0), "{args:?}: {out:?}");
    }
    // The daemon says what is wrong with the pidfile (flock refused it: "Invalid argument").
    let out = assert_cmd::Command::new(common::bin())
        .env("MNEME_CONFIG", dir.path().join("none.toml"))
        .env("MNEME_SERVER__LISTEN", "127.0.0.1:0")
        .env("MNEME_STORAGE__DIR", &data)
        .arg("serve")
        .timeout(std::time::Duration::from_secs(20))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code().is_some_and(|c| c != 0) && err.contains("not a regular file"), "{out:?}");
}

/// A session id far too long to send is told in the CLI's words: the HTTP client refused the
/// URL with its own ("builder error for url") and printed it whole, 66 KB of it.
#[test]
fn a_session_id_too_long_to_send_is_said_briefly() {
    let d = Daemon::start("[local]\nembedder = \"off\"\n");
    let long = "s".repeat(70_000);
    let out = d.cli().args(["retain", "--session", &long, "a fact"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.len() < 1000 && err.contains("too long") && err.contains("nothing was sent"),
        "{}",
        &err[..err.len().min(300)]
    );
}

#[test]
fn a_stopped_daemon_is_one_clear_line_and_exit_3() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "[server]\nlisten = \"127.0.0.1:9\"\n").unwrap();
    for args in [vec!["status"], vec!["flush"], vec!["recall", "x"]] {
        let out = assert_cmd::Command::new(common::bin())
            .env("MNEME_CONFIG", &config)
            .env("MNEME_STORAGE__DIR", dir.path().join("data"))
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(3), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("not running at 127.0.0.1:9") && err.contains("mneme serve"), "{err}");
    }
    // A clear not confirmed is told so, daemon or not.
    let out = assert_cmd::Command::new(common::bin())
        .env("MNEME_CONFIG", &config)
        .env("MNEME_STORAGE__DIR", dir.path().join("data"))
        .args(["clear", "--all"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--yes"), "{out:?}");
    // With --json, standard output says it too, as JSON.
    let out = assert_cmd::Command::new(common::bin())
        .env("MNEME_CONFIG", &config)
        .env("MNEME_STORAGE__DIR", dir.path().join("data"))
        .args(["--json", "status"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["code"], "not_running", "{v}");
}

#[test]
fn config_check_example_and_path() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.toml");
    let run = |args: &[&str]| {
        assert_cmd::Command::new(common::bin()).env("MNEME_CONFIG", &config).args(args).output().unwrap()
    };
    let out = run(&["config", "path"]);
    assert_eq!(stdout(&out).trim(), config.display().to_string());
    let v: Value = serde_json::from_slice(&run(&["--json", "config", "path"]).stdout).unwrap();
    assert_eq!(v["path"], config.display().to_string());
    // A file the user named that is not there is more likely a typo: said, and the check fails
    // (review70's note: it exited 0).
    let out = run(&["config", "check"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("does not exist; the defaults apply"));
    assert!(stdout(&out).contains("warning: MNEME_CONFIG names a file that does not exist"), "{}", stdout(&out));
    let out = run(&["--json", "config", "check"]);
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((v["ok"].as_bool(), v["exists"].as_bool()), (Some(false), Some(false)), "{v}");
    let example = stdout(&run(&["config", "example"]));
    assert!(example.contains("[queue]") && example.contains("batch_size = 16"));
    std::fs::write(&config, "[memory]\nbackend = \"cloud\"\n\n[queue]\nbatch_size = -1\ntypo = 3\n").unwrap();
    let out = run(&["config", "check"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("3 problems"), "{err}");
    assert!(err.contains("line 2: memory.backend"), "{err}");
    assert!(err.contains("line 5: queue.batch_size"), "{err}");
    assert!(err.contains("line 6: queue.typo: unknown key"), "{err}");
    let out = run(&["--json", "config", "check"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["errors"].as_array().unwrap().len(), 3);
    // A daemon refuses to start on it, naming the problems.
    let out = run(&["serve"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 2: memory.backend"));
}

#[test]
fn a_second_daemon_on_the_same_storage_is_refused() {
    let d = Daemon::start("");
    let out = assert_cmd::Command::new(common::bin())
        .args(["serve", "--config"])
        .arg(d.config_path())
        .envs(common::env_for(d.dir.path()))
        .timeout(std::time::Duration::from_secs(10))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("another mneme daemon") && err.contains(&format!("pid {}", d.child.as_ref().unwrap().id())),
        "{err}"
    );
}

#[test]
fn binding_a_non_loopback_address_needs_allow_remote() {
    let dir = tempfile::tempdir().unwrap();
    let out = assert_cmd::Command::new(common::bin())
        .arg("serve")
        .env("MNEME_CONFIG", dir.path().join("none.toml"))
        .env("MNEME_STORAGE__DIR", dir.path().join("data"))
        .env("MNEME_SERVER__LISTEN", "0.0.0.0:0")
        .timeout(std::time::Duration::from_secs(10))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("server.allow_remote"));
}

/// With nothing left to read its log (a pipe to a log shipper that went away), the daemon still
/// answers and stops: each log line's failed write was reported with `eprintln!`, which panicked
/// on the broken pipe and took the task that logged with it (the signal's watcher, a reload), so
/// SIGTERM no longer stopped it (review64 #7).
#[test]
fn a_daemon_whose_log_reader_went_away_still_reloads_and_stops() {
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "[server]\nlisten = \"127.0.0.1:0\"\n").unwrap();
    let mut child = std::process::Command::new(common::bin())
        .args(["serve", "--config"])
        .arg(&config)
        .envs(common::env_for(dir.path()))
        .env("MNEME_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stderr.take());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !std::fs::read_to_string(dir.path().join("data/mneme.pid")).is_ok_and(|p| p.lines().count() > 1) {
        assert!(std::time::Instant::now() < deadline, "the daemon did not start");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let cli = || {
        let mut c = assert_cmd::Command::new(common::bin());
        c.env("MNEME_CONFIG", &config).env("MNEME_LOG", "error").envs(common::env_for(dir.path()));
        c
    };
    cli().args(["reload"]).assert().success();
    cli().args(["retain", "kept through a broken log"]).assert().success();
    common::unsafe_kill(child.id(), "TERM");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("SIGTERM did not stop a daemon whose log reader went away");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    assert_eq!(common::stored_count(&dir.path().join("data/memories.db"), "kept through a broken log"), 1);
}

#[test]
fn sigterm_and_sigint_drain_the_queue_before_exit() {
    for signal in ["TERM", "INT"] {
        let mut d = Daemon::start("[queue]\nflush_interval = \"1h\"\n");
        d.cli().args(["retain", "drained at shutdown"]).assert().success();
        let mut child = d.child.take().unwrap();
        common::unsafe_kill(child.id(), signal);
        let status = child.wait().unwrap();
        assert!(status.success(), "{signal}: {status:?}");
        assert_eq!(common::stored_count(&d.data().join("memories.db"), "drained at shutdown"), 1, "{signal}");
    }
}

#[test]
fn notices_follow_streams_new_notices() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let d = Daemon::start("");
    // A notice before the command starts is listed from the backlog; only the second can come
    // through the stream.
    d.cli().args(["clear", "--all", "--yes"]).assert().success();
    let mut child = d.command().args(["notices", "--follow"]).stdout(Stdio::piped()).spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    let line = rx.recv_timeout(std::time::Duration::from_secs(10)).expect("the backlog");
    assert!(line.starts_with("#1 ") && line.contains("info") && line.contains("Deleted 0 memories"), "{line}");
    // The backlog has been printed: a notice made now can only come through the follow.
    d.cli().args(["clear", "--all", "--yes"]).assert().success();
    let line = rx.recv_timeout(std::time::Duration::from_secs(10)).expect("a streamed notice");
    assert!(line.starts_with("#2 ") && line.contains("Deleted 0 memories"), "{line}");
    // The daemon stopping ends the stream: said, and exit 1 (it was a silent exit 0).
    let mut d = d;
    d.stop();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1));
}

#[tokio::test]
async fn a_reader_that_goes_away_ends_a_command_quietly() {
    let d = Daemon::start("");
    d.start_session("s", "/p/pipe").await;
    let items: Vec<serde_json::Value> =
        (0..300).map(|i| serde_json::json!({"content": format!("note {i} {}", "x".repeat(1000))})).collect();
    let (status, v) = d.post("/v1/sessions/s/retain", serde_json::json!({"items": items})).await;
    assert_eq!(status, 202, "{v}");
    let (status, v) = d.post("/v1/flush", serde_json::json!({})).await;
    assert_eq!((status, &v["failed"]), (200, &serde_json::json!(0)), "{v}");
    // The export's own exit status (head's is the pipeline's): 0, or 141 if SIGPIPE killed it.
    let out = std::process::Command::new("bash")
        .args(["-c", &format!("'{}' export | head -c 1 >/dev/null; exit ${{PIPESTATUS[0]}}", common::bin())])
        .env("MNEME_CONFIG", d.config_path())
        .envs(common::env_for(d.dir.path()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.is_empty(), "{stderr}");
    assert!(matches!(out.status.code(), Some(0 | 141)), "{:?}", out.status);
}

/// A write error on standard output other than a closed pipe (a full disk under `> file`) is
/// the command's failure in one line, exit 1: it was a panic, exit 101 with a backtrace, which
/// hid that the retain before it had been acknowledged.
#[test]
fn a_full_standard_output_is_an_error_not_a_panic() {
    let d = Daemon::start("");
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    for args in [&["status"][..], &["retain", "written before the answer"], &["config", "example"]] {
        let out = d.command().args(args).stdout(full.try_clone().unwrap()).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains("cannot write standard output") && !stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    // Standard error on the full disk too (`&> file`): still exit 1, not an abort.
    let status =
        d.command().arg("status").stdout(full.try_clone().unwrap()).stderr(full.try_clone().unwrap()).status().unwrap();
    assert_eq!(status.code(), Some(1), "{status:?}");
    d.cli().arg("flush").assert().success();
    let out = d.cli().args(["recall", "written before the answer"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("written before the answer"));
}

/// A request over `server.max_body_bytes` is refused by the CLI with the key that bounds it
/// (sent, the daemon closed the connection on its 413 and SIGPIPE killed the CLI, exit 141,
/// without a word).
#[test]
fn a_request_over_the_body_limit_is_refused_with_its_key() {
    let d = Daemon::start("[server]\nmax_body_bytes = 4096\n");
    let out = d.cli().args(["retain", "-"]).write_stdin("word ".repeat(100_000)).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("server.max_body_bytes = 4096") && stderr.contains("nothing was sent"), "{stderr}");
}

/// The limit is the running daemon's, not the config file's edited since (it waits for a
/// restart): lowered in the file, a request the daemon takes was refused as one it would not
/// (review64 #3); raised there, it is still refused before it is sent.
#[test]
fn the_body_limit_is_the_running_daemons() {
    let d = Daemon::start("[server]\nmax_body_bytes = 65536\n");
    std::fs::write(d.config_path(), "[server]\nmax_body_bytes = 2048\n").unwrap();
    let out = d.cli().args(["retain", "-"]).write_stdin("word ".repeat(700)).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    // An import's lines too (review67 #8).
    let line = serde_json::json!({"id": "m-long", "bank": "mneme", "content": "note ".repeat(700), "created_at": "2026-01-01T00:00:00Z"}).to_string() + "\n";
    let out = d.cli().args(["import", "-"]).write_stdin(line).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::write(d.config_path(), "[server]\nmax_body_bytes = 1048576\n").unwrap();
    let out = d.cli().args(["retain", "-"]).write_stdin("word ".repeat(20_000)).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("server.max_body_bytes = 65536") && stderr.contains("nothing was sent"), "{stderr}");
}

/// Standard input and an import's lines are read no further than the daemon's body limit:
/// read without a bound, `retain -`, `recall -` and `import` of `/dev/zero` grew the CLI by a
/// gigabyte a second until the OOM killer came. (Run under a 2 GB address-space limit, and
/// killed after 20 s, so that the old way fails rather than takes the machine.)
#[test]
fn endless_input_is_read_no_further_than_the_body_limit() {
    let d = Daemon::start("[server]\nmax_body_bytes = 65536\n");
    for (args, said) in [
        ("retain -", "standard input is longer than the daemon takes"),
        ("recall -", "standard input is longer than the daemon takes"),
        ("import -", "-: the memory on line 1 is longer than the daemon takes"),
        ("import /dev/zero", "/dev/zero: the memory on line 1 is longer than the daemon takes"),
    ] {
        let cmd = d.command();
        let mneme = cmd.get_program().to_owned();
        let script = format!("ulimit -v 2000000; exec {} {args} < /dev/zero", mneme.to_string_lossy());
        let child = std::process::Command::new("sh")
            .args(["-c", &script])
            .envs(cmd.get_envs().filter_map(|(k, v)| v.map(|v| (k.to_owned(), v.to_owned()))))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let (done, waited) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            if waited.recv_timeout(std::time::Duration::from_secs(20)).is_err() {
                let _ = std::process::Command::new("kill").arg("-9").arg(pid.to_string()).status();
            }
        });
        let out = child.wait_with_output().unwrap();
        let _ = done.send(());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args}: {stderr}");
        assert!(stderr.contains(said) && stderr.contains("server.max_body_bytes = 65536"), "{args}: {stderr}");
    }
}

#[test]
fn every_file_the_daemon_creates_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let d = Daemon::start("");
    d.cli().args(["retain", "private by default"]).assert().success();
    d.cli().arg("flush").assert().success();
    for entry in std::fs::read_dir(d.data()).unwrap() {
        let entry = entry.unwrap();
        let mode = entry.metadata().unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o077, 0, "{} has mode {mode:o}", entry.path().display());
    }
}

/// `mneme serve 2> file` writes plain text (no colour codes off a terminal); `MNEME_LOG_FORMAT=json`
/// writes one JSON object a line; an unknown format is refused with exit 2.
#[tokio::test]
async fn the_log_is_plain_text_off_a_terminal_and_json_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("text.log");
    let mut d = common::Daemon::start_logged(dir, "", &[("MNEME_LOG", "info")], Some(&log));
    d.stop();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("mneme listening"), "{text}");
    assert!(!text.contains('\u{1b}'), "colour codes in a file: {text:?}");

    let dir = d.into_dir();
    let log = dir.path().join("json.log");
    let mut d =
        common::Daemon::start_logged(dir, "", &[("MNEME_LOG", "info"), ("MNEME_LOG_FORMAT", "json")], Some(&log));
    d.stop();
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<serde_json::Value> =
        text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    let listening = lines.iter().find(|l| l["message"] == "mneme listening").unwrap_or_else(|| panic!("{text}"));
    assert_eq!(listening["level"], "INFO");
    assert!(listening["addr"].as_str().is_some_and(|a| a.starts_with("127.0.0.1:")), "{listening}");
    assert!(listening["timestamp"].as_str().is_some(), "{listening}");

    // A word that is not a level is said, and the default level kept (it silenced everything).
    let dir = d.into_dir();
    let log = dir.path().join("verbose.log");
    let mut d = common::Daemon::start_logged(dir, "", &[("MNEME_LOG", "verbose")], Some(&log));
    d.stop();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("MNEME_LOG names \"verbose\", which is not a level"), "{text}");
    assert!(text.contains("mneme listening"), "{text}");

    // At trace, with the log beside the config: no line from the config watcher or the tokenizer
    // (each of the watcher's lines was a change it saw, a loop; the tokenizer logs a character a line).
    let dir = d.into_dir();
    let log = dir.path().join("trace.log");
    let mut d = common::Daemon::start_logged(dir, "", &[("MNEME_LOG", "trace")], Some(&log));
    d.post("/v1/search", serde_json::json!({"query": "anything at all"})).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    d.stop();
    let text = std::fs::read_to_string(&log).unwrap();
    for chatty in [" notify", " tokenizers"] {
        assert!(
            !text.lines().any(|l| l.contains(&format!("TRACE{chatty}"))),
            "{chatty} logs at trace: {}",
            &text[..text.len().min(3000)]
        );
    }

    let out =
        std::process::Command::new(common::bin()).args(["status"]).env("MNEME_LOG_FORMAT", "xml").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("MNEME_LOG_FORMAT"), "{out:?}");
}

#[test]
fn a_daemon_that_takes_connections_but_never_answers_is_one_clear_line_and_exit_3() {
    // A listener that accepts and says nothing, like a daemon stopped with SIGSTOP.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = std::thread::spawn(move || {
        let mut open = Vec::new();
        for stream in listener.incoming().take(3) {
            open.push(stream);
        }
        std::thread::sleep(std::time::Duration::from_secs(30));
    });
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, format!("[server]\nlisten = \"127.0.0.1:{port}\"\n")).unwrap();
    for args in [vec!["status"], vec!["recall", "x"], vec!["notices"]] {
        let started = std::time::Instant::now();
        let out = cli_on(&config, &dir.path().join("data"), &args);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("does not answer"), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(15), "{args:?} took {:?}", started.elapsed());
    }
    drop(held);
}

/// A program on the port that takes the connection and closes it without an HTTP answer is no
/// running mneme daemon either: exit 3, in one line without the request's URL (it was exit 1,
/// "cannot reach the daemon", with the URL).
#[test]
fn a_program_closing_without_an_answer_is_no_running_daemon() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            drop(stream);
        }
    });
    let err = status_on_port(port);
    assert!(err.contains("closed the connection without an HTTP answer") && !err.contains("challenge="), "{err}");
    assert!(err.contains("stop it or set server.listen"), "{err}");
}

/// `mneme status` with a config whose daemon is at 127.0.0.1:`port`: exit 3, and what it said.
fn status_on_port(port: u16) -> String {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, format!("[server]\nlisten = \"127.0.0.1:{port}\"\n")).unwrap();
    let out = cli_on(&config, &dir.path().join("data"), &["status"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A daemon that goes away as a command connects (stopped, or crashed with the connection in
/// its backlog) is said to have gone: the CLI blamed another program on the port, and advised
/// stopping it (review57 #3). Here a listener that never accepts is closed under the command.
#[test]
fn a_daemon_gone_as_a_command_connects_is_not_called_another_program() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(1500));
        drop(listener); // the kernel resets the connections it holds
    });
    let err = status_on_port(port);
    assert!(err.contains("went away as this command connected") && err.contains("mneme serve"), "{err}");
    assert!(!err.contains("stop it or set server.listen"), "{err}");
}

/// Another program holding the port (a plain web server) is no running mneme daemon: exit 3,
/// as with nothing on the port (it was 1, "the daemon refused"), and no token is sent to it.
/// Nor to one that redirects the proof it is asked for to a daemon that holds the token (the
/// CLI followed the redirect, took the proof for the program's, and sent it the token).
#[test]
fn another_program_on_the_port_is_no_running_daemon_and_exit_3() {
    use std::io::{Read, Write};
    let real = Daemon::start("[local]\nembedder = \"off\"\n");
    for redirect in [None, Some(real.addr.clone())] {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let heard = seen.clone();
        let to = redirect.clone();
        std::thread::spawn(move || {
            for mut stream in listener.incoming().flatten() {
                let mut buf = [0u8; 4096];
                let n = stream.read(&mut buf).unwrap_or(0);
                let request = String::from_utf8_lossy(&buf[..n]).into_owned();
                heard.lock().unwrap().push_str(&request);
                let _ = match &to {
                    Some(addr) => {
                        let target = request.split_whitespace().nth(1).unwrap_or("/").to_owned();
                        write!(
                            stream,
                            "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://{addr}{target}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                        )
                    }
                    None => {
                        let page = "<html>a web server</html>";
                        write!(
                            stream,
                            "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                            page.len()
                        )
                    }
                };
            }
        });
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.toml");
        std::fs::write(&config, format!("[server]\nlisten = \"127.0.0.1:{port}\"\n")).unwrap();
        // A storage dir holding the real daemon's token, and no pidfile that says where it runs.
        std::fs::create_dir(dir.path().join("data")).unwrap();
        std::fs::copy(real.data().join("token"), dir.path().join("data/token")).unwrap();
        for args in [vec!["status"], vec!["retain", "a fact"]] {
            let out = cli_on(&config, &dir.path().join("data"), &args);
            assert_eq!(out.status.code(), Some(3), "{redirect:?} {args:?}: {out:?}");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains("no mneme daemon is running") && err.contains("another program"), "{err}");
        }
        assert!(!seen.lock().unwrap().to_ascii_lowercase().contains("authorization"), "the token went to it");
    }
}

#[test]
fn migrate_names_the_backends_it_can_copy_between() {
    for args in [["--from", "local", "--to", "nowhere"], ["--from", "off", "--to", "local"]] {
        let out = assert_cmd::Command::new(common::bin()).arg("migrate").args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("local or hindsight") && !err.contains("\"off\", "), "{err}");
    }
}

/// What migrate creates (the storage dir, the local store and its log) is private to the user,
/// as the daemon makes them, whatever the shell's umask (they were 0755 and 0644 under 022).
#[test]
fn migrate_creates_the_storage_privately() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let refusing = common::refusing_port();
    let closed = refusing.addr;
    let config = dir.path().join("config.toml");
    std::fs::write(&config, format!("[hindsight]\napi_url = \"http://{closed}\"\n")).unwrap();
    let mut cmd = std::process::Command::new(common::bin());
    cmd.args(["migrate", "--from", "local", "--to", "hindsight"])
        .env("MNEME_CONFIG", &config)
        .env("MNEME_STORAGE__DIR", &data)
        .env("MNEME_LOG", "error");
    // SAFETY: umask in the child before exec; it cannot fail.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            libc::umask(0o022);
            Ok(())
        });
    }
    let _ = cmd.output().unwrap(); // the target does not answer: what matters is what was made
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&data), 0o700, "the storage dir");
    let made: Vec<_> = std::fs::read_dir(&data).unwrap().flatten().map(|e| e.path()).collect();
    assert!(made.iter().any(|p| p.ends_with("memories.db")), "{made:?}");
    for path in made {
        assert_eq!(mode(&path) & 0o077, 0, "{} is {:o}", path.display(), mode(&path));
    }
}

#[test]
fn a_daemon_whose_address_changed_in_the_config_is_still_reached() {
    let d = Daemon::start("[queue]\nflush_interval = \"5s\"\n");
    // The config now names another port than the daemon started on: a restart would apply it,
    // and until then the CLI reaches the daemon where its pidfile says it listens.
    let out = d.cli().env("MNEME_SERVER__LISTEN", "127.0.0.1:9").arg("reload").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Reloaded"), "{}", String::from_utf8_lossy(&out.stdout));
}

/// Two projects' CLI calls at once keep to their own projects: each directory has its own
/// default session (one shared "cli" session, scoped again by every call, mixed them up).
#[test]
fn concurrent_cli_calls_from_two_projects_keep_their_own_scope() {
    let d = Daemon::start("[queue]\nflush_interval = \"1h\"\n");
    let root = tempfile::tempdir().unwrap();
    let (alpha, beta) = (root.path().join("alpha"), root.path().join("beta"));
    std::fs::create_dir_all(&alpha).unwrap();
    std::fs::create_dir_all(&beta).unwrap();
    std::thread::scope(|s| {
        for i in 0..8 {
            for (dir, name) in [(&alpha, "alpha"), (&beta, "beta")] {
                let d = &d;
                s.spawn(move || {
                    d.cli().current_dir(dir).args(["retain", &format!("{name} fact number {i}")]).assert().success();
                });
            }
        }
    });
    d.cli().arg("flush").assert().success();
    let out = d.cli().arg("export").output().unwrap();
    let lines: Vec<Value> = stdout(&out).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 16, "{}", stdout(&out));
    for m in &lines {
        let content = m["content"].as_str().unwrap();
        let project = if content.starts_with("alpha") { "project:alpha" } else { "project:beta" };
        assert_eq!(m["tags"], serde_json::json!([project]), "{m}");
    }
    // ... and a recall in one project never shows the other's.
    let out = d.cli().current_dir(&alpha).args(["recall", "beta fact number"]).output().unwrap();
    assert!(!stdout(&out).contains("beta fact"), "{}", stdout(&out));
}

/// With `--json`, standard output is JSON whatever happens: a command line clap refuses (it
/// printed its usage to standard error only), and an export to a file (nothing at all).
#[test]
fn json_is_on_standard_output_for_usage_errors_and_exports_to_a_file() {
    let d = Daemon::start("");
    let out = d.cli().args(["--json", "clear"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)));
    assert_eq!(v["error"]["code"], "usage", "{v}");
    let file = d.dir.path().join("backup.jsonl");
    let out = d.cli().args(["--json", "export", "-o"]).arg(&file).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)));
    assert_eq!(v["exported"], 0, "{v}");
    let out = d.cli().args(["--json", "config", "example"]).output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)));
    assert!(v["example"].as_str().is_some_and(|e| e.contains("[memory]")), "{v}");
}

/// `--json` prints the daemon's own error answer when it refuses: its code (not a generic
/// "refused") and what rides beside it, such as each key and line of a refused reload.
#[test]
fn json_failures_carry_the_daemons_answer() {
    let d = Daemon::start("");
    let out = d.cli().args(["--json", "flush", "--session", "nope"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)));
    assert_eq!(v["error"]["code"], "unknown_session", "{v}");
    std::fs::write(d.config_path(), "[queue]\nbatch_size = \"many\"\n").unwrap();
    let out = d.cli().args(["--json", "reload"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)));
    assert_eq!(v["error"]["code"], "invalid_config", "{v}");
    assert_eq!(v["error"]["errors"][0]["key"], "queue.batch_size", "{v}");
    assert_eq!(v["error"]["errors"][0]["line"], 2, "{v}");
}

/// Another program on a port: it answers each connection's first read with `answer`, and keeps
/// what it heard.
fn squat(listener: std::net::TcpListener, answer: String) -> std::sync::Arc<std::sync::Mutex<String>> {
    use std::io::{Read, Write};
    let heard = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let log = heard.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { break };
            let mut buf = [0u8; 8192];
            let n = conn.read(&mut buf).unwrap_or(0);
            log.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            let _ = conn.write_all(answer.as_bytes());
        }
    });
    heard
}

/// A relay on 127.0.0.1 to `to`: each connection is passed on both ways.
struct Relay {
    port: u16,
    connections: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Relay {
    /// Whether a connection was passed on.
    fn relayed(&self) -> bool {
        self.connections.load(std::sync::atomic::Ordering::SeqCst) > 0
    }
}

fn relay_to(to: &str) -> Relay {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (count, to) = (connections.clone(), to.to_owned());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(client) = conn else { break };
            let Ok(daemon) = std::net::TcpStream::connect(&to) else { continue };
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let (mut c2, mut d2) = (client.try_clone().unwrap(), daemon.try_clone().unwrap());
            let (mut client, mut daemon) = (client, daemon);
            std::thread::spawn(move || std::io::copy(&mut c2, &mut d2));
            std::thread::spawn(move || std::io::copy(&mut daemon, &mut client));
        }
    });
    Relay { port, connections }
}

/// The CLI sends the token only to a daemon that proves it holds it: whatever answers on the
/// port may be another user's process, which took it while the daemon was down (it was sent
/// the token, and the retained text, by every command).
#[test]
fn the_token_goes_only_to_a_daemon_that_proves_it_holds_it() {
    let squatter = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = squatter.local_addr().unwrap().port();
    let body = r#"{"status":"ok","version":"0.1.0","protocol":1}"#;
    let answer = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let heard = squat(squatter, answer);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("token"), "the-users-own-token-0123456789").unwrap();
    let run = |args: &[&str]| {
        assert_cmd::Command::new(common::bin())
            .args(args)
            .env("MNEME_CONFIG", dir.path().join("none.toml"))
            .env("MNEME_STORAGE__DIR", &data)
            .env("MNEME_SERVER__LISTEN", format!("127.0.0.1:{port}"))
            .timeout(std::time::Duration::from_secs(10))
            .output()
            .unwrap()
    };
    let out = run(&["retain", "a secret fact about the project"]);
    // Exit 3, as with no daemon: no daemon of this mneme's answers there.
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("this mneme's token") && said.contains("the token was not sent"), "{said}");
    // Nor does Claude Code's MCP headers helper hand it over (it printed the token unasked).
    let out = run(&["hook", "claude-code", "--mcp-headers"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("the-users-own-token"));
    let heard = heard.lock().unwrap().clone();
    assert!(heard.contains("GET /v1/health?challenge="), "{heard}");
    assert!(!heard.contains("the-users-own-token") && !heard.contains("secret fact"), "{heard}");
}

/// Claude Code's MCP headers helper gives the token only to a daemon that proves it holds it
/// at the URL Claude Code names (`CLAUDE_CODE_MCP_SERVER_URL`): not when a program that is no
/// mneme holds the port (it closes connections, answers no JSON, streams without end), not
/// when nothing listens there (a program may a moment later), and not to the old port a
/// project's `.mcp.json` names after the daemon moved (review50 #1). A health answer is read
/// up to 64 KiB (review50 #3: gigabytes, in every hook too).
#[test]
fn the_mcp_headers_helper_gives_the_token_only_where_it_is_proven() {
    use std::io::{Read, Write};
    let d = Daemon::start("[local]\nembedder = \"off\"\n");
    let program = |answer: &'static [u8], endless: bool| {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { break };
                let mut buf = [0u8; 8192];
                let _ = conn.read(&mut buf);
                let _ = conn.write_all(answer);
                while endless && conn.write_all(&[b'x'; 65536]).is_ok() {}
            }
        });
        port
    };
    let closes = program(b"", false);
    let html = program(b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: 5\r\n\r\n<p>hi", false);
    let endless =
        program(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{\"status\":\"ok\",\"version\":\"", true);
    let nothing = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    // Another user's relay on another port (the one the daemon used before it moved), which
    // passes the question on to the daemon and its proof back (review52 #1).
    let relay = relay_to(&d.addr);
    let helper = |url: &str| {
        d.cli()
            .args(["hook", "claude-code", "--mcp-headers"])
            .env("CLAUDE_CODE_MCP_SERVER_URL", url)
            .timeout(std::time::Duration::from_secs(20))
            .output()
            .unwrap()
    };
    for port in [closes, html, endless, nothing] {
        let out = helper(&format!("http://127.0.0.1:{port}/mcp"));
        assert_eq!(out.status.code(), Some(3), "{port}: {out:?}");
        assert!(!stdout(&out).contains(&d.token), "{port}");
    }
    let said = String::from_utf8_lossy(&helper(&format!("http://127.0.0.1:{endless}/mcp")).stderr).into_owned();
    assert!(said.contains("longer than 64 KiB"), "{said}");
    let out = helper(&format!("http://127.0.0.1:{}/mcp", relay.port));
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(!stdout(&out).contains(&d.token), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("a relay"), "{out:?}");
    assert!(relay.relayed(), "the relay passed the question on");
    // Not to another machine, whatever answers there.
    let out = helper("http://example.com:80/mcp");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("goes only to a daemon on this machine"), "{out:?}");
    // The daemon's own URL, as `--install` writes it: the token.
    let out = helper(&format!("http://{}/mcp", d.addr));
    assert!(out.status.success(), "{out:?}");
    assert!(stdout(&out).contains(&format!("Bearer {}", d.token)), "{out:?}");
    // A Claude Code that names no URL: the one the project's .mcp.json gives mneme's server.
    let project = d.dir.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    for (port, proven) in [(nothing.to_string(), false), (d.addr.rsplit_once(':').unwrap().1.to_owned(), true)] {
        let servers = serde_json::json!({"mcpServers": {"mneme": {"type": "http", "url": format!("http://127.0.0.1:{port}/mcp")}}});
        std::fs::write(project.join(".mcp.json"), servers.to_string()).unwrap();
        let out = d
            .cli()
            .args(["hook", "claude-code", "--mcp-headers"])
            .env("CLAUDE_PROJECT_DIR", &project)
            .output()
            .unwrap();
        assert_eq!(out.status.success(), proven, "{port}: {out:?}");
        assert_eq!(stdout(&out).contains(&d.token), proven, "{port}: {out:?}");
        // A daemon that moved since the file was written is said to listen elsewhere, and how
        // to point the file at it (not "it may be starting": review98 #1).
        if !proven {
            let said = String::from_utf8_lossy(&out.stderr).into_owned();
            assert!(said.contains(&format!("listens at {}", d.addr)) && said.contains("--install --write"), "{said}");
        }
    }
    // A `.mcp.json` that is no regular file (a link to /dev/zero, a FIFO another user planted in
    // a shared folder) is not read (it took gigabytes, or hung; review52 #7): the config's
    // address, as with none.
    let mcp_json = project.join(".mcp.json");
    for planted in ["zero", "fifo"] {
        let _ = std::fs::remove_file(&mcp_json);
        match planted {
            "zero" => std::os::unix::fs::symlink("/dev/zero", &mcp_json).unwrap(),
            _ => assert!(std::process::Command::new("mkfifo").arg(&mcp_json).status().unwrap().success()),
        }
        let out = d
            .cli()
            .args(["hook", "claude-code", "--mcp-headers"])
            .env("CLAUDE_PROJECT_DIR", &project)
            .timeout(std::time::Duration::from_secs(20))
            .output()
            .unwrap();
        assert!(out.status.success(), "{planted}: {out:?}");
        assert!(stdout(&out).contains(&d.token), "{planted}: {out:?}");
    }
}

/// A URL naming `localhost` is proven at every address the name gives: on a machine whose
/// /etc/hosts names ::1 too (Debian's), Claude Code (Node) connects to [::1] first, where another
/// user's process may listen while the daemon listens on 127.0.0.1 alone, and the helper had
/// proven 127.0.0.1 and printed the token (review52 #2). Needs root, for a mount namespace of
/// its own with such a hosts file.
#[test]
fn the_mcp_headers_helper_proves_every_address_localhost_names() {
    // SAFETY: geteuid(2) cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root for a mount namespace");
        return;
    }
    let d = Daemon::start("[local]\nembedder = \"off\"\n");
    let port = d.addr.rsplit_once(':').unwrap().1.to_owned();
    // Another user's listener on [::1] at the daemon's port, which proves nothing.
    let ipv6 = std::net::TcpListener::bind(format!("[::1]:{port}")).ok();
    let url = format!("http://localhost:{port}/mcp");
    let hosts = d.dir.path().join("hosts");
    let with_hosts = |lines: &str| {
        std::fs::write(&hosts, lines).unwrap();
        let mut c = std::process::Command::new("unshare");
        c.args([
            "-m",
            "sh",
            "-c",
            "mount --bind \"$1\" /etc/hosts && exec \"$2\" hook claude-code --mcp-headers",
            "sh",
        ])
        .arg(&hosts)
        .arg(common::bin())
        .env("MNEME_CONFIG", d.config_path())
        .env("MNEME_LOG", "error")
        .envs(common::env_for(d.dir.path()))
        .env("CLAUDE_CODE_MCP_SERVER_URL", &url);
        c.output().unwrap()
    };
    let out = with_hosts("127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n");
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(!stdout(&out).contains(&d.token), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("names [::1]:{port} too")), "{out:?}");
    // Where the name gives 127.0.0.1 alone, that is where Claude Code connects: the token.
    let out = with_hosts("127.0.0.1 localhost\n");
    assert!(out.status.success(), "{out:?}");
    assert!(stdout(&out).contains(&format!("Bearer {}", d.token)), "{out:?}");
    drop(ipv6);
}

/// A token file replaced while the daemon runs (it reads it at start): doctor says to restart
/// the daemon so it reads it again, not to restart it "with this mneme version".
#[test]
fn doctor_says_a_token_file_replaced_since_the_start_wants_a_restart() {
    let d = Daemon::start("");
    std::fs::write(d.data().join("token"), "0123456789abcdef".repeat(4)).unwrap();
    let out = d.cli().arg("doctor").output().unwrap();
    let said = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("the token file changed since the daemon started"), "{said}");
    assert!(!said.contains("with this mneme version"), "{said}");
}

/// The CLI and the MCP headers helper read the token as the daemon does: a link, or a file of
/// another user's, is refused, and nothing is sent (review81 #1: another user who planted the
/// token and answered with its proof was sent the memories and the prompts). Here the daemon
/// holds the same token, so only the file's kind and owner refuse it. Owner part needs root.
#[test]
fn a_token_file_that_is_a_link_or_another_users_is_not_used() {
    let d = Daemon::start("[local]\nembedder = \"off\"\n");
    let token = d.data().join("token");
    let copy = d.dir.path().join("token-elsewhere");
    std::fs::copy(&token, &copy).unwrap();
    std::fs::remove_file(&token).unwrap();
    std::os::unix::fs::symlink(&copy, &token).unwrap();
    let out = d.cli().args(["retain", "a fact sent through a linked token"]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("it is a symbolic link"), "{said}");
    let out = d.cli().args(["hook", "claude-code", "--mcp-headers"]).output().unwrap();
    assert!(!out.status.success() && out.stdout.is_empty(), "{out:?}");
    std::fs::remove_file(&token).unwrap();
    std::fs::copy(&copy, &token).unwrap();
    if unsafe { libc::geteuid() } == 0 {
        std::os::unix::fs::chown(&token, Some(65534), Some(65534)).unwrap();
        let out = d.cli().args(["retain", "a fact sent through another user's token"]).output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(said.contains("belongs to another user"), "{said}");
        std::os::unix::fs::chown(&token, Some(0), Some(0)).unwrap();
    }
    let out = d.cli().args(["retain", "a fact sent with the user's own token"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
}

/// A config file named by MNEME_CONFIG that does not exist (a typo) is a problem to doctor, not
/// "ok: the defaults apply" (review69 #8).
#[test]
fn doctor_says_a_named_config_file_is_not_there() {
    let d = Daemon::start("");
    let missing = d.dir.path().join("confg.toml");
    let out = d.cli().arg("doctor").env("MNEME_CONFIG", &missing).output().unwrap();
    let said = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("the config file MNEME_CONFIG names") && said.contains("does not exist"), "{said}");
}

/// A problem in the file's `[storage]` while the daemon runs on its last good file: doctor says
/// the storage dir and the daemon could not be checked, not that the daemon does not run and to
/// start it (review69 #3: `mneme serve` refuses the same file), and status says it went on with
/// `[server]` alone.
#[test]
fn doctor_with_the_files_storage_unreadable_says_so() {
    let d = Daemon::start("");
    let config = std::fs::read_to_string(d.config_path()).unwrap();
    std::fs::write(d.config_path(), format!("{config}\n[storage]\ndri = \"/nowhere\"\n")).unwrap();
    let out = d.cli().arg("doctor").output().unwrap();
    let said = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("storage.dri"), "{said}");
    assert!(said.contains("the storage dir, its files and the daemon were not checked"), "{said}");
    assert!(!said.contains("start it") && !said.contains("not running"), "{said}");
    let out = d.cli().arg("status").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("going on with its [server] alone"), "{err}");
}

/// The CLI's errors speak of the command line, not the HTTP API: a blank text to retain, and an
/// unknown `--session` (it was told to "start it with POST /v1/sessions"); `clear` without a
/// scope names each way to give one.
#[test]
fn errors_speak_of_the_command_line() {
    let d = Daemon::start("");
    let work = tempfile::tempdir().unwrap();
    let out = d.cli().current_dir(work.path()).args(["retain", "  "]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to retain: the text is blank"), "{out:?}");
    for args in [
        &["retain", "--session", "nope", "a fact"][..],
        &["flush", "--session", "nope"],
        &["recall", "--session", "nope", "q"],
        &["clear", "--session", "nope", "--yes"],
    ] {
        let out = d.cli().current_dir(work.path()).args(args).output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains("no session \"nope\"") && !said.contains("POST /v1/sessions"), "{args:?}: {said}");
    }
    let out = d.cli().arg("clear").output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("--session") && said.contains("--all") && said.contains("--here"), "{said}");
    // A duration reads as the config reads one: "5M" (months to the parser) is ambiguous.
    let out = d.cli().args(["ui", "--no-open", "--valid-for", "5M"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("\"5M\" is ambiguous"), "{out:?}");
}

/// A storage dir others may read (one the user made, 0755, or a folder named by mistake) is
/// said to be so when the daemon starts, as `doctor` says it, and left as it is: a home folder
/// named as the storage dir must not be made 0700.
#[test]
fn a_storage_dir_others_may_read_is_said_and_left_as_it_is() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let log = dir.path().join("serve.log");
    let d = Daemon::start_logged(dir, "", &[("MNEME_LOG", "warn")], Some(&log));
    assert_eq!(std::fs::metadata(d.data()).unwrap().permissions().mode() & 0o777, 0o755);
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(said.contains("is readable by others (mode 755)"), "{said}");
    let out = d.cli().arg("doctor").output().unwrap();
    assert!(stdout(&out).contains("is readable by others (mode 755)"), "{}", stdout(&out));
}

/// mneme's files that others may read (a restore made with umask 022) are said by `doctor` and
/// restricted to 0600 at start, as the token is: the memories were readable by every user. A
/// token others could write is replaced by a new one (its value may be another user's choice,
/// and restricting it kept that user's token); the CLI reads the new one.
#[test]
fn files_others_may_read_are_made_private_and_a_token_others_could_write_is_replaced() {
    use std::os::unix::fs::PermissionsExt;
    let mut d = Daemon::start("[local]\nembedder = \"off\"\n");
    d.cli().args(["retain", "the staging password rotates on Mondays"]).assert().success();
    d.cli().arg("flush").assert().success();
    d.stop();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let set = |p: &std::path::Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    let (data, planted) = (d.data(), "planted-by-another-user-0123456789");
    for name in ["spool.db", "memories.db"] {
        set(&data.join(name), 0o644);
    }
    std::fs::write(data.join("token"), planted).unwrap();
    set(&data.join("token"), 0o666);
    let out = d.cli().arg("doctor").output().unwrap();
    let said = stdout(&out);
    assert!(said.contains("may be written by others (mode 666)") && said.contains("replaces it"), "{said}");
    assert!(said.contains("spool.db (mode 644)") && said.contains("memories.db (mode 644)"), "{said}");
    let log = d.dir.path().join("serve.log");
    let d = Daemon::start_logged(d.into_dir(), "", &[("MNEME_LOG", "warn")], Some(&log));
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("was writable by others (mode 666)"), "{logged}");
    assert!(logged.contains("restricted them to 0600"), "{logged}");
    assert_ne!(d.token, planted);
    for name in ["token", "spool.db", "memories.db"] {
        assert_eq!(mode(&data.join(name)), 0o600, "{name}");
    }
    let answer = d.http.get(d.url("/v1/status")).bearer_auth(planted).send();
    let answer = tokio::runtime::Runtime::new().unwrap().block_on(answer).unwrap();
    assert_eq!(answer.status(), 401);
    d.cli().arg("status").assert().success();
    // A store kept elsewhere through a link in the storage dir: the file it leads to, and the log
    // SQLite keeps beside it.
    let mut d = d;
    d.stop();
    let elsewhere = tempfile::tempdir().unwrap();
    for name in ["memories.db", "memories.db-wal", "memories.db-shm"] {
        if data.join(name).exists() {
            std::fs::rename(data.join(name), elsewhere.path().join(name)).unwrap();
            set(&elsewhere.path().join(name), 0o644);
        }
    }
    std::os::unix::fs::symlink(elsewhere.path().join("memories.db"), data.join("memories.db")).unwrap();
    let out = d.cli().arg("doctor").output().unwrap();
    assert!(stdout(&out).contains("memories.db (mode 644)"), "{}", stdout(&out));
    let d = Daemon::start_logged(d.into_dir(), "", &[("MNEME_LOG", "warn")], Some(&log));
    d.cli().args(["retain", "kept through a link"]).assert().success();
    d.cli().arg("flush").assert().success();
    for name in ["memories.db", "memories.db-wal"] {
        assert_eq!(mode(&elsewhere.path().join(name)), 0o600, "{name}");
    }
}

/// With its config file emptied or deleted, a daemon keeps running on what the file said; a
/// command then looks where the defaults say, and its "not running" said to start one (a
/// second daemon). It now says why it may not have found it (CLI review, M4); a first run,
/// whose config folder does not exist either, is told nothing more.
#[test]
fn a_command_without_its_config_file_says_why_it_may_not_find_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let run = |config: &std::path::Path| {
        let out = std::process::Command::new(common::bin())
            .arg("status")
            .env("MNEME_CONFIG", config)
            .env("MNEME_SERVER__LISTEN", free.to_string())
            .env("MNEME_STORAGE__DIR", dir.path().join("data"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(3));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "\n").unwrap();
    let said = run(&config);
    assert!(said.contains("is empty, so this command looked where the defaults say"), "{said}");
    std::fs::remove_file(&config).unwrap();
    let said = run(&config);
    assert!(said.contains("does not exist, so this command looked where the defaults say"), "{said}");
    let said = run(&dir.path().join("first-run").join("config.toml"));
    assert!(said.contains("not running") && !said.contains("defaults say"), "{said}");
}

/// A command of many requests has the daemon prove it holds the token before each one: a
/// daemon stopped during a long import (a restart, an upgrade) closed its connections, and the
/// next request went, with the token and 500 memories, to another user's program that took the
/// port in the gap (review50 #2).
#[tokio::test]
async fn a_long_command_has_the_daemon_prove_itself_before_each_request() {
    let mut d = Daemon::start("[local]\nembedder = \"off\"\n");
    let env: std::collections::HashMap<String, String> = common::env_for(d.dir.path()).into_iter().collect();
    let settings = mneme::config::load(&d.config_path(), &|k| env.get(k).cloned()).unwrap().settings;
    let client = mneme::cli::Client::connect(&settings).await.unwrap();
    for _ in 0..2 {
        let _: Value = client.get("/v1/status").await.unwrap();
    }
    d.stop();
    let squatter = std::net::TcpListener::bind(&d.addr).unwrap();
    let heard =
        squat(squatter, "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}".into());
    // (The client's kept-alive connection sees the daemon close it, as a long import's does
    // while it sends its next part.)
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let asked: Result<Value, _> = client.post("/v1/import", &serde_json::json!({"memories": []})).await;
    let Err(mneme::cli::CliError::NotRunning(why)) = asked else { panic!("{asked:?}") };
    assert!(why.contains("went away during this command") && why.contains("nothing more was sent"), "{why}");
    let heard = heard.lock().unwrap().clone();
    assert!(heard.contains("GET /v1/health?challenge="), "{why}: {heard}");
    assert!(!heard.contains(&d.token) && !heard.contains("/v1/import"), "{heard}");
}

/// A config file holding a secret (`hindsight.api_token`, `local.embedding_api_key`) that other
/// local users may read (0644, as umask 022 makes it) is said, by `config check`, `doctor` and at
/// the start: `doctor` called it valid and nothing warned (review50 #7).
#[test]
fn a_config_file_others_may_read_holding_a_secret_is_said() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "[hindsight]\napi_token = \"hs_secret_0123\"\n[local]\nembedder = \"off\"\n").unwrap();
    let run = |args: &[&str]| {
        assert_cmd::Command::new(common::bin())
            .args(args)
            .env("MNEME_CONFIG", &config)
            .env("MNEME_STORAGE__DIR", dir.path().join("data"))
            .output()
            .unwrap()
    };
    for (mode, said) in [(0o644, true), (0o600, false)] {
        std::fs::set_permissions(&config, std::fs::Permissions::from_mode(mode)).unwrap();
        let check = stdout(&run(&["config", "check"]));
        let doctor = stdout(&run(&["doctor"]));
        for out in [&check, &doctor] {
            let warned = out.contains("holds hindsight.api_token and others may read it (mode 644)");
            assert_eq!(warned, said, "{mode:o}: {out}");
            assert!(!out.contains("hs_secret_0123"), "{out}");
        }
    }
}

/// With standard error's reader gone (`mneme status 2>&1 | head -1` once `head` quit), a command
/// ends as it would have, with its exit code, and a hook still answers its agent: each panicked
/// on its message (exit 101; review109 #1).
#[tokio::test]
async fn a_closed_standard_error_changes_no_outcome() {
    let run = |d: &Daemon, args: &[&str], input: &str| {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let mut child = d
            .command()
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(writer)
            .spawn()
            .unwrap();
        use std::io::Write as _;
        let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
        let out = child.wait_with_output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let d = Daemon::start("[local]\nembedder = \"off\"\n");
    assert_eq!(run(&d, &["retain", "   "], "").0, Some(1), "a refused retain");
    let mut gone = Daemon::start("[local]\nembedder = \"off\"\n");
    gone.stop();
    assert_eq!(run(&gone, &["status"], "").0, Some(3), "no daemon");
    let prompt = serde_json::json!({"hook_event_name": "UserPromptSubmit", "session_id": "s", "cwd": "/p/closed",
        "prompt": "hello", "transcript_path": "/nonexistent"});
    let (code, out) = run(&gone, &["hook", "claude-code"], &prompt.to_string());
    assert_eq!((code, out.trim()), (Some(0), "{}"), "a hook answers its agent");
}

/// `local.path` naming a file mneme keeps for itself in its storage dir (the spool, the token,
/// the pidfile) is a bad value, said with its line by `config check`: the start blamed "another
/// process" (the daemon's own spool connection), and doctor's advice moved the spool aside, with
/// the retains waiting in it (review115 #2).
#[test]
fn a_store_path_naming_the_spool_or_the_token_is_refused_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let config = dir.path().join("config.toml");
    // Also where the path leads there only once folders are made (a storage dir not made yet, a
    // folder on the way with `..` after it), and the config file itself (review118 #1).
    let later = dir.path().join("not-made-yet");
    let own = "a file mneme keeps for itself";
    let mut cases: Vec<_> = ["spool.db", "token", "mneme.pid"].map(|f| (data.clone(), data.join(f), own)).into();
    cases.push((later.clone(), later.join("spool.db"), own));
    cases.push((data.clone(), data.join("sub/../spool.db"), own));
    cases.push((data.clone(), config.clone(), "names this config file"));
    for (storage, store, said_what) in cases {
        let text = format!(
            "[storage]\ndir = \"{}\"\n\n[local]\nembedder = \"off\"\npath = \"{}\"\n",
            storage.display(),
            store.display()
        );
        std::fs::write(&config, text).unwrap();
        let out = assert_cmd::Command::new(common::bin())
            .args(["config", "check"])
            .env("MNEME_CONFIG", &config)
            .env_remove("MNEME_STORAGE__DIR")
            .output()
            .unwrap();
        let said = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.status.code(), Some(2), "an invalid config: {}: {said}", store.display());
        assert!(said.contains("line 6: local.path") && said.contains(said_what), "{}: {said}", store.display());
    }
}
