//! `mneme hook claude-code --uninstall`: takes out of the project's `.claude/settings.json` and
//! `.mcp.json` what `--install --write` put there — mneme's hooks (this build's and any older
//! one's), its approval of the `mneme` MCP server, and the server itself — and nothing else.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::{json, Value};

use super::install::{command, is_ours, kind, read_json, refused, write_json, EVENTS};
use crate::cli::CliError;

/// `--uninstall`: removes mneme from the project's files, writing only a file that changes.
/// Both are read and changed before either is written: one refused leaves both as they were.
pub fn uninstall(config: Option<&Path>, as_json: bool) -> Result<ExitCode, CliError> {
    let hook = command(config, "hook claude-code");
    let settings_path = PathBuf::from(".claude/settings.json");
    let mcp_path = PathBuf::from(".mcp.json");
    let mut changed = Vec::new();
    if settings_path.exists() {
        let mut claude = read_json(&settings_path)?;
        let removed = remove_hooks(&mut claude, &hook).map_err(|why| refused(&settings_path, &why))?;
        let unapproved = unapprove_mcp_server(&mut claude).map_err(|why| refused(&settings_path, &why))?;
        if removed > 0 || unapproved {
            changed.push((settings_path, claude));
        }
    }
    if mcp_path.exists() {
        let mut mcp = read_json(&mcp_path)?;
        if remove_mcp_server(&mut mcp).map_err(|why| refused(&mcp_path, &why))? {
            changed.push((mcp_path, mcp));
        }
    }
    let mut written = Vec::new();
    for (path, v) in changed {
        write_json(&path, &v)?;
        written.push(path);
    }
    if as_json {
        println!("{}", json!({ "written": written }));
    } else if written.is_empty() {
        println!("No mneme hooks or MCP server in .claude/settings.json or .mcp.json here; nothing changed.");
    } else {
        let files: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
        println!("Took mneme out of {}.", files.join(" and "));
    }
    Ok(ExitCode::SUCCESS)
}

/// Takes every hook of ours (see [`is_ours`]) out of a settings object, and the groups, event
/// lists and `hooks` object left empty by that (only those: an empty one the user wrote stays).
/// Returns how many hooks were taken out. A key of the wrong shape is refused by name, leaving
/// `existing` as it was.
pub fn remove_hooks(existing: &mut Value, command: &str) -> Result<usize, String> {
    let mut changed = existing.clone();
    let root = changed.as_object_mut().ok_or("the file is not a JSON object")?;
    let Some(hooks) = root.get_mut("hooks") else { return Ok(0) };
    let shown = kind(hooks);
    let hooks = hooks.as_object_mut().ok_or_else(|| format!("\"hooks\" is {shown}, not an object"))?;
    let mut removed = 0;
    for event in EVENTS {
        let Some(list) = hooks.get_mut(event) else { continue };
        let shown = kind(list);
        let list = list.as_array_mut().ok_or_else(|| format!("\"hooks.{event}\" is {shown}, not a list"))?;
        let before = removed;
        list.retain_mut(|group| {
            let Some(group_hooks) = group.get_mut("hooks").and_then(Value::as_array_mut) else { return true };
            let had = group_hooks.len();
            group_hooks.retain(|h| !h["command"].as_str().is_some_and(|c| is_ours(c, command)));
            removed += had - group_hooks.len();
            had == group_hooks.len() || !group_hooks.is_empty()
        });
        if removed > before && list.is_empty() {
            hooks.remove(event);
        }
    }
    if removed > 0 && hooks.is_empty() {
        root.remove("hooks");
    }
    *existing = changed;
    Ok(removed)
}

/// Takes `mneme` out of the approved MCP servers (and the list, when that leaves it empty).
/// Returns whether it was there.
fn unapprove_mcp_server(existing: &mut Value) -> Result<bool, String> {
    let root = existing.as_object_mut().ok_or("the file is not a JSON object")?;
    let Some(enabled) = root.get_mut("enabledMcpjsonServers") else { return Ok(false) };
    let shown = kind(enabled);
    let enabled = enabled.as_array_mut().ok_or_else(|| format!("\"enabledMcpjsonServers\" is {shown}, not a list"))?;
    let before = enabled.len();
    enabled.retain(|s| s != "mneme");
    let was_there = enabled.len() < before;
    if was_there && enabled.is_empty() {
        root.remove("enabledMcpjsonServers");
    }
    Ok(was_there)
}

/// Takes mneme's entry out of `mcpServers` (and `mcpServers`, when that leaves it empty).
/// Returns whether it was there.
fn remove_mcp_server(mcp: &mut Value) -> Result<bool, String> {
    let root = mcp.as_object_mut().ok_or("the file is not a JSON object")?;
    let Some(servers) = root.get_mut("mcpServers") else { return Ok(false) };
    let shown = kind(servers);
    let servers = servers.as_object_mut().ok_or_else(|| format!("\"mcpServers\" is {shown}, not an object"))?;
    let was_there = servers.remove("mneme").is_some();
    if was_there && servers.is_empty() {
        root.remove("mcpServers");
    }
    Ok(was_there)
}

#[cfg(test)]
mod tests {
    use super::super::install::{approve_mcp_server, merge_hooks};
    use super::*;
    use crate::config::Settings;

    /// Installed over a user's settings and taken out again, the file is the user's as it was,
    /// other tools' hooks (also named `… hook claude-code`) and an older mneme path included.
    #[test]
    fn uninstalling_gives_back_the_users_settings() {
        let settings = Settings::default();
        let hook = |c: &str| json!({"type": "command", "command": c});
        let users = json!({
            "model": "opus",
            "hooks": {
                "Stop": [{"hooks": [hook("residue hook claude-code"), hook("/old/mneme --config /c.toml hook claude-code")]}],
                "PreToolUse": [{"matcher": "Bash", "hooks": [hook("guard")]}],
            },
            "enabledMcpjsonServers": ["github"],
        });
        let mut s = users.clone();
        merge_hooks(&mut s, "/opt/mneme hook claude-code", &settings).unwrap();
        approve_mcp_server(&mut s).unwrap();
        assert_eq!(remove_hooks(&mut s, "/opt/mneme hook claude-code").unwrap(), EVENTS.len());
        assert!(unapprove_mcp_server(&mut s).unwrap());
        let mut want = users.clone();
        want["hooks"]["Stop"][0]["hooks"] = json!([hook("residue hook claude-code")]);
        assert_eq!(s, want);
        // Again: nothing of ours left, nothing changed.
        assert_eq!(remove_hooks(&mut s, "/opt/mneme hook claude-code").unwrap(), 0);
        assert!(!unapprove_mcp_server(&mut s).unwrap());
        assert_eq!(s, want);
    }

    /// What only mneme put there goes with it; what the user left empty stays.
    #[test]
    fn containers_emptied_by_the_uninstall_go_and_the_users_empty_ones_stay() {
        let settings = Settings::default();
        let mut s = json!({"hooks": {"Notification": []}});
        merge_hooks(&mut s, "mneme hook claude-code", &settings).unwrap();
        approve_mcp_server(&mut s).unwrap();
        remove_hooks(&mut s, "mneme hook claude-code").unwrap();
        unapprove_mcp_server(&mut s).unwrap();
        assert_eq!(s, json!({"hooks": {"Notification": []}}));
        let mut only_ours = json!({});
        merge_hooks(&mut only_ours, "mneme hook claude-code", &settings).unwrap();
        remove_hooks(&mut only_ours, "mneme hook claude-code").unwrap();
        assert_eq!(only_ours, json!({}));
        let mut mcp = json!({"mcpServers": {"mneme": {"type": "http"}, "github": {"type": "http"}}});
        assert!(remove_mcp_server(&mut mcp).unwrap());
        assert_eq!(mcp, json!({"mcpServers": {"github": {"type": "http"}}}));
        let mut mcp = json!({"mcpServers": {"mneme": {"type": "http"}}});
        assert!(remove_mcp_server(&mut mcp).unwrap());
        assert_eq!(mcp, json!({}));
    }

    #[test]
    fn a_key_of_the_wrong_shape_is_refused_by_name_and_nothing_changes() {
        let mut s = json!({"hooks": {"Stop": [{"hooks": [{"command": "mneme hook claude-code"}]}], "SessionEnd": {}}});
        let before = s.clone();
        assert_eq!(
            remove_hooks(&mut s, "mneme hook claude-code").unwrap_err(),
            "\"hooks.SessionEnd\" is an object, not a list"
        );
        assert_eq!(s, before);
        let mut s = json!({"enabledMcpjsonServers": "mneme"});
        assert!(unapprove_mcp_server(&mut s).is_err());
        assert!(remove_mcp_server(&mut json!({"mcpServers": []})).is_err());
    }
}
