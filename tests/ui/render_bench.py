#!/usr/bin/env python3
"""render_bench.py OUT [N] : the web view at N memories (default 100,000), in Chromium headless
against a real `mneme serve` (MNEME_BIN), inside a loopback-only namespace (run it through
tests/clients/netns.sh; `cargo bench --bench web_ui` does). Reports, as JSON on stdout and in
OUT/bench.json:

- the view's routes as a client sees them (urllib, keep-alive off): p50/p99 over 100 calls each
  of the first list page, a page deep in the store (by cursor), a tag held by a tenth and by a
  thousandth of the memories, the banks with their counts, one memory, the queue, the status;
- the page in the browser: time from navigation start to a full list of 50 and the bytes
  transferred (page, assets and API answers), over 20 fresh loads after one warm-up.

The embedder is off here: list speed does not depend on it, and a backfill of N passages would
compete for the 2 cores for the whole run. A measurement, not a test: it asserts nothing.
"""
import json
import os
import statistics
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import browser_check as bc  # noqa: E402

OUT = os.path.abspath(sys.argv[1])
N = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000


def percentile(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def timed(d, path, n=100):
    took = []
    for _ in range(n):
        t0 = time.perf_counter()
        status, _ = d.api("GET", path)
        took.append((time.perf_counter() - t0) * 1000)
        assert status == 200, (path, status)
    return {"p50_ms": round(percentile(took, 50), 2), "p99_ms": round(percentile(took, 99), 2)}


def main():
    os.makedirs(OUT, exist_ok=True)
    root = os.path.join(OUT, "run")
    os.makedirs(root, exist_ok=True)
    bc.SHOTS = os.path.join(OUT, "screenshots")
    os.makedirs(bc.SHOTS, exist_ok=True)
    d = bc.Daemon(root, '[local]\nembedder = "off"\n')
    report = {"memories": N}
    t0 = time.time()
    batch = []
    for i in range(N):
        tags = [f"project:p{i % 10}"] + (["rare"] if i % 1000 == 0 else [])
        batch.append({"id": f"m{i:06d}", "bank": "mneme", "tags": tags, "type": "world",
                      "content": f"Fact {i}: the service_{i % 997} worker retries {i % 7} times and logs to shard {i % 31}.",
                      "created_at": f"2026-11-{1 + i * 29 // N:02d}T00:00:00Z"})
        if len(batch) == 1000:
            status, v = d.api("POST", "/v1/import", {"memories": batch})
            assert status == 200, v
            batch = []
    if batch:
        d.api("POST", "/v1/import", {"memories": batch})
    report["import_s"] = round(time.time() - t0, 1)
    _, first = d.api("GET", "/v1/memories?limit=50&preview=280")
    deep = first["next"]
    for _ in range(N // 100):  # walk half-way down, 50 at a time
        _, page = d.api("GET", f"/v1/memories?limit=50&preview=280&cursor={deep}")
        deep = page["next"] or deep
    _, one = d.api("GET", "/v1/memories?limit=1")
    report["api"] = {
        "first_page": timed(d, "/v1/memories?limit=50&preview=280"),
        "deep_page": timed(d, f"/v1/memories?limit=50&preview=280&cursor={deep}"),
        "tag_1_in_10": timed(d, "/v1/memories?limit=50&preview=280&tags=project:p3"),
        "tag_1_in_1000": timed(d, "/v1/memories?limit=50&preview=280&tags=rare", 20),
        "banks": timed(d, "/v1/banks", 20),
        "one_memory": timed(d, "/v1/memories/" + urllib.parse.quote(one["memories"][0]["id"])),
        "queue": timed(d, "/v1/queue"),
        "status": timed(d, "/v1/status"),
    }
    b = bc.Browser(root)
    try:
        out = d.cli("ui", "--no-open")
        b.go(out.stdout.strip())
        b.wait("return document.body.dataset.listRendered", "the first list", 30)
        loads = []
        for _ in range(21):
            b.go(d.url + "/ui/")
            b.wait("return document.body.dataset.listRendered", "the list", 30)
            loads.append(b.js("""
                const mark = performance.getEntriesByName('mneme-list-rendered')[0];
                const nav = performance.getEntriesByType('navigation')[0];
                const res = performance.getEntriesByType('resource');
                return {list_ms: mark.startTime, items: document.querySelectorAll('#list li').length,
                        bytes: nav.transferSize + res.reduce((n, r) => n + r.transferSize, 0)};"""))
        loads = loads[1:]
        b.screenshot(f"memories-at-{N}")
        report["browser"] = {
            "loads": len(loads),
            "items": loads[0]["items"],
            "list_ms_p50": round(statistics.median(x["list_ms"] for x in loads), 1),
            "list_ms_max": round(max(x["list_ms"] for x in loads), 1),
            "transferred_bytes": loads[0]["bytes"],
        }
    finally:
        b.quit()
        d.stop()
    with open(os.path.join(OUT, "bench.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
