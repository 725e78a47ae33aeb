//! `mneme hook claude-code --install`: the hooks for `.claude/settings.json`, and mneme's MCP
//! server for `.mcp.json` so the session has the memory tools the instructions name. The MCP
//! server's headers (the bearer token, the project's directory) come from a `headersHelper`
//! command, so no secret is written into a file a repository might hold.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::{json, Value};

use super::event_timeout;
use crate::cli::commands::{load_client_settings, load_settings};
use crate::cli::CliError;
use crate::config::Settings;

/// Every event mneme handles, in the order `--install` writes them.
pub const EVENTS: [&str; 5] = ["SessionStart", "UserPromptSubmit", "PreCompact", "Stop", "SessionEnd"];

/// A word for `sh`: as it is when it is plain, else single-quoted.
fn shell_word(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@".contains(c)) {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The command line that runs this mneme with `args`, and with the config file `--install` read
/// (given by `--config` or `MNEME_CONFIG`): the agent runs its hooks without this shell's
/// environment, and hooks on the default config would find no daemon.
pub(super) fn command(config: Option<&Path>, args: &str) -> String {
    let exe = std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_else(|_| "mneme".into());
    let from_env = std::env::var_os("MNEME_CONFIG").filter(|v| !v.is_empty()).map(PathBuf::from);
    let config = config.map(Path::to_path_buf).or(from_env);
    let config =
        config.map(|c| format!(" --config {}", shell_word(&absolute(&c).display().to_string()))).unwrap_or_default();
    format!("{}{config} {args}", shell_word(&exe))
}

fn absolute(p: &Path) -> PathBuf {
    std::env::current_dir().map(|d| d.join(p)).unwrap_or_else(|_| p.to_owned())
}

/// The hooks configuration for `.claude/settings.json`, running `command` for every event with
/// Claude Code's `timeout` a little above the hook's own budget.
pub fn hooks_config(command: &str, settings: &Settings) -> Value {
    let mut hooks = serde_json::Map::new();
    for event in EVENTS {
        let entry =
            json!([{"hooks": [{"type": "command", "command": command, "timeout": event_timeout(event, settings)}]}]);
        hooks.insert(event.to_owned(), entry);
    }
    json!({ "hooks": hooks, "enabledMcpjsonServers": ["mneme"] })
}

/// Merges our hooks into an existing settings object, keeping everything else; idempotent. A key
/// of the wrong shape (`hooks` not an object, an event's hooks not a list …) is the user's to
/// mend: refused with its name, never replaced.
pub fn merge_hooks(existing: &mut Value, command: &str, settings: &Settings) -> Result<(), String> {
    let ours = hooks_config(command, settings);
    // Merged on a copy, so a refusal half-way leaves `existing` as it was.
    let mut merged = existing.clone();
    let root = merged.as_object_mut().ok_or("the file is not a JSON object")?;
    let hooks = root.entry("hooks").or_insert_with(|| json!({}));
    let shown = kind(hooks);
    let hooks = hooks.as_object_mut().ok_or_else(|| format!("\"hooks\" is {shown}, not an object"))?;
    for event in EVENTS {
        let list = hooks.entry(event).or_insert_with(|| json!([]));
        let shown = kind(list);
        let list = list.as_array_mut().ok_or_else(|| format!("\"hooks.{event}\" is {shown}, not a list"))?;
        let our_hook = &ours["hooks"][event][0]["hooks"][0];
        let mut present = false;
        list.retain_mut(|group| {
            // Under a matcher (`startup`) the hook would miss the event's other sources (a
            // SessionStart after a compaction brings its context): it goes in a group of its own.
            let matches_all = group.get("matcher").is_none_or(|m| m.as_str().is_some_and(|m| m.is_empty() || m == "*"));
            let Some(hooks) = group.get_mut("hooks").and_then(Value::as_array_mut) else { return true };
            let before = hooks.len();
            hooks.retain_mut(|h| {
                if !h["command"].as_str().is_some_and(|c| is_ours(c, command)) {
                    return true;
                }
                if present || !matches_all {
                    return false; // a second of ours (an older path): it would run the hook twice
                }
                present = true;
                *h = our_hook.clone(); // this mneme's path and config, and today's timeout
                true
            });
            hooks.len() == before || !hooks.is_empty()
        });
        if !present {
            list.extend(ours["hooks"][event].as_array().expect("array").iter().cloned());
        }
    }
    *existing = merged;
    Ok(())
}

/// Whether a hook's command is one `--install` wrote: this command, or an earlier one (another
/// path to mneme, another config). Kept as it was, an older entry ran the hook twice (or failed
/// each time, its path gone), and its timeout stayed whatever `recall.timeout` was then. Other
/// tools' hooks end in `hook claude-code` too (`context-mode hook claude-code`): only a command
/// whose program is named `mneme` (or as this one is) is taken for ours.
pub(super) fn is_ours(hook_command: &str, command: &str) -> bool {
    let program = |c: &str| first_shell_word(c).map(|w| w.rsplit('/').next().unwrap_or_default().to_owned());
    hook_command == command
        || (hook_command.trim_end().ends_with(" hook claude-code")
            && program(hook_command).is_some_and(|p| p == "mneme" || Some(&p) == program(command).as_ref()))
}

/// The first word of a command line as `sh` reads it, for the words [`shell_word`] writes: plain,
/// or single-quoted pieces (`'it'\''s'`). `None` for an empty line.
fn first_shell_word(line: &str) -> Option<String> {
    let mut word = String::new();
    let mut chars = line.trim_start().chars();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match c {
            '\'' => quoted = !quoted,
            '\\' if !quoted => word.extend(chars.next()),
            c if c.is_whitespace() && !quoted => break,
            c => word.push(c),
        }
    }
    (!word.is_empty()).then_some(word)
}

/// Adds the `mneme` MCP server (from `.mcp.json`) to the settings' approved servers, keeping the
/// others; idempotent; refuses a list of the wrong shape as [`merge_hooks`] does.
pub fn approve_mcp_server(existing: &mut Value) -> Result<(), String> {
    let root = existing.as_object_mut().ok_or("the file is not a JSON object")?;
    let enabled = root.entry("enabledMcpjsonServers").or_insert_with(|| json!([]));
    let shown = kind(enabled);
    let enabled = enabled.as_array_mut().ok_or_else(|| format!("\"enabledMcpjsonServers\" is {shown}, not a list"))?;
    if !enabled.iter().any(|s| s == "mneme") {
        enabled.push(json!("mneme"));
    }
    Ok(())
}

/// What a JSON value is, for a message.
pub(super) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// A file's JSON the user must mend before `--install --write` touches it.
pub(super) fn refused(path: &Path, why: &str) -> CliError {
    CliError::Other(format!(
        "{}: {why}; not touching it (mend it, or run --install without --write to see what to add)",
        path.display()
    ))
}

/// mneme's MCP server for `.mcp.json`.
fn mcp_server(settings: &Settings, headers_helper: &str) -> Value {
    // A `SocketAddr` writes an IPv6 host in brackets, as a URL needs it.
    let addr = settings.server.local_addr();
    json!({"type": "http", "url": format!("http://{addr}/mcp"), "headersHelper": headers_helper})
}

/// What `--install` does.
#[derive(Debug, Clone, Copy)]
pub struct Install {
    /// Merge into the project's files (else print).
    pub write: bool,
    /// Also mneme's MCP server (the memory tools).
    pub mcp: bool,
}

/// `--install`: print the configuration, or merge it into `.claude/settings.json` and `.mcp.json`
/// with `--write`.
pub fn install(config: Option<&Path>, what: Install, as_json: bool) -> Result<ExitCode, CliError> {
    let settings = load_settings(config)?.settings;
    let hook = command(config, "hook claude-code");
    let helper = command(config, "hook claude-code --mcp-headers");
    let mut hooks = hooks_config(&hook, &settings);
    if !what.mcp {
        hooks.as_object_mut().expect("object").remove("enabledMcpjsonServers");
    }
    // Port 0 is the system's choice at each start: a URL written now names no daemon later.
    if what.mcp && settings.server.listen.port() == 0 {
        return Err(CliError::Other(
            "server.listen has port 0 (a port the system picks at each start): the MCP server's URL in .mcp.json would name no daemon; give server.listen a fixed port, or install with --no-mcp".into(),
        ));
    }
    let server = json!({"mcpServers": {"mneme": mcp_server(&settings, &helper)}});
    if !what.write {
        println!("{}", serde_json::to_string_pretty(&hooks).expect("json"));
        if what.mcp {
            crate::say!(
                "Put the above in .claude/settings.json; for the memory tools, also this in .mcp.json:\n{}",
                serde_json::to_string_pretty(&server).expect("json")
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    // Both files are read and merged before either is written: one refused leaves both as they were.
    let settings_path = PathBuf::from(".claude/settings.json");
    let mut claude = read_json(&settings_path)?;
    merge_hooks(&mut claude, &hook, &settings).map_err(|why| refused(&settings_path, &why))?;
    let mut files = vec![(settings_path, claude)];
    if what.mcp {
        approve_mcp_server(&mut files[0].1).map_err(|why| refused(&files[0].0, &why))?;
        let mcp_path = PathBuf::from(".mcp.json");
        let mut mcp = read_json(&mcp_path)?;
        add_mcp_server(&mut mcp, &server["mcpServers"]["mneme"]).map_err(|why| refused(&mcp_path, &why))?;
        files.push((mcp_path, mcp));
    }
    std::fs::create_dir_all(".claude").map_err(|e| CliError::Other(format!("cannot create .claude: {e}")))?;
    let mut written = Vec::new();
    for (path, v) in files {
        write_json(&path, &v)?;
        written.push(path);
    }
    if as_json {
        println!("{}", json!({"written": written, "events": EVENTS}));
    } else {
        let files: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
        println!("Wrote the mneme hooks ({}) into {}.", EVENTS.join(", "), files.join(" and "));
    }
    Ok(ExitCode::SUCCESS)
}

/// Puts mneme's entry under `mcpServers` (replacing an older one of ours), keeping the others.
fn add_mcp_server(mcp: &mut Value, ours: &Value) -> Result<(), String> {
    let root = mcp.as_object_mut().ok_or("the file is not a JSON object")?;
    let servers = root.entry("mcpServers").or_insert_with(|| json!({}));
    let shown = kind(servers);
    let servers = servers.as_object_mut().ok_or_else(|| format!("\"mcpServers\" is {shown}, not an object"))?;
    servers.insert("mneme".to_owned(), ours.clone());
    Ok(())
}

/// `--mcp-headers`: Claude Code's `headersHelper` for the MCP server: the bearer token and the
/// project's directory (`CLAUDE_PROJECT_DIR`, else the current one), as a JSON object.
pub async fn mcp_headers(config: Option<&Path>) -> Result<ExitCode, CliError> {
    // As the hooks: a config the daemon refused leaves it running on its last good one, and a
    // helper that gave up would take mneme's tools away from the agent.
    let settings = load_client_settings(config)?.settings;
    let token_path = settings.token_path();
    // Read as the daemon reads it: not a link, nor another user's file (review81 #1).
    let token = crate::files::read_token(&token_path)
        .map_err(|problem| CliError::Other(problem.to_string()))?
        .ok_or_else(|| {
            let what = if token_path.exists() { "the token file is empty at" } else { "there is no token at" };
            CliError::Other(format!(
                "{what} {}: is mneme running? (it writes its token when it starts)",
                token_path.display()
            ))
        })?;
    // Claude Code sends these headers to the server's URL, which it names to the helper: only a
    // daemon there that proves it holds the token is given it. What answers on that port may be
    // another user's process, which took it while the daemon was down, or since the daemon
    // moved to another port and `.mcp.json` still names the old one; nothing answering may be
    // such a process a moment later. (Given the headers whatever answered but a daemon of
    // another token, Claude Code sent the token to a program that closed the connection.)
    let cwd = std::env::var("CLAUDE_PROJECT_DIR")
        .ok()
        .filter(|d| !d.is_empty())
        .or_else(crate::cli::working_folder)
        .unwrap_or_else(|| "/".into());
    match mcp_server_url(Path::new(&cwd)) {
        // Every address a name gives: Claude Code may connect to any of them (Node tries ::1
        // first for `localhost`, where another user's process may listen while the daemon
        // listens on 127.0.0.1 alone).
        Some(url) => {
            let addrs = loopback_addrs(&url)?;
            let several = addrs.len() > 1;
            for addr in addrs {
                let proven = super::super::client::Client::connect_at(&settings, addr.clone()).await;
                proven.map_err(|e| match several {
                    true => e.with_note(&format!(
                        "; {} names {addr} too, where Claude Code may connect: write the daemon's address in .mcp.json (`mneme hook claude-code --install` does)",
                        mneme_core::text::quoted_unless_private(&url)
                    )),
                    false => e,
                })?;
            }
        }
        None => drop(super::super::client::Client::connect(&settings).await?),
    }
    // A path that is not ASCII goes percent-encoded: a fetch client (Claude Code's, Node's)
    // sends a header's text as Latin-1, and cannot send one beyond U+00FF at all.
    let cwd = crate::daemon::path_for_header(&cwd);
    println!("{}", json!({"Authorization": format!("Bearer {}", token.trim()), "X-Mneme-Cwd": cwd}));
    Ok(ExitCode::SUCCESS)
}

/// The most of a project's `.mcp.json` the headers helper reads (Claude Code's are a few
/// hundred bytes).
const MCP_JSON_MAX: u64 = 1024 * 1024;

/// The URL Claude Code sends the headers to: the one it names to the helper, or (a Claude Code
/// that names none) the one the project's `.mcp.json` gives mneme's server.
fn mcp_server_url(project: &Path) -> Option<String> {
    if let Some(url) = std::env::var("CLAUDE_CODE_MCP_SERVER_URL").ok().filter(|u| !u.trim().is_empty()) {
        return Some(url);
    }
    // Read as a regular file of at most 1 MiB: in a shared folder another user's `.mcp.json`
    // (a link to /dev/zero, a FIFO) took the helper to gigabytes, or hung it. (Whatever URL it
    // names, only a daemon that proves the token at that address is given it.)
    let text = crate::files::read_regular_bounded(&project.join(".mcp.json"), MCP_JSON_MAX).ok()?;
    let servers: Value = serde_json::from_str(&text).ok()?;
    servers["mcpServers"]["mneme"]["url"].as_str().map(str::to_owned)
}

/// The `host:port`s of the MCP server's URL Claude Code names, when they are this machine's:
/// the token never goes to another. A name (`localhost`) gives each address it resolves to.
fn loopback_addrs(url: &str) -> Result<Vec<String>, CliError> {
    let refused = |why: &str| {
        CliError::Other(format!(
            "the MCP server's URL {} {why}: mneme's token goes only to a daemon on this machine",
            mneme_core::text::quoted_unless_private(url)
        ))
    };
    let parsed = reqwest::Url::parse(url.trim()).map_err(|e| refused(&format!("is not a URL ({e})")))?;
    if parsed.scheme() != "http" {
        return Err(refused("is not http://"));
    }
    let loopback = match parsed.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        None => false,
    };
    let port =
        parsed.port_or_known_default().filter(|_| loopback).ok_or_else(|| refused("names no loopback address"))?;
    Ok(match parsed.host() {
        Some(url::Host::Ipv6(ip)) => vec![format!("[{ip}]:{port}")],
        Some(url::Host::Domain(name)) => {
            use std::net::ToSocketAddrs;
            let resolved: Vec<std::net::SocketAddr> = (name, port)
                .to_socket_addrs()
                .map_err(|e| refused(&format!("names a host that is not found ({e})")))?
                .collect();
            if resolved.is_empty() || resolved.iter().any(|a| !a.ip().is_loopback()) {
                return Err(refused("names a host that is not this machine's loopback alone"));
            }
            let mut addrs: Vec<String> = resolved.iter().map(std::net::SocketAddr::to_string).collect();
            addrs.sort_unstable();
            addrs.dedup();
            addrs
        }
        _ => vec![format!("{}:{port}", parsed.host_str().unwrap_or("127.0.0.1"))],
    })
}

pub(super) fn read_json(path: &Path) -> Result<Value, CliError> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| refused(path, &format!("not valid JSON ({e})"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(json!({})),
        // Not UTF-8, unreadable: what cannot be read is never replaced.
        Err(e) => Err(refused(path, &format!("cannot be read ({e})"))),
    }
}

/// Replaces the file at `path` (through a temporary file beside it) with `v`. A symlink is
/// followed, so the file it names (a dotfiles repository's) is the one changed, and the file
/// keeps its permissions (a settings file holding keys is often 0600).
pub(super) fn write_json(path: &Path, v: &Value) -> Result<(), CliError> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let failed = |e: std::io::Error| CliError::Other(format!("cannot write {}: {e}", path.display()));
    let target = match std::fs::symlink_metadata(path) {
        // A link to a file not made yet (a dotfiles repository's) names where it is to be.
        Ok(m) if m.file_type().is_symlink() => std::fs::canonicalize(path)
            .or_else(|_| {
                let to = std::fs::read_link(path)?;
                Ok::<_, std::io::Error>(path.parent().map_or(to.clone(), |dir| dir.join(&to)))
            })
            .map_err(failed)?,
        _ => path.to_path_buf(),
    };
    // An existing file's mode is kept; a new one is made as any file is (0666 less the umask).
    let kept_mode = std::fs::metadata(&target).ok().map(|m| m.permissions().mode() & 0o7777);
    let tmp = target.with_extension("json.tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(kept_mode.unwrap_or(0o666))
        .open(&tmp)
        .map_err(failed)?;
    if let Some(mode) = kept_mode {
        file.set_permissions(std::fs::Permissions::from_mode(mode)).map_err(failed)?;
    }
    file.write_all((serde_json::to_string_pretty(v).expect("json") + "\n").as_bytes())
        .and_then(|_| file.sync_all())
        .and_then(|_| std::fs::rename(&tmp, &target))
        .map_err(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mcp_url_is_one_a_client_can_open() {
        let mut settings = Settings::default();
        for (listen, url) in [
            ("127.0.0.1:6366", "http://127.0.0.1:6366/mcp"),
            ("[::1]:6366", "http://[::1]:6366/mcp"),
            ("0.0.0.0:7000", "http://127.0.0.1:7000/mcp"),
        ] {
            settings.server.listen = listen.parse().unwrap();
            assert_eq!(mcp_server(&settings, "h")["url"], url);
        }
    }

    #[test]
    fn merging_keeps_other_settings_and_is_idempotent() {
        let settings = Settings::default();
        let mut s = json!({"model": "opus", "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "other"}]}]}});
        for _ in 0..2 {
            merge_hooks(&mut s, "mneme hook claude-code", &settings).unwrap();
            approve_mcp_server(&mut s).unwrap();
        }
        assert_eq!(s["model"], "opus");
        assert_eq!(s["hooks"]["Stop"].as_array().unwrap().len(), 2);
        assert_eq!(s["enabledMcpjsonServers"], json!(["mneme"]));
        for e in EVENTS {
            let ours = &s["hooks"][e][s["hooks"][e].as_array().unwrap().len() - 1]["hooks"][0];
            assert_eq!(ours["command"], "mneme hook claude-code");
            // The recalling hooks (SessionStart after a compaction brings its context).
            let want = if e == "UserPromptSubmit" || e == "SessionStart" { 11 } else { 6 };
            assert_eq!(ours["timeout"], want, "{e}");
        }
    }

    #[test]
    fn installing_again_updates_our_entry_and_drops_older_ones() {
        let mut slow = Settings::default();
        slow.recall.timeout = std::time::Duration::from_secs(20);
        let other = json!({"type": "command", "command": "other"});
        let old = |path: &str| json!({"type": "command", "command": format!("{path} hook claude-code"), "timeout": 11});
        let mut s = json!({"hooks": {"UserPromptSubmit": [
            {"hooks": [other.clone(), old("/nix/store/aaa-mneme/bin/mneme")]},
            {"hooks": [old("/usr/local/bin/mneme --config /x.toml")]},
        ]}});
        merge_hooks(&mut s, "/opt/mneme hook claude-code", &slow).unwrap();
        let groups = s["hooks"]["UserPromptSubmit"].as_array().unwrap();
        assert_eq!(groups.len(), 1, "{groups:?}");
        let hooks = groups[0]["hooks"].as_array().unwrap();
        assert_eq!(hooks[0], other);
        assert_eq!(hooks[1]["command"], "/opt/mneme hook claude-code");
        assert_eq!(hooks[1]["timeout"], event_timeout("UserPromptSubmit", &slow));
        assert_eq!(hooks.len(), 2);
        assert_eq!(s["hooks"]["Stop"].as_array().unwrap().len(), 1);
    }

    /// Other tools' hooks are called `… hook claude-code` too: they stay, and so do their
    /// groups; an older mneme hook under a matcher moves to a group of its own (under `startup`
    /// it never ran after a compaction).
    #[test]
    fn other_tools_hooks_stay_and_ours_leaves_a_matcher() {
        let settings = Settings::default();
        let hook = |c: &str| json!({"type": "command", "command": c});
        let mut s = json!({"hooks": {
            "SessionStart": [{"matcher": "startup", "hooks": [hook("context-mode hook claude-code"), hook("'/old dir/mneme' hook claude-code")]}],
            "Stop": [{"hooks": [hook("residue hook claude-code"), hook("npx lemory hook claude-code")]}],
        }});
        for _ in 0..2 {
            merge_hooks(&mut s, "/opt/mneme hook claude-code", &settings).unwrap();
        }
        let start = s["hooks"]["SessionStart"].as_array().unwrap();
        assert_eq!(start.len(), 2, "{start:?}");
        assert_eq!(start[0], json!({"matcher": "startup", "hooks": [hook("context-mode hook claude-code")]}));
        assert!(start[1].get("matcher").is_none());
        assert_eq!(start[1]["hooks"][0]["command"], "/opt/mneme hook claude-code");
        let stop = s["hooks"]["Stop"].as_array().unwrap();
        assert_eq!(stop.len(), 2, "{stop:?}");
        assert_eq!(stop[0]["hooks"], json!([hook("residue hook claude-code"), hook("npx lemory hook claude-code")]));
        assert_eq!(stop[1]["hooks"][0]["command"], "/opt/mneme hook claude-code");
        // A renamed build is known by its own name; a quoted path by its last step.
        assert!(is_ours("/b/mneme-dev --config /c.toml hook claude-code", "/a/mneme-dev hook claude-code"));
        assert!(is_ours(r"'/it'\''s/mneme' hook claude-code", "/a/mneme hook claude-code"));
        assert!(!is_ours("mnemex hook claude-code", "/a/mneme hook claude-code"));
        assert!(!is_ours("/usr/bin/mneme hook claude-code --debug", "/a/mneme hook claude-code"));
    }

    #[test]
    fn a_key_of_the_wrong_shape_is_refused_by_name() {
        let settings = Settings::default();
        let refused = |mut v: Value, merge: &dyn Fn(&mut Value) -> Result<(), String>| {
            let before = v.clone();
            let why = merge(&mut v).unwrap_err();
            assert_eq!(v, before, "left as it was");
            why
        };
        let hooks = |v: &mut Value| merge_hooks(v, "m", &settings);
        assert_eq!(refused(json!([1]), &hooks), "the file is not a JSON object");
        assert_eq!(refused(json!({"hooks": []}), &hooks), "\"hooks\" is a list, not an object");
        let late = json!({"hooks": {"PreCompact": {"x": 1}}}); // after two events are merged
        assert_eq!(refused(late, &hooks), "\"hooks.PreCompact\" is an object, not a list");
        let approvals = json!({"enabledMcpjsonServers": "mneme"});
        assert_eq!(refused(approvals, &approve_mcp_server), "\"enabledMcpjsonServers\" is a string, not a list");
        let servers = |v: &mut Value| add_mcp_server(v, &json!({}));
        assert_eq!(refused(json!({"mcpServers": null}), &servers), "\"mcpServers\" is null, not an object");
    }

    /// A settings file keeps its permissions (one holding keys is often 0600), and one that is
    /// a symlink (to a dotfiles repository) stays one: the file it names is changed.
    #[test]
    fn writing_keeps_the_files_mode_and_follows_a_symlink() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let private = dir.path().join("settings.json");
        std::fs::write(&private, r#"{"env":{"K":"secret"}}"#).unwrap();
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap();
        write_json(&private, &json!({"env": {"K": "secret"}, "hooks": {}})).unwrap();
        assert_eq!(std::fs::metadata(&private).unwrap().permissions().mode() & 0o777, 0o600);
        let real = dir.path().join("real.json");
        std::fs::write(&real, r#"{"model":"opus"}"#).unwrap();
        let link = dir.path().join("linked.json");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        write_json(&link, &json!({"model": "opus", "hooks": {}})).unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert!(std::fs::read_to_string(&real).unwrap().contains("hooks"));
        // A link to a file not made yet: it is made there.
        let later = dir.path().join("later.json");
        let dangling = dir.path().join("dangling.json");
        std::os::unix::fs::symlink(&later, &dangling).unwrap();
        write_json(&dangling, &json!({"hooks": {}})).unwrap();
        assert!(std::fs::read_to_string(&later).unwrap().contains("hooks"));
    }

    /// A user's settings keep the order they were written in (serde_json's `preserve_order`):
    /// a merge adds its keys after theirs instead of sorting the whole file.
    #[test]
    fn merging_keeps_the_order_of_the_users_keys() {
        let settings = Settings::default();
        let text = r#"{"permissions": {"deny": [], "allow": []}, "model": "opus", "env": {"Z": "1", "A": "2"}}"#;
        let mut s: Value = serde_json::from_str(text).unwrap();
        merge_hooks(&mut s, "mneme hook claude-code", &settings).unwrap();
        approve_mcp_server(&mut s).unwrap();
        let keys: Vec<&str> = s.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["permissions", "model", "env", "hooks", "enabledMcpjsonServers"]);
        let written = serde_json::to_string(&s).unwrap();
        assert!(written.starts_with(r#"{"permissions":{"deny":[],"allow":[]},"model":"opus","env":{"Z":"1","A":"2"}"#));
    }

    #[test]
    fn paths_are_quoted_for_the_shell() {
        assert_eq!(shell_word("/usr/local/bin/mneme"), "/usr/local/bin/mneme");
        assert_eq!(shell_word("/home/me/My Tools/mneme"), "'/home/me/My Tools/mneme'");
        assert_eq!(shell_word("/it's/mneme"), r"'/it'\''s/mneme'");
    }
}
