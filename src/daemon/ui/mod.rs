//! The web view at `/ui`: its embedded assets, and the browser login that stands in for the
//! bearer token a page cannot send on a navigation.
//!
//! `mneme ui` asks (with the token) for a one-time code and opens `/ui/login?code=…`; the daemon
//! trades the code for an HttpOnly, SameSite=Strict session cookie and redirects to `/ui/`, so the
//! code leaves the address bar at once. Sessions live in memory: a restart ends them. A cookie
//! opens only the routes the view uses ([`cookie_may`]); see [`auth`] for the cross-site checks.

pub mod auth;

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

pub use auth::{cookie_may, UiAuth};

use super::api::{UiCode, UiCodeRequest, UiSession};
use super::error::ApiError;
use super::AppState;

type St = State<Arc<AppState>>;

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// Nothing but the daemon's own scripts, styles and API; never framed.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// Paths served without any credential: the page and its assets hold no data, the login
/// carries its own code, and the session check reads the cookie itself (a page that is not
/// logged in asks without an error in its console).
pub fn is_public(path: &str) -> bool {
    matches!(path, "/ui" | "/ui/" | "/ui/app.js" | "/ui/app.css" | "/ui/login" | "/ui/session")
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    r
}

pub async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

pub async fn app_js() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

pub async fn app_css() -> Response {
    asset("text/css; charset=utf-8", APP_CSS)
}

pub async fn to_index() -> Response {
    (StatusCode::PERMANENT_REDIRECT, [(header::LOCATION, "/ui/")]).into_response()
}

/// `POST /v1/ui/codes` (bearer only): a one-time code and the URL that uses it.
pub async fn new_code(State(s): St, body: axum::body::Bytes) -> Result<Json<UiCode>, ApiError> {
    let b: UiCodeRequest = super::routes::optional_body(&body)?;
    let (shortest, longest) = (auth::SHORTEST_SESSION.as_secs(), auth::LONGEST_SESSION.as_secs());
    if b.valid_for_seconds.is_some_and(|n| !(shortest..=longest).contains(&n)) {
        return Err(ApiError::invalid(format!(
            "valid_for_seconds must be from {shortest} (a minute) to {longest} (30 days)"
        )));
    }
    let valid_for = b.valid_for_seconds.map(std::time::Duration::from_secs);
    let issued = s.ui.issue(valid_for).map_err(|e| {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", format!("cannot make a login code: {e}"))
    })?;
    Ok(Json(UiCode {
        url: format!("http://{}/ui/login?code={}", crate::config::local_addr(s.listen), issued.code),
        code_expires_in_seconds: auth::CODE_LIFETIME.as_secs(),
        valid_for_seconds: issued.valid_for.as_secs(),
    }))
}

#[derive(Debug, Default, Deserialize)]
pub struct LoginQuery {
    code: Option<String>,
}

/// `GET /ui/login?code=…`: the code for a session cookie, then on to `/ui/` (the code leaves the
/// address bar and the history).
pub async fn login(
    State(s): St,
    headers: HeaderMap,
    q: Result<Query<LoginQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = q?;
    let code = q.code.unwrap_or_default();
    if code.trim().is_empty() {
        // Not "already used": a link cut short, or the address typed by hand (review81's note).
        return Err(ApiError::invalid(
            "this login link has no code: open the whole link `mneme ui` printed, or run it again",
        ));
    }
    let Some(session) = s.ui.redeem(code.trim()) else {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "this login link was already used or has expired: run `mneme ui` for a new one",
        ));
    };
    // The session this browser's cookie named is replaced: ended, not left valid for its
    // whole lifetime (review114 #1).
    if let Some(replaced) = auth::session_cookie(&headers, &s.cookie_name()) {
        s.ui.end(replaced);
    }
    let cookie = format!(
        "{}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}",
        s.cookie_name(),
        session.id,
        session.valid_for.as_secs()
    );
    let mut r = (StatusCode::SEE_OTHER, [(header::LOCATION, "/ui/")]).into_response();
    let h = r.headers_mut();
    h.insert(header::SET_COOKIE, HeaderValue::from_str(&cookie).expect("cookie is ASCII"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    Ok(r)
}

/// `GET /ui/session`: whether the cookie opens a session, and its CSRF value. Only a
/// same-origin script can read the answer (no CORS), and the cross-site checks apply.
pub async fn session(State(s): St, headers: HeaderMap) -> Result<Json<UiSession>, ApiError> {
    // Refused from another origin with a session or without: refused only with one, a page on
    // another local port told from the status (a script tag's load or error) whether the owner
    // had the view open (review81's note). (A read asks for no CSRF value.)
    if let Some(why) = auth::cross_site_refusal(&headers, &axum::http::Method::GET, "") {
        return Err(ApiError::new(StatusCode::FORBIDDEN, "forbidden_cross_site", why));
    }
    let found = auth::session_cookie(&headers, &s.cookie_name()).and_then(|id| s.ui.session(id));
    let Some(found) = found else {
        return Ok(Json(UiSession { logged_in: false, csrf: None, expires_in_seconds: None }));
    };
    Ok(Json(UiSession {
        logged_in: true,
        csrf: Some(found.csrf),
        expires_in_seconds: Some(found.expires_in.as_secs()),
    }))
}

/// `POST /ui/logout` (cookie): ends every session of the view, and clears the cookie. Every one:
/// a second login in the same browser left the first session valid (its cookie replaced, not
/// ended), and so did any cookie a program on another local port was sent (review114 #1). Only
/// a live session's cookie ends them.
pub async fn logout(State(s): St, headers: HeaderMap) -> Response {
    let name = s.cookie_name();
    if auth::session_cookie(&headers, &name).and_then(|id| s.ui.session(id)).is_some() {
        s.ui.end_all();
    }
    (StatusCode::NO_CONTENT, [(header::SET_COOKIE, clearing_cookie(&name))]).into_response()
}

/// A `Set-Cookie` value that removes the session cookie `name` ([`auth::cookie_name`]).
pub fn clearing_cookie(name: &str) -> HeaderValue {
    let value = format!("{name}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    HeaderValue::from_str(&value).expect("cookie is ASCII")
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_clearing_cookie_names_the_session_cookie() {
        let name = super::auth::cookie_name(6366);
        let clearing = super::clearing_cookie(&name);
        assert!(clearing.to_str().unwrap().starts_with("mneme_ui_6366=;"));
    }
}
