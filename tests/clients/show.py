#!/usr/bin/env python3
"""Summaries of the harness logs, for people and for grepping in tests.

  show.py stub  STUB.jsonl  [--full N]   one block per model request: path, kind, model, system
                                         blocks, messages (role, block types, first chars), tools
  show.py hooks HOOKS.jsonl              one block per hook call: event payload, transcript state
  show.py find  STUB.jsonl TEXT          which requests contain TEXT, and where (system / message i)
  show.py lag   HOOKS.jsonl WATCH.jsonl  per Stop hook: was the assistant reply in the transcript yet
                                         (hook_tap.py --watch-ms), and if not when did it land
"""

import json
import sys


def short(s, n=160):
    s = s if isinstance(s, str) else json.dumps(s)
    s = s.replace("\n", "\\n")
    return s if len(s) <= n else s[:n] + f"...<{len(s)}>"


def text_blocks(content):
    if isinstance(content, str):
        return [("str", content)]
    out = []
    for b in content or []:
        t = b.get("type")
        if t == "text":
            out.append((t, b.get("text", "")))
        elif t == "tool_use":
            out.append((t, json.dumps({"name": b.get("name"), "input": b.get("input")})))
        elif t == "tool_result":
            out.append((t, json.dumps(b.get("content"))))
        else:
            out.append((t, json.dumps(b)))
    return out


def stub(path, full=160):
    for line in open(path):
        r = json.loads(line)
        b = r.get("body") if isinstance(r.get("body"), dict) else {}
        print(f"#{r['seq']} {r['method']} {r['path']}{'?' + r['query'] if r.get('query') else ''} kind={r['kind']} "
              f"model={b.get('model')} max_tokens={b.get('max_tokens')} stream={b.get('stream')} "
              f"ua={r['headers'].get('user-agent')}")
        sysb = b.get("system")
        if isinstance(sysb, str):
            print(f"   system: {short(sysb, full)}")
        elif isinstance(sysb, list):
            for i, x in enumerate(sysb):
                print(f"   system[{i}] ({len(x.get('text', ''))} chars): {short(x.get('text', ''), full)}")
        for i, m in enumerate(b.get("messages") or []):
            if not isinstance(m, dict):
                continue
            extra = ""
            if m.get("tool_calls"):
                extra = " tool_calls=" + short(m["tool_calls"], full)
            for t, txt in text_blocks(m.get("content")):
                print(f"   msg[{i}] {m.get('role')} {t} ({len(txt)}): {short(txt, full)}{extra}")
            if not m.get("content") and extra:
                print(f"   msg[{i}] {m.get('role')}{extra}")
        tools = [t.get("name") or (t.get("function") or {}).get("name") for t in b.get("tools") or []]
        if tools:
            print(f"   tools ({len(tools)}): {', '.join(tools)}")
        if r.get("reply"):
            print(f"   -> {short(r['reply'], full)}")


def hooks(path):
    for line in open(path):
        r = json.loads(line)
        t = r["transcript"]
        ev = dict(r["event"] or {})
        print(f"#{r['seq']} {r['hook_event_name']} took {round((r['ts_end'] - r['ts_start']) * 1000)} ms "
              f"(real hook {r['real_ms']} ms, rc {r['rc']})")
        print(f"   stdin: {json.dumps(ev)}")
        if t.get("path"):
            print(f"   transcript exists={t.get('exists')} lines={t.get('lines')} "
                  f"user/assistant={[x for x in (t.get('types') or []) if x in ('user', 'assistant')]}")
        if r.get("answer"):
            print(f"   answer: {short(r['answer'], 200)}")
        if r.get("stderr"):
            print(f"   stderr: {short(r['stderr'], 200)}")


def find(path, needle):
    for line in open(path):
        r = json.loads(line)
        b = r.get("body") if isinstance(r.get("body"), dict) else {}
        where = []
        sysb = b.get("system")
        if isinstance(sysb, str) and needle in sysb:
            where.append("system")
        elif isinstance(sysb, list):
            where += [f"system[{i}]" for i, x in enumerate(sysb) if needle in x.get("text", "")]
        for i, m in enumerate(b.get("messages") or []):
            for t, txt in text_blocks(m.get("content")):
                if needle in txt:
                    where.append(f"messages[{i}] role={m.get('role')} {t}")
        print(f"#{r['seq']} {r['path']} kind={r['kind']}: {', '.join(where) or '-'}")


def lag(hooks_path, watch_path):
    """For each Stop: did the transcript hold the turn's assistant message when the hook started,
    and if not, how long after the hook started (and after it ended) did it land?"""
    hooks = [json.loads(l) for l in open(hooks_path)]
    watch = sorted((json.loads(l) for l in open(watch_path)), key=lambda w: w["ts"])
    for h in hooks:
        if h["hook_event_name"] != "Stop":
            continue
        types = h["transcript"].get("types") or []
        ua = [t for t in types if t in ("user", "assistant")]
        want = ua.count("user")  # assistant entries the turn needs (one per user entry, roughly)
        have = ua.count("assistant")
        if ua and ua[-1] == "assistant":
            print(f"Stop #{h['seq']}: assistant message already in the transcript at hook start "
                  f"({len(ua)} user/assistant entries)")
            continue
        landed = next((w for w in watch if w["ts"] >= h["ts_start"] and w["roles"]
                       and w["roles"][-1] == "assistant" and w["roles"].count("assistant") > have), None)
        if landed:
            print(f"Stop #{h['seq']}: assistant message MISSING at hook start; landed "
                  f"{round((landed['ts'] - h['ts_start']) * 1000)} ms after the hook started "
                  f"({round((landed['ts'] - h['ts_end']) * 1000)} ms after it ended)")
        else:
            print(f"Stop #{h['seq']}: assistant message MISSING at hook start; not seen in the watch window")


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "stub":
        stub(sys.argv[2], int(sys.argv[sys.argv.index("--full") + 1]) if "--full" in sys.argv else 160)
    elif cmd == "hooks":
        hooks(sys.argv[2])
    elif cmd == "lag":
        lag(sys.argv[2], sys.argv[3])
    elif cmd == "find":
        find(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
