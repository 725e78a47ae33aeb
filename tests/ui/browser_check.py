#!/usr/bin/env python3
"""browser_check.py OUT : drives the web view in Debian's Chromium (headless, over WebDriver with
chromedriver) against a real `mneme serve`, and writes what it saw to OUT/results.json and the
screenshots to OUT/screenshots/. tests/web_ui.rs runs it in a loopback-only network namespace
(tests/clients/netns.sh) and asserts on the results; this script only records.

Standard library only. Needs MNEME_BIN, `chromium` and `chromedriver` on PATH.
"""
import base64
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

OUT = os.path.abspath(sys.argv[1])
SHOTS = os.path.join(OUT, "screenshots")
MNEME = os.environ["MNEME_BIN"]
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"
results = {"steps": []}

# The memories the view shows: distractors, a fact found only by meaning, one to delete.
PARAPHRASED_FACT = "Our frontend is written in TypeScript using the React component library."
PARAPHRASED_QUERY = "which javascript ui framework powers the web client"
DELETE_ME = "Temporary note: the flaky test is test_orders_sync, skip it until Friday."
DISTRACTORS = [
    f"{topic} {detail}" for topic, detail in [
        ("The payments service", "retries webhooks three times with exponential backoff."),
        ("Database migrations", "are applied with sqlx migrate run before every deploy."),
        ("The staging cluster", "lives in eu-west-1 and scales down at night."),
        ("Log retention", "is fourteen days in Loki, ninety in cold storage."),
        ("Feature flags", "are read from LaunchDarkly at startup and cached."),
        ("The mobile app", "pins its API version in the Accept header."),
        ("Code review", "needs two approvals for anything under billing/."),
        ("The search index", "is rebuilt nightly from the orders table."),
        ("Secrets", "are injected by Vault agent as files under /run/secrets."),
        ("The cron runner", "uses systemd timers, not crontab."),
    ]
] + [f"Config key service_{i}.timeout_ms defaults to {100 * (i + 1)} and is tuned per region." for i in range(47)]


def log(msg):
    print(f"[browser {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def step(name, **facts):
    results["steps"].append({"step": name, **facts})
    log(f"{name}: {json.dumps(facts)[:300]}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(method, url, body=None, headers=None, timeout=30):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, method=method, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            text = r.read().decode()
            return r.status, (json.loads(text) if text else None)
    except urllib.error.HTTPError as e:
        text = e.read().decode()
        try:
            return e.code, json.loads(text)
        except ValueError:
            return e.code, text


def wait_http(url, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not answer within {seconds} s")


class Daemon:
    """`mneme serve` with its own config (`extra` appended) and storage dir under `root`."""

    def __init__(self, root, extra=""):
        self.port = free_port()
        self.dir = os.path.join(root, "mneme")
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        self.config = os.path.join(root, "mneme.toml")
        self.base_config = f'[server]\nlisten = "127.0.0.1:{self.port}"\n[storage]\ndir = "{self.dir}"\n'
        self.extra = extra
        self.write_config("")
        self.log_path = os.path.join(root, "daemon.log")
        self.log = open(self.log_path, "a")
        # Debug: every request is logged (by route), so the secrets check below covers them.
        env = {**os.environ, "MNEME_CONFIG": self.config, "MNEME_LOG": os.environ.get("MNEME_UI_LOG", "debug")}
        self.proc = subprocess.Popen([MNEME, "serve"], env=env, stdout=self.log, stderr=self.log)
        self.url = f"http://127.0.0.1:{self.port}"
        wait_http(self.url + "/v1/health", 30)
        with open(os.path.join(self.dir, "token")) as f:
            self.token = f.read().strip()

    def write_config(self, extra):
        with open(self.config, "w") as f:
            f.write(self.base_config + self.extra + extra)

    def api(self, method, path, body=None):
        return request(method, self.url + path, body, {"Authorization": f"Bearer {self.token}"})

    def cli(self, *args):
        env = {**os.environ, "MNEME_CONFIG": self.config, "MNEME_LOG": "error"}
        return subprocess.run([MNEME, *args], env=env, capture_output=True, text=True, timeout=30)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


class Browser:
    def __init__(self, root):
        self.port = free_port()
        self.profile = os.path.join(root, "chrome-profile")
        self.log = open(os.path.join(root, "chromedriver.log"), "w")
        self.proc = subprocess.Popen(["chromedriver", f"--port={self.port}"], stdout=self.log, stderr=self.log)
        self.base = f"http://127.0.0.1:{self.port}"
        wait_http(self.base + "/status", 20)
        args = [
            "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900",
            "--no-first-run", "--no-default-browser-check", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--disable-default-apps", "--metrics-recording-only",
            "--disable-domain-reliability", "--disable-breakpad", "--disable-crash-reporter",
            f"--user-data-dir={self.profile}",
        ]
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"args": args},
            "goog:loggingPrefs": {"browser": "ALL"},
        }}}
        status, v = request("POST", self.base + "/session", caps, timeout=60)
        if status != 200:
            raise SystemExit(f"chromedriver did not start a session: {v}")
        self.sid = v["value"]["sessionId"]
        results["browser"] = v["value"]["capabilities"].get("browserVersion")

    def call(self, method, path, body=None):
        status, v = request(method, f"{self.base}/session/{self.sid}{path}", body, timeout=60)
        if status != 200:
            raise RuntimeError(f"webdriver {method} {path}: {status} {v}")
        return v["value"]

    def js(self, script, *args):
        return self.call("POST", "/execute/sync", {"script": script, "args": list(args)})

    def go(self, url):
        self.call("POST", "/url", {"url": url})

    def wait(self, script, what, seconds=15, *args):
        deadline = time.time() + seconds
        while time.time() < deadline:
            v = self.js(script, *args)
            if v:
                return v
            time.sleep(0.05)
        raise RuntimeError(f"timed out waiting for {what}")

    def version(self):
        return self.js("return document.getElementById('list').dataset.version || '0'")

    def wait_rerender(self, before, what):
        """Waits until the list was drawn again after `before` (its version then)."""
        self.wait("return document.getElementById('list').dataset.version !== arguments[0]", what, 15, before)

    def find(self, css):
        return self.call("POST", "/element", {"using": "css selector", "value": css})[ELEMENT]

    def click(self, css):
        element = self.find(css)
        # In the middle of the window: never under the sticky header.
        self.js("arguments[0].scrollIntoView({block: 'center'})", {ELEMENT: element})
        self.call("POST", f"/element/{element}/click", {})

    def type(self, css, text):
        self.call("POST", f"/element/{self.find(css)}/value", {"text": text})

    def keys(self, *keys):
        actions = [a for k in keys for a in ({"type": "keyDown", "value": k}, {"type": "keyUp", "value": k})]
        self.call("POST", "/actions", {"actions": [{"type": "key", "id": "keyboard", "actions": actions}]})

    def screenshot(self, name):
        png = base64.b64decode(self.call("GET", "/screenshot"))
        path = os.path.join(SHOTS, f"{name}.png")
        with open(path, "wb") as f:
            f.write(png)
        results.setdefault("screenshots", []).append(path)

    def console(self):
        try:
            return self.call("POST", "/se/log", {"type": "browser"})
        except RuntimeError as e:
            return [{"level": "UNAVAILABLE", "message": str(e)}]

    def quit(self):
        try:
            request("DELETE", f"{self.base}/session/{self.sid}", timeout=10)
        except Exception as e:  # a browser that hangs still goes, below
            log(f"closing the browser session: {e}")
        finally:
            self.proc.terminate()
            # Chromium outlives its driver: its processes (this run's profile) go too.
            subprocess.run(["pkill", "-f", "--", f"--user-data-dir={self.profile}"], check=False)


class OtherOrigin:
    """A page on another port of 127.0.0.1: the same site as the daemon, another origin."""

    def __init__(self, daemon_url, target_id, bank):
        self.port = free_port()
        page = OTHER_PAGE.replace("DAEMON", daemon_url).replace("TARGET", target_id).replace("BANK", bank)

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = page.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.port}/"


OTHER_PAGE = """<!doctype html><title>another origin</title>
<script>
window.outcome = {};
async function attempt(name, url, init) {
  try {
    const r = await fetch(url, Object.assign({credentials: 'include'}, init));
    let text = '';
    try { text = await r.text(); } catch (e) { text = 'unreadable'; }
    outcome[name] = 'answered ' + r.type + ' ' + r.status + ' ' + text.slice(0, 120);
  } catch (e) {
    outcome[name] = 'blocked ' + e.name;
  }
}
(async () => {
  await attempt('read', 'DAEMON/v1/memories');
  await attempt('read_no_cors', 'DAEMON/v1/memories', {mode: 'no-cors'});
  await attempt('delete', 'DAEMON/v1/memories/TARGET?bank=BANK', {method: 'DELETE', headers: {'X-Mneme-CSRF': 'guess'}});
  await attempt('retry_no_cors', 'DAEMON/v1/retry', {method: 'POST', mode: 'no-cors', body: '{}'});
  await attempt('search_no_cors', 'DAEMON/v1/search', {method: 'POST', mode: 'no-cors', body: '{"query":"password"}'});
  outcome.done = true;
})();
</script>
<form id="clear" method="POST" action="DAEMON/v1/clear" enctype="text/plain">
<input type="hidden" name='{"all": true, "x": "' value='"}'></form>
"""


def metric(daemon, route, status):
    """mneme_http_requests_total for a route and status."""
    req = urllib.request.Request(daemon.url + "/metrics", headers={"Authorization": f"Bearer {daemon.token}"})
    text = urllib.request.urlopen(req, timeout=10).read().decode()
    needle = f'mneme_http_requests_total{{route="{route}",status="{status}"}} '
    for line in text.splitlines():
        if line.startswith(needle):
            return int(float(line[len(needle):]))
    return 0


def seed(d, root):
    proj = os.path.join(root, "proj")
    os.makedirs(proj, exist_ok=True)
    subprocess.run(["git", "-c", "init.defaultBranch=main", "init", "-q", proj], check=True)
    status, started = d.api("POST", "/v1/sessions", {"session_id": "ui-seed", "cwd": proj})
    assert status == 200, started
    scope = started["scope"]
    texts = [PARAPHRASED_FACT] + DISTRACTORS[:28] + [DELETE_ME] + DISTRACTORS[28:]
    status, v = d.api("POST", "/v1/sessions/ui-seed/retain", {"items": [{"content": t} for t in texts]})
    assert status == 202, v
    status, v = d.api("POST", "/v1/flush", {"wait": True})
    assert status == 200, v
    long_doc = "\n\n".join(
        f"[user]: design review point {i}: the ingestion worker batches {i * 8} events before it writes to Kafka"
        for i in range(40))
    status, v = d.api("POST", "/v1/import", {"memories": [
        {"id": "design-1", "bank": scope["bank"], "content": long_doc, "document_id": "design-notes",
         "tags": scope["tags"], "type": "experience", "created_at": "2026-11-30T10:00:00Z"},
        {"id": "design-2", "bank": scope["bank"], "content": "Design notes, part two: the worker owns its offsets.",
         "document_id": "design-notes", "tags": scope["tags"], "created_at": "2026-11-30T10:00:01Z"},
    ]})
    assert status == 200, v
    status, v = d.api("POST", "/v1/flush", {"wait": True})
    assert status == 200, v
    # Semantic recall needs the vectors: wait for the background backfill.
    deadline = time.time() + 180
    while time.time() < deadline:
        _, s = d.api("GET", "/v1/status")
        e = s["backend"].get("embedding") or {}
        if e.get("state") == "ready" and e.get("embedded") == e.get("passages"):
            break
        time.sleep(0.2)
    step("seeded", memories=s["backend"]["memories"], embedding=s["backend"].get("embedding"), bank=scope["bank"],
         tags=scope["tags"])
    _, page = d.api("GET", "/v1/memories?limit=1000")
    ids = {m["content"]: m["id"] for m in page["memories"]}
    return scope, ids[PARAPHRASED_FACT], ids[DELETE_ME]


def main():
    os.makedirs(SHOTS, exist_ok=True)
    root = os.path.join(OUT, "run")
    os.makedirs(root, exist_ok=True)
    d = Daemon(root)
    b = None
    try:
        scope, fact_id, delete_id = seed(d, root)
        results["ids"] = {"fact": fact_id, "delete": delete_id}
        b = Browser(root)
        run_view(d, b, scope, fact_id, delete_id)
        run_tabs(d, b)
        run_other_origin(d, b, scope, fact_id)
        run_logout(d, b)
    finally:
        try:
            if b:
                b.quit()
        finally:
            d.stop()
        # The token, the login code and the cookie value must appear in no log line.
        with open(d.log_path) as f:
            text = f.read()
        secrets = [d.token] + results.pop("_secrets", [])
        step("secrets-in-log", log_lines=text.count("\n"), checked=len(secrets),
             found=[i for i, x in enumerate(secrets) if x and x in text])
        with open(os.path.join(OUT, "results.json"), "w") as f:
            json.dump(results, f, indent=1)


def run_view(d, b, scope, fact_id, delete_id):
    # Not logged in: the page says how to log in, and no data is shown.
    b.go(d.url + "/ui/")
    b.wait("return !document.getElementById('login').hidden", "the login hint")
    step("before-login", text=b.js("return document.getElementById('login').innerText"),
         items=b.js("return document.querySelectorAll('#list li').length"))
    b.screenshot("0-not-logged-in")

    out = d.cli("ui", "--no-open")
    login_url = out.stdout.strip()
    results["_secrets"] = [login_url.split("code=")[-1]]
    step("mneme-ui", rc=out.returncode, stderr=out.stderr.strip(), url_has_code="/ui/login?code=" in login_url,
         url_has_token=d.token in login_url)
    t0 = time.time()
    b.go(login_url)
    b.wait("return document.body.dataset.listRendered", "the first list")
    step("logged-in", url=b.js("return location.href"), wall_ms=round((time.time() - t0) * 1000),
         rendered_ms=int(b.js("return document.body.dataset.listRendered")))
    # The code works once.
    status, _ = request("GET", login_url)
    step("code-reused", status=status)
    cookies = b.call("GET", "/cookie")
    results["_secrets"] += [c["value"] for c in cookies]
    step("cookie", cookies=[{k: c.get(k) for k in ("name", "httpOnly", "sameSite", "path", "secure")} for c in cookies],
         readable_by_script=b.js("return document.cookie"))

    # A fresh load of the view, timed: from navigation start to a full list of 50, and its weight.
    b.go(d.url + "/ui/")
    b.wait("return document.body.dataset.listRendered", "the list after a reload")
    perf = b.js("""
        const nav = performance.getEntriesByType('navigation')[0];
        const mark = performance.getEntriesByName('mneme-list-rendered')[0];
        const res = performance.getEntriesByType('resource');
        return {
          list_ms: mark ? mark.startTime : null,
          dom_content_loaded_ms: nav.domContentLoadedEventEnd,
          transferred_bytes: nav.transferSize + res.reduce((n, r) => n + r.transferSize, 0),
          decoded_bytes: nav.decodedBodySize + res.reduce((n, r) => n + r.decodedBodySize, 0),
          resources: res.map(r => ({name: r.name.replace(location.origin, ''), bytes: r.transferSize, ms: Math.round(r.duration)})),
        };""")
    items = b.js("return document.querySelectorAll('#list li').length")
    step("first-render", items=items, **perf)
    html = b.js("return document.documentElement.outerHTML")
    step("page-secrets", token_in_page=d.token in html, url=b.js("return location.href"))
    b.screenshot("1-memories")

    # Older page and back.
    v = b.version()
    b.click("#older")
    b.wait_rerender(v, "the older page")
    step("older-page", items=b.js("return document.querySelectorAll('#list li').length"))
    v = b.version()
    b.click("#newest")
    b.wait_rerender(v, "the newest page")

    # Filter by the project tag.
    tag = scope["tags"][0] if scope["tags"] else ""
    if tag:
        b.type("#tags", tag)
        v = b.version()
        b.click("#filters button[type=submit]")
        b.wait_rerender(v, "the filtered list")
        shown = b.js("return [...document.querySelectorAll('#list .item')].every(e => e.textContent.includes(arguments[0]))", tag)
        # A comma inside a tag is typed `\,`, as the list's API reads it (review60 #6).
        split = b.js("return askedTags('project:web\\\\,app, team:red')")
        step("tag-filter", tag=tag, all_tagged=shown, items=b.js("return document.querySelectorAll('#list li').length"),
             split=split)

    # A memory's detail: the long document memory has passages.
    b.click('#list .item[data-id="design-1"]')
    b.wait("return document.getElementById('detail').dataset.id === 'design-1'", "the detail")
    step("detail", passages=b.js("return document.querySelectorAll('#detail .passages li').length"),
         text=b.js("return document.getElementById('detail').innerText.slice(0, 400)"))
    b.screenshot("2-detail")
    b.keys("\ue00c")  # Escape closes it
    step("escape-closes-detail", hidden=b.wait("return document.getElementById('detail').hidden", "closing"))

    # A slow answer for one memory does not replace the one chosen after it (whose delete
    # button would then have deleted the slow one).
    other = b.js("return [...document.querySelectorAll('#list .item')].map(e => e.dataset.id)"
                 ".find(id => id !== 'design-1')")
    b.js("const f = window.fetch; window.__slow = '/v1/memories/design-1';"
         "window.fetch = (u, o) => window.__slow && String(u).includes(window.__slow)"
         " ? new Promise((r) => setTimeout(r, 800)).then(() => f(u, o)) : f(u, o);")
    b.click('#list .item[data-id="design-1"]')
    b.click(f'#list .item[data-id="{other}"]')
    b.wait(f"return document.getElementById('detail').dataset.id === '{other}'", "the second memory's detail")
    time.sleep(1.5)  # the first memory's answer arrives meanwhile
    step("late-detail", chosen=other, shown=b.js("return document.getElementById('detail').dataset.id"),
         pressed=b.js("return [...document.querySelectorAll('#list .item[aria-pressed=\"true\"]')]"
                      ".map(e => e.dataset.id)"))
    b.js("window.__slow = null")
    b.keys("\ue00c")
    b.wait("return document.getElementById('detail').hidden", "closing")

    # Search by meaning, from the keyboard: "/" focuses the box, Enter searches.
    b.js("document.activeElement && document.activeElement.blur()")
    b.keys("/")
    focused = b.js("return document.activeElement && document.activeElement.id")
    v = b.version()
    b.keys(*PARAPHRASED_QUERY, "\ue007")
    b.wait_rerender(v, "search results")
    ranked = b.js("return [...document.querySelectorAll('#list .item')].map(e => e.dataset.id)")
    step("search", focused=focused, query=PARAPHRASED_QUERY, rank=(ranked.index(fact_id) + 1) if fact_id in ranked else None,
         results=len(ranked), info=b.js("return document.getElementById('list-info').textContent"))
    b.screenshot("3-search")
    v = b.version()
    b.click("#clear-search")
    b.wait_rerender(v, "the list again")

    # Delete a memory after the confirmation; the store no longer has it.
    b.click(f'#list .item[data-id="{delete_id}"]')
    b.wait("return document.getElementById('detail').dataset.id === arguments[0]", "the detail to delete", 15, delete_id)
    b.click("#forget-memory")
    b.wait("return document.getElementById('confirm').open", "the confirmation")
    b.screenshot("4-confirm-delete")
    b.click("#confirm-ok")
    b.wait("return !document.getElementById('toast').hidden", "the toast")
    toast = b.js("return document.getElementById('toast').textContent")
    status, _ = d.api("GET", f"/v1/memories/{delete_id}")
    try:  # the list is drawn again without it
        b.wait("return !document.querySelector('#list .item[data-id=\"' + arguments[0] + '\"]')", "the list without it", 10, delete_id)
        still_listed = False
    except RuntimeError:
        still_listed = True
    step("delete", toast=toast, api_status=status, still_listed=still_listed)

    # Delete a whole document (both of its memories) the same way.
    b.click('#list .item[data-id="design-2"]')
    b.wait("return document.getElementById('detail').dataset.id === 'design-2'", "the document's memory")
    label = b.js("return document.getElementById('forget-document').textContent")
    b.click("#forget-document")
    b.wait("return document.getElementById('confirm').open", "the document confirmation")
    question = b.js("return document.getElementById('confirm-text').textContent")
    b.click("#confirm-ok")
    b.wait("return document.getElementById('toast').textContent.includes('design-notes') || "
           "document.getElementById('toast').textContent.includes('2 memories')", "the document toast")
    gone = [d.api("GET", f"/v1/memories/{i}")[0] for i in ("design-1", "design-2")]
    step("delete-document", label=label, question=question, toast=b.js("return document.getElementById('toast').textContent"),
         api_status=gone)

    # Under "All banks" a search reads every bank (per-project banks: the configured one held
    # none of the projects' memories).
    status, v = d.api("POST", "/v1/import", {"memories": [
        {"id": "other-bank-1", "bank": "ui-other", "content": "The zebra stable is swept every night at ten.",
         "created_at": "2026-11-30T10:00:02Z"}]})
    assert status == 200, v
    b.go(d.url + "/ui/")
    b.wait("return document.body.dataset.listRendered", "the list with the other bank")
    b.wait("return [...document.getElementById('bank').options].some(o => o.value === 'ui-other')", "the other bank listed")
    v = b.version()
    b.js("const q = document.getElementById('query'); q.value = 'when is the zebra stable swept?';"
         "q.form.requestSubmit();")
    b.wait_rerender(v, "the search of every bank")
    step("search-all-banks", banks=b.js("return [...document.querySelectorAll('#list .item')].map(e => e.dataset.bank)"),
         ids=b.js("return [...document.querySelectorAll('#list .item')].map(e => e.dataset.id)"),
         info=b.js("return document.getElementById('list-info').textContent"))
    d.api("DELETE", "/v1/memories/other-bank-1?bank=ui-other")
    v = b.version()
    b.click("#clear-search")
    b.wait_rerender(v, "the list again")

    # Notices, live: a delivery that fails (the backend switched to a Hindsight nobody serves).
    b.go(d.url + "/ui/#notices")
    b.wait("return document.querySelectorAll('#notices li').length > 0", "the notice history")
    before = b.js("return document.querySelectorAll('#notices li').length")
    forgot = b.js("return [...document.querySelectorAll('#notices li')].some(e => e.textContent.includes('Forgot memory'))")
    closed = free_port()
    d.write_config(f'[memory]\nbackend = "hindsight"\n[hindsight]\napi_url = "http://127.0.0.1:{closed}"\ntimeout = "2s"\n')
    status, v = d.api("POST", "/v1/reload")
    d.api("POST", "/v1/sessions", {"session_id": "ui-fail", "cwd": "/tmp"})
    d.api("POST", "/v1/sessions/ui-fail/retain", {"items": [{"content": "a fact that cannot be delivered yet"}]})
    d.api("POST", "/v1/flush", {"wait": True})
    t0 = time.time()
    b.wait("return [...document.querySelectorAll('#notices li')].some(e => e.dataset.level !== 'info')", "a live warning", 30)
    # The switch's notice has the bank list read again (the local banks were still offered).
    b.wait("return document.getElementById('bank').options[0].textContent === 'The configured bank'",
           "the new backend's banks", 20)
    step("live-notice", reload=status, forget_notice=forgot, before=before, wait_ms=round((time.time() - t0) * 1000),
         banks_after_switch=b.js("return [...document.getElementById('bank').options].map(o => o.textContent)"),
         warning=b.js("return [...document.querySelectorAll('#notices li')].find(e => e.dataset.level !== 'info').innerText"),
         highlighted=b.js("return getComputedStyle(document.querySelector('#notices li.warning, #notices li.error')).backgroundColor"))
    b.screenshot("5-notices")

    # A notice the spool could not store (a full disk: the error the view most needs to show)
    # comes with id 0, on the stream and in the backlog: shown once, and counted (review114 #2).
    # Handed to the page's own handler twice, as the stream and the backlog both may.
    unstored = "{id: 0, at: '2026-12-07T00:00:00Z', level: 'error', source: 'queue', message: 'UNSTORED-NOTICE the disk is full'}"
    b.js(f"showNotice({unstored}); showNotice({unstored});")
    step("unstored-notice",
         shown=b.js("return [...document.querySelectorAll('#notices li')].filter(e => e.textContent.includes('UNSTORED-NOTICE')).length"))

    # Back on Memories after the switch, seen from another tab: the list is the new backend's
    # (here one that cannot list: said so), not the local store's kept as current (review114 #3).
    b.click("#tab-memories")
    b.wait("return document.getElementById('list-info').textContent.startsWith('The backend cannot list')",
           "the list after the switch", 20)
    step("list-after-switch", info=b.js("return document.getElementById('list-info').textContent"),
         items=b.js("return document.querySelectorAll('#list li').length"))

    # The queue: the failed session waits, with its last delivery's error. (A click, not a new
    # page load: the list would ask the unreachable backend.)
    b.click("#tab-queue")
    b.wait("return [...document.querySelectorAll('#queue-table td')].some(e => e.textContent === 'ui-fail')", "the queue table")
    step("queue", rows=b.js("return [...document.querySelectorAll('#queue-table tbody tr')].map(r => r.innerText)"),
         last=b.js("return document.getElementById('last-delivery').textContent"))
    b.screenshot("6-queue")

    # A dead letter: a Hindsight that refuses the token (mneme's own Hindsight API, wrong token)
    # fails the delivery for good. Back on local, "Retry dead letters" in the view delivers it.
    d.write_config(f'[memory]\nbackend = "hindsight"\n[hindsight]\napi_url = "{d.url}/hindsight"\napi_token = "not-the-token"\n')
    status, _ = d.api("POST", "/v1/reload")
    d.api("POST", "/v1/flush", {"wait": True})
    b.wait("return !document.getElementById('retry').disabled", "the dead letter in the queue view", 20)
    dead_rows = b.js("return [...document.querySelectorAll('#queue-table tbody tr.dead')].map(r => r.innerText)")
    b.screenshot("6b-queue-dead-letter")
    d.write_config("")
    status2, _ = d.api("POST", "/v1/reload")
    b.click("#retry")
    b.wait("return document.getElementById('toast').textContent.startsWith('Re-queued')", "the retry's answer")
    retry_toast = b.js("return document.getElementById('toast').textContent")
    d.api("POST", "/v1/flush", {"wait": True})
    _, page = d.api("GET", "/v1/memories?limit=5")
    delivered = any(m["content"] == "a fact that cannot be delivered yet" for m in page["memories"])
    _, q = d.api("GET", "/v1/queue")
    step("dead-letter-retry", reload=[status, status2], dead_rows=dead_rows, toast=retry_toast, delivered=delivered,
         dead_after=q["totals"]["dead"], spooled_after=q["totals"]["spooled"])

    b.go(d.url + "/ui/#backend")
    b.wait("return document.querySelectorAll('#backend-facts dt').length > 0", "the backend facts")
    step("backend", facts=b.js("return document.getElementById('backend-facts').innerText"),
         embedding=b.js("return document.getElementById('embedding').hidden ? null : document.getElementById('embedding').innerText"))
    b.screenshot("7-backend")

    # A narrow window: nothing scrolls sideways.
    b.call("POST", "/window/rect", {"width": 420, "height": 900})
    b.go(d.url + "/ui/")
    b.wait("return document.body.dataset.listRendered", "the list, narrow")
    step("narrow", overflow=b.js("return document.documentElement.scrollWidth - document.documentElement.clientWidth"))
    b.screenshot("8-memories-narrow")
    b.call("POST", "/window/rect", {"width": 1280, "height": 900})

    # Keyboard: Tab reaches the tabs, the filters, the search box and the memories.
    b.go(d.url + "/ui/")
    b.wait("return document.body.dataset.listRendered", "the list")
    reached = set()
    for _ in range(20):
        b.keys("\ue004")
        reached.add(b.js("const e = document.activeElement; return e.id || e.className || e.tagName"))
    step("keyboard", reached=sorted(reached))
    # '/' from another tab shows the Memories view and focuses its search box (review114 #5).
    b.click("#tab-notices")
    b.wait("return !document.getElementById('view-notices').hidden", "the notices tab")
    b.js("document.activeElement.blur()")
    b.keys("/")
    step("slash-from-another-tab", focused=b.js("return document.activeElement.id"),
         memories_shown=b.js("return !document.getElementById('view-memories').hidden"))
    step("console", entries=b.console())


def run_tabs(d, b):
    """Seven tabs of the view in one browser: it opens six connections to one host at most, and a
    notice stream held by each tab left the seventh, and every request of the others, waiting."""
    def settles(script, seconds, *args):
        try:
            return bool(b.wait(script, "", seconds, *args))
        except RuntimeError:
            return False

    first = b.call("GET", "/window")
    b.go(d.url + "/ui/#notices")
    b.wait("return document.body.dataset.listRendered", "the list in the first tab")
    tabs, loaded = [first], [True]
    for _ in range(6):
        handle = b.call("POST", "/window/new", {"type": "tab"})["handle"]
        b.call("POST", "/window", {"handle": handle})
        b.go(d.url + "/ui/#notices")
        loaded.append(settles("return document.body.dataset.listRendered", 20))
        tabs.append(handle)
    # A notice made now reaches every tab (one of them streams, and passes it on).
    status, v = d.api("POST", "/v1/sessions/ui-seed/retain", {"items": [{"content": "a fact for the tabs to hear of"}]})
    assert status == 202, v
    d.api("POST", "/v1/flush", {"wait": True})
    _, page = d.api("GET", "/v1/memories?limit=1000")
    marker = next(m["id"] for m in page["memories"] if m["content"] == "a fact for the tabs to hear of")
    d.api("DELETE", f"/v1/memories/{marker}")
    heard = []
    for handle in tabs:
        b.call("POST", "/window", {"handle": handle})
        heard.append(settles("return [...document.querySelectorAll('#notices li')].some(e => e.textContent.includes(arguments[0]))",
                             15, marker))
    b.call("POST", "/window", {"handle": first})
    answer = b.call("POST", "/execute/async", {"script": (
        "const done = arguments[0]; setTimeout(() => done('no answer in 10 s'), 10000);"
        "fetch('/v1/status', {cache: 'no-store'}).then(r => done(r.status)).catch(e => done(String(e)));"), "args": []})
    for handle in tabs[1:]:
        b.call("POST", "/window", {"handle": handle})
        b.call("DELETE", "/window")
    b.call("POST", "/window", {"handle": first})
    # The first tab goes on hearing of notices once the others are closed (it may not have streamed).
    status, v = d.api("POST", "/v1/sessions/ui-seed/retain", {"items": [{"content": "a fact after the tabs closed"}]})
    d.api("POST", "/v1/flush", {"wait": True})
    _, page = d.api("GET", "/v1/memories?limit=1000")
    after = next(m["id"] for m in page["memories"] if m["content"] == "a fact after the tabs closed")
    d.api("DELETE", f"/v1/memories/{after}")
    heard_after = settles(
        "return [...document.querySelectorAll('#notices li')].some(e => e.textContent.includes(arguments[0]))", 15, after)
    step("tabs", loaded=loaded, heard=heard, first_tab_status=answer, heard_after_closing=heard_after)

    # One long word (a hash as a document id, a long tag) wraps: the page is no wider than the window.
    long_id, long_tag = "sha256-" + "ab12cd34ef" * 30, "ticket:" + "x" * 200
    status, v = d.api("POST", "/v1/import", {"memories": [
        {"id": "long-words", "bank": page["memories"][0]["bank"], "content": "a memory with long words around it",
         "document_id": long_id, "tags": [long_tag], "created_at": "2026-12-01T10:00:00Z"},
        # A Hebrew note ("Hello! We deploy with cargo-dist.") reads right to left.
        {"id": "rtl", "bank": page["memories"][0]["bank"], "content": "שלום! אנחנו פורסים עם cargo-dist.",
         "created_at": "2026-12-01T10:00:01Z"},
        # So does its line in a conversation's turn, after the Latin "[role: user]" line.
        {"id": "rtl-turn", "bank": page["memories"][0]["bank"],
         "content": "[role: user]\nשלום! אנחנו פורסים עם cargo-dist.\n[user:end]",
         "created_at": "2026-12-01T10:00:02Z"}]})
    assert status == 200, v
    d.api("POST", "/v1/flush", {"wait": True})
    b.go(d.url + "/ui/")
    b.wait("return [...document.querySelectorAll('#list .item')].some(e => e.textContent.includes('long words'))",
           "the memory with long words")
    wide = b.js("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
    rtl = b.js("const e = document.querySelector('#list .item[data-id=\"rtl\"] .text .line');"
               "return e && getComputedStyle(e).direction")
    # Where the line's words land: Hebrew read right to left puts its first word right of the
    # Latin one at its end.
    # And the line after it as written, a paragraph of its own: laid out in one text with the
    # Hebrew line (unicode-bidi: plaintext), its brackets were drawn mirrored.
    turn_rtl = b.js("const e = document.querySelector('#list .item[data-id=\"rtl-turn\"] .text');"
                    "if (!e) return null;"
                    "const walk = document.createTreeWalker(e, NodeFilter.SHOW_TEXT), texts = [];"
                    "for (let n; (n = walk.nextNode());) texts.push(n);"
                    "const at = (w, k) => { const t = texts.find(n => n.data.includes(w) && (k ? n.data.includes(k) : true));"
                    "  const r = document.createRange(), i = t.data.indexOf(w);"
                    "  r.setStart(t, i); r.setEnd(t, i + w.length); return r.getBoundingClientRect().left; };"
                    "const dir = w => getComputedStyle(texts.find(n => n.data.includes(w)).parentElement).direction;"
                    "return at('שלום') > at('cargo') && dir('שלום') === 'rtl' && dir('user:end') === 'ltr'"
                    "  && e.textContent.includes('\\n[user:end]')")
    # The confirmation to delete its document names the id whole, within the dialog.
    b.click('#list .item[data-id="long-words"]')
    b.wait("return document.getElementById('detail').dataset.id === 'long-words'", "the long memory's detail")
    b.click("#forget-document")
    b.wait("return document.getElementById('confirm').open", "the document confirmation")
    dialog = b.js("const d = document.getElementById('confirm'); return d.scrollWidth - d.clientWidth")
    b.click("#confirm-cancel")
    d.api("DELETE", "/v1/memories/long-words")
    d.api("DELETE", "/v1/memories/rtl")
    d.api("DELETE", "/v1/memories/rtl-turn")
    step("long-words", overflow=wide, dialog_overflow=dialog, rtl_direction=rtl, rtl_turn=turn_rtl)


def run_other_origin(d, b, scope, fact_id):
    other = OtherOrigin(d.url, fact_id, scope["bank"])
    before = {
        "memories_403": metric(d, "/v1/memories", 403) + metric(d, "/v1/memories/{id}", 403),
        "retry_403": metric(d, "/v1/retry", 403),
        "search_403": metric(d, "/v1/search", 403),
    }
    _, count_before = d.api("GET", "/v1/status")
    b.go(other.url)
    outcome = b.wait("return window.outcome && window.outcome.done && window.outcome", "the other origin's attempts", 20)
    after = {
        "memories_403": metric(d, "/v1/memories", 403) + metric(d, "/v1/memories/{id}", 403),
        "retry_403": metric(d, "/v1/retry", 403),
        "search_403": metric(d, "/v1/search", 403),
    }
    b.js("document.getElementById('clear').submit()")
    b.wait("return location.href.includes('/v1/clear')", "the form's answer")
    time.sleep(0.3)
    form_answer = b.js("return document.body.innerText")
    status, target = d.api("GET", f"/v1/memories/{fact_id}")
    _, count_after = d.api("GET", "/v1/status")
    step("other-origin", outcome=outcome, refused_by_daemon={k: after[k] - before[k] for k in after}, form_answer=form_answer,
         target_status=status, memories_before=count_before["backend"]["memories"],
         memories_after=count_after["backend"]["memories"])
    b.screenshot("9-other-origin-form")


def run_logout(d, b):
    b.go(d.url + "/ui/")
    b.wait("return document.body.dataset.listRendered", "the list")
    b.click("#logout")
    b.wait("return !document.getElementById('login').hidden", "the logged-out page")
    status, _ = request("GET", d.url + "/v1/status")
    b.go(d.url + "/ui/")
    b.wait("return !document.getElementById('login').hidden", "the login hint after logout")
    step("logout", cookies=[c["name"] for c in b.call("GET", "/cookie")], anonymous_status=status)

    # A session that ends while the page is open (a restarted daemon has forgotten it): the page
    # shows the login within a poll, instead of "reconnecting" for good.
    b.go(d.cli("ui", "--no-open").stdout.strip())
    b.wait("return document.body.dataset.listRendered", "the list, logged in again")
    b.call("DELETE", "/cookie")
    step("session-ended", login_shown=b.wait("return !document.getElementById('login').hidden",
                                             "the login after the session ended", 10))


if __name__ == "__main__":
    main()
