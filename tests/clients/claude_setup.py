#!/usr/bin/env python3
"""Prepares a throw-away HOME and project for running the real Claude Code against the stub.

  claude_setup.py --home HOME --project DIR [--tap DIR] [--tap-extra]
                  [--mcp-url URL --mcp-token TOKEN] [--api-key KEY]

* HOME/.claude.json: onboarding done, the project trusted, the dummy API key approved (so the
  interactive UI asks nothing), auto-updates off.
* HOME/.claude/settings.json: telemetry/updates off through `env` too (belt and braces).
* With --tap: wraps every `mneme hook claude-code` command found in DIR/.claude/settings.json
  (written before by `mneme hook claude-code --install --write`) in hook_tap.py, which records
  each event's stdin and the transcript as it was at that moment into the tap DIR.
  With --tap-extra also adds tap-only hooks (no real hook behind them) for PostCompact,
  StopFailure, SubagentStop, Notification and PostToolUse, to see those payloads too.
* With --mcp-url: a project .mcp.json with the mneme MCP server (HTTP transport, bearer header)
  and enableAllProjectMcpServers in the project's settings so nobody is asked.
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TAP_ONLY = ["PostCompact", "StopFailure", "SubagentStop", "Notification", "PostToolUse"]


def load(path, default):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def save(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--home", required=True)
    p.add_argument("--project", required=True)
    p.add_argument("--tap")
    p.add_argument("--tap-extra", action="store_true")
    p.add_argument("--watch-ms", type=int, default=0, help="hook_tap --watch-ms: follow the transcript after each hook")
    p.add_argument("--python", default="/usr/bin/python3")
    p.add_argument("--mcp-url")
    p.add_argument("--mcp-token")
    p.add_argument("--mcp-header", action="append", default=[], help="extra NAME=VALUE header for the MCP server (Claude Code expands ${VAR} in it)")
    p.add_argument("--api-key", default=os.environ.get("ANTHROPIC_API_KEY", "sk-ant-api03-stub-0000000000000000000000"))
    a = p.parse_args()
    project = os.path.realpath(a.project)

    cj_path = os.path.join(a.home, ".claude.json")
    cj = load(cj_path, {})
    cj.update({
        "hasCompletedOnboarding": True,
        "lastOnboardingVersion": "2.1.332",
        "theme": "dark",
        "autoUpdates": False,
        "bypassPermissionsModeAccepted": True,
        "skipDangerousModePermissionPrompt": True,
        "hasAcknowledgedCostThreshold": True,
        "hasIdeOnboardingBeenShown": {"vscode": True},
        "shiftEnterKeyBindingInstalled": True,
        "hasSeenTasksHint": True,
        "officialMarketplaceAutoInstallAttempted": True,
        "officialMarketplaceAutoInstalled": True,
        "customApiKeyResponses": {"approved": [a.api_key[-20:]], "rejected": []},
    })
    projects = cj.setdefault("projects", {})
    proj = projects.setdefault(project, {})
    proj.update({"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True,
                 "projectOnboardingSeenCount": 1, "allowedTools": []})
    save(cj_path, cj)

    us_path = os.path.join(a.home, ".claude", "settings.json")
    us = load(us_path, {})
    us.setdefault("env", {}).update({
        "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    })
    us["skipDangerousModePermissionPrompt"] = True
    save(us_path, us)

    ps_path = os.path.join(project, ".claude", "settings.json")
    ps = load(ps_path, {})
    if a.tap:
        tap = [a.python, os.path.join(HERE, "hook_tap.py"), "--dir", os.path.realpath(a.tap)] + (["--watch-ms", str(a.watch_ms)] if a.watch_ms else []) + ["--"]
        for event, groups in (ps.get("hooks") or {}).items():
            for g in groups:
                for h in g.get("hooks", []):
                    cmd = h.get("command", "")
                    if "hook claude-code" in cmd and "hook_tap.py" not in cmd:
                        h["command"] = " ".join(tap) + " " + cmd
        if a.tap_extra:
            hooks = ps.setdefault("hooks", {})
            for event in TAP_ONLY:
                hooks.setdefault(event, []).append(
                    {"hooks": [{"type": "command", "command": " ".join(tap[:-1]), "timeout": 10}]})
    if a.mcp_url:
        headers = {"Authorization": f"Bearer {a.mcp_token}"}
        headers.update(h.split("=", 1) for h in a.mcp_header)
        save(os.path.join(project, ".mcp.json"), {"mcpServers": {"mneme": {
            "type": "http", "url": a.mcp_url, "headers": headers}}})
        ps["enableAllProjectMcpServers"] = True
        ps["enabledMcpjsonServers"] = ["mneme"]
    save(ps_path, ps)
    print(json.dumps({"claude_json": cj_path, "user_settings": us_path, "project_settings": ps_path}))


if __name__ == "__main__":
    sys.exit(main())
