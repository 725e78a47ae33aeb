//! Faults a real server cannot produce on demand, from an in-process axum server on 127.0.0.1:0.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::post;
use axum::Router;
use mneme_core::*;
use mneme_hindsight::HindsightBackend;

async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

fn batch() -> RetainBatch {
    RetainBatch {
        id: "0192f4a1b2c3d4e5f60718293a4b5c6d".into(),
        items: vec![MemoryItem::new("i", "c", "2026-01-01T00:00:00Z")],
    }
}

fn scope() -> Scope {
    Scope { bank: "b".into(), tags: vec![] }
}

#[tokio::test]
async fn too_many_requests_honours_retry_after() {
    let url = serve(Router::new().route(
        "/v1/default/banks/b/memories",
        post(|| async { (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "3")], r#"{"detail":"slow down"}"#) }),
    ))
    .await;
    let e = HindsightBackend::new(common::config(&url, None)).unwrap().retain(&scope(), &batch()).await.unwrap_err();
    assert!(e.is_transient(), "{e}");
    assert_eq!(e.retry_after(), Some(Duration::from_secs(3)));
    assert!(e.to_string().contains("slow down"), "{e}");
}

#[tokio::test]
async fn server_errors_are_transient_with_their_reason() {
    let url = serve(Router::new().route(
        "/v1/default/banks/b/memories",
        post(|| async {
            (StatusCode::INTERNAL_SERVER_ERROR, r#"{"detail":"database is restarting"}"#).into_response()
        }),
    ))
    .await;
    let e = HindsightBackend::new(common::config(&url, None)).unwrap().retain(&scope(), &batch()).await.unwrap_err();
    assert!(e.is_transient());
    assert!(e.to_string().contains("500") && e.to_string().contains("database is restarting"), "{e}");
}

/// A 200 that is not Hindsight's JSON (a proxy's page, a server mid-restart) is retried, not
/// dead-lettered at once: the batch's operation id makes a resend safe.
#[tokio::test]
async fn an_answer_that_is_not_hindsights_json_is_transient() {
    // A proxy's page, a cut answer, an empty 200, JSON that is not a retain's answer, or one
    // saying nothing was stored: none of them may count as delivered.
    for body in ["<html>502 from the proxy</html>", "{\"success\": tru", "", "{}", "{\"success\": false}"] {
        let url = serve(
            Router::new().route("/v1/default/banks/b/memories", post(move || async move { (StatusCode::OK, body) })),
        )
        .await;
        let e =
            HindsightBackend::new(common::config(&url, None)).unwrap().retain(&scope(), &batch()).await.unwrap_err();
        assert!(e.is_transient(), "{body:?}: {e}");
    }
}

/// A server that answers its health check but not a retain in time may be choking on this very
/// batch: an attempt, so that it is not retried for ever.
#[tokio::test]
async fn a_slow_server_past_the_timeout_is_transient() {
    let url = serve(
        Router::new()
            .route(
                "/v1/default/banks/b/memories",
                post(|| async {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    "{}"
                }),
            )
            .route("/health", axum::routing::get(|| async { r#"{"status":"healthy"}"# })),
    )
    .await;
    let mut config = common::config(&url, None);
    config.retain_timeout = Duration::from_millis(200);
    let started = Instant::now();
    let e = HindsightBackend::new(config).unwrap().retain(&scope(), &batch()).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(e.is_transient() && e.to_string().contains("timed out"), "{e}");
}

/// A server that took the connection and answers nothing, its health check included (hung,
/// stopped, a VM paused): an outage, which uses up no attempt. Counted as attempts, its
/// timeouts made every batch a dead letter within minutes, not delivered when it came back.
#[tokio::test]
async fn a_hung_server_is_an_outage_not_an_attempt() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    let mut config = common::config(&url, None);
    config.retain_timeout = Duration::from_millis(300);
    config.timeout = Duration::from_millis(300);
    let e = HindsightBackend::new(config).unwrap().retain(&scope(), &batch()).await.unwrap_err();
    assert!(e.is_outage(), "{e}");
    assert!(e.to_string().contains("timed out") && e.to_string().contains("health check"), "{e}");
}

#[tokio::test]
async fn connection_refused_is_transient_and_status_says_unreachable() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let b = HindsightBackend::new(common::config(&url, Some("sekrit-token"))).unwrap();
    let e = b.retain(&scope(), &batch()).await.unwrap_err();
    assert!(e.is_transient() && e.is_unreachable() && e.to_string().contains("connection refused"), "{e}");
    assert!(e.to_string().contains("Connection refused"), "the OS's own reason: {e}");
    assert!(!e.to_string().contains("sekrit"));
    let status = b.status().await;
    assert!(!status.healthy);
    assert_eq!(status.reachable, Some(false));
    assert!(status.detail.unwrap().contains("unreachable"));
}

/// A host that is off or a firewall dropping packets: the connection attempt times out. The
/// server never saw the batch, so it is an outage like a refused connection, which uses up no
/// attempts (an outage of any length dead-letters nothing).
#[tokio::test]
async fn a_connection_attempt_that_times_out_is_an_outage() {
    // A listener that never accepts, its queue full: the kernel drops later connection attempts.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut held = Vec::new();
    for _ in 0..16 {
        match tokio::time::timeout(Duration::from_millis(300), tokio::net::TcpStream::connect(addr)).await {
            Ok(Ok(s)) => held.push(s),
            _ => break,
        }
    }
    let mut config = common::config(&format!("http://{addr}"), None);
    config.timeout = Duration::from_millis(300);
    let e = HindsightBackend::new(config).unwrap().retain(&scope(), &batch()).await.unwrap_err();
    assert!(e.is_unreachable(), "an outage, not an attempt: {e:?}");
    assert!(e.to_string().contains("timed out"), "{e}");
    drop((held, listener));
}

/// An ingress that redirects (http to https, another path): a 301 or 302 would turn the POST
/// into a GET (then a 405, read as the server refusing every batch), a 307 would send the
/// memories to whatever host it names. Not followed: a permanent error naming where it points.
#[tokio::test]
async fn a_redirect_is_not_followed_and_names_where_it_points() {
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let elsewhere = serve(Router::new().fallback(move || {
        let counted = counted.clone();
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            r#"{"success": true, "bank_id": "b", "items_count": 1, "async": true}"#
        }
    }))
    .await;
    for status in [StatusCode::MOVED_PERMANENTLY, StatusCode::TEMPORARY_REDIRECT] {
        let target = format!("{elsewhere}/v1/default/banks/b/memories");
        let url =
            serve(Router::new().route(
                "/v1/default/banks/b/memories",
                post(move || async move { (status, [("location", target)], "") }),
            ))
            .await;
        let e =
            HindsightBackend::new(common::config(&url, None)).unwrap().retain(&scope(), &batch()).await.unwrap_err();
        assert!(!e.is_transient(), "{status}: {e}");
        assert!(e.to_string().contains(&elsewhere) && e.to_string().contains("hindsight.api_url"), "{e}");
    }
    assert_eq!(hits.load(Ordering::SeqCst), 0, "nothing was sent where the redirect pointed");
}

/// A server (or a proxy) that answers without end: what is read is bounded, and the retain is
/// worth retrying, not taken as delivered.
#[tokio::test]
async fn an_answer_without_end_is_refused_past_its_bound() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = [0u8; 65536];
                let _ = s.read(&mut request).await;
                let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
                if s.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = format!("100000\r\n{}\r\n", " ".repeat(1 << 20));
                // Until the client hangs up.
                while s.write_all(chunk.as_bytes()).await.is_ok() {}
            });
        }
    });
    let e = HindsightBackend::new(common::config(&url, None)).unwrap().retain(&scope(), &batch()).await.unwrap_err();
    assert!(e.is_transient() && e.to_string().contains("longer than"), "{e}");
}

/// A bank's mission the server answered 404 for was not set: it is asked again at the next
/// retain, not taken as done for the rest of the run.
#[tokio::test]
async fn a_mission_answered_404_is_set_again_later() {
    let puts = Arc::new(AtomicUsize::new(0));
    let counted = puts.clone();
    let url = serve(
        Router::new()
            .route(
                "/v1/default/banks/b",
                axum::routing::put(move || {
                    let counted = counted.clone();
                    async move {
                        counted.fetch_add(1, Ordering::SeqCst);
                        StatusCode::NOT_FOUND
                    }
                }),
            )
            .route(
                "/v1/default/banks/b/memories",
                post(|| async { r#"{"success": true, "bank_id": "b", "items_count": 1, "async": true}"# }),
            ),
    )
    .await;
    let mut config = common::config(&url, None);
    config.bank_mission = "Remember how the team builds and ships.".into();
    let b = HindsightBackend::new(config).unwrap();
    b.retain(&scope(), &batch()).await.unwrap();
    b.retain(&scope(), &batch()).await.unwrap();
    assert_eq!(puts.load(Ordering::SeqCst), 2, "asked again after the 404");
}

#[tokio::test]
async fn the_rate_limit_waits_instead_of_dropping() {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let url = serve(Router::new().route(
        "/v1/default/banks/b/memories",
        post(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            async { r#"{"success": true}"# }
        }),
    ))
    .await;
    let mut config = common::config(&url, None);
    config.requests_per_second = 5;
    config.burst = 1;
    let b = Arc::new(HindsightBackend::new(config).unwrap());
    let started = Instant::now();
    let calls: Vec<_> = (0..4)
        .map(|_| {
            let b = b.clone();
            tokio::spawn(async move { b.retain(&scope(), &batch()).await })
        })
        .collect();
    for c in calls {
        c.await.unwrap().unwrap();
    }
    assert_eq!(hits.load(Ordering::SeqCst), 4);
    assert!(started.elapsed() >= Duration::from_millis(550), "{:?}", started.elapsed());
}

/// A password in `api_url` is never shown: not in an error an agent sees, nor in the status.
#[tokio::test]
async fn credentials_in_the_url_are_never_shown() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener); // nothing listens there
    let url = format!("http://alice:S3CRETPW@127.0.0.1:{port}");
    let b = HindsightBackend::new(common::config(&url, None)).unwrap();
    let e = b.retain(&scope(), &batch()).await.unwrap_err();
    assert!(e.to_string().contains("cannot reach Hindsight at http://****@127.0.0.1"), "{e}");
    let status = b.status().await;
    let shown = format!("{status:?} {b:?} {e:?}");
    assert!(!shown.contains("S3CRETPW") && !shown.contains("alice"), "{shown}");
}

/// A server with an LLM answers a synchronous retain only once its extraction is done, which may
/// take longer than `retain_timeout`, and it cancels the retain when the client gives up: such a
/// retain would fail on every attempt. Here synchronous retains outlast the timeout and
/// asynchronous ones are queued at once: a delivery and an import that name a document more than
/// once go through. Their documents go synchronously first (each item keeps its tags), and once
/// that times out, item by item (their items being alike); every other request is asynchronous
/// and names a document once at most.
#[tokio::test]
async fn documents_named_more_than_once_never_wait_for_a_slow_synchronous_retain() {
    let bodies = Arc::new(std::sync::Mutex::new(Vec::<serde_json::Value>::new()));
    let seen = bodies.clone();
    let url = serve(Router::new().route(
        "/v1/default/banks/b/memories",
        post(move |axum::Json(body): axum::Json<serde_json::Value>| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().push(body.clone());
                if body["async"] != true {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                }
                axum::Json(serde_json::json!({"success": true, "items_count": 1}))
            }
        }),
    ))
    .await;
    let config =
        mneme_hindsight::HindsightConfig { retain_timeout: Duration::from_millis(800), ..common::config(&url, None) };
    let b = HindsightBackend::new(config).unwrap();
    let in_doc = |id: &str, doc: &str| MemoryItem {
        document_id: Some(doc.into()),
        ..MemoryItem::new(id, id, "2026-01-01T00:00:00Z")
    };
    let delivery = RetainBatch {
        id: "0192f4a1b2c3d4e5f60718293a4b5c6d".into(),
        items: vec![in_doc("a", "d"), in_doc("b", "d"), MemoryItem::new("c", "c", "2026-01-01T00:00:00Z")],
    };
    b.retain(&scope(), &delivery).await.expect("a delivery naming a document twice");
    // Tried again (a later part failed, a kill): the document is deleted again, and its items go
    // under ids of the attempt's own. Under the first attempt's, the server answered them from the
    // operations that stored what the delete took, and the document was lost (review62 #1).
    let ids_of_d = |bodies: &[serde_json::Value]| -> Vec<String> {
        bodies
            .iter()
            .filter(|b| b["async"] == true && b["items"][0]["document_id"] == "d")
            .map(|b| b["operation_id"].as_str().unwrap().to_owned())
            .collect()
    };
    let first = ids_of_d(&bodies.lock().unwrap());
    b.retain(&scope(), &delivery).await.expect("the same delivery again");
    let all = ids_of_d(&bodies.lock().unwrap());
    assert_eq!((first.len(), all.len()), (2, 4), "{all:?}");
    assert!(all[2..].iter().all(|id| !first.contains(id)), "{all:?}");
    bodies.lock().unwrap().truncate(4); // the second attempt's bodies aside
    let stored = |id: &str, doc: &str| StoredMemory {
        id: id.into(),
        bank: "b".into(),
        content: id.into(),
        context: None,
        tags: vec![],
        metadata: Default::default(),
        document_id: Some(doc.into()),
        kind: MemoryType::World,
        created_at: "2026-01-01T00:00:00Z".into(),
    };
    b.import(&[stored("x1", "x"), stored("y", "y"), stored("x2", "x")])
        .await
        .expect("an import naming a document twice");
    let bodies = bodies.lock().unwrap();
    assert_eq!(
        bodies.len(),
        4 + 4,
        "the loose item, the document at once, then each of its items; the same for the import's {bodies:?}"
    );
    let (folded, bodies): (Vec<&serde_json::Value>, Vec<&serde_json::Value>) =
        bodies.iter().partition(|b| b["async"] != true);
    assert_eq!(folded.len(), 2, "{folded:?}");
    assert!(folded.iter().all(|f| f["items"].as_array().unwrap().len() == 2), "{folded:?}");
    for body in bodies.iter() {
        assert_eq!(body["async"], true, "{body}");
        let docs: Vec<&str> =
            body["items"].as_array().unwrap().iter().filter_map(|i| i["document_id"].as_str()).collect();
        let unique: std::collections::HashSet<&&str> = docs.iter().collect();
        assert_eq!(unique.len(), docs.len(), "a document named twice in one request: {body}");
        assert!(body["operation_id"].as_str().is_some_and(|id| id.len() == 36), "{body}");
    }
}

/// A reflect's compound tag filters, types and bound reach the server as given: dropped, a
/// project's question was answered from every project's memories (review59 #2).
#[tokio::test]
async fn a_reflect_passes_on_its_tag_groups_types_and_bound() {
    let bodies = Arc::new(std::sync::Mutex::new(Vec::<serde_json::Value>::new()));
    let seen = bodies.clone();
    let url = serve(Router::new().route(
        "/v1/default/banks/b/reflect",
        post(move |axum::Json(body): axum::Json<serde_json::Value>| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().push(body);
                axum::Json(serde_json::json!({"text": "beta's answer"}))
            }
        }),
    ))
    .await;
    let groups = serde_json::json!([{"tags": ["project:beta"], "match": "all_strict"}]);
    let q = ReflectQuery {
        query: "what is the launch code?".into(),
        context: None,
        budget: Budget::Mid,
        tags: vec![],
        tags_match: TagsMatch::Any,
        tag_groups: Some(groups.clone()),
        types: vec![MemoryType::World],
        max_tokens: Some(300),
    };
    let text = HindsightBackend::new(common::config(&url, None)).unwrap().reflect(&scope(), &q).await.unwrap();
    assert_eq!(text, "beta's answer");
    let body = bodies.lock().unwrap().pop().unwrap();
    assert_eq!(body["tag_groups"], groups, "{body}");
    assert_eq!(body["fact_types"], serde_json::json!(["world"]), "{body}");
    assert_eq!(body["max_tokens"], 300, "{body}");
    assert!(body.get("tags").is_none() && body.get("tags_match").is_none(), "{body}");
}

/// A reflect answer quoting what another client marked private (the server's LLM read it) is
/// passed on without it. The peer's mock LLM cannot be made to quote on demand.
#[tokio::test]
async fn a_reflect_answer_quoting_private_text_is_cleaned() {
    let url = serve(Router::new().route(
        "/v1/default/banks/b/reflect",
        post(|| async { axum::Json(serde_json::json!({"text": "The key is <private>hunter2</private>; rotate it."})) }),
    ))
    .await;
    let q = ReflectQuery {
        query: "what is the key?".into(),
        context: None,
        budget: Budget::Mid,
        tags: vec![],
        tags_match: TagsMatch::Any,
        tag_groups: None,
        types: vec![],
        max_tokens: None,
    };
    let text = HindsightBackend::new(common::config(&url, None)).unwrap().reflect(&scope(), &q).await.unwrap();
    assert!(!text.contains("hunter2") && text.contains("rotate it"), "{text}");
}

/// A server that accepts a retain and reports its operation as `statuses` say, one per look
/// (the last repeated), counting looks and re-queues.
async fn operation_server(statuses: &'static [&'static str]) -> (String, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    use axum::extract::Path;
    use axum::routing::get;
    let looks = Arc::new(AtomicUsize::new(0));
    let requeued = Arc::new(AtomicUsize::new(0));
    let (l, r) = (looks.clone(), requeued.clone());
    let app = Router::new()
        .route("/v1/default/banks/b/memories", post(|| async { r#"{"success":true}"# }))
        .route(
            "/v1/default/banks/b/operations/{id}",
            get(move |Path(id): Path<String>| async move {
                let n = l.fetch_add(1, Ordering::SeqCst);
                let status = statuses[n.min(statuses.len() - 1)];
                let error = if status == "failed" { r#""the LLM provider refused the API key""# } else { "null" };
                format!(r#"{{"operation_id":"{id}","status":"{status}","error_message":{error}}}"#)
            }),
        )
        .route(
            "/v1/default/banks/b/operations/{id}/retry",
            post(move || async move {
                r.fetch_add(1, Ordering::SeqCst);
                r#"{"success":true,"message":"queued for retry"}"#
            }),
        );
    (serve(app).await, looks, requeued)
}

/// Accepted is only queued: a retain is done when its operation is completed, looked at until
/// then.
#[tokio::test]
async fn a_retain_waits_for_its_operation_to_complete() {
    let (url, looks, _) = operation_server(&["pending", "processing", "completed"]).await;
    HindsightBackend::new(common::config(&url, None)).unwrap().retain(&scope(), &batch()).await.unwrap();
    assert_eq!(looks.load(Ordering::SeqCst), 3);
}

/// An operation the server's worker failed (a refused LLM key, its embedder down) was taken for
/// stored: the spool let the batch go and nothing was kept. Now the delivery fails with the
/// server's reason, counted as an attempt, and the operation is re-queued on the server (a
/// resend under the same id would be answered from the failed one).
#[tokio::test]
async fn a_failed_operation_fails_the_delivery_and_is_requeued() {
    let (url, _, requeued) = operation_server(&["failed", "completed"]).await;
    let b = HindsightBackend::new(common::config(&url, None)).unwrap();
    let e = b.retain(&scope(), &batch()).await.unwrap_err();
    assert!(e.is_transient() && !e.is_unreachable(), "{e}");
    assert!(e.to_string().contains("could not store") && e.to_string().contains("refused the API key"), "{e}");
    assert_eq!(requeued.load(Ordering::SeqCst), 1);
    // The next attempt finds it stored.
    b.retain(&scope(), &batch()).await.unwrap();
}

/// A server whose worker never gets to the operation: the delivery gives up after
/// `retain_timeout` (an outage: no attempt used) instead of holding the session's queue for ever.
#[tokio::test]
async fn an_operation_still_pending_after_the_retain_timeout_fails_the_delivery() {
    let (url, looks, _) = operation_server(&["pending"]).await;
    let config =
        mneme_hindsight::HindsightConfig { retain_timeout: Duration::from_millis(600), ..common::config(&url, None) };
    let started = Instant::now();
    let e = HindsightBackend::new(config).unwrap().retain(&scope(), &batch()).await.unwrap_err();
    assert!(e.is_outage() && e.to_string().contains("not finished storing"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert!(looks.load(Ordering::SeqCst) >= 2);
}

/// An operation the server leaves unfinished for good (a worker that died: Hindsight issue
/// #4131) was an outage for ever, holding its session's queue with one notice. Past 60
/// `retain_timeout`s it uses up an attempt each time, so that the batch reaches the dead letters.
#[tokio::test]
async fn an_operation_unfinished_for_good_uses_up_attempts() {
    let (url, _, _) = operation_server(&["processing"]).await;
    let config =
        mneme_hindsight::HindsightConfig { retain_timeout: Duration::from_millis(50), ..common::config(&url, None) };
    let b = HindsightBackend::new(config).unwrap();
    let started = Instant::now();
    let e = b.retain(&scope(), &batch()).await.unwrap_err();
    assert!(e.is_outage(), "a first wait is an outage: {e}");
    let e = loop {
        let e = b.retain(&scope(), &batch()).await.unwrap_err();
        if !e.is_outage() || started.elapsed() > Duration::from_secs(10) {
            break e;
        }
    };
    assert!(e.is_transient() && !e.is_outage(), "{e}");
    assert!(e.to_string().contains("worker may have died"), "{e}");
    assert!(started.elapsed() >= Duration::from_secs(3), "after 60 timeouts, not before: {:?}", started.elapsed());
    // One only `pending` waits behind the server's backlog: an outage however long it lasts.
    let (url, _, _) = operation_server(&["pending"]).await;
    let config =
        mneme_hindsight::HindsightConfig { retain_timeout: Duration::from_millis(50), ..common::config(&url, None) };
    let b = HindsightBackend::new(config).unwrap();
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(3500) {
        let e = b.retain(&scope(), &batch()).await.unwrap_err();
        assert!(e.is_outage(), "a backlog is an outage: {e}");
    }
}

/// A server without the operations route (404), or one that pruned the operation, and one
/// cancelled by a clear of the bank: done.
#[tokio::test]
async fn an_operation_gone_or_cancelled_is_done() {
    let url =
        serve(Router::new().route("/v1/default/banks/b/memories", post(|| async { r#"{"success":true}"# }))).await;
    HindsightBackend::new(common::config(&url, None)).unwrap().retain(&scope(), &batch()).await.unwrap();
    let (url, _, _) = operation_server(&["cancelled"]).await;
    HindsightBackend::new(common::config(&url, None)).unwrap().retain(&scope(), &batch()).await.unwrap();
}

/// `https://` to a server that talks plain HTTP: a TLS failure is permanent and says so (it was
/// taken for an outage, and every memory stayed queued for good as "unreachable").
#[tokio::test]
async fn a_server_that_does_not_talk_tls_is_a_permanent_error() {
    let url =
        serve(Router::new().route("/v1/default/banks/b/memories", post(|| async { r#"{"success":true}"# }))).await;
    let https = url.replace("http://", "https://");
    let e = HindsightBackend::new(common::config(&https, None)).unwrap().retain(&scope(), &batch()).await.unwrap_err();
    assert!(!e.is_transient(), "{e}");
    assert!(e.to_string().contains("TLS") && e.to_string().contains("hindsight.api_url"), "{e}");
}

/// A clear of the bank cancels the retains still queued on the server, and a forget of a
/// document those of that document: run after the delete, they stored again what it deleted.
/// (The real server's worker runs a queued retain within a moment: one cannot be kept queued on
/// demand, hence this stand-in.)
#[tokio::test]
async fn a_clear_or_a_forget_cancels_the_retains_still_queued_on_the_server() {
    use axum::extract::{Path, Query};
    use axum::routing::{delete, get};
    use std::collections::HashMap;
    let cancelled = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let gone = cancelled.clone();
    let listed = cancelled.clone();
    let app = Router::new()
        .route(
            "/v1/default/banks/b/operations",
            get(move |Query(q): Query<HashMap<String, String>>| async move {
                let done = listed.lock().unwrap().clone();
                let all = [("op-a", "retain", "doc-a"), ("op-b", "retain", "doc-b"), ("op-c", "consolidation", "doc-a")];
                let offset: usize = q.get("offset").and_then(|o| o.parse().ok()).unwrap_or(0);
                let ops: Vec<serde_json::Value> = if q.get("status").map(String::as_str) == Some("pending") {
                    all.iter()
                        .filter(|(id, ..)| !done.iter().any(|d| d == id))
                        .skip(offset)
                        .map(|(id, t, d)| serde_json::json!({"id": id, "task_type": t, "document_id": d, "items_count": 1}))
                        .collect()
                } else {
                    Vec::new()
                };
                axum::Json(serde_json::json!({"operations": ops}))
            }),
        )
        .route(
            "/v1/default/banks/b/operations/{id}",
            delete(move |Path(id): Path<String>| async move {
                gone.lock().unwrap().push(id);
                r#"{"success":true}"#
            }),
        )
        .route("/v1/default/banks/b/documents/{id}", delete(|| async { r#"{"success":true,"memory_units_deleted":1}"# }))
        .route("/v1/default/banks/b/memories", delete(|| async { r#"{"success":true}"# }));
    let url = serve(app).await;
    let b = HindsightBackend::new(common::config(&url, None)).unwrap();
    b.forget(&Forget::Document { id: "doc-a".into(), bank: "b".into() }).await.unwrap();
    assert_eq!(*cancelled.lock().unwrap(), ["op-a"], "the document's retain only");
    b.clear(&scope(), ClearWhat::Remote).await.unwrap();
    assert_eq!(*cancelled.lock().unwrap(), ["op-a", "op-b"], "every retain of the bank, not other work");
}

/// A server running a retain of a document stops only after that document, and a cancelled
/// operation's status no longer says when: a forget that cancelled it and deleted at once found
/// the document stored again after the delete. Now a running retain is left to finish, and its
/// document deleted again once it has; a queued one cancelled (a worker may have taken it just
/// before) has its document deleted again after `retain_timeout`. Not when mneme itself
/// retained or imported to it in between; a clear deletes again only those documents, not the
/// whole bank; nothing once the backend is gone. (The real server runs a retain within a moment
/// with its test LLM: one cannot be kept running on demand, hence this stand-in.)
#[tokio::test]
async fn a_retain_the_server_was_running_at_a_forget_is_deleted_again_once_it_finished() {
    use axum::extract::{Path, Query};
    use axum::routing::{delete, get};
    use std::collections::HashMap;
    #[derive(Default)]
    struct Server {
        looks: AtomicUsize,
        cancels: AtomicUsize,
        document_deletes: AtomicUsize,
        bank_deletes: AtomicUsize,
    }
    /// `status`: how the retain of doc-a is listed, until its second look says it finished.
    async fn start(status: &'static str, finished_after: usize) -> (String, Arc<Server>) {
        let server = Arc::new(Server::default());
        let (a, b, c, d, e) = (server.clone(), server.clone(), server.clone(), server.clone(), server.clone());
        let app = Router::new()
            .route(
                "/v1/default/banks/b/operations",
                get(move |Query(q): Query<HashMap<String, String>>| async move {
                    let listed = q.get("status").map(String::as_str) == Some(status)
                        && q.get("offset").map(String::as_str) == Some("0")
                        && a.looks.load(Ordering::SeqCst) < finished_after
                        && a.cancels.load(Ordering::SeqCst) == 0;
                    let ops: Vec<serde_json::Value> = match listed {
                        true => vec![serde_json::json!({"id": "op-r", "task_type": "retain", "document_id": "doc-a"})],
                        false => Vec::new(),
                    };
                    axum::Json(serde_json::json!({"operations": ops}))
                }),
            )
            .route(
                "/v1/default/banks/b/operations/{id}",
                get(move |Path(id): Path<String>| async move {
                    let status = match id.as_str() {
                        "op-r" if b.looks.fetch_add(1, Ordering::SeqCst) + 1 < finished_after => "processing",
                        _ => "completed",
                    };
                    format!(r#"{{"operation_id":"{id}","status":"{status}"}}"#)
                })
                .delete(move || async move {
                    c.cancels.fetch_add(1, Ordering::SeqCst);
                    r#"{"success":true}"#
                }),
            )
            .route(
                "/v1/default/banks/b/documents/{id}",
                delete(move || async move {
                    d.document_deletes.fetch_add(1, Ordering::SeqCst);
                    r#"{"success":true,"memory_units_deleted":1}"#
                })
                .get(|| async { (StatusCode::NOT_FOUND, r#"{"detail":"Document not found"}"#) }),
            )
            .route(
                "/v1/default/banks/b/memories",
                delete(move || async move {
                    e.bank_deletes.fetch_add(1, Ordering::SeqCst);
                    r#"{"success":true}"#
                })
                .post(|| async { r#"{"success":true}"# }),
            );
        (serve(app).await, server)
    }
    async fn settled(b: &HindsightBackend) {
        let started = Instant::now();
        while b.deletes_owed() > 0 {
            assert!(started.elapsed() < Duration::from_secs(20), "the delete owed never came");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let forget = Forget::Document { id: "doc-a".into(), bank: "b".into() };
    let config = |url: &str| mneme_hindsight::HindsightConfig {
        retain_timeout: Duration::from_millis(500),
        ..common::config(url, None)
    };

    // Deleted again once it finished (the second look says so).
    let (url, server) = start("processing", 2).await;
    let b = HindsightBackend::new(config(&url)).unwrap();
    let forgotten = b.forget(&forget).await.unwrap();
    assert!(forgotten.message.contains("deleted again once"), "{}", forgotten.message);
    assert_eq!(server.cancels.load(Ordering::SeqCst), 0, "a running retain is not cancelled");
    assert_eq!(server.document_deletes.load(Ordering::SeqCst), 1);
    assert_eq!(b.deletes_owed(), 1);
    settled(&b).await;
    assert_eq!(server.looks.load(Ordering::SeqCst), 2, "looked at until it finished");
    assert_eq!(server.document_deletes.load(Ordering::SeqCst), 2, "deleted again after it finished");

    // A queued retain cancelled: its document deleted again after retain_timeout.
    let (url, server) = start("pending", 2).await;
    let b = HindsightBackend::new(config(&url)).unwrap();
    b.forget(&forget).await.unwrap();
    assert_eq!(server.cancels.load(Ordering::SeqCst), 1, "a queued retain is cancelled");
    let started = Instant::now();
    settled(&b).await;
    assert!(started.elapsed() >= Duration::from_millis(400), "{:?}", started.elapsed());
    assert_eq!(server.document_deletes.load(Ordering::SeqCst), 2, "deleted again after retain_timeout");

    // mneme retained, or imported, to the document in between: the second delete would take it.
    for import in [false, true] {
        let (url, server) = start("processing", 2).await;
        let b = HindsightBackend::new(config(&url)).unwrap();
        b.forget(&forget).await.unwrap();
        let mut item = MemoryItem::new("i", "the new text", "2026-01-01T00:00:00Z");
        item.document_id = Some("doc-a".into());
        if import {
            let memory = StoredMemory {
                id: "m".into(),
                bank: "b".into(),
                content: "the imported text".into(),
                context: None,
                tags: Vec::new(),
                metadata: Default::default(),
                document_id: Some("doc-a".into()),
                kind: MemoryType::World,
                created_at: "2026-01-01T00:00:00Z".into(),
            };
            b.import(&[memory]).await.unwrap();
        } else {
            let batch = RetainBatch { id: "0192f4a1b2c3d4e5f60718293a4b5c6e".into(), items: vec![item] };
            b.retain(&scope(), &batch).await.unwrap();
        }
        settled(&b).await;
        assert_eq!(server.document_deletes.load(Ordering::SeqCst), 1, "deleted again over a newer write ({import})");
    }

    // A clear of the bank: the running retain's document deleted again, not the whole bank.
    let (url, server) = start("processing", 2).await;
    let b = HindsightBackend::new(config(&url)).unwrap();
    let cleared = b.clear(&scope(), ClearWhat::Remote).await.unwrap();
    assert!(cleared.message.contains("deleted again once"), "{}", cleared.message);
    settled(&b).await;
    assert_eq!(server.bank_deletes.load(Ordering::SeqCst), 1, "the bank is cleared once");
    assert_eq!(server.document_deletes.load(Ordering::SeqCst), 1, "the running retain's document again");

    // The backend gone (a switch, a shutdown): its owed deletes go with it.
    let (url, server) = start("processing", usize::MAX).await;
    let b = HindsightBackend::new(config(&url)).unwrap();
    b.forget(&forget).await.unwrap();
    drop(b);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(server.looks.load(Ordering::SeqCst), 0, "nothing looked at after the backend went");
}

/// The TLS check reads the causes, not reqwest's own message, which holds the URL: a bank named
/// after a project called `rustls` made every outage a permanent TLS error.
#[tokio::test]
async fn a_bank_named_like_tls_is_still_an_outage_when_nothing_answers() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let b = HindsightBackend::new(common::config(&format!("http://127.0.0.1:{port}"), None)).unwrap();
    let scope = Scope { bank: "mneme-rustls-certificate".into(), tags: vec![] };
    let e = b.retain(&scope, &batch()).await.unwrap_err();
    assert!(e.is_unreachable(), "{e}");
}

/// Cancels that are refused (409: the operation finished meanwhile, or went with its parent)
/// leave the list as the cancelled ones do: the next page starts where the queued ones still
/// are, not past some of them. And a forget of a document that was only queued is done once
/// its retain is cancelled (the delete then answers 404).
#[tokio::test]
async fn cancelling_pages_through_refusals_and_a_queued_document_is_forgotten() {
    use axum::extract::{Path, Query};
    use axum::routing::{delete, get};
    use std::collections::HashMap;
    // Twelve queued retains, every third refused; the server lists two a page.
    let ops: Vec<String> = (0..12).map(|i| format!("op-{i:02}")).collect();
    let gone = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let cancelled = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let (listed, all) = (gone.clone(), ops.clone());
    let (removed, took) = (gone.clone(), cancelled.clone());
    let app = Router::new()
        .route(
            "/v1/default/banks/b/operations",
            get(move |Query(q): Query<HashMap<String, String>>| async move {
                let gone = listed.lock().unwrap().clone();
                let offset: usize = q.get("offset").and_then(|o| o.parse().ok()).unwrap_or(0);
                let pending = q.get("status").map(String::as_str) == Some("pending");
                let page: Vec<serde_json::Value> = all
                    .iter()
                    .filter(|id| pending && !gone.contains(id))
                    .skip(offset)
                    .take(2)
                    .map(|id| serde_json::json!({"id": id, "task_type": "retain", "document_id": "doc-q", "items_count": 1}))
                    .collect();
                axum::Json(serde_json::json!({"operations": page}))
            }),
        )
        .route(
            "/v1/default/banks/b/operations/{id}",
            delete(move |Path(id): Path<String>| async move {
                removed.lock().unwrap().push(id.clone());
                let n: usize = id[3..].parse().unwrap();
                if n.is_multiple_of(3) {
                    (StatusCode::CONFLICT, r#"{"detail":"already completed"}"#).into_response()
                } else {
                    took.lock().unwrap().push(id);
                    r#"{"success":true}"#.into_response()
                }
            }),
        )
        .route("/v1/default/banks/b/documents/{id}", delete(|| async { (StatusCode::NOT_FOUND, r#"{"detail":"Document not found"}"#) }));
    let url = serve(app).await;
    let b = HindsightBackend::new(common::config(&url, None)).unwrap();
    let forgotten = b.forget(&Forget::Document { id: "doc-q".into(), bank: "b".into() }).await.unwrap();
    assert_eq!(forgotten.deleted, Some(0));
    assert!(forgotten.message.contains("cancelled"), "{}", forgotten.message);
    let want: Vec<String> = ops.iter().filter(|id| id[3..].parse::<usize>().unwrap() % 3 != 0).cloned().collect();
    assert_eq!(*cancelled.lock().unwrap(), want, "every queued retain that could be cancelled was");
}

/// An import whose operation the server failed (its LLM key refused) is re-queued there when
/// imported again: a resend under its id is answered from the failed operation, and the second
/// import stored nothing and said it had.
#[tokio::test]
async fn an_import_whose_operation_failed_is_requeued_when_imported_again() {
    let (url, _, requeued) = operation_server(&["failed"]).await;
    let b = HindsightBackend::new(common::config(&url, None)).unwrap();
    let memory = StoredMemory {
        id: "m1".into(),
        bank: "b".into(),
        content: "The petrel job runs weekly".into(),
        context: None,
        tags: vec![],
        metadata: Default::default(),
        document_id: None,
        kind: MemoryType::World,
        created_at: "2026-01-02T03:04:05Z".into(),
    };
    b.import(std::slice::from_ref(&memory)).await.unwrap();
    assert_eq!(requeued.load(Ordering::SeqCst), 1, "looked at before it was sent: failed");
}

/// Hindsight 1.1's database now and then deadlocks a delete against the server's own upkeep of
/// the bank (a 500 "deadlock detected"): a forget or a remote clear tries it again, and a server
/// that keeps failing is still an error after three tries, not a loop.
#[tokio::test]
async fn a_delete_the_server_deadlocked_is_tried_again() {
    use axum::routing::delete;
    let (doc_tries, clear_tries) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (d, c) = (doc_tries.clone(), clear_tries.clone());
    let app = Router::new()
        .route(
            "/v1/default/banks/b/documents/{id}",
            delete(move || async move {
                if d.fetch_add(1, Ordering::SeqCst) < 2 {
                    (StatusCode::INTERNAL_SERVER_ERROR, r#"{"detail":"deadlock detected"}"#).into_response()
                } else {
                    (StatusCode::OK, r#"{"success":true,"memory_units_deleted":2}"#).into_response()
                }
            }),
        )
        .route(
            "/v1/default/banks/b/memories",
            delete(move || async move {
                c.fetch_add(1, Ordering::SeqCst);
                (StatusCode::INTERNAL_SERVER_ERROR, r#"{"detail":"deadlock detected"}"#)
            }),
        );
    let url = serve(app).await;
    let b = HindsightBackend::new(common::config(&url, None)).unwrap();
    let forgotten = b.forget(&Forget::Document { id: "doc".into(), bank: "b".into() }).await.unwrap();
    assert_eq!((forgotten.deleted, doc_tries.load(Ordering::SeqCst)), (Some(2), 3));
    let e = b.clear(&scope(), ClearWhat::Remote).await.unwrap_err();
    assert!(e.is_transient() && e.to_string().contains("deadlock detected"), "{e}");
    assert_eq!(clear_tries.load(Ordering::SeqCst), 3);
}

/// `/health` needs no key: a server that refuses the token everywhere else, or a web server that
/// answers `/health` but is no Hindsight API, is not reported healthy (a wrong token showed
/// "healthy" while every recall was refused).
#[tokio::test]
async fn status_checks_the_token_and_the_api_beyond_health() {
    use axum::routing::get;
    let health = || async { axum::Json(serde_json::json!({"status": "healthy"})) };
    let keyed = serve(Router::new().route("/health", get(health)).route(
        "/v1/default/banks",
        get(|| async { (StatusCode::UNAUTHORIZED, r#"{"detail":"Authentication failed: Invalid API key"}"#) }),
    ))
    .await;
    let status = HindsightBackend::new(common::config(&keyed, Some("wrong"))).unwrap().status().await;
    assert!(!status.healthy, "{status:?}");
    assert!(status.detail.as_deref().unwrap_or_default().contains("refused the API token"), "{status:?}");
    // None set: said so, not that one was refused.
    let status = HindsightBackend::new(common::config(&keyed, None)).unwrap().status().await;
    assert!(!status.healthy, "{status:?}");
    assert!(status.detail.as_deref().unwrap_or_default().contains("none is set"), "{status:?}");
    let other = serve(Router::new().route("/health", get(health))).await;
    let status = HindsightBackend::new(common::config(&other, None)).unwrap().status().await;
    assert!(!status.healthy, "{status:?}");
    assert!(status.detail.as_deref().unwrap_or_default().contains("is hindsight.api_url right?"), "{status:?}");
    let fine = serve(
        Router::new()
            .route("/health", get(health))
            .route("/v1/default/banks", get(|| async { axum::Json(serde_json::json!({"banks": []})) })),
    )
    .await;
    let status = HindsightBackend::new(common::config(&fine, None)).unwrap().status().await;
    assert!(status.healthy, "{status:?}");
    assert_eq!(status.reachable, Some(true));
}

/// The status asks the server's version once a minute, not with every status: the web view's
/// status every 2 s took a third of its requests from `requests_per_second` for it, and at a
/// low rate starved the deliveries (review74 #1, review75 #1). Its health is asked every time.
#[tokio::test]
async fn the_status_asks_the_version_once_a_minute() {
    use axum::routing::get;
    let (health_asked, version_asked) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (h, v) = (health_asked.clone(), version_asked.clone());
    let server = serve(
        Router::new()
            .route(
                "/health",
                get(move || {
                    h.fetch_add(1, Ordering::SeqCst);
                    async { axum::Json(serde_json::json!({"status": "healthy"})) }
                }),
            )
            .route(
                "/version",
                get(move || {
                    v.fetch_add(1, Ordering::SeqCst);
                    async { axum::Json(serde_json::json!({"api_version": "1.1.0"})) }
                }),
            )
            .route("/v1/default/banks", get(|| async { axum::Json(serde_json::json!({"banks": []})) })),
    )
    .await;
    let b = HindsightBackend::new(common::config(&server, None)).unwrap();
    for _ in 0..3 {
        let status = b.status().await;
        assert_eq!((status.healthy, status.version.as_deref()), (true, Some("1.1.0")), "{status:?}");
    }
    assert_eq!(health_asked.load(Ordering::SeqCst), 3);
    assert_eq!(version_asked.load(Ordering::SeqCst), 1);
}

/// A server that answers, with a 404 at a wrong `api_url` path or with a 500, is reachable (the
/// CLI shows UNHEALTHY, not UNREACHABLE: review67 #6); its detail is not "unreachable".
#[tokio::test]
async fn a_server_that_answers_an_error_is_reachable() {
    use axum::routing::get;
    let health = || async { axum::Json(serde_json::json!({"status": "healthy"})) };
    let at_root = serve(Router::new().route("/health", get(health))).await;
    let failing = serve(
        Router::new().route("/health", get(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "database is down") })),
    )
    .await;
    for url in [format!("{at_root}/api"), failing] {
        let status = HindsightBackend::new(common::config(&url, None)).unwrap().status().await;
        assert!(!status.healthy, "{status:?}");
        assert_eq!(status.reachable, Some(true), "{url}: {status:?}");
        assert!(!status.detail.as_deref().unwrap_or_default().contains("unreachable"), "{status:?}");
    }
}

/// A recall answered 404 is an empty bank only when the server names the bank missing: a wrong
/// `hindsight.api_url` (another web server, a path the server lacks) answered the bare
/// `Not Found` of a route, and looked like an empty memory.
#[tokio::test]
async fn a_404_naming_nothing_is_a_wrong_url_not_an_empty_bank() {
    let q = RecallQuery {
        query: "where is the deploy key".into(),
        budget: Budget::Mid,
        max_tokens: 1024,
        types: vec![],
        tags: vec![],
        tags_match: TagsMatch::Any,
        deadline: None,
    };
    let no_bank = serve(Router::new().route(
        "/v1/default/banks/b/memories/recall",
        post(|| async { (StatusCode::NOT_FOUND, r#"{"detail":"Bank 'b' not found"}"#) }),
    ))
    .await;
    let found = HindsightBackend::new(common::config(&no_bank, None)).unwrap().recall(&scope(), &q).await.unwrap();
    assert!(found.is_empty());
    for wrong in [
        serve(Router::new()).await,
        serve(Router::new().fallback(|| async { (StatusCode::NOT_FOUND, r#"{"detail":"Not Found"}"#) })).await,
    ] {
        let b = HindsightBackend::new(common::config(&wrong, None)).unwrap();
        let e = b.recall(&scope(), &q).await.unwrap_err();
        assert!(e.to_string().contains("is hindsight.api_url right?"), "{e}");
        let e = b.export(Some("b"), None, 10).await.unwrap_err();
        assert!(e.to_string().contains("is hindsight.api_url right?"), "{e}");
    }
}

/// A bank written while the list is read moves to a page already read (the server lists the
/// banks last written first): it was in no page. The list is read again until a reading finds
/// nothing new (review70 #3).
#[tokio::test]
async fn a_bank_written_while_the_list_is_read_is_listed() {
    use axum::extract::Query;
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = asked.clone();
    let list = move |Query(q): Query<std::collections::HashMap<String, String>>| {
        let counter = counter.clone();
        async move {
            // `a` is written once the first page has been read: from then on it comes first.
            let order = match counter.fetch_add(1, Ordering::SeqCst) {
                0 => ["c", "b", "a"],
                _ => ["a", "c", "b"],
            };
            let offset: usize = q.get("offset").and_then(|o| o.parse().ok()).unwrap_or(0);
            let limit: usize = q.get("limit").and_then(|l| l.parse().ok()).unwrap_or(100);
            let banks: Vec<serde_json::Value> = order
                .iter()
                .skip(offset)
                .take(limit)
                .map(|b| serde_json::json!({"bank_id": b, "fact_count": 1}))
                .collect();
            axum::Json(serde_json::json!({"banks": banks, "total": 3, "limit": limit, "offset": offset}))
        }
    };
    let url = serve(Router::new().route("/v1/default/banks", axum::routing::get(list))).await;
    let b = HindsightBackend::new(mneme_hindsight::HindsightConfig { banks_page: 2, ..common::config(&url, None) })
        .unwrap();
    let mut banks: Vec<String> = b.banks().await.unwrap().into_iter().map(|x| x.bank).collect();
    banks.sort();
    assert_eq!(banks, ["a", "b", "c"]);
    assert!(asked.load(Ordering::SeqCst) >= 4, "read again");
}
