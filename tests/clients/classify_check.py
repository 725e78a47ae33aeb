#!/usr/bin/env python3
"""Feeds model requests captured by stub_model.py to mneme's POST /v1/classify and prints, for
each, the stub's own guess next to mneme's verdict.

  classify_check.py --url http://127.0.0.1:6366 --token-file TOKEN STUB.jsonl [STUB.jsonl ...]

Prints one JSON line per request: {file, seq, path, stub_kind, mneme_kind, decided_by, score,
pattern}. Python 3 standard library only.
"""
import argparse
import json
import urllib.request


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", default="http://127.0.0.1:6366")
    p.add_argument("--token-file", required=True)
    p.add_argument("logs", nargs="+")
    a = p.parse_args()
    token = open(a.token_file).read().strip()
    for path in a.logs:
        for line in open(path):
            r = json.loads(line)
            if r["method"] != "POST" or not isinstance(r.get("body"), dict) or "messages" not in r["body"] and "input" not in r["body"]:
                continue
            req = urllib.request.Request(
                a.url.rstrip("/") + "/v1/classify",
                data=json.dumps({"headers": {k: v for k, v in r["headers"].items() if v != "<redacted>"},
                                 "body": r["body"]}).encode(),
                headers={"content-type": "application/json", "authorization": f"Bearer {token}"})
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    v = json.load(resp)
            except Exception as e:  # noqa: BLE001
                v = {"kind": f"error: {e}"}
            print(json.dumps({"file": path, "seq": r["seq"], "path": r["path"], "stub_kind": r["kind"],
                              "mneme_kind": v.get("kind"), "decided_by": v.get("decided_by"),
                              "score": v.get("score"), "pattern": v.get("pattern"),
                              "signals": v.get("signals")}))


if __name__ == "__main__":
    main()
