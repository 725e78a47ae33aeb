//! Request bodies, bounded in size and in time: a body declared larger than
//! `server.max_body_bytes` is refused before any of it is read, and a body must arrive in full
//! within `server.body_timeout` of its headers. Without the deadline a client that sends its
//! headers and then trickles (or withholds) the body holds a connection place for ever, and a few
//! such clients fill `server.max_connections` (hyper's header timeout stops at the headers).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body::{Frame, SizeHint};

use super::error::ApiError;

/// What the middleware enforces.
#[derive(Debug, Clone, Copy)]
pub(super) struct BodyLimits {
    /// Largest body accepted, in bytes.
    pub max_bytes: usize,
    /// The whole body must arrive within this of the headers.
    pub timeout: Duration,
}

/// Refuses an over-long declared body at once and puts a deadline on reading the rest.
pub(super) async fn bound(State(limits): State<BodyLimits>, req: Request, next: Next) -> Response {
    let declared = req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limits.max_bytes as u64) {
        let message = format!(
            "the request body is {} bytes; at most {} are accepted (server.max_body_bytes)",
            declared.unwrap_or_default(),
            limits.max_bytes
        );
        return closing(ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", message).into_response());
    }
    if let Some(coding) = encoded(&req) {
        // Read as it is, a gzip body is "not JSON" (400), which sends the client looking in the wrong place.
        let message = format!(
            "request bodies are read as sent: Content-Encoding \"{coding}\" is not supported; send the body uncompressed"
        );
        let mut response =
            ApiError::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_content_encoding", message).into_response();
        // RFC 7694: a 415 for a content coding says which codings are accepted.
        response.headers_mut().insert(header::ACCEPT_ENCODING, HeaderValue::from_static("identity"));
        return closing(response);
    }
    // Nothing to wait for (most GETs): no timer.
    if declared == Some(0) || http_body::Body::is_end_stream(req.body()) {
        return next.run(req).await;
    }
    let expired = Arc::new(AtomicBool::new(false));
    let (parts, body) = req.into_parts();
    let body = Deadline { inner: body, sleep: Box::pin(tokio::time::sleep(limits.timeout)), expired: expired.clone() };
    let response = next.run(Request::from_parts(parts, Body::new(body))).await;
    if expired.load(Ordering::Relaxed) {
        // Whatever the handler made of the cut body (an invalid JSON, say), the client was slow.
        let message =
            format!("the request body did not arrive within {:?} of its headers (server.body_timeout)", limits.timeout);
        return closing(ApiError::new(StatusCode::REQUEST_TIMEOUT, "body_timeout", message).into_response());
    }
    response
}

/// The content coding a request's body declares, other than `identity`, shown as sent
/// (control characters escaped, at most 40 characters).
fn encoded(req: &Request) -> Option<String> {
    let codings: Vec<&str> = req
        .headers()
        .get_all(header::CONTENT_ENCODING)
        .iter()
        .flat_map(|v| v.to_str().unwrap_or("?").split(','))
        .map(str::trim)
        .filter(|c| !c.is_empty() && !c.eq_ignore_ascii_case("identity"))
        .collect();
    if codings.is_empty() {
        return None;
    }
    let joined = codings.join(", ");
    if mneme_core::text::has_private_tag(&joined) {
        // Not repeated: error messages reach clients and logs.
        return Some("(a value with <private> text)".into());
    }
    let shown: String = joined.chars().take(40).flat_map(char::escape_default).collect();
    Some(shown)
}

/// The connection closes after this answer: the rest of the body is not read.
fn closing(mut response: Response) -> Response {
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// A body that fails once its deadline passes.
struct Deadline {
    inner: Body,
    sleep: Pin<Box<tokio::time::Sleep>>,
    expired: Arc<AtomicBool>,
}

impl http_body::Body for Deadline {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        if this.sleep.as_mut().poll(cx).is_ready() {
            this.expired.store(true, Ordering::Relaxed);
            return Poll::Ready(Some(Err(axum::Error::new("the request body did not arrive in time"))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
