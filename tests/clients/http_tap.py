#!/usr/bin/env python3
"""A logging HTTP reverse proxy: put it between a client and mneme (e.g. Claude Code's MCP client
and /mcp) to record exactly what goes over the wire.

  http_tap.py --listen PORT --target HOST:PORT --log FILE [--port-file FILE]

Forwards every request as is (streaming the answer back chunk by chunk, so SSE works) and appends
one JSON line per exchange to FILE: {seq, ts, ms, method, path, req_headers (authorization
redacted), req_body (JSON if it parses), status, resp_headers, resp_body (text; SSE included)}.
Python 3 standard library only.
"""

import argparse
import http.client
import itertools
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ARGS = None
LOCK = threading.Lock()
SEQ = itertools.count(1)
HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


def parse(raw):
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")


class Tap(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _any(self):
        t0 = time.time()
        n = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(n) if n else b""
        host, port = ARGS.target.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=ARGS.timeout)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        rec = {"seq": next(SEQ), "ts": round(t0, 3), "method": self.command, "path": self.path,
               "req_headers": {k.lower(): ("<redacted>" if k.lower() == "authorization" else v) for k, v in self.headers.items()},
               "req_body": parse(body) if body else None}
        chunks = []
        try:
            conn.request(self.command, self.path, body=body or None, headers=headers)
            resp = conn.getresponse()
            rec["status"] = resp.status
            rec["resp_headers"] = {k.lower(): v for k, v in resp.getheaders()}
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in HOP and k.lower() != "content-length":
                    self.send_header(k, v)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            while True:
                data = resp.read1(65536) if hasattr(resp, "read1") else resp.read(65536)
                if not data:
                    break
                chunks.append(data)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except Exception as e:  # noqa: BLE001 - a tap reports, it does not judge
            rec["error"] = repr(e)
            try:
                self.send_response(502)
                self.send_header("content-length", "0")
                self.end_headers()
            except Exception:  # noqa: BLE001
                pass
        finally:
            conn.close()
            raw = b"".join(chunks)
            rec["resp_body"] = parse(raw) if raw else None
            rec["ms"] = round((time.time() - t0) * 1000)
            with LOCK, open(ARGS.log, "a") as f:
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = do_OPTIONS = do_HEAD = _any


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--listen", type=int, default=0)
    p.add_argument("--target", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--port-file")
    p.add_argument("--timeout", type=float, default=300)
    ARGS = p.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", ARGS.listen), Tap)
    srv.daemon_threads = True
    if ARGS.port_file:
        with open(ARGS.port_file, "w") as f:
            f.write(str(srv.server_address[1]))
    print(f"listening 127.0.0.1:{srv.server_address[1]} -> {ARGS.target}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
