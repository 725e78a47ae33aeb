//! Who may talk to the daemon: loopback callers (by `Host` and `Origin`, so a web page cannot
//! drive it through DNS rebinding or a cross-site request) holding the bearer token.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::{ui, AppState};

/// Whether a `Host` / `Origin` host part names this machine.
pub fn is_loopback_host(host: &str) -> bool {
    let host = host.trim();
    let bare = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(h, port)| if port.chars().all(|c| c.is_ascii_digit()) { h } else { host })
    };
    let bare = bare.trim_end_matches('.').to_ascii_lowercase();
    bare == "localhost"
        || bare.ends_with(".localhost")
        || bare.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn origin_is_loopback(origin: &str) -> bool {
    let Some((scheme, rest)) = origin.split_once("://") else { return false };
    matches!(scheme, "http" | "https") && is_loopback_host(rest.split('/').next().unwrap_or(""))
}

/// Whether `origin` is the host the request was sent to (its one `Host` header): the daemon's own
/// page, wherever it was opened from.
fn is_own_origin(origin: &str, headers: &axum::http::HeaderMap) -> bool {
    let mut hosts = headers.get_all(header::HOST).iter();
    let (Some(host), None) = (hosts.next(), hosts.next()) else { return false };
    let Some((scheme, authority)) = origin.split_once("://") else { return false };
    matches!(scheme, "http" | "https") && host.to_str().is_ok_and(|h| h.eq_ignore_ascii_case(authority))
}

/// Compares without leaking where the first difference is.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Refuses non-loopback `Host`/`Origin` (403) and, except on `/v1/health` and the web view's
/// assets, a missing or wrong token (401). A request without a token but with the web view's
/// session cookie may use the view's routes, from the view's own origin (see [`ui::auth`]).
pub async fn guard(State(state): State<Arc<AppState>>, mut req: Request, next: Next) -> Response {
    let headers = req.headers();
    // This daemon's own Hindsight backend, pointed at its /hindsight API (with its token, which
    // gets past the checks below): refused before anything is spooled, or each delivery would
    // queue its items again, for ever. The answer carries this instance's header too, which the
    // backend reads as the loop it is (one dead letter, a notice naming hindsight.api_url).
    if headers.get(mneme_core::INSTANCE_HEADER).is_some_and(|v| v == mneme_core::instance_id()) {
        return ApiError::new(
            StatusCode::CONFLICT,
            "loop",
            "this request came from this mneme's own Hindsight backend: hindsight.api_url names this daemon",
        )
        .into_response();
    }
    // Every value counts, not the first: a second Host or Origin must not slip past the check.
    // With `allow_remote`, the view is also opened at the daemon's own address on the network:
    // its origin is then the request's own host (the cookie's CSRF and origin checks still hold).
    let own_origin = |origin: &str| state.allow_remote && is_own_origin(origin, headers);
    if headers
        .get_all(header::ORIGIN)
        .iter()
        .any(|origin| !origin.to_str().is_ok_and(|o| origin_is_loopback(o) || own_origin(o)))
    {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden_origin",
            "requests from web pages are refused (non-loopback Origin)",
        )
        .into_response();
    }
    if !state.allow_remote {
        // The host a request names: its Host headers, and the authority of an absolute-form
        // target (`GET http://example.com/v1/banks`), which HTTP/1.1 says wins over Host.
        let hosts_named = headers.get_all(header::HOST).iter().map(|h| h.to_str().ok());
        let target = req.uri().authority().map(|a| Some(a.as_str()));
        if hosts_named.chain(target).any(|host| !host.is_some_and(is_loopback_host)) {
            return ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden_host",
                "the Host header must name this machine (localhost or a loopback address)",
            )
            .into_response();
        }
    }
    let path = req.uri().path();
    if path == "/v1/health" || ui::is_public(path) {
        return next.run(req).await;
    }
    let bearer = headers.get(header::AUTHORIZATION);
    if bearer.is_none() {
        let cookie = state.cookie_name();
        if let Some(id) = ui::auth::session_cookie(headers, &cookie) {
            let id = id.to_owned();
            return match state.ui.session(&id) {
                Some(live) if ui::cookie_may(req.method(), path) => {
                    match ui::auth::cross_site_refusal(req.headers(), req.method(), &live.csrf) {
                        None => {
                            // What the request runs on, for a route that outlives it (a stream).
                            req.extensions_mut().insert(ui::auth::ViewSession(id));
                            owners_connection(&req);
                            next.run(req).await
                        }
                        Some(why) => ApiError::new(StatusCode::FORBIDDEN, "forbidden_cross_site", why).into_response(),
                    }
                }
                Some(_) => ApiError::new(
                    StatusCode::FORBIDDEN,
                    "forbidden_for_browser",
                    "the web view's session cannot use this route: send the bearer token",
                )
                .into_response(),
                // Logging out of a session that has ended already only clears the cookie.
                None if req.method() == Method::POST && path == "/ui/logout" => next.run(req).await,
                None => {
                    let mut r = ApiError::new(
                        StatusCode::UNAUTHORIZED,
                        "unauthorized",
                        "the web view's session has ended: run `mneme ui` to log in again",
                    )
                    .into_response();
                    // The dead cookie goes, instead of being sent until its Max-Age.
                    r.headers_mut().insert(header::SET_COOKIE, ui::clearing_cookie(&cookie));
                    r
                }
            };
        }
    }
    let presented = bearer
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim());
    if !presented.is_some_and(|t| constant_time_eq(t.as_bytes(), state.token.as_bytes())) {
        // Where the token is helps a user of this machine; a remote caller (with
        // `server.allow_remote`) is not told the owner's home and storage dir.
        let message = if state.allow_remote {
            "missing or wrong bearer token: send `Authorization: Bearer <token>` (`mneme doctor` on the daemon's machine shows where the token is)".to_owned()
        } else {
            format!(
                "missing or wrong bearer token: send `Authorization: Bearer <token>` with the token from {}",
                state.token_path.display()
            )
        };
        return ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message).into_response();
    }
    owners_connection(&req);
    next.run(req).await
}

/// The request showed the token (or the web view's session): its connection is never cut at
/// the connection cap as an anonymous one (see `idle`).
fn owners_connection(req: &Request) {
    if let Some(connection) = req.extensions().get::<super::idle::ConnectionOf>() {
        connection.0.authenticated();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_and_origins() {
        for h in [
            "localhost",
            "localhost:6366",
            "127.0.0.1:1",
            "127.1.2.3",
            "[::1]:80",
            "[::1]",
            "LOCALHOST.",
            "a.localhost:9",
        ] {
            assert!(is_loopback_host(h), "{h}");
        }
        for h in ["evil.com", "10.0.0.1:6366", "localhost.evil.com", "[::2]:1", "0.0.0.0", ""] {
            assert!(!is_loopback_host(h), "{h}");
        }
        assert!(origin_is_loopback("http://localhost:3000"));
        assert!(!origin_is_loopback("null"));
        assert!(!origin_is_loopback("https://evil.com"));
        assert!(!origin_is_loopback("file://"));
        assert!(
            constant_time_eq(b"abc", b"abc") && !constant_time_eq(b"abc", b"abd") && !constant_time_eq(b"a", b"ab")
        );
    }
}
