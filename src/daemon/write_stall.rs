//! Closes a connection whose client stops reading its answers.
//!
//! hyper's header timeout runs only while it waits for a request: a client that sends requests
//! (pipelined, a few thousand in one write) and never reads the answers leaves hyper waiting to
//! write, its buffers full, with no timer running, and the connection holds one of the
//! `server.max_connections` places for ever. Here a write (or flush) that makes no progress for
//! the limit fails, which ends the connection. Any progress starts the wait afresh, so a slow
//! reader is served; a connection with nothing to write (an idle stream of notices) is not
//! watched at all.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// `inner`, whose writes fail once one has made no progress for `limit`.
pub struct WriteStall<T> {
    inner: T,
    limit: Duration,
    /// Armed by a write that could not go on, dropped by one that did.
    deadline: Option<Pin<Box<Sleep>>>,
}

impl<T> WriteStall<T> {
    /// Watches `inner`'s writes.
    pub fn new(inner: T, limit: Duration) -> Self {
        WriteStall { inner, limit, deadline: None }
    }

    fn watch<R>(&mut self, cx: &mut Context<'_>, attempt: Poll<io::Result<R>>) -> Poll<io::Result<R>> {
        match attempt {
            Poll::Ready(done) => {
                self.deadline = None;
                Poll::Ready(done)
            }
            Poll::Pending => {
                let limit = self.limit;
                let deadline = self.deadline.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                match deadline.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("the client read nothing of its answer for {limit:?} (server.header_timeout)"),
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteStall<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteStall<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let attempt = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, attempt)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let attempt = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(cx, attempt)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let attempt = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.watch(cx, attempt)
    }
}
