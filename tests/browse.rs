//! Single memories over the API (list newest first, show, forget, search without a session, the
//! queue per session), `mneme forget`, and the web view's login: a one-time code for a cookie
//! that opens the view's routes only, from the view's own origin. The browser itself is driven
//! in `tests/web_ui.rs`.

mod common;

use common::Daemon;
use reqwest::{header, Method, StatusCode};
use serde_json::{json, Value};

const NO_EMBEDDER: &str = "[local]\nembedder = \"off\"\n";

/// Retains `texts` in session `s` (project `proj`, so tagged `project:proj` by default scoping)
/// and waits until they are stored.
async fn retain(d: &Daemon, session: &str, cwd: &str, texts: &[&str]) {
    d.start_session(session, cwd).await;
    let items: Vec<Value> = texts.iter().map(|t| json!({"content": t})).collect();
    let (status, v) = d.post(&format!("/v1/sessions/{session}/retain"), json!({"items": items})).await;
    assert_eq!(status, 202, "{v}");
    let (status, v) = d.post("/v1/flush", json!({"wait": true})).await;
    assert_eq!(status, 200, "{v}");
}

#[tokio::test]
async fn memories_are_listed_newest_first_by_bank_and_tag_and_paged() {
    let d = Daemon::start(NO_EMBEDDER);
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let first: Vec<String> = (0..5).map(|i| format!("alpha fact number {i}")).collect();
    let refs: Vec<&str> = first.iter().map(String::as_str).collect();
    retain(&d, "s1", a.path().to_str().unwrap(), &refs).await;
    retain(&d, "s2", b.path().to_str().unwrap(), &["beta fact in the other project"]).await;

    let (status, v) = d.get("/v1/memories").await;
    assert_eq!(status, 200, "{v}");
    let texts: Vec<&str> = v["memories"].as_array().unwrap().iter().map(|m| m["content"].as_str().unwrap()).collect();
    assert_eq!(texts[0], "beta fact in the other project", "newest first: {texts:?}");
    assert_eq!(
        texts[1..],
        [
            "alpha fact number 4",
            "alpha fact number 3",
            "alpha fact number 2",
            "alpha fact number 1",
            "alpha fact number 0"
        ]
    );
    assert!(v["next"].is_null());

    let tag = v["memories"][1]["tags"][0].as_str().unwrap().to_owned();
    assert!(tag.starts_with("project:"), "{tag}");
    let (_, v) = d.get(&format!("/v1/memories?tags={tag}&limit=2")).await;
    let page: Vec<&str> = v["memories"].as_array().unwrap().iter().map(|m| m["content"].as_str().unwrap()).collect();
    assert_eq!(page, ["alpha fact number 4", "alpha fact number 3"]);
    let next = v["next"].as_str().expect("a next page").to_owned();
    let (_, v) = d.get(&format!("/v1/memories?tags={tag}&limit=2&cursor={next}&preview=7")).await;
    let page: Vec<&str> = v["memories"].as_array().unwrap().iter().map(|m| m["content"].as_str().unwrap()).collect();
    assert_eq!(page, ["alpha f…", "alpha f…"], "the next page, previews cut");

    let (_, v) = d.get("/v1/memories?bank=nosuchbank").await;
    assert_eq!(v["memories"], json!([]));
    let (_, v) = d.get("/v1/banks").await;
    assert_eq!(v["banks"][0]["memories"], 6, "{v}");

    let (status, v) = d.get("/v1/memories?cursor=notanumber").await;
    assert_eq!(status, 400, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("cursor"), "{v}");
    // An empty cursor is the first page, on the list and the export alike (review85 #1: the
    // export refused it).
    for route in ["/v1/memories?cursor=&limit=2", "/v1/export?cursor=&limit=2"] {
        let (status, v) = d.get(route).await;
        assert_eq!((status, v["memories"].as_array().map(Vec::len)), (200, Some(2)), "{route}: {v}");
    }
}

/// A project in a folder whose name holds a comma is listed by its tag, the comma written `\,`:
/// split there, the list asked for `project:web` and `app`, and was empty (review58 #2).
#[tokio::test]
async fn a_tag_holding_a_comma_is_listed_with_it_escaped() {
    let d = Daemon::start(NO_EMBEDDER);
    let parent = tempfile::tempdir().unwrap();
    let folder = parent.path().join("web,app");
    std::fs::create_dir(&folder).unwrap();
    retain(&d, "s1", folder.to_str().unwrap(), &["the web app builds with vite"]).await;
    let (_, v) = d.get("/v1/memories?tags=project:web%5C,app").await;
    let texts: Vec<&str> = v["memories"].as_array().unwrap().iter().map(|m| m["content"].as_str().unwrap()).collect();
    assert_eq!(texts, ["the web app builds with vite"], "{v}");
    assert_eq!(v["memories"][0]["tags"], json!(["project:web,app"]), "{v}");
    let (_, v) = d.get("/v1/memories?tags=project:web,app").await;
    assert_eq!(v["memories"], json!([]), "unescaped, two tags: {v}");
}

#[tokio::test]
async fn a_memory_shows_its_passages_and_forgetting_it_removes_it_from_recall_with_a_notice() {
    let d = Daemon::start(NO_EMBEDDER);
    let cwd = tempfile::tempdir().unwrap();
    let long: String = (0..60).map(|i| format!("[user]: step {i} of the zephyr migration plan\n\n")).collect();
    retain(&d, "s", cwd.path().to_str().unwrap(), &["the deploy key lives in vault under zephyr", &long]).await;
    let (_, v) = d.get("/v1/memories").await;
    let long_id = v["memories"][0]["id"].as_str().unwrap().to_owned();
    let short_id = v["memories"][1]["id"].as_str().unwrap().to_owned();

    let (status, detail) = d.get(&format!("/v1/memories/{long_id}")).await;
    assert_eq!(status, 200, "{detail}");
    assert_eq!(detail["memory"]["content"], long.trim_end());
    assert!(detail["passages"].as_array().unwrap().len() > 1, "a long memory is split: {detail}");
    assert_eq!(detail["document_memories"], 1);

    let (_, found) = d.post("/v1/search", json!({"query": "where is the deploy key"})).await;
    assert!(found["results"].as_array().unwrap().iter().any(|r| r["id"] == short_id.as_str()), "{found}");

    let (_, before) = d.get("/v1/status").await;
    let out = d.cli().args(["forget", &short_id]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("Deleted 1 memory"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let (status, v) = d.get(&format!("/v1/memories/{short_id}")).await;
    assert_eq!(status, 404, "{v}");
    assert_eq!(v["error"]["code"], "not_found");
    let (_, found) = d.post("/v1/search", json!({"query": "where is the deploy key"})).await;
    assert!(found["results"].as_array().unwrap().iter().all(|r| r["id"] != short_id.as_str()), "{found}");
    let (_, notices) = d.get(&format!("/v1/notices?after={}", before["last_notice_id"])).await;
    assert!(
        notices["notices"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["source"] == "forget" && n["message"].as_str().unwrap().contains(&short_id)),
        "{notices}"
    );

    let (status, v) = d.req(Method::DELETE, &format!("/v1/memories/{short_id}"), None).await;
    assert_eq!(status, 404, "forgetting twice: {v}");
    let out = d.cli().args(["forget", "no-such-id"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no memory"), "{}", String::from_utf8_lossy(&out.stderr));
    let (status, v) = d.req(Method::DELETE, "/v1/documents/doc", None).await;
    assert_eq!(status, 400, "a document needs its bank: {v}");
    let (status, v) = d.post("/v1/search", json!({"query": "  "})).await;
    assert_eq!(status, 400, "{v}");
    for n in [json!(0), json!(100_001), json!(1_000_000_000_000_000u64)] {
        let (status, v) = d.post("/v1/search", json!({"query": "deploy key", "max_tokens": n})).await;
        assert_eq!(status, 400, "{n}: {v}");
        assert_eq!(v["error"]["message"], "max_tokens must be from 1 to 100000 (a token is about 4 characters)");
    }
    let (status, v) = d.post("/v1/search", json!({"query": "deploy key", "max_tokens": 100_000})).await;
    assert_eq!(status, 200, "{v}");
    // Too many tags to filter on is the client's mistake (it was a 503 from SQLite's depth limit).
    let many: Vec<String> = (0..1000).map(|i| format!("t{i}")).collect();
    let (status, v) = d.post("/v1/search", json!({"query": "deploy key", "tags": many})).await;
    assert_eq!(status, 400, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("at most 100"), "{v}");
    let (status, v) = d.get(&format!("/v1/memories?tags={}", many[..200].join(","))).await;
    assert_eq!(status, 400, "{v}");
    let (status, v) = d.post("/v1/search", json!({"query": "deploy key", "tags": many[..100]})).await;
    assert_eq!(status, 200, "{v}");
    // The CLI says which flag the bank is.
    let out = d.cli().args(["forget", "--document", "doc"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("--bank"), "{}", String::from_utf8_lossy(&out.stderr));
    // Ids with a URL's own characters reach the daemon as they are; "." and ".." cannot be put
    // in a URL path at all, so they are not taken.
    let memory = |id: &str| json!({"id": id, "bank": "mneme", "content": format!("odd id {id}"), "created_at": "2026-01-01T00:00:00Z"});
    for id in [".", ".."] {
        let (status, v) = d.post("/v1/import", json!({"memories": [memory(id)]})).await;
        assert_eq!(status, 400, "{v}");
    }
    // Nor a bank with spaces at its ends (every `?bank=` is trimmed: it could not be named).
    let mut spaced = memory("spaced");
    spaced["bank"] = json!(" mneme");
    let (status, v) = d.post("/v1/import", json!({"memories": [spaced]})).await;
    assert_eq!(status, 400, "{v}");
    assert!(v.to_string().contains("bank"), "{v}");
    // Nor a document that is ".." once its private span is removed, as it would be stored.
    let mut in_document = memory("dotted");
    in_document["document_id"] = json!("..<private>s</private>");
    let (status, v) = d.post("/v1/import", json!({"memories": [in_document]})).await;
    assert_eq!(status, 400, "{v}");
    assert!(v.to_string().contains("document_id"), "{v}");
    let (status, v) = d.post("/v1/import", json!({"memories": [memory("a/b"), memory("?#"), memory("%2E")]})).await;
    assert_eq!(status, 200, "{v}");
    // A memory without `created_at` is dated at its import, as one with an empty one is (it was
    // refused as a missing field).
    let (status, v) =
        d.post("/v1/import", json!({"memories": [{"id": "undated", "bank": "mneme", "content": "no date"}]})).await;
    assert_eq!((status, &v["imported"]), (200, &json!(1)), "{v}");
    let (_, v) = d.get("/v1/memories/undated?bank=mneme").await;
    assert!(v["memory"]["created_at"].as_str().is_some_and(|t| t.starts_with("20")), "{v}");
    for id in ["a/b", "?#", "%2E"] {
        let out = d.cli().args(["forget", id]).output().unwrap();
        assert!(out.status.success(), "{id}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let out = d.cli().args(["forget", ""]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("give the id"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test]
async fn forgetting_a_document_removes_every_memory_of_it() {
    let d = Daemon::start(NO_EMBEDDER);
    let (status, v) = d
        .post(
            "/v1/import",
            json!({"memories": [
                {"id": "m1", "bank": "b", "content": "first part of the design doc", "document_id": "design", "created_at": "2026-01-01T00:00:00Z"},
                {"id": "m2", "bank": "b", "content": "second part of the design doc", "document_id": "design", "created_at": "2026-01-01T00:00:01Z"},
                {"id": "m3", "bank": "b", "content": "unrelated note", "created_at": "2026-01-01T00:00:02Z"}
            ]}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let (_, detail) = d.get("/v1/memories/m1?bank=b").await;
    assert_eq!(detail["document_memories"], 2, "{detail}");
    let (status, v) = d.get("/v1/memories/m1?bank=other").await;
    assert_eq!(status, 404, "ids are looked up in the bank named: {v}");
    let (status, v) = d.get("/v1/memories/m1?bank=").await;
    assert_eq!(status, 200, "an empty bank names none, as in /v1/search: {v}");
    let (_, v) = d.get("/v1/memories?bank=%20").await;
    assert_eq!(v["memories"].as_array().unwrap().len(), 3, "{v}");
    // A URL takes . and .. for steps in a path: on Hindsight they would name another bank.
    for dot in [".", ".."] {
        let (status, v) = d.get(&format!("/v1/memories?bank={dot}")).await;
        assert_eq!((status, v["error"]["code"].as_str()), (400, Some("invalid_request")), "{dot}: {v}");
    }
    let out = d.cli().args(["forget", "--document", "design", "--bank", "b", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["deleted"], 2, "{v}");
    let (_, v) = d.get("/v1/memories?bank=b").await;
    let ids: Vec<&str> = v["memories"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["m3"]);
}

#[tokio::test]
async fn the_queue_is_shown_per_session_with_its_last_delivery() {
    let d = Daemon::start(NO_EMBEDDER);
    let cwd = tempfile::tempdir().unwrap();
    retain(&d, "qs", cwd.path().to_str().unwrap(), &["a queued fact"]).await;
    let (status, v) = d.get("/v1/queue").await;
    assert_eq!(status, 200, "{v}");
    let row = v["sessions"].as_array().unwrap().iter().find(|s| s["session_id"] == "qs").expect("the session").clone();
    assert_eq!(row["spooled"], 0, "{row}");
    assert_eq!(row["last_delivery"]["ok"], true, "{row}");
    assert_eq!(row["last_delivery"]["items"], 1, "{row}");
    assert!(row["last_delivery"]["took_ms"].as_f64().unwrap() >= 0.0);
    assert_eq!(v["totals"]["dead"], 0);
    assert_eq!(v["last_delivery"], row["last_delivery"]);
}

/// A browser-like client: cookies are sent by hand, as a browser would.
struct Browser {
    http: reqwest::Client,
    origin: String,
    cookie: String,
}

impl Browser {
    async fn login(d: &Daemon) -> Browser {
        let out = d.cli().args(["ui", "--no-open"]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let url = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        assert!(url.starts_with(&format!("http://{}/ui/login?code=", d.addr)), "{url}");
        assert!(!url.contains(&d.token), "the token is never in the URL");
        let http = reqwest::Client::builder().no_proxy().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        let r = http.get(&url).header("sec-fetch-site", "none").send().await.unwrap();
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        assert_eq!(r.headers()[header::LOCATION], "/ui/");
        let set = r.headers()[header::SET_COOKIE].to_str().unwrap().to_owned();
        for part in ["HttpOnly", "SameSite=Strict", "Path=/"] {
            assert!(set.contains(part), "{set}");
        }
        let again = http.get(&url).send().await.unwrap();
        assert_eq!(again.status(), StatusCode::UNAUTHORIZED, "a code works once");
        // A link cut short says so, not that its code was used (review81's note).
        let cut = http.get(format!("http://{}/ui/login?code=", d.addr)).send().await.unwrap();
        assert_eq!(cut.status(), StatusCode::BAD_REQUEST);
        let v: Value = cut.json().await.unwrap();
        assert!(v["error"]["message"].as_str().unwrap().contains("no code"), "{v}");
        let cookie = set.split(';').next().unwrap().to_owned();
        Browser { http, origin: format!("http://{}", d.addr), cookie }
    }

    fn req(&self, d: &Daemon, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.http.request(method, d.url(path)).header(header::COOKIE, &self.cookie)
    }

    /// Logs out from the view's own origin with the session's CSRF value.
    async fn logout(&self, d: &Daemon, csrf: &str) -> reqwest::Response {
        self.req(d, Method::POST, "/ui/logout")
            .header("origin", &self.origin)
            .header("x-mneme-csrf", csrf)
            .send()
            .await
            .unwrap()
    }
}

#[tokio::test]
async fn the_web_views_cookie_opens_its_routes_only_and_only_from_its_own_origin() {
    let d = Daemon::start(NO_EMBEDDER);
    let cwd = tempfile::tempdir().unwrap();
    retain(&d, "s", cwd.path().to_str().unwrap(), &["a fact the view shows"]).await;

    let page = reqwest::get(d.url("/ui/")).await.unwrap();
    assert_eq!(page.status(), 200);
    let csp = page.headers()[header::CONTENT_SECURITY_POLICY].to_str().unwrap().to_owned();
    assert!(csp.contains("frame-ancestors 'none'") && csp.contains("script-src 'self'"), "{csp}");
    let html = page.text().await.unwrap();
    assert!(!html.contains(&d.token));
    let (status, v) = {
        let r = reqwest::Client::new().get(d.url("/ui/session")).send().await.unwrap();
        (r.status(), r.text().await.unwrap())
    };
    assert_eq!(status, 200, "{v}");
    assert_eq!(serde_json::from_str::<Value>(&v).unwrap()["logged_in"], false, "no cookie, no session: {v}");
    // From another local port's page, the same refusal with a session or without: the status
    // told the page whether the owner had the view open (review81's note).
    let other_page = |r: reqwest::RequestBuilder| r.header("sec-fetch-site", "same-site").send();
    let r = other_page(reqwest::Client::new().get(d.url("/ui/session"))).await.unwrap();
    assert_eq!(r.status(), 403, "without a session");

    let b = Browser::login(&d).await;
    let r = other_page(b.req(&d, Method::GET, "/ui/session")).await.unwrap();
    assert_eq!(r.status(), 403, "with a session");
    let r = b.req(&d, Method::GET, "/ui/session").header("sec-fetch-site", "same-origin").send().await.unwrap();
    assert_eq!(r.status(), 200);
    let csrf = r.json::<Value>().await.unwrap()["csrf"].as_str().unwrap().to_owned();
    assert!(!csrf.contains(&d.token));

    let r = b.req(&d, Method::GET, "/v1/memories").header("sec-fetch-site", "same-origin").send().await.unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["memories"][0]["content"], "a fact the view shows");

    // Only the view's routes.
    for (method, path) in [(Method::GET, "/v1/export"), (Method::POST, "/v1/clear"), (Method::POST, "/v1/ui/codes")] {
        let r = b
            .req(&d, method.clone(), path)
            .header("origin", &b.origin)
            .header("x-mneme-csrf", &csrf)
            .header("content-type", "application/json")
            .body("{\"all\":true}")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{method} {path}");
        assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "forbidden_for_browser");
    }
    // Another origin on the same machine (same site, so SameSite lets the cookie through).
    let other = "http://127.0.0.1:9";
    let r = b
        .req(&d, Method::GET, "/v1/memories")
        .header("origin", other)
        .header("sec-fetch-site", "same-site")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "forbidden_cross_site");
    let id = v["memories"][0]["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/memories/{id}");
    let r =
        b.req(&d, Method::DELETE, &path).header("origin", other).header("x-mneme-csrf", &csrf).send().await.unwrap();
    assert_eq!(r.status(), 403, "a cross-origin delete");
    let r = b.req(&d, Method::DELETE, &path).header("origin", &b.origin).send().await.unwrap();
    assert_eq!(r.status(), 403, "a delete without the CSRF header");
    let r = b
        .req(&d, Method::DELETE, &path)
        .header("origin", &b.origin)
        .header("x-mneme-csrf", "wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403, "a delete with a wrong CSRF value");
    let (status, _) = d.get(&path).await;
    assert_eq!(status, 200, "still stored");
    let r = b
        .req(&d, Method::DELETE, &path)
        .header("origin", &b.origin)
        .header("sec-fetch-site", "same-origin")
        .header("x-mneme-csrf", &csrf)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let (status, _) = d.get(&path).await;
    assert_eq!(status, 404, "forgotten");

    // Logging out ends the session.
    assert_eq!(b.logout(&d, &csrf).await.status(), 204);
    let r = b.req(&d, Method::GET, "/v1/memories").send().await.unwrap();
    assert_eq!(r.status(), 401);
    let cookie_name = format!("mneme_ui_{}", d.addr.rsplit(':').next().unwrap());
    let cleared = |r: &reqwest::Response| {
        r.headers()
            .get(header::SET_COOKIE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with(&format!("{cookie_name}=;")) && v.contains("Max-Age=0"))
    };
    assert!(cleared(&r), "the ended session's cookie is cleared: {:?}", r.headers());
    // Logging out again (a second tab) clears the cookie, without an error.
    let r = b.req(&d, Method::POST, "/ui/logout").header("origin", &b.origin).send().await.unwrap();
    assert_eq!(r.status(), 204);
    assert!(cleared(&r), "{:?}", r.headers());
    let r = b.req(&d, Method::GET, "/ui/session").send().await.unwrap();
    assert_eq!(r.json::<Value>().await.unwrap()["logged_in"], false);
    // A made-up cookie opens nothing either.
    let made_up = format!("{cookie_name}=0000");
    let r = reqwest::Client::new().get(d.url("/v1/status")).header(header::COOKIE, made_up).send().await.unwrap();
    assert_eq!(r.status(), 401);
    // Another daemon's view (another port, one cookie jar in the browser): its cookie is not
    // this daemon's to refuse or clear.
    let other = "mneme_ui_1=0000";
    let r = reqwest::Client::new().get(d.url("/v1/status")).header(header::COOKIE, other).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.headers().get(header::SET_COOKIE).is_none(), "{:?}", r.headers());
}

/// With `server.allow_remote`, the view opened at the daemon's network address may change things
/// (its origin is the request's own host); another origin still may not.
#[tokio::test]
async fn with_allow_remote_the_view_at_the_network_address_can_delete() {
    let d = Daemon::start(&format!("{NO_EMBEDDER}[server]\nallow_remote = true\n"));
    let cwd = tempfile::tempdir().unwrap();
    retain(&d, "s", cwd.path().to_str().unwrap(), &["a fact to delete remotely"]).await;
    let b = Browser::login(&d).await;
    let host = "192.168.1.5:6366";
    let from = |origin: &str, method: Method, path: &str| {
        b.req(&d, method, path)
            .header(header::HOST, host)
            .header("origin", origin)
            .header("sec-fetch-site", "same-origin")
    };
    let r = from(&format!("http://{host}"), Method::GET, "/ui/session").send().await.unwrap();
    let csrf = r.json::<Value>().await.unwrap()["csrf"].as_str().unwrap().to_owned();
    let (_, v) = d.get("/v1/memories").await;
    let path = format!("/v1/memories/{}", v["memories"][0]["id"].as_str().unwrap());
    let r = from("http://192.168.1.9:6366", Method::DELETE, &path).header("x-mneme-csrf", &csrf).send().await.unwrap();
    assert_eq!(r.status(), 403, "another origin");
    let r = from(&format!("http://{host}"), Method::DELETE, &path).header("x-mneme-csrf", &csrf).send().await.unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    // A caller without the token is not told where the owner keeps it (their home, their name).
    let r = d.http.get(d.url("/v1/status")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let v: Value = r.json().await.unwrap();
    let data = d.data().display().to_string();
    assert!(!v["error"]["message"].as_str().unwrap().contains(&data), "{v}");
}

#[tokio::test]
async fn a_login_code_request_is_checked_not_clamped() {
    let d = Daemon::start(NO_EMBEDDER);
    let send = |body: &'static str| {
        d.http
            .post(d.url("/v1/ui/codes"))
            .bearer_auth(&d.token)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    for (body, status, code) in [
        ("[]", 422, "invalid_field"),
        ("{bad", 400, "invalid_json"),
        (r#"{"valid_for_seconds": 0}"#, 400, "invalid_request"),
        (r#"{"valid_for_seconds": 1000000000000}"#, 400, "invalid_request"),
    ] {
        let r = send(body).await.unwrap();
        assert_eq!(r.status(), status, "{body}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], code, "{body}: {v}");
    }
    let r = send(r#"{"valid_for_seconds": 60}"#).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["valid_for_seconds"], 60);
    let r = send("").await.unwrap();
    assert_eq!(r.json::<Value>().await.unwrap()["valid_for_seconds"], 12 * 3600, "no body: the default");
    // Out of range, short or long, is one usage error (review109 #2: a year and more was the
    // config parser's "at most 365 days").
    for too in ["0s", "31days", "400days"] {
        let out = d.cli().args(["ui", "--no-open", "--valid-for", too]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{too}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains("'--valid-for <DURATION>': must be from 1m to 30days"), "{too}: {said}");
    }
}

/// On a desktop, `mneme ui` gives the browser a private page that sends it on, never the URL:
/// a command's arguments are readable by every user (/proc/*/cmdline), and whoever uses the
/// one-time code first gets the view's session.
#[tokio::test]
async fn the_login_code_is_not_in_the_openers_arguments() {
    use std::os::unix::fs::PermissionsExt;
    let d = Daemon::start(NO_EMBEDDER);
    let bin = tempfile::tempdir().unwrap();
    let said = bin.path().join("args");
    let opener = bin.path().join("xdg-open");
    std::fs::write(&opener, format!("#!/bin/sh\nprintf '%s\\n' \"$@\" > {}.part && mv {0}.part {0}\n", said.display()))
        .unwrap();
    std::fs::set_permissions(&opener, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.path().display(), std::env::var("PATH").unwrap_or_default());
    let out = d.cli().arg("ui").env("DISPLAY", ":99").env("PATH", path).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let url = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !said.exists() {
        assert!(std::time::Instant::now() < until, "the opener did not run");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let args = std::fs::read_to_string(&said).unwrap();
    assert!(!args.contains("code="), "the code is in the opener's arguments: {args}");
    let page = std::path::PathBuf::from(args.trim());
    assert_eq!(page, d.data().join("ui-login.html"));
    assert_eq!(std::fs::metadata(&page).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(std::fs::read_to_string(&page).unwrap().contains(&url), "the page sends the browser to {url}");
}

/// A notice stream the web view opened ends with its session: it went on delivering notices
/// after a logout (or the session's time up) until the daemon stopped.
#[tokio::test]
async fn the_views_notice_stream_ends_with_its_session() {
    let d = Daemon::start(NO_EMBEDDER);
    let b = Browser::login(&d).await;
    let session = b.req(&d, Method::GET, "/ui/session").send().await.unwrap();
    let csrf = session.json::<Value>().await.unwrap()["csrf"].as_str().unwrap().to_owned();
    let mut stream = b.req(&d, Method::GET, "/v1/notices/stream").send().await.unwrap();
    assert_eq!(stream.status(), 200);
    assert_eq!(b.logout(&d, &csrf).await.status(), 204);
    // Within the stream's check (2 s) and well before its 15 s keep-alive.
    let ended = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while stream.chunk().await.unwrap_or(None).is_some() {}
    })
    .await;
    assert!(ended.is_ok(), "the stream outlived its session");
    // The token's stream is not tied to any view session.
    let mut tokened = d.http.get(d.url("/v1/notices/stream")).bearer_auth(&d.token).send().await.unwrap();
    assert_eq!(tokened.status(), 200);
    let open = tokio::time::timeout(std::time::Duration::from_secs(3), tokened.chunk()).await;
    assert!(open.is_err(), "still open: {open:?}");
}

/// Forgetting a document drops its versions still queued (by any session): one delivered after
/// the forget stored the document again. A document only queued is forgotten too.
#[tokio::test]
async fn forgetting_a_document_drops_its_queued_versions() {
    let d = Daemon::start("[queue]\nflush_interval = \"1h\"\n");
    let retain = |content: &str, document: &str, wait: bool| {
        let item = json!({"content": content, "document_id": document, "metadata": {"session_id": "omp-1"}});
        d.post("/hindsight/v1/default/banks/fgb/memories", json!({"items": [item], "async": !wait}))
    };
    retain("doc version one ECHIDNA first", "fdoc", true).await;
    retain("doc version two ECHIDNA second", "fdoc", false).await;
    retain("another document KEPT-NUMBAT", "other", false).await;
    retain("only ever queued PLATYPUS", "queued-only", false).await;
    let (status, v) = d.req(Method::DELETE, "/v1/documents/fdoc?bank=fgb", None).await;
    assert_eq!(status, 200, "{v}");
    assert!(v["message"].as_str().unwrap().contains("1 queued"), "{v}");
    let (status, v) = d.req(Method::DELETE, "/v1/documents/queued-only?bank=fgb", None).await;
    assert_eq!(status, 200, "{v}");
    let (_, v) = d.post("/v1/flush", json!({})).await;
    assert_eq!(v["failed"], 0, "{v}");
    let (_, exported) = d.get("/v1/export?bank=fgb").await;
    let text = exported.to_string();
    assert!(!text.contains("ECHIDNA") && !text.contains("PLATYPUS"), "{text}");
    assert!(text.contains("KEPT-NUMBAT"), "the other document of the batch is stored: {text}");
    let (status, v) = d.req(Method::DELETE, "/v1/documents/queued-only?bank=fgb", None).await;
    assert_eq!(status, 404, "forgotten once: {v}");
}

/// A forget while the Hindsight backend is down drops the document's queued versions all the
/// same, and its 503 says so (it read as if nothing had been forgotten); they stay dropped.
#[tokio::test]
async fn a_forget_during_an_outage_says_what_it_dropped() {
    let d = Daemon::start(
        "[memory]\nbackend = \"hindsight\"\n[hindsight]\napi_url = \"http://127.0.0.1:9\"\n[queue]\nflush_interval = \"1h\"\n",
    );
    for v in ["one", "two"] {
        let item = json!({"content": format!("version {v} of the OUTAGEDOC"), "document_id": "od"});
        let (status, body) =
            d.post("/hindsight/v1/default/banks/mneme/memories", json!({"items": [item], "async": true})).await;
        assert_eq!(status, 200, "{body}");
    }
    let (_, st) = d.get("/v1/status").await;
    let before = st["queue"]["spooled"].as_u64().unwrap();
    let (status, v) = d.req(Method::DELETE, "/v1/documents/od?bank=mneme", None).await;
    assert_eq!(status, 503, "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("2 queued copies were dropped"), "{message}");
    let (_, st) = d.get("/v1/status").await;
    assert_eq!(st["queue"]["spooled"].as_u64().unwrap(), before - 2, "{st}");
}

/// Forgetting the memory automatic retain wrote for a session forgets that session's conversation
/// so far, as forgetting its document does: the session's next full-session retain stored the
/// whole history again, the forgotten turns with it.
#[tokio::test]
async fn forgetting_a_sessions_transcript_memory_is_not_undone_by_its_next_turn() {
    let d = Daemon::start(&format!("{NO_EMBEDDER}[retain]\nevery_n_turns = 1\n"));
    let proj = tempfile::tempdir().unwrap();
    d.start_session("s1", proj.path().to_str().unwrap()).await;
    let turns = |n: usize| -> Vec<Value> {
        (0..n)
            .flat_map(|i| {
                [
                    json!({"role": "user", "content": format!("question {i} about the zeppelin hangar")}),
                    json!({"role": "assistant", "content": format!("answer {i}")}),
                ]
            })
            .collect()
    };
    let (_, v) = d.post("/v1/sessions/s1/agent-end", json!({"messages": turns(2)})).await;
    assert_eq!(v["retained"], 1, "{v}");
    let (_, v) = d.get("/v1/memories").await;
    let memory = &v["memories"][0];
    assert_eq!(memory["document_id"], "s1", "{v}");
    let path = format!("/v1/memories/{}?bank={}", memory["id"].as_str().unwrap(), memory["bank"].as_str().unwrap());
    let (status, v) = d.req(Method::DELETE, &path, None).await;
    assert_eq!(status, 200, "{v}");
    let (_, v) = d.post("/v1/sessions/s1/agent-end", json!({"messages": turns(3)})).await;
    assert_eq!(v["retained"], 1, "{v}");
    let (_, v) = d.get("/v1/memories").await;
    let text = v.to_string();
    assert!(text.contains("question 2 about the zeppelin hangar"), "the turn after the forget is kept: {text}");
    for i in 0..2 {
        assert!(!text.contains(&format!("question {i} about")), "turn {i} came back: {text}");
    }
}

/// A second login in the same browser ends the session its cookie replaced, and a log out ends
/// every session of the view: the first cookie still read and deleted memories for its whole
/// lifetime (12 h by default) after the owner logged out (review114 #1).
#[tokio::test]
async fn a_new_login_ends_the_session_it_replaces_and_a_logout_ends_them_all() {
    let d = Daemon::start(NO_EMBEDDER);
    let cwd = tempfile::tempdir().unwrap();
    retain(&d, "s", cwd.path().to_str().unwrap(), &["a fact the view shows"]).await;
    let status_with = |b: &Browser| {
        let r = b.req(&d, Method::GET, "/v1/memories").header("sec-fetch-site", "same-origin").send();
        async move { r.await.unwrap().status().as_u16() }
    };
    // The link opened in the browser that holds the first session's cookie: it is sent along.
    let first = Browser::login(&d).await;
    let out = d.cli().args(["ui", "--no-open"]).output().unwrap();
    let url = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let r = first.http.get(&url).header(header::COOKIE, &first.cookie).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let set = r.headers()[header::SET_COOKIE].to_str().unwrap();
    let second = Browser {
        http: first.http.clone(),
        origin: first.origin.clone(),
        cookie: set.split(';').next().unwrap().to_owned(),
    };
    assert_eq!(status_with(&first).await, 401, "the replaced session is ended");
    assert_eq!(status_with(&second).await, 200);
    // Another login, from elsewhere (no cookie sent): both live until a log out.
    let third = Browser::login(&d).await;
    assert_eq!(status_with(&third).await, 200);
    let r = second.req(&d, Method::GET, "/ui/session").header("sec-fetch-site", "same-origin").send().await.unwrap();
    let csrf = r.json::<Value>().await.unwrap()["csrf"].as_str().unwrap().to_owned();
    assert_eq!(second.logout(&d, &csrf).await.status(), 204);
    assert_eq!(status_with(&second).await, 401);
    assert_eq!(status_with(&third).await, 401, "a log out ends every session of the view");
}
