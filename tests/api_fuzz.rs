//! The HTTP API under hostile input, through the real router in-process: random JSON and
//! non-JSON bodies, odd content types and odd session ids (`..`, `%2F`, 5,000 characters, NUL,
//! emoji) on every route. Never a panic, never a 5xx other than 503/507, and every 4xx is
//! `{"error": {"code", "message"}}`.

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request};
use axum::Router;
use mneme::daemon::Daemon;
use proptest::prelude::*;
use serde_json::{json, Value};
use tower::ServiceExt;

/// Every route, with `{id}` where a session id goes.
const ROUTES: &[(&str, &str)] = &[
    ("GET", "/v1/health"),
    ("GET", "/v1/status"),
    ("POST", "/v1/sessions"),
    ("DELETE", "/v1/sessions/{id}"),
    ("POST", "/v1/sessions/{id}/retain"),
    ("POST", "/v1/sessions/{id}/recall"),
    ("POST", "/v1/sessions/{id}/reflect"),
    ("POST", "/v1/sessions/{id}/agent-start"),
    ("POST", "/v1/sessions/{id}/agent-end"),
    ("GET", "/v1/sessions/{id}/instructions"),
    ("POST", "/v1/sessions/{id}/compaction"),
    ("POST", "/v1/flush"),
    ("POST", "/v1/clear"),
    ("POST", "/v1/retry"),
    ("POST", "/v1/reload"),
    ("POST", "/v1/classify"),
    ("GET", "/v1/export"),
    ("POST", "/v1/import"),
    ("GET", "/v1/notices"),
    ("GET", "/metrics"),
    ("GET", "/v1/banks"),
    ("GET", "/v1/memories"),
    ("GET", "/v1/memories/{id}"),
    ("DELETE", "/v1/memories/{id}"),
    ("DELETE", "/v1/documents/{id}"),
    ("POST", "/v1/search"),
    ("GET", "/v1/queue"),
    ("POST", "/v1/ui/codes"),
    ("GET", "/ui/login"),
    ("GET", "/ui/session"),
    ("POST", "/ui/logout"),
    ("GET", "/ui/"),
    ("POST", "/mcp"),
    ("PUT", "/v1/sessions/{id}"),
    ("GET", "/v1/nowhere/{id}"),
];

struct Rig {
    _dir: tempfile::TempDir,
    router: Router,
    token: String,
    runtime: tokio::runtime::Runtime,
}

fn rig() -> Rig {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "[queue]\nflush_interval = \"50ms\"\nshutdown_grace = \"1s\"\n").unwrap();
    let data = dir.path().join("data");
    let env = move |k: &str| (k == "MNEME_STORAGE__DIR").then(|| data.display().to_string());
    let loaded = mneme::config::load(&config, &env).unwrap();
    let daemon = runtime.block_on(Daemon::open(loaded)).unwrap();
    let token = daemon.token().to_owned();
    let router = daemon.router(SocketAddr::from(([127, 0, 0, 1], 6366)));
    // The daemon's background parts (queue, spool) live on as long as the router's state.
    std::mem::forget(daemon);
    let rig = Rig { _dir: dir, router, token, runtime };
    rig.start_session();
    rig
}

impl Rig {
    /// (Re)starts the session most requests name, which a DELETE may have ended.
    fn start_session(&self) {
        let body = json!({"session_id": "s1", "cwd": "/p/fuzz"}).to_string().into_bytes();
        let (status, v) = self.send("POST", "/v1/sessions", Some("application/json"), body);
        assert_eq!(status, 200, "{v}");
    }

    /// Sends one request; checks the answer's shape; returns (status, JSON body or Null).
    fn send(&self, method: &str, uri: &str, content_type: Option<&str>, body: Vec<u8>) -> (u16, Value) {
        let mut req = Request::builder()
            .method(Method::from_bytes(method.as_bytes()).unwrap())
            .uri(uri)
            .header("host", "127.0.0.1:6366")
            .header("authorization", format!("Bearer {}", self.token))
            .header("accept", "application/json, text/event-stream");
        if let Some(ct) = content_type {
            req = req.header("content-type", ct);
        }
        let req = req.body(Body::from(body)).unwrap();
        self.runtime.block_on(async {
            let response = tokio::time::timeout(Duration::from_secs(20), self.router.clone().oneshot(req))
                .await
                .unwrap_or_else(|_| panic!("{method} {uri}: no answer within 20 s"))
                .unwrap();
            let status = response.status().as_u16();
            let streaming = response
                .headers()
                .get("content-type")
                .is_some_and(|v| v.to_str().unwrap_or("").starts_with("text/event-stream"));
            assert!(
                !(500..600).contains(&status) || status == 503 || status == 507,
                "{method} {uri}: a {status} (only 503 and 507 are allowed)"
            );
            if streaming {
                return (status, Value::Null);
            }
            let bytes =
                tokio::time::timeout(Duration::from_secs(20), axum::body::to_bytes(response.into_body(), 16 << 20))
                    .await
                    .unwrap_or_else(|_| panic!("{method} {uri}: body not finished within 20 s"))
                    .unwrap();
            let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            if (400..600).contains(&status) {
                assert!(
                    v["error"]["code"].is_string() && v["error"]["message"].is_string(),
                    "{method} {uri}: a {status} without the error shape: {}",
                    String::from_utf8_lossy(&bytes)
                );
            }
            (status, v)
        })
    }
}

/// Percent-encodes everything but unreserved characters (and keeps `%` sequences the test wants).
fn encode(id: &str) -> String {
    id.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'%' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn odd_ids() -> Vec<String> {
    vec![
        "s1".into(),
        "..".into(),
        ".".into(),
        "%2F".into(),
        "a%2Fb".into(),
        "%2e%2e".into(),
        "%".into(),
        "%zz".into(),
        "x".repeat(5000),
        "\0".into(),
        "nul\0inside".into(),
        "🦀🧠".into(),
        "with space".into(),
        "<script>".into(),
        "\u{202e}rtl".into(),
        "\r\n".into(),
    ]
}

fn uri(route: &str, id: &str) -> String {
    route.replace("{id}", &encode(id))
}

#[test]
fn every_route_with_odd_session_ids_and_odd_bodies() {
    let rig = rig();
    let bodies: Vec<(Option<&str>, Vec<u8>)> = vec![
        (None, Vec::new()),
        (Some("application/json"), b"{}".to_vec()),
        (Some("application/json"), b"{not json".to_vec()),
        (Some("application/json"), b"null".to_vec()),
        (Some("application/json"), b"[1,2,3]".to_vec()),
        (Some("application/json"), json!({"items": [{"content": "fuzz fact"}], "query": "fuzz", "prompt": "p", "messages": [], "session_id": "s1", "cwd": "/x"}).to_string().into_bytes()),
        (Some("application/json"), json!({"items": "x", "query": 5, "messages": {"a": 1}, "memories": [{}]}).to_string().into_bytes()),
        (Some("text/plain"), b"hello".to_vec()),
        (Some("application/json"), vec![0xff, 0xfe, 0x00, 0x7b]),
        (Some("application/json; charset=utf-8"), json!({"body": {"messages": [{"role": "user", "content": [1]}]}, "headers": {"a": "b"}}).to_string().into_bytes()),
    ];
    let mut answered = 0;
    for (method, route) in ROUTES {
        rig.start_session();
        for id in odd_ids() {
            for (ct, body) in &bodies {
                rig.send(method, &uri(route, &id), *ct, body.clone());
                answered += 1;
            }
        }
    }
    println!("{answered} requests answered within the contract");
}

/// Any JSON value, a few levels deep.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| json!(f)),
        ".{0,40}".prop_map(Value::String),
        Just(json!("<private>secret</private>")),
        Just(json!("x".repeat(3000))),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("items".to_owned()),
                    Just("content".to_owned()),
                    Just("context".to_owned()),
                    Just("query".to_owned()),
                    Just("prompt".to_owned()),
                    Just("messages".to_owned()),
                    Just("role".to_owned()),
                    Just("session_id".to_owned()),
                    Just("cwd".to_owned()),
                    Just("parent_session_id".to_owned()),
                    Just("all".to_owned()),
                    Just("remote".to_owned()),
                    Just("memories".to_owned()),
                    Just("body".to_owned()),
                    Just("headers".to_owned()),
                    Just("request".to_owned()),
                    Just("agent".to_owned()),
                    "[a-z_]{1,8}",
                ],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn body() -> impl Strategy<Value = (Option<&'static str>, Vec<u8>)> {
    prop_oneof![
        4 => json_value().prop_map(|v| (Some("application/json"), v.to_string().into_bytes())),
        1 => prop::collection::vec(any::<u8>(), 0..200).prop_map(|b| (Some("application/json"), b)),
        1 => prop::collection::vec(any::<u8>(), 0..200).prop_map(|b| (None, b)),
        1 => ".{0,100}".prop_map(|s| (Some("text/plain"), s.into_bytes())),
    ]
}

fn session_id() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => Just("s1".to_owned()),
        2 => prop::sample::select(odd_ids()),
        2 => "\\PC{1,30}",
        1 => ".{1,12}",
    ]
}

fn query() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "(after|limit|bank|cursor)=[-a-z0-9%]{0,12}".prop_map(|q| format!("?{q}")),
        Just("?after=-1&limit=99999999999999999999".to_owned()),
        Just("?cursor=abc&limit=0".to_owned()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_requests_stay_within_the_contract(
        route in prop::sample::select(ROUTES),
        id in session_id(),
        (ct, body) in body(),
        q in query(),
    ) {
        thread_local! {
            static RIG: Rig = rig();
        }
        let (method, path) = route;
        // Streams answer with a head and then go on; everything else must finish.
        let path = if path == "/v1/notices" && q.is_empty() { "/v1/notices/stream" } else { path };
        RIG.with(|rig| {
            rig.start_session();
            rig.send(method, &format!("{}{q}", uri(path, &id)), ct, body);
        });
    }
}
