#!/usr/bin/env python3
"""A deterministic stand-in for the model providers, for driving real agent clients offline.

Python 3.11 standard library only. Serves on 127.0.0.1:<port>:

  Anthropic (Claude Code):  POST /v1/messages (SSE when "stream": true), POST /v1/messages/count_tokens,
                            GET /v1/models, GET /v1/models/{id}
  OpenAI (opencode):        POST /v1/chat/completions (SSE when "stream": true), POST /v1/responses
                            (non-streaming and SSE), GET /v1/models
  Anything else:            a JSON 404 (still logged), HEAD/GET / -> 200.

Every request is appended as one JSON line to the log file: {seq, ts, method, path, query, headers
(secrets redacted), body (parsed JSON, else text), kind, reply}. `kind` is the stub's own guess:
"main", "tool_result", "title", "compaction", "quota", "side", "count_tokens", "models", "other".

Replies are deterministic:
  * text: "<reply> [n] re: <first 80 chars of the last user text>"  (n counts main-kind replies);
  * a tool call when the latest user prompt contains  [[call NAME {json args}]]  and the request
    offers a tool whose name is NAME or ends with NAME (e.g. "retain" matches "mcp__mneme__retain"
    or "mneme_retain"), once per prompt; when Claude Code defers the tool behind ToolSearch, first
    a ToolSearch call {"query": "select:mcp__...__NAME"} and then the tool. A request carrying a
    tool result otherwise gets "<reply> tool-result: <first 200 chars of the result>";
  * compaction requests get "<summary>STUB-SUMMARY ...</summary>" text;
  * title requests get a short title (JSON {"title": ...} when the request asks for JSON).

Usage:
  stub_model.py --log FILE [--port 0] [--port-file FILE] [--reply TEXT] [--delay-ms N]
  (prints "listening 127.0.0.1:<port>" on stdout; --port 0 picks a free port)
"""

import argparse
import itertools
import json
import re
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

SECRET_HEADERS = {"authorization", "x-api-key", "cookie", "proxy-authorization", "api-key"}
CALL_RE = re.compile(r"\[\[call\s+([A-Za-z0-9_.\-]+)\s+(\{.*?\})\s*\]\]", re.S)

ARGS = None
LOCK = threading.Lock()
SEQ = itertools.count(1)
TURN = itertools.count(1)


# ---------------------------------------------------------------- request analysis


def _text_of(content):
    """Text of an Anthropic/OpenAI message content (string or block list), tool results included."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    out = []
    if isinstance(content, list):
        for b in content:
            if not isinstance(b, dict):
                continue
            t = b.get("type")
            if t in ("text", "input_text", "output_text"):
                out.append(b.get("text") or "")
            elif t == "tool_result":
                out.append(_text_of(b.get("content")))
    return "\n".join(out)


META_RE = re.compile(r"<(system-reminder|local-command-caveat|local-command-stdout|command-name|command-message|command-args)>.*?</\1>", re.S)


def _strip_reminders(text):
    return META_RE.sub("", text).strip()


def _prompt_of(msg, fallback):
    """The user's own words in a message: its last text block that is not harness metadata."""
    c = (msg or {}).get("content")
    if isinstance(c, list):
        for b in reversed(c):
            if isinstance(b, dict) and b.get("type") in ("text", "input_text"):
                t = _strip_reminders(b.get("text") or "")
                if t:
                    return t
    return _strip_reminders(fallback)


def _system_text(body):
    """Anthropic `system` (string or blocks) or the OpenAI system/developer messages."""
    sys_ = body.get("system")
    parts = []
    if isinstance(sys_, str):
        parts.append(sys_)
    elif isinstance(sys_, list):
        parts += [b.get("text", "") for b in sys_ if isinstance(b, dict)]
    for m in body.get("messages") or []:
        if isinstance(m, dict) and m.get("role") in ("system", "developer"):
            parts.append(_text_of(m.get("content")))
    if isinstance(body.get("instructions"), str):  # OpenAI Responses
        parts.append(body["instructions"])
    return "\n".join(parts)


def _messages(body):
    msgs = body.get("messages")
    if msgs is None and isinstance(body.get("input"), list):  # OpenAI Responses
        msgs = body["input"]
    return [m for m in (msgs or []) if isinstance(m, dict)]


def _last_user(body):
    """(last user message, its text) — for OpenAI a trailing tool message counts as the last."""
    msgs = _messages(body)
    if not msgs:
        if isinstance(body.get("input"), str):
            return {"role": "user", "content": body["input"]}, body["input"]
        return None, ""
    for m in reversed(msgs):
        if m.get("role") in ("user", "tool") or m.get("type") == "function_call_output":
            if m.get("type") == "function_call_output":
                return m, str(m.get("output", ""))
            return m, _text_of(m.get("content"))
        if m.get("role") == "assistant":
            break
    return msgs[-1], _text_of(msgs[-1].get("content"))


def _is_tool_result(msg):
    if not msg:
        return False
    if msg.get("role") == "tool" or msg.get("type") == "function_call_output":
        return True
    c = msg.get("content")
    return isinstance(c, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in c)


def _tool_names(body):
    names = []
    for t in body.get("tools") or []:
        if not isinstance(t, dict):
            continue
        if "function" in t and isinstance(t["function"], dict):
            names.append(t["function"].get("name", ""))
        elif "name" in t:
            names.append(t["name"])
    return names


def _classify(body):
    system = _system_text(body).lower()
    msg, text = _last_user(body)
    low = text.lower()
    tools = _tool_names(body)
    if _is_tool_result(msg):
        return "tool_result"
    if low.strip() == "quota" or (body.get("max_tokens") == 1 and len(_messages(body)) <= 1):
        return "quota"
    if "title generator" in system or "generate a title" in low or ("title" in system and "conversation" in system and not tools):
        return "title"
    if ("summary" in low and ("conversation" in low or "compact" in low) and
            ("create a detailed summary" in low or "<summary>" in low or "summarize" in low or "summary of the conversation" in low)):
        return "compaction"
    if "summariz" in system and ("conversation" in system or "summary" in system) and not tools:
        return "compaction"
    if "title" in system and not tools:
        return "title"
    if "title" in low and ("conversation" in low or "session" in low) and not tools:
        return "title"
    if not tools:
        return "side"
    return "main"


def _wants_json(body):
    fmt = body.get("output_format") or body.get("response_format") or {}
    return isinstance(fmt, dict) and fmt.get("type") in ("json_schema", "json_object", "json")


def _directive(body):
    """The [[call NAME {args}]] in the latest real user prompt, with the messages after it."""
    msgs = _messages(body)
    for i in range(len(msgs) - 1, -1, -1):
        m = msgs[i]
        if m.get("role") == "user" and not _is_tool_result(m):
            found = CALL_RE.search(_prompt_of(m, _text_of(m.get("content"))))
            return (found, msgs[i + 1:]) if found else (None, [])
    return None, []


def _called(after):
    """Tool names the assistant already called after the prompt (Anthropic and OpenAI shapes)."""
    names = []
    for m in after:
        if m.get("role") != "assistant" and m.get("type") != "function_call":
            continue
        if m.get("type") == "function_call":
            names.append(m.get("name"))
        for b in m.get("content") or [] if isinstance(m.get("content"), list) else []:
            if isinstance(b, dict) and b.get("type") == "tool_use":
                names.append(b.get("name"))
        for c in m.get("tool_calls") or []:
            names.append((c.get("function") or {}).get("name"))
    return names


def _tool_step(body):
    """The next tool call the directive asks for, or None: the tool itself when the request offers
    it; else, when Claude Code defers it behind ToolSearch, a ToolSearch "select:" for it first."""
    m, after = _directive(body)
    if not m:
        return None
    want = m.group(1)
    try:
        args = json.loads(m.group(2))
    except ValueError:
        args = {}
    called = _called(after)
    tools = _tool_names(body)
    name = next((t for t in tools if t == want), None) or next((t for t in tools if t.endswith(want)), None)
    if name:
        return None if name in called else {"name": name, "input": args}
    if "ToolSearch" in tools and "ToolSearch" not in called:
        text = json.dumps(body)
        full = re.search(r"(mcp__[A-Za-z0-9_\-]+__" + re.escape(want) + r")\b", text)
        if full:
            return {"name": "ToolSearch", "input": {"query": "select:" + full.group(1), "max_results": 5}}
    return None


def plan_reply(body):
    """What to answer: {"kind", "text"} or {"kind", "tool": {"name", "input"}}."""
    kind = _classify(body)
    msg, text = _last_user(body)
    if kind in ("main", "tool_result"):
        step = _tool_step(body)
        if step:
            return {"kind": "tool_call", "tool": step}
    prompt = _prompt_of(msg, text) if kind != "tool_result" else text
    if kind == "tool_result":
        return {"kind": kind, "text": f"{ARGS.reply} tool-result: {text.strip()[:200]}"}
    if kind == "quota":
        return {"kind": kind, "text": "ok"}
    if kind == "compaction":
        return {"kind": kind, "text": "<analysis>stub</analysis>\n<summary>STUB-SUMMARY of the conversation so far.</summary>"}
    if kind == "title":
        title = "Stub session title"
        return {"kind": kind, "text": json.dumps({"title": title}) if _wants_json(body) else title}
    n = next(TURN) if kind == "main" else 0
    first = " ".join(prompt.split())[:80]
    label = f"[{n}]" if kind == "main" else f"[{kind}]"
    return {"kind": kind, "text": f"{ARGS.reply} {label} re: {first}"}


# ---------------------------------------------------------------- HTTP


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "stub-model/1"

    def log_message(self, fmt, *a):  # quiet
        if ARGS.verbose:
            sys.stderr.write("stub: " + fmt % a + "\n")

    # -- plumbing
    def _read_body(self):
        n = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(n) if n else b""
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            raw = b""
            while True:
                size = int(self.rfile.readline().strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                raw += self.rfile.read(size)
                self.rfile.readline()
        if self.headers.get("content-encoding", "").lower() == "gzip":
            import gzip
            raw = gzip.decompress(raw)
        try:
            return raw, (json.loads(raw) if raw else None)
        except ValueError:
            return raw, None

    def _record(self, body, raw, kind, reply):
        u = urlsplit(self.path)
        headers = {k.lower(): ("<redacted>" if k.lower() in SECRET_HEADERS else v) for k, v in self.headers.items()}
        rec = {
            "seq": next(SEQ),
            "ts": round(time.time(), 3),
            "method": self.command,
            "path": u.path,
            "query": u.query,
            "headers": headers,
            "body": body if body is not None else raw.decode("utf-8", "replace"),
            "kind": kind,
            "reply": reply,
        }
        with LOCK, open(ARGS.log, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")

    def _json(self, status, obj, extra=None):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _sse_start(self):
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

    def _chunk(self, s):
        b = s.encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(b), b))
        self.wfile.flush()

    def _sse_end(self):
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _delay(self):
        if ARGS.delay_ms:
            time.sleep(ARGS.delay_ms / 1000)

    # -- verbs
    def do_HEAD(self):
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_GET(self):
        path = urlsplit(self.path).path
        if path in ("/v1/models", "/models"):
            self._record(None, b"", "models", None)
            now = int(time.time())
            data = [{"id": m, "type": "model", "object": "model", "display_name": m, "created": now,
                     "created_at": "2025-01-01T00:00:00Z", "owned_by": "stub"} for m in ARGS.models]
            return self._json(200, {"data": data, "object": "list", "has_more": False,
                                    "first_id": data[0]["id"], "last_id": data[-1]["id"]})
        if path.startswith("/v1/models/"):
            self._record(None, b"", "models", None)
            m = path.rsplit("/", 1)[1]
            return self._json(200, {"id": m, "type": "model", "display_name": m, "created_at": "2025-01-01T00:00:00Z"})
        self._record(None, b"", "other", None)
        if path == "/":
            return self._json(200, {"ok": True})
        return self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": f"stub: no {path}"}})

    def do_POST(self):
        path = urlsplit(self.path).path
        raw, body = self._read_body()
        body = body if isinstance(body, dict) else {}
        if path.endswith("/messages/count_tokens"):
            self._record(body, raw, "count_tokens", None)
            n = max(1, len(json.dumps(body)) // 4)
            return self._json(200, {"input_tokens": n})
        if path.endswith("/v1/messages") or path == "/messages":
            plan = plan_reply(body)
            self._record(body, raw, plan["kind"], plan)
            self._delay()
            return self._anthropic(body, plan)
        if path.endswith("/chat/completions"):
            plan = plan_reply(body)
            self._record(body, raw, plan["kind"], plan)
            self._delay()
            return self._openai_chat(body, plan)
        if path.endswith("/responses"):
            plan = plan_reply(body)
            self._record(body, raw, plan["kind"], plan)
            self._delay()
            return self._openai_responses(body, plan)
        self._record(body, raw, "other", None)
        return self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": f"stub: no {path}"}})

    # -- Anthropic Messages
    def _anthropic(self, body, plan):
        model = body.get("model") or "claude-stub"
        mid = "msg_stub_" + uuid.uuid4().hex[:20]
        usage_in = max(1, len(json.dumps(body)) // 4)
        if "tool" in plan:
            tid = "toolu_stub_" + uuid.uuid4().hex[:16]
            block = {"type": "tool_use", "id": tid, "name": plan["tool"]["name"], "input": plan["tool"]["input"]}
            stop = "tool_use"
        else:
            block = {"type": "text", "text": plan["text"]}
            stop = "end_turn"
        if not body.get("stream"):
            return self._json(200, {"id": mid, "type": "message", "role": "assistant", "model": model,
                                    "content": [block], "stop_reason": stop, "stop_sequence": None,
                                    "usage": {"input_tokens": usage_in, "output_tokens": 10,
                                              "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}})
        self._sse_start()

        def ev(name, data):
            self._chunk(f"event: {name}\ndata: {json.dumps(data)}\n\n")

        ev("message_start", {"type": "message_start", "message": {
            "id": mid, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": usage_in, "output_tokens": 1, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0}}})
        if block["type"] == "text":
            ev("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
            ev("ping", {"type": "ping"})
            text = block["text"]
            for i in range(0, len(text), 40):
                ev("content_block_delta", {"type": "content_block_delta", "index": 0,
                                           "delta": {"type": "text_delta", "text": text[i:i + 40]}})
        else:
            ev("content_block_start", {"type": "content_block_start", "index": 0,
                                       "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}})
            ev("content_block_delta", {"type": "content_block_delta", "index": 0,
                                       "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}})
        ev("content_block_stop", {"type": "content_block_stop", "index": 0})
        ev("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                             "usage": {"output_tokens": 10}})
        ev("message_stop", {"type": "message_stop"})
        self._sse_end()

    # -- OpenAI Chat Completions
    def _openai_chat(self, body, plan):
        model = body.get("model") or "stub"
        cid = "chatcmpl-stub" + uuid.uuid4().hex[:16]
        now = int(time.time())
        usage = {"prompt_tokens": max(1, len(json.dumps(body)) // 4), "completion_tokens": 10}
        usage["total_tokens"] = usage["prompt_tokens"] + 10
        if "tool" in plan:
            call = {"id": "call_stub_" + uuid.uuid4().hex[:12], "type": "function",
                    "function": {"name": plan["tool"]["name"], "arguments": json.dumps(plan["tool"]["input"])}}
            msg, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
        else:
            msg, finish = {"role": "assistant", "content": plan["text"]}, "stop"
        if not body.get("stream"):
            return self._json(200, {"id": cid, "object": "chat.completion", "created": now, "model": model,
                                    "choices": [{"index": 0, "message": msg, "finish_reason": finish}], "usage": usage})
        self._sse_start()

        def chunk(delta, fin=None, **extra):
            d = {"id": cid, "object": "chat.completion.chunk", "created": now, "model": model,
                 "choices": [{"index": 0, "delta": delta, "finish_reason": fin}]}
            d.update(extra)
            self._chunk(f"data: {json.dumps(d)}\n\n")

        chunk({"role": "assistant", "content": ""})
        if "tool" in plan:
            c = msg["tool_calls"][0]
            chunk({"tool_calls": [{"index": 0, "id": c["id"], "type": "function",
                                   "function": {"name": c["function"]["name"], "arguments": ""}}]})
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": c["function"]["arguments"]}}]})
        else:
            text = plan["text"]
            for i in range(0, len(text), 40):
                chunk({"content": text[i:i + 40]})
        chunk({}, finish)
        if (body.get("stream_options") or {}).get("include_usage"):
            self._chunk(f"data: {json.dumps({'id': cid, 'object': 'chat.completion.chunk', 'created': now, 'model': model, 'choices': [], 'usage': usage})}\n\n")
        self._chunk("data: [DONE]\n\n")
        self._sse_end()

    # -- OpenAI Responses (minimal)
    def _openai_responses(self, body, plan):
        model = body.get("model") or "stub"
        rid = "resp_stub" + uuid.uuid4().hex[:16]
        if "tool" in plan:
            item = {"type": "function_call", "id": "fc_" + uuid.uuid4().hex[:12], "call_id": "call_" + uuid.uuid4().hex[:12],
                    "name": plan["tool"]["name"], "arguments": json.dumps(plan["tool"]["input"]), "status": "completed"}
        else:
            item = {"type": "message", "id": "msg_" + uuid.uuid4().hex[:12], "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": plan["text"], "annotations": []}]}
        resp = {"id": rid, "object": "response", "created_at": int(time.time()), "status": "completed", "model": model,
                "output": [item], "usage": {"input_tokens": 10, "output_tokens": 10, "total_tokens": 20}}
        if not body.get("stream"):
            return self._json(200, resp)
        self._sse_start()

        def ev(name, data):
            data["type"] = name
            self._chunk(f"event: {name}\ndata: {json.dumps(data)}\n\n")

        ev("response.created", {"response": {**resp, "status": "in_progress", "output": []}})
        ev("response.output_item.added", {"output_index": 0, "item": {**item, "status": "in_progress"}})
        if item["type"] == "message":
            ev("response.output_text.delta", {"output_index": 0, "item_id": item["id"], "content_index": 0, "delta": plan["text"]})
        ev("response.output_item.done", {"output_index": 0, "item": item})
        ev("response.completed", {"response": resp})
        self._sse_end()


def main():
    global ARGS
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--log", required=True, help="JSON-lines request log (appended)")
    p.add_argument("--port-file", help="write the chosen port here once listening")
    p.add_argument("--reply", default="STUB-REPLY", help="marker that starts every text answer")
    p.add_argument("--delay-ms", type=int, default=0, help="wait this long before each model answer")
    p.add_argument("--models", nargs="*", default=["claude-sonnet-4-5", "claude-haiku-4-5", "claude-opus-4-5", "stub-model"])
    p.add_argument("--verbose", action="store_true")
    ARGS = p.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", ARGS.port), Handler)
    srv.daemon_threads = True
    port = srv.server_address[1]
    if ARGS.port_file:
        with open(ARGS.port_file + ".tmp", "w") as f:
            f.write(str(port))
        import os
        os.replace(ARGS.port_file + ".tmp", ARGS.port_file)
    print(f"listening 127.0.0.1:{port}", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
