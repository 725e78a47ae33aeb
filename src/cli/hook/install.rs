//! `mneme hook claude-code --install`: the hooks for `.claude/settings.json`, and mneme's MCP
//! server for `.mcp.json` so the session has the memory tools the instructions name. The MCP
//! server's headers (the bearer token, the project's directory) come from a `headersHelper`
//! command, so no secret is written into a file a repository might hold.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::{json, Value};

use super::event_timeout;
use crate::cli::commands::load_settings;
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

/// The command line that runs this mneme with `args` (and the config file given to `--install`).
fn command(config: Option<&Path>, args: &str) -> String {
    let exe = std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_else(|_| "mneme".into());
    let config =
        config.map(|c| format!(" --config {}", shell_word(&absolute(c).display().to_string()))).unwrap_or_default();
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

/// Merges our hooks (and the approval of the `mneme` MCP server) into an existing settings
/// object, keeping everything else; idempotent.
pub fn merge_hooks(existing: &mut Value, command: &str, settings: &Settings) {
    if !existing.is_object() {
        *existing = json!({});
    }
    let ours = hooks_config(command, settings);
    let root = existing.as_object_mut().expect("object");
    let hooks = root.entry("hooks").or_insert_with(|| json!({}));
    if !hooks.is_object() {
        *hooks = json!({});
    }
    for event in EVENTS {
        let list = hooks.as_object_mut().expect("object").entry(event).or_insert_with(|| json!([]));
        if !list.is_array() {
            *list = json!([]);
        }
        let present = list.as_array().expect("array").iter().any(|group| {
            group["hooks"].as_array().is_some_and(|hs| hs.iter().any(|h| h["command"].as_str() == Some(command)))
        });
        if !present {
            list.as_array_mut().expect("array").extend(ours["hooks"][event].as_array().expect("array").iter().cloned());
        }
    }
    let enabled = root.entry("enabledMcpjsonServers").or_insert_with(|| json!([]));
    if !enabled.is_array() {
        *enabled = json!([]);
    }
    let enabled = enabled.as_array_mut().expect("array");
    if !enabled.iter().any(|s| s == "mneme") {
        enabled.push(json!("mneme"));
    }
}

/// mneme's MCP server for `.mcp.json`.
fn mcp_server(settings: &Settings, headers_helper: &str) -> Value {
    let listen = settings.server.listen;
    let host = if listen.ip().is_unspecified() { "127.0.0.1".to_owned() } else { listen.ip().to_string() };
    json!({"type": "http", "url": format!("http://{host}:{}/mcp", listen.port()), "headersHelper": headers_helper})
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
    let server = json!({"mcpServers": {"mneme": mcp_server(&settings, &helper)}});
    if !what.write {
        println!("{}", serde_json::to_string_pretty(&hooks).expect("json"));
        if what.mcp {
            eprintln!(
                "Put the above in .claude/settings.json; for the memory tools, also this in .mcp.json:\n{}",
                serde_json::to_string_pretty(&server).expect("json")
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let settings_path = PathBuf::from(".claude/settings.json");
    let mut claude = read_json(&settings_path)?;
    merge_hooks(&mut claude, &hook, &settings);
    if !what.mcp {
        claude.as_object_mut().expect("object").remove("enabledMcpjsonServers");
    }
    std::fs::create_dir_all(".claude").map_err(|e| CliError::Other(format!("cannot create .claude: {e}")))?;
    write_json(&settings_path, &claude)?;
    let mut written = vec![settings_path];
    if what.mcp {
        let mcp_path = PathBuf::from(".mcp.json");
        let mut mcp = read_json(&mcp_path)?;
        let root = mcp.as_object_mut().expect("object");
        let servers = root.entry("mcpServers").or_insert_with(|| json!({}));
        if !servers.is_object() {
            *servers = json!({});
        }
        servers["mneme"] = server["mcpServers"]["mneme"].clone();
        write_json(&mcp_path, &mcp)?;
        written.push(mcp_path);
    }
    if as_json {
        println!("{}", json!({"written": written, "events": EVENTS}));
    } else {
        let files: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
        println!("Wrote the mneme hooks ({}) into {}.", EVENTS.join(", "), files.join(" and "));
    }
    Ok(ExitCode::SUCCESS)
}

/// `--mcp-headers`: Claude Code's `headersHelper` for the MCP server: the bearer token and the
/// project's directory (`CLAUDE_PROJECT_DIR`, else the current one), as a JSON object.
pub fn mcp_headers(config: Option<&Path>) -> Result<ExitCode, CliError> {
    let settings = load_settings(config)?.settings;
    let token_path = settings.token_path();
    let token = std::fs::read_to_string(&token_path)
        .map_err(|e| CliError::Other(format!("cannot read the token {}: {e}", token_path.display())))?;
    let cwd = std::env::var("CLAUDE_PROJECT_DIR")
        .ok()
        .filter(|d| !d.is_empty())
        .or_else(|| std::env::current_dir().ok().map(|d| d.display().to_string()))
        .unwrap_or_else(|| "/".into());
    println!("{}", json!({"Authorization": format!("Bearer {}", token.trim()), "X-Mneme-Cwd": cwd}));
    Ok(ExitCode::SUCCESS)
}

fn read_json(path: &Path) -> Result<Value, CliError> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let v: Value = serde_json::from_str(&text)
                .map_err(|e| CliError::Other(format!("{} is not valid JSON ({e}); not touching it", path.display())))?;
            Ok(if v.is_object() { v } else { json!({}) })
        }
        Err(_) => Ok(json!({})),
    }
}

fn write_json(path: &Path, v: &Value) -> Result<(), CliError> {
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(v).expect("json") + "\n")
        .and_then(|_| std::fs::rename(&tmp, path))
        .map_err(|e| CliError::Other(format!("cannot write {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merging_keeps_other_settings_and_is_idempotent() {
        let settings = Settings::default();
        let mut s = json!({"model": "opus", "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "other"}]}]}});
        merge_hooks(&mut s, "mneme hook claude-code", &settings);
        merge_hooks(&mut s, "mneme hook claude-code", &settings);
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
    fn paths_are_quoted_for_the_shell() {
        assert_eq!(shell_word("/usr/local/bin/mneme"), "/usr/local/bin/mneme");
        assert_eq!(shell_word("/home/me/My Tools/mneme"), "'/home/me/My Tools/mneme'");
        assert_eq!(shell_word("/it's/mneme"), r"'/it'\''s/mneme'");
    }
}
