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
use tokio_util::bytes::BytesMut;

use super::error::ApiError;

/// What the middleware enforces.
#[derive(Debug, Clone, Copy)]
pub(super) struct BodyLimits {
    /// Largest body accepted, in bytes.
    pub max_bytes: usize,
    /// The whole body must arrive within this of the headers.
    pub timeout: Duration,
}

/// What an exported memory may hold beyond the retain that stored it (its id, bank, dates,
/// document id and tags): an import's request may be this much over `server.max_body_bytes`, so
/// that a backup of memories a daemon accepted is restored under the same config (review106 #6:
/// a memory retained just under the bound exported to a line over it, and refused the file).
pub const IMPORT_ROOM: usize = 64 * 1024;

/// The route that takes [`IMPORT_ROOM`] more.
pub const IMPORT_PATH: &str = "/v1/import";

/// Refuses an over-long declared body at once and puts a deadline on reading the rest.
pub(super) async fn bound(State(limits): State<BodyLimits>, req: Request, next: Next) -> Response {
    let declared = req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let most = match req.uri().path() == IMPORT_PATH {
        true => limits.max_bytes.saturating_add(IMPORT_ROOM),
        false => limits.max_bytes,
    };
    if declared.is_some_and(|n| n > most as u64) {
        let beyond = if most > limits.max_bytes { " and the room an import has beyond it" } else { "" };
        let message = format!(
            "the request body is {} bytes; at most {most} are accepted (server.max_body_bytes{beyond})",
            declared.unwrap_or_default(),
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
    let body = Deadline {
        inner: body,
        sleep: Box::pin(tokio::time::sleep(limits.timeout)),
        expired: expired.clone(),
        gathered: BytesMut::new(),
        held: None,
        ended: false,
    };
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

/// A body that fails once its deadline passes, and whose data comes in pieces of at least
/// [`GATHERED`] bytes (but the last).
///
/// Each piece the connection reads points into a read buffer of its own, kept as long as the
/// piece: a body sent a byte at a time, collected as read, held a buffer of 1–4 KiB for each
/// byte (a 2 MB body took 2 GiB, and the allocator kept it). Copied into one buffer as they
/// come, the pieces let their read buffers go at once.
struct Deadline {
    inner: Body,
    sleep: Pin<Box<tokio::time::Sleep>>,
    expired: Arc<AtomicBool>,
    /// Data read and not given on yet.
    gathered: BytesMut,
    /// A trailers frame that came while data was gathered: given after it.
    held: Option<Frame<Bytes>>,
    /// The inner body has ended.
    ended: bool,
}

/// Data is given on in pieces of at least this many bytes.
const GATHERED: usize = 64 * 1024;

impl Deadline {
    fn give_gathered(&mut self) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Poll::Ready(Some(Ok(Frame::data(self.gathered.split().freeze()))))
    }
}

impl http_body::Body for Deadline {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        if let Some(trailers) = this.held.take() {
            return Poll::Ready(Some(Ok(trailers)));
        }
        while !this.ended {
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        this.gathered.extend_from_slice(&data);
                        if this.gathered.len() >= GATHERED {
                            return this.give_gathered();
                        }
                    }
                    Err(trailers) if this.gathered.is_empty() => return Poll::Ready(Some(Ok(trailers))),
                    Err(trailers) => {
                        this.held = Some(trailers);
                        return this.give_gathered();
                    }
                },
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => this.ended = true,
                Poll::Pending => break,
            }
        }
        if this.ended {
            return match this.gathered.is_empty() {
                true => Poll::Ready(None),
                false => this.give_gathered(),
            };
        }
        if this.sleep.as_mut().poll(cx).is_ready() {
            this.expired.store(true, Ordering::Relaxed);
            return Poll::Ready(Some(Err(axum::Error::new("the request body did not arrive in time"))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.gathered.is_empty() && self.held.is_none() && (self.ended || self.inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        if self.ended {
            return SizeHint::with_exact(self.gathered.len() as u64);
        }
        let inner = self.inner.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower() + self.gathered.len() as u64);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + self.gathered.len() as u64);
        }
        hint
    }
}
