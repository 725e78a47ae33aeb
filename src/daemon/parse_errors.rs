//! The answers hyper writes itself, before a request reaches the router (bytes that are not
//! HTTP/1.1, headers larger than it reads, a bad `Content-Length`), given the API's JSON error
//! body. hyper sends them with an empty body and offers no hook to change that, so the
//! connection's writes are watched: a response head that is hyper's (a 4xx or 5xx with
//! `content-length: 0` and without the instance header every routed answer carries) is
//! replaced, whole, by the same status with a body.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A connection whose writes are watched for hyper's own error answers.
pub struct JsonParseErrors<T> {
    inner: T,
    /// A replacement answer not yet fully written.
    pending: Vec<u8>,
    sent: usize,
}

impl<T> JsonParseErrors<T> {
    /// Watches `inner`.
    pub fn new(inner: T) -> Self {
        JsonParseErrors { inner, pending: Vec::new(), sent: 0 }
    }
}

/// The replacement for `head` when it is one of hyper's own error answers.
fn replacement(head: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(head).ok()?;
    let status_line = text.strip_prefix("HTTP/1.")?.get(2..)?;
    let status: u16 = status_line.get(..3)?.parse().ok()?;
    if !(400..600).contains(&status) || !text.ends_with("\r\n\r\n") {
        return None;
    }
    let lower = text.to_ascii_lowercase();
    if !lower.contains("\r\ncontent-length: 0\r\n") || lower.contains(mneme_core::INSTANCE_HEADER) {
        return None;
    }
    let (code, message) = match status {
        431 => ("headers_too_large", "the request's headers are larger than mneme reads"),
        414 => ("uri_too_long", "the request's path is longer than mneme reads"),
        413 => ("payload_too_large", "the request's body is larger than mneme reads"),
        408 => ("request_timeout", "the request's headers did not arrive in time"),
        505 => ("http_version_not_supported", "mneme speaks HTTP/1.1"),
        _ => ("bad_request", "the request is not valid HTTP/1.1"),
    };
    let body = super::error::error_body(code, message).to_string();
    let mut out = String::with_capacity(head.len() + body.len() + 64);
    for line in text.trim_end_matches("\r\n").split("\r\n") {
        if !line.to_ascii_lowercase().starts_with("content-length:") {
            out.push_str(line);
            out.push_str("\r\n");
        }
    }
    out.push_str(&format!("content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}", body.len()));
    Some(out.into_bytes())
}

impl<T: AsyncWrite + Unpin> JsonParseErrors<T> {
    /// Writes what is left of a replacement answer.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.pending.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.pending.clear();
        self.sent = 0;
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for JsonParseErrors<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for JsonParseErrors<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        ready!(self.poll_pending(cx))?;
        if buf.starts_with(b"HTTP/1.") {
            if let Some(answer) = replacement(buf) {
                self.pending = answer;
                // Taken whole: what is left is written before anything else, and by flush.
                let _ = self.poll_pending(cx)?;
                return Poll::Ready(Ok(buf.len()));
            }
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    // Not vectored: hyper then writes a response head in one piece, which is what is watched.
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hypers_own_answers_get_a_json_body_and_routed_ones_are_left_alone() {
        let hyper = b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\ndate: Thu, 03 Dec 2026 21:48:05 GMT\r\n\r\n";
        let out = String::from_utf8(replacement(hyper).unwrap()).unwrap();
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\n"), "{head}");
        assert!(head.contains("date: Thu") && head.contains("content-type: application/json"), "{head}");
        assert!(head.contains(&format!("content-length: {}", body.len())) && !head.contains("content-length: 0"));
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["code"], "headers_too_large");
        let bad = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
        assert!(String::from_utf8(replacement(bad).unwrap()).unwrap().contains("\"bad_request\""));
        let routed =
            format!("HTTP/1.1 404 Not Found\r\n{}: x\r\ncontent-length: 0\r\n\r\n", mneme_core::INSTANCE_HEADER);
        assert!(replacement(routed.as_bytes()).is_none());
        assert!(replacement(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").is_none());
        assert!(replacement(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 12\r\n\r\n").is_none());
        assert!(replacement(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\nmore").is_none());
    }
}
