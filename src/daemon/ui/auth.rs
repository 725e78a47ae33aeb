//! Browser sessions: one-time codes, session cookies, and which requests a cookie may make.
//!
//! A cookie-authenticated request must come from the view itself. `SameSite=Strict` keeps the
//! cookie off requests that start on another *site*, but every port of 127.0.0.1 is the same
//! site, so the daemon also checks what the browser says about the request's origin: an `Origin`
//! other than the daemon's own, or `Sec-Fetch-Site` other than `same-origin` (or `none`, a typed
//! address, for reads), is refused. State-changing requests also carry [`CSRF_HEADER`] with the
//! session's value, which a page elsewhere can neither read nor send without a CORS preflight the
//! daemon never grants.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap, Method};

use crate::lock::MutexExt;

/// The session cookie's name for the daemon listening on `port`: browsers keep one cookie jar for
/// every port of a host, and under one name two daemons' views logged each other out (a
/// request with the other's cookie was refused, and its answer cleared the cookie).
pub fn cookie_name(port: u16) -> String {
    format!("mneme_ui_{port}")
}
/// The header state-changing cookie requests carry, with the value from `GET /ui/session`.
pub const CSRF_HEADER: &str = "x-mneme-csrf";
/// How long a login code may be used.
pub const CODE_LIFETIME: Duration = Duration::from_secs(120);
/// A browser session's default and longest lifetimes.
const DEFAULT_SESSION: Duration = Duration::from_secs(12 * 3600);
/// The shortest and longest a browser session may be asked to last.
pub(super) const SHORTEST_SESSION: Duration = Duration::from_secs(60);
pub(super) const LONGEST_SESSION: Duration = Duration::from_secs(30 * 24 * 3600);
/// Codes not yet used (a bound, so a token holder looping cannot grow memory without end).
const MAX_CODES: usize = 64;

/// The web view's session a request was let in on (a request extension; none with the token).
#[derive(Debug, Clone)]
pub struct ViewSession(pub String);

/// The daemon's browser sessions, in memory only.
#[derive(Default)]
pub struct UiAuth {
    codes: Mutex<HashMap<String, Pending>>,
    sessions: Mutex<HashMap<String, Entry>>,
}

struct Pending {
    expires: Instant,
    valid_for: Duration,
}

struct Entry {
    expires: Instant,
    csrf: String,
}

/// A code just made.
pub struct Issued {
    /// The code (a secret until used).
    pub code: String,
    /// How long the session it opens will last.
    pub valid_for: Duration,
}

/// A session just opened.
pub struct Opened {
    /// The cookie's value.
    pub id: String,
    /// Its lifetime.
    pub valid_for: Duration,
}

/// A live session.
pub struct Live {
    /// Its CSRF value.
    pub csrf: String,
    /// Time left.
    pub expires_in: Duration,
}

impl UiAuth {
    /// A new one-time code for a session of `valid_for` (default 12 h, at most 30 days).
    pub fn issue(&self, valid_for: Option<Duration>) -> std::io::Result<Issued> {
        let valid_for = valid_for.unwrap_or(DEFAULT_SESSION).clamp(SHORTEST_SESSION, LONGEST_SESSION);
        let code = crate::ids::secret_hex(16)?;
        let now = Instant::now();
        let mut codes = self.codes.locked();
        codes.retain(|_, p| p.expires > now);
        if codes.len() >= MAX_CODES {
            // The oldest goes: a new `mneme ui` always works.
            if let Some(oldest) = codes.iter().min_by_key(|(_, p)| p.expires).map(|(k, _)| k.clone()) {
                codes.remove(&oldest);
            }
        }
        codes.insert(code.clone(), Pending { expires: now + CODE_LIFETIME, valid_for });
        Ok(Issued { code, valid_for })
    }

    /// Uses a code (once): a new session, or `None` for an unknown, used or expired code.
    pub fn redeem(&self, code: &str) -> Option<Opened> {
        let pending = self.codes.locked().remove(code)?;
        let now = Instant::now();
        if pending.expires <= now {
            return None;
        }
        let id = crate::ids::secret_hex(32).ok()?;
        let csrf = crate::ids::secret_hex(16).ok()?;
        let mut sessions = self.sessions.locked();
        sessions.retain(|_, e| e.expires > now);
        sessions.insert(id.clone(), Entry { expires: now + pending.valid_for, csrf });
        Some(Opened { id, valid_for: pending.valid_for })
    }

    /// The live session with this cookie value.
    pub fn session(&self, id: &str) -> Option<Live> {
        let now = Instant::now();
        let sessions = self.sessions.locked();
        let e = sessions.get(id).filter(|e| e.expires > now)?;
        Some(Live { csrf: e.csrf.clone(), expires_in: e.expires - now })
    }

    /// Ends a session.
    pub fn end(&self, id: &str) {
        self.sessions.locked().remove(id);
    }

    /// Ends every session (a log out: the daemon has one owner, and a cookie of an earlier
    /// login, or one a program on another local port was sent, must not outlive it).
    pub fn end_all(&self) {
        self.sessions.locked().clear();
    }
}

/// The value of the session cookie named `name` ([`cookie_name`]), if the request carries one.
pub fn session_cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(found, _)| *found == name)
        .map(|(_, value)| value.trim())
}

/// The routes a browser session may use: what the view reads and the few changes it makes.
/// Everything else (retain, import, clear, reload, MCP, the Hindsight API …) needs the token.
pub fn cookie_may(method: &Method, path: &str) -> bool {
    let read = method == Method::GET || method == Method::HEAD;
    match path {
        "/v1/status" | "/v1/notices" | "/v1/notices/stream" | "/v1/banks" | "/v1/memories" | "/v1/queue" => read,
        "/v1/search" | "/v1/retry" | "/ui/logout" => method == Method::POST,
        p if p.starts_with("/v1/memories/") => read || method == Method::DELETE,
        p if p.starts_with("/v1/documents/") => method == Method::DELETE,
        _ => false,
    }
}

/// Why a cookie request is refused, if it is: it did not start on the view's own origin, or it
/// changes something without the session's CSRF value.
pub fn cross_site_refusal(headers: &HeaderMap, method: &Method, csrf: &str) -> Option<&'static str> {
    let read = method == Method::GET || method == Method::HEAD;
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
    if let Some(origin) = headers.get(header::ORIGIN) {
        let own = format!("http://{host}");
        if origin.to_str().ok() != Some(own.as_str()) {
            return Some("the request came from another origin than the web view's");
        }
    }
    match headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        None | Some("same-origin") => {}
        Some("none") if read => {}
        Some(_) => return Some("the request came from another origin than the web view's"),
    }
    if !read {
        let sent = headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok()).unwrap_or("");
        if !super::super::auth::constant_time_eq(sent.as_bytes(), csrf.as_bytes()) {
            return Some("a change from the web view must carry its X-Mneme-CSRF header");
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_opens_one_session_once() {
        let ui = UiAuth::default();
        let issued = ui.issue(Some(Duration::from_secs(3600))).unwrap();
        let opened = ui.redeem(&issued.code).expect("fresh code");
        assert!(ui.redeem(&issued.code).is_none(), "a code is used once");
        assert!(ui.redeem("").is_none());
        let live = ui.session(&opened.id).expect("live session");
        assert_eq!(live.csrf.len(), 32);
        ui.end(&opened.id);
        assert!(ui.session(&opened.id).is_none());
    }

    #[test]
    fn cookie_routes_are_the_views_only() {
        assert!(cookie_may(&Method::GET, "/v1/memories"));
        assert!(cookie_may(&Method::DELETE, "/v1/memories/abc"));
        assert!(cookie_may(&Method::DELETE, "/v1/documents/abc"));
        assert!(!cookie_may(&Method::POST, "/v1/import"));
        assert!(!cookie_may(&Method::POST, "/v1/clear"));
        assert!(!cookie_may(&Method::GET, "/v1/export"));
        assert!(!cookie_may(&Method::POST, "/v1/ui/codes"));
        assert!(!cookie_may(&Method::DELETE, "/v1/status"));
    }

    #[test]
    fn cross_site_requests_are_refused() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, "127.0.0.1:6366".parse().unwrap());
        assert_eq!(cross_site_refusal(&h, &Method::GET, "c"), None);
        h.insert("sec-fetch-site", "same-site".parse().unwrap());
        assert!(cross_site_refusal(&h, &Method::GET, "c").is_some());
        h.insert("sec-fetch-site", "same-origin".parse().unwrap());
        h.insert(header::ORIGIN, "http://127.0.0.1:9999".parse().unwrap());
        assert!(cross_site_refusal(&h, &Method::GET, "c").is_some());
        h.insert(header::ORIGIN, "http://127.0.0.1:6366".parse().unwrap());
        assert!(cross_site_refusal(&h, &Method::POST, "c").is_some(), "no CSRF header");
        h.insert(CSRF_HEADER, "c".parse().unwrap());
        assert_eq!(cross_site_refusal(&h, &Method::POST, "c"), None);
    }
}
