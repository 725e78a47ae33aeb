//! The accept loop, after mini-redis's `server::run`: a semaphore caps open connections, so a
//! flood of half-open ones cannot exhaust file descriptors or memory, and hyper closes a
//! connection whose request headers do not arrive in time (also between keep-alive requests).
//! A client that stops reading its answers is closed after the same timeout (`write_stall`).
//! At the cap, the connection idle longest makes room for a new one, else the oldest on which
//! no request showed the token; those hold half the places at most (see `idle`). On shutdown
//! it stops accepting and lets the requests in progress finish. What hyper answers
//! itself (bytes that are not HTTP, headers too large) gets the API's JSON error body too.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use super::idle::{self, Connections};

use crate::config::ServerSettings;

/// This daemon's end of the connection a request came on, in the request's extensions: the
/// health proof names it (see `api::Health::address_proof`).
#[derive(Debug, Clone, Copy)]
pub struct ArrivedAt(pub std::net::SocketAddr);

/// How long requests in progress may take to finish after shutdown is asked for.
const DRAIN: Duration = Duration::from_secs(5);
/// Pause after a failed accept (out of file descriptors), so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// How long a connection must have been idle (since its last answer, or since it was
/// accepted) before it makes room for a new one at the cap, and how often a client waiting at
/// the cap looks again.
const IDLE_BEFORE_EVICTION: Duration = Duration::from_secs(1);
const EVICTION_LOOK: Duration = Duration::from_millis(250);
/// How long a connection may go without showing the token before it may be cut to make room
/// (see `idle`): an owner's client shows it on its first requests, within milliseconds.
const ANONYMOUS_GRACE: Duration = Duration::from_millis(250);
/// Connections accepted after one without the token, at least, before it may be cut however
/// young (see `run`).
const MIN_NEWER_BEFORE_CUT: u64 = 16;
/// The most bytes a request's line and headers may take; more is answered 431. Agents send a
/// few hundred.
const MAX_HEADER_BYTES: usize = 64 * 1024;

/// Connection limits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Open connections at most; more wait in the kernel's backlog.
    pub max_connections: usize,
    /// A request's headers must arrive within this, and an idle keep-alive connection (or one
    /// whose client reads nothing of its answer) is closed after it.
    pub header_timeout: Duration,
}

impl From<&ServerSettings> for Limits {
    fn from(s: &ServerSettings) -> Self {
        Limits { max_connections: s.max_connections, header_timeout: s.header_timeout }
    }
}

/// Serves `app` on `listener` until `stop` is cancelled, then drains (for at most [`DRAIN`]).
pub async fn run(listener: TcpListener, app: Router, limits: Limits, stop: CancellationToken) -> std::io::Result<()> {
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let connections = Arc::new(Connections::default());
    let tasks = TaskTracker::new();
    // HTTP/1.1 only: agents' clients speak it on plain http, and detecting HTTP/2 first would
    // wait for a connection's first bytes with no timeout at all.
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
    // Without a set size, hyper refuses headers only once its read buffer (~400 KiB) fills before
    // they end, so whether half a megabyte of headers got through depended on how the bytes were
    // split across reads.
    builder.max_header_size(MAX_HEADER_BYTES);
    // Out of file descriptors, accept fails every ACCEPT_BACKOFF: said once a minute, not ten
    // times a second.
    let mut warned_at: Option<std::time::Instant> = None;
    loop {
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    if warned_at.is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(60)) {
                        tracing::warn!("cannot accept a connection (said again at most once a minute): {e}");
                        warned_at = Some(std::time::Instant::now());
                    }
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            _ = stop.cancelled() => break,
        };
        // Connections that never showed the token hold half the places at most: past that, the
        // oldest of them open a while goes as this one comes, so the owner's clients find a
        // place at once however many another local user opens (see `idle`). Past three
        // quarters, the oldest however young, once a quarter of the places' worth of newer
        // connections came after it (16 at least): a flood opening half the places every
        // quarter second kept every one younger than the while, and filled them all (review112
        // #2). An owner's client shows its token on its first request, long before so many
        // connections come; and clients asking `/v1/health` (open to all) are not cut by it
        // below three quarters.
        let anonymous = connections.anonymous();
        if anonymous >= limits.max_connections.div_ceil(2) {
            let crowded = anonymous >= (limits.max_connections * 3).div_ceil(4);
            let newer = (limits.max_connections as u64 / 4).max(MIN_NEWER_BEFORE_CUT);
            if !(crowded && connections.cut_longest_anonymous_followed_by(newer)) {
                connections.cut_longest_anonymous(ANONYMOUS_GRACE);
            }
        }
        // At the cap, the connection idle longest makes room (see `idle`); when every one is busy,
        // this one waits for a place (and the next ones in the kernel's backlog).
        let place = loop {
            if let Ok(place) = open.clone().try_acquire_owned() {
                break Some(place);
            }
            // Else one that never showed the token, open a while, goes at once (see `idle`).
            let _ = connections.close_longest_idle(IDLE_BEFORE_EVICTION)
                || connections.cut_longest_anonymous(ANONYMOUS_GRACE);
            tokio::select! {
                place = open.clone().acquire_owned() => break Some(place.expect("the semaphore is never closed")),
                // None idle long enough yet: looked at again.
                _ = tokio::time::sleep(EVICTION_LOOK) => {}
                _ = stop.cancelled() => break None,
            }
        };
        let Some(place) = place else { break };
        // Agents send small requests and wait for each answer: never hold a reply back for Nagle.
        let _ = tcp.set_nodelay(true);
        let fd = std::os::fd::AsRawFd::as_raw_fd(&tcp);
        let arrived_at = tcp.local_addr().ok().map(ArrivedAt);
        let tcp = super::write_stall::WriteStall::new(tcp, limits.header_timeout);
        let (evict, cut) = (CancellationToken::new(), CancellationToken::new());
        let activity = Arc::new(connections.add(evict.clone(), cut.clone(), Some(fd)));
        let stop = stop.clone();
        let (app, requests) = (app.clone(), activity.clone());
        let service = hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            let (app, busy) = (app.clone(), requests.begin());
            // For the guard to mark the connection as its owner's once a request shows the token.
            request.extensions_mut().insert(idle::ConnectionOf(requests.clone()));
            if let Some(arrived_at) = arrived_at {
                request.extensions_mut().insert(arrived_at);
            }
            async move {
                let Ok(answer) = app.oneshot(request).await;
                Ok::<_, std::convert::Infallible>(answer.map(|body| idle::tracked(body, busy)))
            }
        });
        let io = TokioIo::new(super::parse_errors::JsonParseErrors::new(tcp));
        let connection = builder.serve_connection(io, service);
        tasks.spawn(async move {
            let mut connection = std::pin::pin!(connection);
            let ended = tokio::select! {
                ended = connection.as_mut() => ended,
                // Shutdown: the answer in progress, if any, ends first (and is written out).
                () = stop.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
                // Room made for another client. One that never finished a request's headers
                // (idle for a while, so a slow or half-open one) goes at once: hyper's graceful
                // close would wait for those headers until their timeout. One that has served
                // closes gracefully: hyper writes out the end of an answer still being read.
                // Cut, as a connection that never showed the token at the cap: at once.
                () = cut.cancelled() => Ok(()),
                () = evict.cancelled() => match activity.has_served() {
                    true => {
                        connection.as_mut().graceful_shutdown();
                        connection.await
                    }
                    false => Ok(()),
                }
            };
            activity.closing();
            if let Err(e) = ended {
                tracing::debug!("connection ended: {e}");
            }
            drop(place);
        });
    }
    drop(listener);
    tasks.close();
    if tokio::time::timeout(DRAIN, tasks.wait()).await.is_err() {
        tracing::warn!("requests still running after {DRAIN:?}; closing them");
    }
    Ok(())
}
