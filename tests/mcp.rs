//! The MCP endpoint with a real MCP client session (rmcp): initialize, tools/list, tools/call.

mod common;

use common::Daemon;
use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::ServiceExt;
use serde_json::{json, Value};

fn args(v: Value) -> serde_json::Map<String, Value> {
    serde_json::from_value(v).unwrap()
}

fn text(r: &rmcp::model::CallToolResult) -> String {
    let v = serde_json::to_value(r).unwrap();
    v["content"][0]["text"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn an_mcp_client_retains_recalls_and_reflects() {
    let d = Daemon::start("");
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(d.url("/mcp")).auth_header(d.token.clone()),
    );
    let client = ClientConfig::default().serve(transport).await.expect("initialize");
    let info = client.peer_info().expect("server info");
    assert!(serde_json::to_string(&*info).unwrap().contains("long-term memory"), "instructions carry the memory guide");
    assert_eq!(
        info.server_info.as_ref().map(|s| s.name.as_str()),
        Some("mneme"),
        "the server names itself, not its library"
    );

    let tools = client.list_all_tools().await.unwrap();
    let mut names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    names.sort();
    assert_eq!(names, vec!["recall", "reflect", "retain"]);

    d.start_session("agent-1", "/p/heron").await;
    let r = client
        .call_tool(
            CallToolRequestParams::new("retain")
                .with_arguments(args(json!({"content": "heron deploys need a VPN", "session_id": "agent-1"}))),
        )
        .await
        .unwrap();
    assert_eq!(text(&r), "1 memory queued.");
    d.post("/v1/flush", json!({})).await;
    let r = client
        .call_tool(
            CallToolRequestParams::new("recall")
                .with_arguments(args(json!({"query": "heron deploys", "session_id": "agent-1"}))),
        )
        .await
        .unwrap();
    let (_, http) = d.post("/v1/sessions/agent-1/recall", json!({"query": "heron deploys"})).await;
    let mcp_text = text(&r);
    assert!(mcp_text.contains("heron deploys need a VPN"), "{mcp_text}");
    // The same answer as the HTTP route (the time stamp is to the minute).
    assert_eq!(mcp_text, http["message"].as_str().unwrap());

    // Without a session: the default "mcp" session in the given cwd.
    let r = client
        .call_tool(
            CallToolRequestParams::new("retain")
                .with_arguments(args(json!({"content": "a default-session note", "cwd": "/p/heron"}))),
        )
        .await
        .unwrap();
    assert_eq!(text(&r), "1 memory queued.");
    // reflect needs hindsight: an error result, with the same reason as the HTTP 422.
    let r = client
        .call_tool(
            CallToolRequestParams::new("reflect")
                .with_arguments(args(json!({"query": "why?", "session_id": "agent-1"}))),
        )
        .await;
    let shown = format!("{r:?}");
    assert!(shown.contains("hindsight"), "{shown}");
    assert!(shown.contains("-32600"), "the caller's to know, not an internal error: {shown}");
    // An unknown session is a clear error.
    let r = client
        .call_tool(
            CallToolRequestParams::new("recall").with_arguments(args(json!({"query": "x", "session_id": "nope"}))),
        )
        .await;
    assert!(format!("{r:?}").contains("unknown session"), "{r:?}");
    let _ = client.cancel().await;
}

#[tokio::test]
async fn the_mcp_endpoint_needs_the_token() {
    let d = Daemon::start("");
    let r = d
        .http
        .post(d.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test]
async fn optional_arguments_are_plain_and_the_cwd_header_picks_the_project() {
    let d = Daemon::start("");
    let project = tempfile::tempdir().unwrap();
    let cwd = project.path().join("Otter-Café");
    std::fs::create_dir_all(&cwd).unwrap();
    let cwd = cwd.display().to_string();
    // Like Claude Code with `"X-Mneme-Cwd": "${PWD}"` in .mcp.json: no cwd in the arguments. Sent
    // as the path's UTF-8 bytes (not visible ASCII only: it was taken for no header at all).
    let headers = std::collections::HashMap::from([(
        reqwest::header::HeaderName::from_static("x-mneme-cwd"),
        reqwest::header::HeaderValue::from_bytes(cwd.as_bytes()).unwrap(),
    )]);
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(d.url("/mcp"))
            .auth_header(d.token.clone())
            .custom_headers(headers),
    );
    let client = ClientConfig::default().serve(transport).await.expect("initialize");

    for tool in client.list_all_tools().await.unwrap() {
        let schema = serde_json::to_value(&tool.input_schema).unwrap();
        assert!(!schema.to_string().contains("null"), "{}: {schema}", tool.name);
        let required: Vec<&str> =
            schema["required"].as_array().map(|r| r.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
        let wanted = if tool.name == "retain" { vec!["content"] } else { vec!["query"] };
        assert_eq!(required, wanted, "{}: {schema}", tool.name);
    }

    let r = client
        .call_tool(
            CallToolRequestParams::new("retain")
                .with_arguments(args(json!({"content": "otters hold hands while sleeping"}))),
        )
        .await
        .unwrap();
    assert_eq!(text(&r), "1 memory queued.");
    // The hooks' session in the same project sees it, and MCP sees the hooks' memories.
    d.start_session("hooks", &cwd).await;
    d.post("/v1/sessions/hooks/retain", json!({"items": [{"content": "otters use rocks as tools"}]})).await;
    d.post("/v1/flush", json!({})).await;
    let (_, v) = d.post("/v1/sessions/hooks/recall", json!({"query": "otters sleeping"})).await;
    assert!(v["message"].as_str().unwrap().contains("otters hold hands"), "{v}");
    assert_eq!(v["results"][0]["tags"], json!(["project:otter-café"]), "{v}");
    let r = client
        .call_tool(CallToolRequestParams::new("recall").with_arguments(args(json!({"query": "otters rocks"}))))
        .await
        .unwrap();
    assert!(text(&r).contains("otters use rocks as tools"), "{}", text(&r));
    let _ = client.cancel().await;
    // As a fetch client sends it (Latin-1 bytes), and as `--mcp-headers` does (percent-encoded
    // whole): the same project. As Latin-1 it went to the "/" scope.
    let latin1: Vec<u8> = cwd.chars().map(|c| c as u8).collect();
    let encoded: String = cwd.bytes().map(|b| format!("%{b:02X}")).collect();
    for (n, value) in [latin1, encoded.into_bytes()].into_iter().enumerate() {
        let headers = std::collections::HashMap::from([(
            reqwest::header::HeaderName::from_static("x-mneme-cwd"),
            reqwest::header::HeaderValue::from_bytes(&value).unwrap(),
        )]);
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(d.url("/mcp"))
                .auth_header(d.token.clone())
                .custom_headers(headers),
        );
        let client = ClientConfig::default().serve(transport).await.expect("initialize");
        let fact = format!("otters groom their fur {n}");
        let r = client
            .call_tool(CallToolRequestParams::new("retain").with_arguments(args(json!({"content": fact}))))
            .await
            .unwrap();
        assert_eq!(text(&r), "1 memory queued.");
        let _ = client.cancel().await;
    }
    d.post("/v1/flush", json!({})).await;
    let (_, v) = d.get("/v1/export").await;
    for n in 0..2 {
        let fact = format!("otters groom their fur {n}");
        let m = v["memories"].as_array().unwrap().iter().find(|m| m["content"] == fact.as_str());
        assert_eq!(m.map(|m| m["tags"].clone()), Some(json!(["project:otter-café"])), "{fact}: {v}");
    }
}

/// The folder's MCP session follows the folder to another project (a link switched, a
/// worktree's path reused): it kept its first project for good, and retained the new
/// project's memories under the old project's tag.
#[tokio::test]
async fn the_folders_mcp_session_follows_the_folder_to_another_project() {
    let d = Daemon::start("[local]\nembedder = \"off\"\n");
    let root = tempfile::tempdir().unwrap();
    for repo in ["projx", "projy"] {
        std::fs::create_dir_all(root.path().join(repo).join(".git")).unwrap();
    }
    let current = root.path().join("current");
    let client = ClientConfig::default()
        .serve(StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(d.url("/mcp")).auth_header(d.token.clone()),
        ))
        .await
        .expect("initialize");
    for (repo, fact) in [("projx", "projx deploys with helm"), ("projy", "projy deploys with nomad")] {
        let _ = std::fs::remove_file(&current);
        std::os::unix::fs::symlink(root.path().join(repo), &current).unwrap();
        let call = args(json!({"content": fact, "cwd": current.display().to_string()}));
        let r = client.call_tool(CallToolRequestParams::new("retain").with_arguments(call)).await.unwrap();
        assert_eq!(text(&r), "1 memory queued.");
    }
    d.post("/v1/flush", json!({})).await;
    let (_, v) = d.get("/v1/export").await;
    let tags_of = |fact: &str| -> Value {
        let found = v["memories"].as_array().unwrap().iter().find(|m| m["content"] == fact);
        found.map_or(Value::Null, |m| m["tags"].clone())
    };
    assert_eq!(tags_of("projx deploys with helm"), json!(["project:projx"]), "{v}");
    assert_eq!(tags_of("projy deploys with nomad"), json!(["project:projy"]), "{v}");
    let _ = client.cancel().await;
}

#[tokio::test]
async fn what_is_not_a_json_rpc_message_gets_json_rpc_errors() {
    let d = Daemon::start("");
    let post = |body: &'static str, content_type: &'static str| {
        d.http
            .post(d.url("/mcp"))
            .bearer_auth(&d.token)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", content_type)
            .body(body)
            .send()
    };
    for (body, code, rpc_code) in [
        ("{bad json", "invalid_json", -32700),
        ("", "invalid_json", -32700),
        ("[]", "invalid_request", -32600),
        (r#"[{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}]"#, "invalid_request", -32600),
        (r#"{"jsonrpc": "1.0", "id": 1, "method": "initialize"}"#, "invalid_request", -32600),
        ("42", "invalid_request", -32600),
        (r#"{"jsonrpc": "2.0", "id": null, "method": "initialize", "params": {}}"#, "invalid_request", -32600),
        (r#"{"jsonrpc": "2.0", "id": {"a": 1}, "method": "tools/list"}"#, "invalid_request", -32600),
        // What the library answered with a bare 415 or 400, or "method not found".
        (r#"{"jsonrpc": "2.0", "id": 2.5, "method": "ping"}"#, "invalid_request", -32600),
        (r#"{"jsonrpc": "2.0", "id": 1180591620717411303424, "method": "ping"}"#, "invalid_request", -32600),
        (r#"{"jsonrpc": "2.0", "id": 3, "method": 5}"#, "invalid_request", -32600),
        (r#"{"jsonrpc": "2.0", "id": 1}"#, "invalid_request", -32600),
        (r#"{"jsonrpc": "2.0", "id": 1, "method": "ping", "result": {}}"#, "invalid_request", -32600),
        (
            r#"{"jsonrpc": "2.0", "id": 1, "result": {}, "error": {"code": 1, "message": "x"}}"#,
            "invalid_request",
            -32600,
        ),
        (r#"{"jsonrpc": "2.0", "id": 3, "method": "ping", "params": []}"#, "invalid_params", -32602),
        (r#"{"jsonrpc": "2.0", "id": 1, "method": "initialize"}"#, "invalid_params", -32602),
        (
            r#"{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 5}}"#,
            "invalid_params",
            -32602,
        ),
    ] {
        let r = post(body, "application/json").await.unwrap();
        assert_eq!(r.status(), 400, "{body}");
        let v: Value = r.json().await.unwrap();
        assert_eq!((&v["jsonrpc"], &v["error"]["code"]), (&json!("2.0"), &json!(code)), "{body}: {v}");
        assert_eq!(v["error"]["data"]["jsonrpc_code"], rpc_code, "{body}: {v}");
        assert!(v["error"]["message"].is_string(), "{body}: {v}");
        // The request's id, once it could be read (a valid one, in an object): null otherwise.
        let sent: Value = serde_json::from_str(body).unwrap_or_default();
        let readable = sent["id"].is_string() || sent["id"].is_i64();
        let id =
            if sent.is_object() && sent["jsonrpc"] == "2.0" && readable { sent["id"].clone() } else { Value::Null };
        assert_eq!(v["id"], id, "{body}: {v}");
    }
    // A client that accepts anything is answered (the library refused it with 406).
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    for accept in [Some("*/*"), None] {
        let mut req = d.http.post(d.url("/mcp")).bearer_auth(&d.token).json(&init);
        if let Some(a) = accept {
            req = req.header("accept", a);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 200, "{accept:?}: {}", r.text().await.unwrap());
    }
    let r = post(r#"{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}"#, "text/plain").await.unwrap();
    assert_eq!(r.status(), 415);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "unsupported_media_type", "{v}");
    // A message after initialize without its session, or with one that is gone, says so.
    let r = post(r#"{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}"#, "application/json").await.unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert!(v["error"]["message"].as_str().unwrap().contains("Mcp-Session-Id"), "{v}");
    let headers = [("accept", "application/json, text/event-stream"), ("mcp-session-id", "no-such-session")];
    let r = mcp_post(&d, &headers, &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "unknown_session", "{v}");
    // A session ends once: the second DELETE names a session that is no longer open.
    let r = d.http.post(d.url("/mcp")).bearer_auth(&d.token).json(&init).send().await.unwrap();
    let id = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    // A method name holding a private span is not repeated in the answer (the library's "method
    // not found" repeats the name it was given).
    let headers = [("accept", "application/json, text/event-stream"), ("mcp-session-id", id.as_str())];
    let private = json!({"jsonrpc": "2.0", "id": 4, "method": "<private>MCPSECRET-1</private>", "params": {}});
    let r = mcp_post(&d, &headers, &private).send().await.unwrap();
    let body = r.text().await.unwrap();
    assert!(!body.contains("MCPSECRET") && body.contains("-32601"), "{body}");
    let delete = || d.http.delete(d.url("/mcp")).bearer_auth(&d.token).header("mcp-session-id", &id).send();
    let first = delete().await.unwrap();
    assert!(first.status().is_success(), "{}", first.status());
    let again = delete().await.unwrap();
    assert_eq!(again.status(), 404);
    let v: Value = again.json().await.unwrap();
    assert_eq!(v["error"]["code"], "unknown_session", "{v}");
}

/// What Claude Code 2.1 puts in each message's `_meta` (MCP 2026-07-28, stateless).
/// A POST to `/mcp` with the token, these headers and this JSON body.
fn mcp_post(d: &Daemon, headers: &[(&str, &str)], body: &Value) -> reqwest::RequestBuilder {
    headers.iter().fold(d.http.post(d.url("/mcp")).bearer_auth(&d.token), |r, (k, v)| r.header(*k, *v)).json(body)
}

fn stateless_meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "claude-code", "version": "2.1.332"},
        "io.modelcontextprotocol/clientCapabilities": {}})
}

/// A stateless (2026-07-28) request: `method` in the `Mcp-Method` header, the body's own method
/// in `message`, the `_meta` added to its params.
fn stateless(d: &Daemon, method: &str, mut message: Value) -> reqwest::RequestBuilder {
    message["params"]["_meta"] = stateless_meta();
    let name = message["params"]["name"].as_str().unwrap_or_default().to_owned();
    d.http
        .post(d.url("/mcp"))
        .bearer_auth(&d.token)
        .header("mcp-name", name)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .json(&message)
}

/// Claude Code 2.1 speaks MCP 2026-07-28, stateless: no initialize and no session, the version
/// in a header and in each message's `_meta` (what tests/clients/FINDINGS.md §4 recorded).
#[tokio::test]
async fn a_stateless_client_is_answered_without_a_session() {
    let d = Daemon::start("");
    let send = |id: u64, method: &str, params: Value| {
        stateless(&d, method, json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).send()
    };
    let listed = send(1, "tools/list", json!({})).await.unwrap();
    let status = listed.status();
    let body = listed.text().await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"retain\"") && body.contains("\"recall\""), "{body}");
    // Every loopback name the daemon's guard takes is taken here too (the library's own list
    // refused these with 403 on this route alone).
    let port = d.addr.rsplit_once(':').unwrap().1.to_owned();
    for host in [format!("app.localhost:{port}"), format!("localhost.:{port}"), format!("127.0.0.2:{port}")] {
        let message = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {}});
        let listed = stateless(&d, "tools/list", message).header("host", &host).send().await.unwrap();
        let status = listed.status();
        let body = listed.text().await.unwrap();
        assert_eq!(status, 200, "{host}: {body}");
    }
    let called = send(
        2,
        "tools/call",
        json!({"name": "retain", "arguments": {"content": "The build uses cargo-nextest STATELESS-1", "context": "build"}}),
    )
    .await
    .unwrap();
    let status = called.status();
    let body = called.text().await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("1 memory queued.") && body.contains("\"isError\":false"), "{body}");
    // What the library refuses itself has the API's error shape too (a string code, JSON-RPC's
    // number in data): a header that disagrees with the message, a method it does not know.
    for (method_header, method, status, code, rpc_code) in [
        ("tools/list", "tools/call", 400, "header_mismatch", -32020),
        ("no/such", "no/such", 404, "method_not_found", -32601),
    ] {
        let params = json!({"name": "recall", "arguments": {"query": "x"}});
        let message = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
        let refused = stateless(&d, method_header, message).send().await.unwrap();
        let got = refused.status();
        let v: Value = refused.json().await.unwrap();
        assert_eq!(got, status, "{method}: {v}");
        assert_eq!(v["error"]["code"], code, "{method}: {v}");
        assert_eq!(v["error"]["data"]["jsonrpc_code"], rpc_code, "{method}: {v}");
        assert!(v["error"]["message"].is_string(), "{method}: {v}");
    }
    // A message of an earlier revision without its session is still told what it lacks.
    let legacy = d
        .http
        .post(d.url("/mcp"))
        .bearer_auth(&d.token)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(legacy.status(), 400);
}

/// Half an emoji in a tool's argument (`\ud83d`, text cut by UTF-16 units) is read as U+FFFD,
/// as every other route reads it: the message was refused whole ("Parse error", id null), and
/// the memory was not stored.
#[tokio::test]
async fn a_tool_call_with_half_an_emoji_is_read() {
    let d = Daemon::start("[local]\nembedder = \"off\"\n");
    let mut message = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
        "params": {"name": "retain", "arguments": {"content": "the rocket HALF launches at noon"}}});
    message["params"]["_meta"] = stateless_meta();
    let body = serde_json::to_string(&message).unwrap().replace("HALF", r"\ud83d");
    let called = stateless(&d, "tools/call", message).body(body).send().await.unwrap();
    let status = called.status();
    let body = called.text().await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("1 memory queued.") && body.contains("\"id\":4"), "{body}");
    d.post("/v1/flush", json!({})).await;
    let (_, v) = d.get("/v1/export").await;
    assert_eq!(v["memories"][0]["content"], "the rocket \u{fffd} launches at noon", "{v}");
}

/// A Hindsight server that takes connections and never answers: a recall through it stays in
/// progress until the daemon stops.
async fn silent_server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    url
}

/// SIGTERM to the daemon once a call is well under way (within the 5 s a recall may take).
async fn stop_soon(d: &Daemon) {
    let pid = d.child.as_ref().unwrap().id();
    tokio::time::sleep(std::time::Duration::from_millis(1000)).await;
    common::unsafe_kill(pid, "TERM");
}

/// A tool call the daemon's shutdown cuts short is answered: a result marked `isError` telling
/// the model to try again once mneme is back (as when the backend is down), not the library's
/// 500 (stateless) or an event stream closed without an answer (a session of an earlier revision).
#[tokio::test]
async fn a_call_cut_short_by_shutdown_is_answered() {
    let url = silent_server().await;
    let d = Daemon::start(&format!("[memory]\nbackend = \"hindsight\"\n[hindsight]\napi_url = \"{url}\"\n"));
    let call = stateless(
        &d,
        "tools/call",
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "recall", "arguments": {"query": "where is the deploy key"}}}),
    )
    .send();
    let (answer, ()) = tokio::join!(call, stop_soon(&d));
    let answer = answer.unwrap();
    assert_eq!(answer.status(), 200);
    let body = answer.text().await.unwrap();
    let v: Value = serde_json::from_str(body.trim()).unwrap_or_else(|_| sse_message(&body));
    assert_eq!(v["id"], 1, "{body}");
    assert_eq!(v["result"]["isError"], true, "{body}");
    assert!(v["result"]["content"][0]["text"].as_str().unwrap().contains("mneme is stopping"), "{body}");
}

#[tokio::test]
async fn a_call_cut_short_by_shutdown_is_answered_on_a_sessions_stream() {
    let url = silent_server().await;
    let d = Daemon::start(&format!("[memory]\nbackend = \"hindsight\"\n[hindsight]\napi_url = \"{url}\"\n"));
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let accept = [("accept", "application/json, text/event-stream")];
    let r = mcp_post(&d, &accept, &init).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let session = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let headers = [accept[0], ("mcp-session-id", session.as_str()), ("mcp-protocol-version", "2025-06-18")];
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert!(mcp_post(&d, &headers, &initialized).send().await.unwrap().status().is_success());
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "recall", "arguments": {"query": "where is the deploy key"}}});
    let call = async { mcp_post(&d, &headers, &call).send().await.unwrap().text().await.unwrap() };
    let (body, ()) = tokio::join!(call, stop_soon(&d));
    let v = sse_message(&body);
    assert_eq!(v["id"], 7, "{body}");
    assert_eq!(v["result"]["isError"], true, "{body}");
    assert!(v["result"]["content"][0]["text"].as_str().unwrap().contains("mneme is stopping"), "{body}");
}

/// SSE priming events (an empty `data` with an id and a retry, MCP 2025-11-25) go only to
/// clients of that revision or later: the earlier revisions' SDKs parse every `data` as a
/// message, and reported an error on every call.
#[tokio::test]
async fn priming_events_go_only_to_clients_that_expect_them() {
    let d = Daemon::start("");
    let accept = ("accept", "application/json, text/event-stream");
    let primed =
        |body: &str| body.lines().any(|l| l.starts_with("retry:")) || body.lines().any(|l| l.trim() == "data:");
    for (version, expected) in
        [("2024-11-05", false), ("2025-03-26", false), ("2025-06-18", false), ("2025-11-25", true)]
    {
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
        let r = mcp_post(&d, &[accept], &init).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let session = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
        let body = r.text().await.unwrap();
        assert_eq!(primed(&body), expected, "{version}: {body:?}");
        assert_eq!(sse_message(&body)["result"]["protocolVersion"], version, "{body}");
        // Later requests carry the version in a header from 2025-06-18 on, none before.
        let mut headers = vec![accept, ("mcp-session-id", session.as_str())];
        if version >= "2025-06-18" {
            headers.push(("mcp-protocol-version", version));
        }
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        assert!(mcp_post(&d, &headers, &initialized).send().await.unwrap().status().is_success());
        let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
        let body = mcp_post(&d, &headers, &list).send().await.unwrap().text().await.unwrap();
        assert_eq!(primed(&body), expected, "{version}: {body:?}");
        assert!(sse_message(&body)["result"]["tools"].is_array(), "{body}");
    }
}

/// Event streams (GET /mcp) are bounded as notice streams are: a client's streams (dozens a
/// session) filled `server.max_connections`, and nothing else was answered, the health check
/// included. A stream closed gives its place back.
#[tokio::test]
async fn mcp_event_streams_are_bounded() {
    let d = Daemon::start("");
    let accept = ("accept", "application/json, text/event-stream");
    let session = || async {
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
        let r = mcp_post(&d, &[accept], &init).send().await.unwrap();
        let session = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let headers = [accept, ("mcp-session-id", session.as_str()), ("mcp-protocol-version", "2025-06-18")];
        assert!(mcp_post(&d, &headers, &initialized).send().await.unwrap().status().is_success());
        session
    };
    let get = |session: &str| {
        d.http
            .get(d.url("/mcp"))
            .bearer_auth(&d.token)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", "2025-06-18")
            .send()
    };
    // The library keeps a session's newest 33 streams (it ends older ones): three sessions.
    let mut open = Vec::new();
    for _ in 0..3 {
        let id = session().await;
        for _ in 0..22 {
            if open.len() < 64 {
                let stream = get(&id).await.unwrap();
                assert_eq!(stream.status(), 200);
                open.push(stream);
            }
        }
    }
    let id = session().await;
    let refused = get(&id).await.unwrap();
    assert_eq!(refused.status(), 503);
    assert!(refused.headers().contains_key("retry-after"));
    let v: Value = refused.json().await.unwrap();
    assert_eq!(v["error"]["code"], "too_many_streams", "{v}");
    let (status, _) = d.get("/v1/health").await;
    assert_eq!(status, 200);
    open.clear();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let again = get(&id).await.unwrap();
        if again.status() == 200 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "closed streams kept their places: {}", again.status());
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// The JSON-RPC message of an event stream's body (its one `data:` line that is not empty).
fn sse_message(body: &str) -> Value {
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .find(|d| !d.is_empty())
        .map(|d| serde_json::from_str(d).unwrap())
        .unwrap_or_else(|| panic!("no message in the stream: {body:?}"))
}

/// The recall tool called (statelessly) for "where is the deploy key" in `cwd`.
async fn recall_tool(d: &Daemon, cwd: &str) -> reqwest::Response {
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "recall", "arguments": {"query": "where is the deploy key", "cwd": cwd}}});
    stateless(d, "tools/call", call).send().await.unwrap()
}

/// A recall tool is bounded by `recall.timeout`, as automatic recall is: the session start hands
/// it out as the wait a plugin's recall should exceed, and a backend that took longer (up to
/// `hindsight.recall_timeout`, 30 s) made the opencode plugin take the daemon for hung and skip
/// it, the turn's retains too, for 30 s.
#[tokio::test]
async fn a_recall_tool_gives_up_at_the_recall_timeout() {
    let url = silent_server().await;
    let d = Daemon::start(&format!(
        "[memory]\nbackend = \"hindsight\"\n[hindsight]\napi_url = \"{url}\"\n[recall]\ntimeout = \"1s\"\n"
    ));
    let (_, v) = d.post("/v1/sessions", json!({"session_id": "slow", "cwd": "/p/slow"})).await;
    assert_eq!(v["recall_timeout_ms"], 1000, "{v}");
    let started = std::time::Instant::now();
    let (status, v) = d.post("/v1/sessions/slow/recall", json!({"query": "where is the deploy key"})).await;
    let took = started.elapsed();
    assert_eq!(status, 503, "{v}");
    assert_eq!(v["error"]["code"], "backend_unavailable", "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("recall.timeout (1s)"), "{v}");
    assert!(took < std::time::Duration::from_secs(5), "answered after {took:?}, not at recall.timeout");
    // The web view's search ("recall as an agent would get it") too.
    let started = std::time::Instant::now();
    let (status, v) = d.post("/v1/search", json!({"query": "where is the deploy key"})).await;
    assert_eq!((status, &v["error"]["code"]), (503, &json!("backend_unavailable")), "{v}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "search answered after {:?}", started.elapsed());
    // The MCP tool says it to the model, with when to try again.
    let v = sse_message(&recall_tool(&d, "/p/slow").await.text().await.unwrap());
    assert_eq!(v["result"]["isError"], true, "{v}");
    let text = v["result"]["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("recall.timeout") && text.contains("try again in"), "{text}");
}

/// Memory failing to do its part is the tool's own failure: a result marked `isError` that the
/// model is shown, saying what the HTTP route says and when to try again, not a JSON-RPC
/// internal error a client shows as a broken tool.
#[tokio::test]
async fn a_backend_that_is_down_is_a_tool_result_saying_when_to_try_again() {
    // A Hindsight server that is not there: connections are refused.
    let refusing = common::refusing_port();
    let closed = refusing.addr;
    let d = Daemon::start(&format!("[memory]\nbackend = \"hindsight\"\n[hindsight]\napi_url = \"http://{closed}\"\n"));
    let answer = recall_tool(&d, "/p/down").await;
    let status = answer.status();
    let body = answer.text().await.unwrap();
    assert_eq!(status, 200, "{body}");
    // One event of the stream the client accepted.
    let json = body.lines().find_map(|l| l.strip_prefix("data: ")).unwrap_or(&body);
    let v: Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert!(v.get("error").is_none(), "a tool result, not a JSON-RPC error: {v}");
    assert_eq!(v["result"]["isError"], true, "{v}");
    let text = v["result"]["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("memory backend unavailable") && text.contains("try again in"), "{text}");
    // A call the model got wrong stays a JSON-RPC error.
    let wrong = stateless(
        &d,
        "tools/call",
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "recall", "arguments": {"query": "x", "session_id": "nope"}}}),
    )
    .send()
    .await
    .unwrap();
    let body = wrong.text().await.unwrap();
    assert!(body.contains("unknown session") && !body.contains("\"isError\":true"), "{body}");
}

/// A client looping on initialize cannot grow the daemon without bound: past 256 open sessions
/// it is told to come back later (503, Retry-After), and a session deleted makes room.
#[tokio::test]
async fn open_mcp_sessions_are_bounded() {
    let d = Daemon::start("");
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let open = || d.http.post(d.url("/mcp")).bearer_auth(&d.token).header("accept", "*/*").json(&init).send();
    let mut ids = Vec::new();
    for _ in 0..256 {
        let r = open().await.unwrap();
        assert_eq!(r.status(), 200);
        ids.push(r.headers()["mcp-session-id"].to_str().unwrap().to_owned());
    }
    let r = open().await.unwrap();
    assert_eq!(r.status(), 503);
    assert!(r.headers().contains_key("retry-after"));
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "too_many_sessions", "{v}");
    // Nor does an initialize naming a stateless revision (which opens a session all the same).
    let stateless = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2026-07-28",
        "capabilities": {}, "clientInfo": {"name": "t", "version": "1"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}});
    let headers = [("accept", "*/*"), ("mcp-protocol-version", "2026-07-28")];
    let r = mcp_post(&d, &headers, &stateless).send().await.unwrap();
    assert_eq!(r.status(), 503, "an initialize naming a stateless revision opens a session too");
    let r = d.http.delete(d.url("/mcp")).bearer_auth(&d.token).header("mcp-session-id", &ids[0]).send().await.unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    assert_eq!(open().await.unwrap().status(), 200);
}

/// A call the model got wrong is told in the tool's own terms: its arguments, not the HTTP
/// route's `items`, and not to start a session over HTTP, which a model cannot do.
#[tokio::test]
async fn a_wrong_call_is_told_in_the_tools_terms() {
    let d = Daemon::start("");
    let call = |id: i64, name: &str, arguments: Value| {
        stateless(
            &d,
            "tools/call",
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}}),
        )
        .send()
    };
    let answer = |r: reqwest::Response| async move {
        let body = r.text().await.unwrap();
        serde_json::from_str::<Value>(body.trim()).unwrap_or_else(|_| sse_message(&body))
    };
    // A tool's argument missing or of the wrong type (the library answered with a result marked
    // isError; then a 400 that ended the Python SDK's session): a JSON-RPC error, its code a
    // number, in a 200.
    for (id, name, arguments) in [
        (5, "recall", Value::Null),
        (6, "recall", json!({"query": 5})),
        (7, "retain", json!({"text": "x"})),
        (8, "reflect", json!({"query": "x", "cwd": 1})),
    ] {
        let r = call(id, name, arguments.clone()).await.unwrap();
        assert_eq!(r.status(), 200, "{name} {arguments}");
        let v = answer(r).await;
        assert_eq!((&v["id"], &v["error"]["code"]), (&json!(id), &json!(-32602)), "{v}");
        assert!(v["error"]["message"].as_str().unwrap().starts_with("Invalid params: "), "{v}");
    }
    // So is a call that names no tool, or passes its arguments as a JSON string (as bridges of
    // other function-calling APIs do).
    for (id, params) in [
        (9, json!({})),
        (10, json!({"name": 7})),
        (11, json!({"name": "recall", "arguments": "{\"query\": \"x\"}"})),
        (12, json!({"name": "recall", "arguments": [1]})),
    ] {
        let message = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
        let r = stateless(&d, "tools/call", message).send().await.unwrap();
        assert_eq!(r.status(), 200, "{params}");
        let v = answer(r).await;
        assert_eq!((&v["id"], &v["error"]["code"]), (&json!(id), &json!(-32602)), "{v}");
    }
    let v = answer(call(1, "retain", json!({"content": ""})).await.unwrap()).await;
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("content is blank"), "{v}");
    let v = answer(call(2, "recall", json!({"query": "x", "session_id": "nosuch"})).await.unwrap()).await;
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("\"nosuch\"") && message.contains("leave session_id out"), "{v}");
    assert!(!message.contains("POST"), "{v}");
}

/// The library's bare refusals ("Bad Request") say what is wrong, and an initialize is bounded:
/// what it names is kept while its session is open (a 4 MB clientInfo a session took the daemon
/// to a gigabyte at the sessions' cap).
#[tokio::test]
async fn refusals_say_why_and_an_initialize_is_bounded() {
    let d = Daemon::start("[local]\nembedder = \"off\"\n");
    let both = ("accept", "application/json, text/event-stream");
    let init = |client_info: Value| {
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": client_info}})
    };
    let r = mcp_post(&d, &[both], &init(json!({"name": "t", "version": "1"}))).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let session = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let said = |r: reqwest::Response| async move {
        let status = r.status().as_u16();
        let v: Value = r.json().await.unwrap();
        (status, v["error"]["message"].as_str().unwrap_or_default().to_owned())
    };
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
    let headers = [both, ("mcp-session-id", session.as_str()), ("mcp-protocol-version", "2099-01-01")];
    let (status, message) = said(mcp_post(&d, &headers, &ping).send().await.unwrap()).await;
    assert_eq!(status, 400);
    assert!(message.contains("MCP-Protocol-Version \"2099-01-01\"") && message.contains("2025-06-18"), "{message}");
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let r = d.http.request(method.clone(), d.url("/mcp")).bearer_auth(&d.token).header(both.0, both.1);
        let (status, message) = said(r.send().await.unwrap()).await;
        assert_eq!(status, 400, "{method}");
        assert!(message.contains("Mcp-Session-Id"), "{method}: {message}");
    }
    let r = d.http.get(d.url("/mcp")).bearer_auth(&d.token).header(both.0, both.1).header("mcp-session-id", "gone");
    let r = r.send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "unknown_session");
    let meta = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
        "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}, "_meta": "x"}});
    let (status, message) = said(mcp_post(&d, &[both], &meta).send().await.unwrap()).await;
    assert_eq!(status, 400);
    assert!(message.contains("params._meta must be an object"), "{message}");
    let bare = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}});
    let (status, message) = said(mcp_post(&d, &[both], &bare).send().await.unwrap()).await;
    assert_eq!(status, 400);
    assert!(message.contains("clientInfo"), "{message}");
    let huge = init(json!({"name": "x".repeat(100 * 1024), "version": "1"}));
    let (status, message) = said(mcp_post(&d, &[both], &huge).send().await.unwrap()).await;
    assert_eq!(status, 413);
    assert!(message.contains("64 KiB"), "{message}");
}

/// Tool calls that race the DELETE of their session are answered as calls naming a session that
/// is not open (404 `unknown_session`) or as calls, never with a 500: the library answered "Session
/// service terminated" with one (review105 #1: 3–16 in 30 rounds like these).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_racing_the_delete_of_their_session_get_no_500() {
    let d = Daemon::start("");
    let mut answers = std::collections::BTreeMap::<u16, usize>::new();
    for round in 0..30 {
        let version = if round % 2 == 0 { "2025-06-18" } else { "2025-11-25" };
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
        let accept = ("accept", "application/json, text/event-stream");
        let r = mcp_post(&d, &[accept], &init).send().await.unwrap();
        let id = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
        let session = [accept, ("mcp-session-id", id.as_str()), ("mcp-protocol-version", version)];
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        mcp_post(&d, &session, &initialized).send().await.unwrap();
        let mut calls = Vec::new();
        for i in 0..12 {
            let tool = if i % 2 == 0 { "recall" } else { "retain" };
            let call = json!({"jsonrpc": "2.0", "id": 10 + i, "method": "tools/call", "params": {"name": tool,
                "arguments": {"query": "fact", "content": format!("fact {i}"), "cwd": "/tmp/race"}}});
            calls.push(tokio::spawn(mcp_post(&d, &session, &call).send()));
            if i == 6 {
                let delete = d.http.delete(d.url("/mcp")).bearer_auth(&d.token).header("mcp-session-id", &id);
                calls.push(tokio::spawn(delete.send()));
            }
        }
        for call in calls {
            let r = call.await.unwrap().unwrap();
            let status = r.status().as_u16();
            *answers.entry(status).or_default() += 1;
            if status == 404 {
                let v: Value = r.json().await.unwrap();
                assert_eq!(v["error"]["code"], "unknown_session", "{v}");
            }
        }
    }
    assert!(answers.keys().all(|s| matches!(s, 200 | 202 | 404)), "answers by status: {answers:?}");
}
