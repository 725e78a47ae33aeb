//! Which open connections are idle, so that a client waiting for a place at the connection cap
//! gets the place of the one idle longest rather than waiting for its keep-alive timeout.
//!
//! Without it, a local process that held `server.max_connections` keep-alive connections,
//! each asking for `/v1/health` (open to all) once a second, kept every place: the agents' own
//! requests waited, and their hooks timed out. A connection is busy from a request's start until
//! its answer's body has ended (a notice stream is busy for as long as it streams); between
//! requests, and before its first, it is idle; only one idle for a while makes room (see
//! `accept`), and it is closed gracefully once it has served a request, so that hyper writes out
//! the end of an answer a slow client is still reading.

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use http_body::{Frame, SizeHint};
use tokio_util::sync::CancellationToken;

/// The open connections, by id.
#[derive(Debug, Default)]
pub struct Connections {
    open: Mutex<HashMap<u64, State>>,
    next: AtomicU64,
}

#[derive(Debug)]
struct State {
    /// When it was accepted.
    accepted: Instant,
    /// A request on it presented the token (or the web view's session).
    authenticated: bool,
    /// Cancelled to drop it at once, answer in progress or not (see
    /// [`Connections::cut_longest_anonymous`]).
    cut: CancellationToken,
    /// Requests whose answers have not ended.
    busy: usize,
    /// Requests begun on it.
    served: usize,
    /// When it last became idle (or was accepted).
    idle_since: Instant,
    /// Cancelled to close it once its answer in progress, if any, has ended.
    close: CancellationToken,
    /// Its socket, for the bytes written that the client has not received yet.
    fd: Option<RawFd>,
}

impl State {
    /// An answer is still on its way to the client: the socket holds bytes the client has not
    /// acknowledged (hyper may have let go of them, and of the body; when it waits to write
    /// more, the socket's queue is full).
    fn writing(&self) -> bool {
        self.fd.is_some_and(|fd| unsent_bytes(fd) > 0)
    }
}

/// Bytes in the socket's send queue not yet acknowledged by the peer (`SIOCOUTQ`); 0 when it
/// cannot tell.
fn unsent_bytes(fd: RawFd) -> i32 {
    let mut queued: libc::c_int = 0;
    // SAFETY: TIOCOUTQ writes one int; the fd is the connection's socket, open while it is listed.
    let done = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut queued) };
    if done == 0 {
        queued
    } else {
        0
    }
}

impl Connections {
    /// A connection accepted: closed when `close` is cancelled (by [`Self::close_longest_idle`]);
    /// never while an answer is on its way to the client: `fd`'s send queue holds bytes the
    /// client has not received (a slow client still reading an answer hyper had let go of was
    /// closed, the answer cut).
    /// Dropped at once when `cut` is cancelled (by [`Self::cut_longest_anonymous`]).
    pub fn add(self: &Arc<Self>, close: CancellationToken, cut: CancellationToken, fd: Option<RawFd>) -> Activity {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let state = State { accepted: now, authenticated: false, cut, busy: 0, served: 0, idle_since: now, close, fd };
        self.locked().insert(id, state);
        Activity { connections: self.clone(), id }
    }

    /// How many open connections never showed the token.
    pub fn anonymous(&self) -> usize {
        self.locked().values().filter(|c| !c.authenticated && !c.cut.is_cancelled()).count()
    }

    /// Drops the connection open longest, if it has been open `at_least`, on which no request
    /// presented the token: answers in progress or not. Returns whether there was one.
    ///
    /// Without the token, a local process could hold every place: connections that pipeline
    /// `GET /v1/health` (open to all) and read none of the answers are never idle, and each
    /// stayed busy until its writes stalled for `server.header_timeout`; the owner's own
    /// requests took seconds, and the agent's hooks gave up. A client of the owner's proves
    /// itself on a connection's first requests, within milliseconds.
    pub fn cut_longest_anonymous(&self, at_least: Duration) -> bool {
        self.cut_oldest_anonymous(|_, c| c.accepted.elapsed() >= at_least)
    }

    /// Drops the connection open longest on which no request presented the token, if `newer`
    /// connections at least were accepted after it, however young it is. Returns whether there
    /// was one. (See `accept`: under a flood faster than [`Self::cut_longest_anonymous`]'s age
    /// lets it cut, every connection is young; counted in connections accepted after it, an
    /// owner's client still has the time those take to come to show its token.)
    pub fn cut_longest_anonymous_followed_by(&self, newer: u64) -> bool {
        let next = self.next.load(Ordering::Relaxed);
        self.cut_oldest_anonymous(|id, _| id + newer < next)
    }

    /// Drops the oldest connection (ids follow the accepts) on which no request presented the
    /// token and that `eligible` takes. Returns whether there was one.
    fn cut_oldest_anonymous(&self, eligible: impl Fn(u64, &State) -> bool) -> bool {
        let open = self.locked();
        let anonymous = open
            .iter()
            .filter(|(id, c)| !c.authenticated && !c.cut.is_cancelled() && eligible(**id, c))
            .min_by_key(|(id, _)| **id);
        match anonymous {
            Some((_, c)) => {
                c.cut.cancel();
                true
            }
            None => false,
        }
    }

    /// Closes the connection idle longest, if one has been idle for `at_least` (a connection
    /// just accepted is idle until its request's headers are read: closed at once, each new
    /// client would close the one before it). Returns whether there was one.
    pub fn close_longest_idle(&self, at_least: Duration) -> bool {
        let open = self.locked();
        let idle = open
            .values()
            .filter(|c| c.busy == 0 && !c.close.is_cancelled() && c.idle_since.elapsed() >= at_least)
            .filter(|c| !c.writing())
            .min_by_key(|c| c.idle_since);
        match idle {
            Some(c) => {
                c.close.cancel();
                true
            }
            None => false,
        }
    }

    fn locked(&self) -> std::sync::MutexGuard<'_, HashMap<u64, State>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The connection a request came on, in the request's extensions (see
/// [`Activity::authenticated`]).
#[derive(Debug, Clone)]
pub struct ConnectionOf(pub Arc<Activity>);

/// One connection's entry; removed when dropped (the connection ended).
#[derive(Debug)]
pub struct Activity {
    connections: Arc<Connections>,
    id: u64,
}

impl Activity {
    /// A request began on this connection: busy until the guard (held by its answer's body)
    /// drops.
    pub fn begin(&self) -> Busy {
        if let Some(c) = self.connections.locked().get_mut(&self.id) {
            c.busy += 1;
            c.served += 1;
        }
        Busy { connections: self.connections.clone(), id: self.id }
    }
}

impl Activity {
    /// The connection is about to close its socket: its fd is no longer looked at (the
    /// number may be given to the next connection before this entry goes).
    pub fn closing(&self) {
        if let Some(c) = self.connections.locked().get_mut(&self.id) {
            c.fd = None;
        }
    }

    /// A request on this connection presented the token (or the web view's session): the
    /// connection is never cut as an anonymous one.
    pub fn authenticated(&self) {
        if let Some(c) = self.connections.locked().get_mut(&self.id) {
            c.authenticated = true;
        }
    }

    /// Whether a request was ever begun on this connection.
    pub fn has_served(&self) -> bool {
        self.connections.locked().get(&self.id).is_some_and(|c| c.served > 0)
    }
}

impl Drop for Activity {
    fn drop(&mut self) {
        self.connections.locked().remove(&self.id);
    }
}

/// A request in progress (see [`Activity::begin`]).
#[derive(Debug)]
pub struct Busy {
    connections: Arc<Connections>,
    id: u64,
}

impl Drop for Busy {
    fn drop(&mut self) {
        if let Some(c) = self.connections.locked().get_mut(&self.id) {
            c.busy = c.busy.saturating_sub(1);
            c.idle_since = Instant::now();
        }
    }
}

/// An answer's body that keeps its connection busy until it ends (or is dropped).
pub fn tracked(body: Body, busy: Busy) -> Body {
    Body::new(Tracked { body, _busy: busy })
}

struct Tracked {
    body: Body,
    _busy: Busy,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An answer hyper let go of may still sit in the socket's send queue, waiting for a slow
    /// client: that connection is not idle (closed, the answer was cut).
    #[test]
    fn bytes_the_client_has_not_received_keep_a_connection_writing() {
        use std::io::Write;
        use std::os::fd::AsRawFd;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        let connections = Arc::new(Connections::default());
        let token = CancellationToken::new();
        let _entry = connections.add(token.clone(), CancellationToken::new(), Some(server.as_raw_fd()));
        assert!(connections.close_longest_idle(Duration::ZERO) && token.is_cancelled(), "nothing unsent: idle");
        let token = CancellationToken::new();
        let _entry = connections.add(token.clone(), CancellationToken::new(), Some(server.as_raw_fd()));
        server.set_nonblocking(true).unwrap();
        let _ = server.write(&vec![b'x'; 4 << 20]);
        assert!(unsent_bytes(server.as_raw_fd()) > 0);
        assert!(!connections.close_longest_idle(Duration::ZERO) && !token.is_cancelled(), "its answer is on its way");
        drop(client);
    }

    #[test]
    fn the_connection_idle_longest_is_closed_and_never_a_busy_one() {
        let connections = Arc::new(Connections::default());
        let tokens: Vec<CancellationToken> = (0..3).map(|_| CancellationToken::new()).collect();
        let entries: Vec<Activity> =
            tokens.iter().map(|t| connections.add(t.clone(), CancellationToken::new(), None)).collect();
        // The first is busy; the second became idle after the third.
        let busy = entries[0].begin();
        std::thread::sleep(std::time::Duration::from_millis(2));
        drop(entries[2].begin());
        std::thread::sleep(std::time::Duration::from_millis(2));
        drop(entries[1].begin());
        assert!(!connections.close_longest_idle(Duration::from_secs(60)), "none idle that long");
        assert!(connections.close_longest_idle(Duration::ZERO));
        assert!(tokens[2].is_cancelled() && !tokens[0].is_cancelled() && !tokens[1].is_cancelled());
        assert!(connections.close_longest_idle(Duration::ZERO) && tokens[1].is_cancelled());
        assert!(!connections.close_longest_idle(Duration::ZERO), "only the busy one is left");
        drop(busy);
        assert!(connections.close_longest_idle(Duration::ZERO) && tokens[0].is_cancelled());
        drop(entries);
        assert!(connections.locked().is_empty());
    }

    #[test]
    fn only_a_connection_that_never_showed_the_token_is_cut_the_oldest_first() {
        let connections = Arc::new(Connections::default());
        let cuts: Vec<CancellationToken> = (0..3).map(|_| CancellationToken::new()).collect();
        let entries: Vec<Activity> =
            cuts.iter().map(|c| connections.add(CancellationToken::new(), c.clone(), None)).collect();
        // All three are busy with answers; the first showed the token.
        let _busy: Vec<Busy> = entries.iter().map(Activity::begin).collect();
        entries[0].authenticated();
        assert!(!connections.cut_longest_anonymous(Duration::from_secs(60)), "none open that long");
        assert!(connections.cut_longest_anonymous(Duration::ZERO));
        assert!(cuts[1].is_cancelled() && !cuts[0].is_cancelled() && !cuts[2].is_cancelled());
        assert!(connections.cut_longest_anonymous(Duration::ZERO) && cuts[2].is_cancelled());
        assert!(!connections.cut_longest_anonymous(Duration::ZERO), "only the one that showed the token is left");
    }
}
