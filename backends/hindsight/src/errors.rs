//! Turning HTTP outcomes into [`BackendError`]s: an outage (no connection; 429 and 503, with a
//! `Retry-After`), transient (timeouts, 408, other 5xx) or permanent (other 4xx), each with a
//! reason a person can act on.

use std::time::Duration;

use mneme_core::BackendError;
use reqwest::StatusCode;
use serde_json::Value;

/// A reqwest failure before any answer. Never includes headers (so never the token).
pub fn from_transport(what: &str, url: &str, e: &reqwest::Error) -> BackendError {
    if e.is_connect() && is_tls_failure(e) {
        // A server that answers, but not in TLS (`https://` to a plain HTTP Hindsight), or with a
        // certificate this client does not trust: no retry will change that, and taken for an
        // outage it kept every memory queued for good under "connection refused or unreachable".
        return BackendError::permanent(format!(
            "{what}: cannot talk TLS with Hindsight at {url}: {} (check hindsight.api_url: http:// or https://, and the server's certificate)",
            innermost_cause(e)
        ));
    }
    if e.is_connect() {
        // No connection was made, so the server never saw the batch: an outage, which uses up no
        // attempts. Nothing listens, no route, or (a host that is off, a VPN that is down, a
        // firewall dropping packets) the connection attempt timed out.
        let why = if e.is_timeout() {
            "the connection attempt timed out".to_owned()
        } else {
            format!("connection refused or unreachable ({})", innermost_cause(e))
        };
        let reason = format!("{what}: cannot reach Hindsight at {url}: {why}");
        return BackendError::Unreachable { reason };
    }
    // A timeout counts as an attempt: a server that accepted and never answered may be choking
    // on this very batch, which must not be retried for ever.
    let why = if e.is_timeout() {
        "timed out".to_owned()
    } else {
        // reqwest's Display names the URL, not headers.
        e.without_url_ref().to_string()
    };
    BackendError::transient(format!("{what}: cannot reach Hindsight at {url}: {why}"))
}

/// Whether a connection failed in a way TLS will not get past on a retry (rustls's errors, named
/// in the chain below reqwest's own, whose text holds the URL: a bank named `mneme-rustls` is
/// no TLS failure): a corrupt message from a server that does not talk TLS, a certificate
/// refused, a fatal alert, a peer with no protocol in common. A peer that closed mid-handshake
/// ("tls handshake eof": a proxy restarting) is not among them: that is an outage.
fn is_tls_failure(e: &reqwest::Error) -> bool {
    const PERMANENT: [&str; 5] =
        ["certificate", "corrupt message", "alert received", "peer is incompatible", "peer misbehaved"];
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let text = c.to_string().to_ascii_lowercase();
        if PERMANENT.iter().any(|w| text.contains(w)) {
            return true;
        }
        cause = c.source();
    }
    false
}

/// The error at the end of `e`'s chain (the OS's "Connection refused", a certificate the TLS
/// layer refused), which reqwest's own message ("error sending request") leaves out.
fn innermost_cause(e: &reqwest::Error) -> String {
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

trait WithoutUrl {
    fn without_url_ref(&self) -> String;
}

impl WithoutUrl for reqwest::Error {
    fn without_url_ref(&self) -> String {
        let mut s = self.to_string();
        if let Some(u) = self.url() {
            s = s.replace(u.as_str(), "");
        }
        s
    }
}

/// An error answer: status, `Retry-After` header value and body.
pub fn from_status(what: &str, status: StatusCode, retry_after: Option<&str>, body: &str) -> BackendError {
    let detail = readable_detail(body);
    let reason = match detail {
        Some(d) => format!("{what}: Hindsight answered {status}: {d}"),
        None => format!("{what}: Hindsight answered {status}"),
    };
    match status.as_u16() {
        401 => BackendError::permanent(format!(
            "{what}: Hindsight refused the API token (401 Unauthorized); check hindsight.api_token (or HINDSIGHT_API_TOKEN)"
        )),
        403 => BackendError::permanent(format!("{reason}; check hindsight.api_token")),
        // The server says it cannot serve now (overloaded, restarting): an outage, which uses up
        // no attempts, with its Retry-After. A 502 or 504 is a proxy's word, which may as well
        // mean this very request crashed or choked the server (as a timeout of ours may): an
        // attempt, so that such a batch reaches the dead letters instead of blocking its session.
        429 | 503 => BackendError::Unavailable { reason, retry_after: retry_after.and_then(parse_retry_after) },
        408 | 500..=599 => BackendError::Transient { reason, retry_after: None },
        _ => BackendError::permanent(reason),
    }
}

/// A redirect, which mneme does not follow: a POST would arrive as a GET (a 301 or 302), or the
/// memories go to whatever host the answer names. Permanent, naming where it points, so the
/// user sets `hindsight.api_url` to it.
pub fn redirected(what: &str, status: StatusCode, location: Option<&str>) -> BackendError {
    let to = match location {
        Some(l) => format!("to {}", mneme_core::text::quoted_unless_private(l)),
        None => "without saying where".to_owned(),
    };
    BackendError::permanent(format!(
        "{what}: Hindsight answered {status}, redirecting {to}; set hindsight.api_url to where it points (mneme does not follow redirects)"
    ))
}

/// A 404 that names nothing missing where Hindsight names the bank: `hindsight.api_url` points
/// at something else (another web server, a path the server lacks). Permanent: waiting mends
/// nothing.
pub fn no_such_route(what: &str, shown: &str) -> BackendError {
    BackendError::permanent(format!(
        "{what}: {shown} answered 404 Not Found where Hindsight names the missing bank: is hindsight.api_url right?"
    ))
}

/// `Retry-After` as seconds (an HTTP date is treated as "soon": 1 s).
pub fn parse_retry_after(v: &str) -> Option<Duration> {
    let v = v.trim();
    match v.parse::<u64>() {
        Ok(secs) => Some(Duration::from_secs(secs.min(3600))),
        Err(_) if !v.is_empty() => Some(Duration::from_secs(1)),
        Err(_) => None,
    }
}

/// `{"detail": "..."}` or `{"detail": [{loc, msg, type}, …]}` as one line, without the private
/// spans it quotes: the server may hold text other clients marked private, and an error goes
/// into answers, notices (on disk) and the log.
pub fn readable_detail(body: &str) -> Option<String> {
    let detail = detail_as_given(body)?;
    Some(mneme_core::text::strip_private(&detail)).filter(|d| !d.trim().is_empty())
}

fn detail_as_given(body: &str) -> Option<String> {
    let v: Value = serde_json::from_str(body).ok()?;
    match &v["detail"] {
        Value::String(s) => Some(s.clone()),
        Value::Array(items) => {
            let parts: Vec<String> = items
                .iter()
                .map(|i| {
                    let loc: Vec<String> = i["loc"]
                        .as_array()
                        .map(|l| l.iter().map(|p| p.as_str().map_or_else(|| p.to_string(), str::to_owned)).collect())
                        .unwrap_or_default();
                    let msg = i["msg"].as_str().unwrap_or("invalid");
                    if loc.is_empty() {
                        msg.to_owned()
                    } else {
                        format!("{}: {msg}", loc.join("."))
                    }
                })
                .collect();
            (!parts.is_empty()).then(|| parts.join("; "))
        }
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn details_of_both_shapes_read_well() {
        assert_eq!(readable_detail(r#"{"detail": "Bank 'x' not found"}"#).unwrap(), "Bank 'x' not found");
        let list = r#"{"detail":[{"type":"missing","loc":["body","items",0,"content"],"msg":"Field required"},{"loc":[],"msg":"bad"}]}"#;
        assert_eq!(readable_detail(list).unwrap(), "body.items.0.content: Field required; bad");
        assert_eq!(readable_detail("<html>"), None);
    }

    #[test]
    fn a_detail_quoting_a_private_span_loses_it() {
        let said = r#"{"detail": "worker crashed on fact: deploy key <PRIVATE a=1>hunter2</private> rotated"}"#;
        let d = readable_detail(said).unwrap();
        assert!(!d.contains("hunter2") && d.contains("worker crashed") && d.contains("rotated"), "{d}");
        let list = r#"{"detail":[{"loc":["body","items",0],"msg":"bad <private>hunter2</private>"}]}"#;
        assert!(!readable_detail(list).unwrap().contains("hunter2"));
        // An unclosed span takes the rest; nothing left is no detail.
        assert_eq!(readable_detail(r#"{"detail": "<private>hunter2"}"#), None);
        let e = from_status("recall", StatusCode::INTERNAL_SERVER_ERROR, None, said);
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }

    #[test]
    fn statuses_classify() {
        assert!(from_status("retain", StatusCode::SERVICE_UNAVAILABLE, None, "").is_transient());
        assert!(from_status("retain", StatusCode::REQUEST_TIMEOUT, None, "").is_transient());
        let e = from_status("retain", StatusCode::TOO_MANY_REQUESTS, Some("7"), "");
        assert_eq!(e.retry_after(), Some(Duration::from_secs(7)));
        let e = from_status("retain", StatusCode::SERVICE_UNAVAILABLE, Some("4"), "");
        assert_eq!(e.retry_after(), Some(Duration::from_secs(4)), "a 503's Retry-After too");
        assert!(!from_status("retain", StatusCode::UNPROCESSABLE_ENTITY, None, "{}").is_transient());
        for outage in [StatusCode::TOO_MANY_REQUESTS, StatusCode::SERVICE_UNAVAILABLE] {
            assert!(from_status("retain", outage, None, "").is_outage(), "{outage}: uses up no attempt");
        }
        for status in [StatusCode::INTERNAL_SERVER_ERROR, StatusCode::BAD_GATEWAY, StatusCode::GATEWAY_TIMEOUT] {
            let e = from_status("retain", status, None, "");
            assert!(e.is_transient() && !e.is_outage(), "{status} may be this batch's fault: an attempt");
        }
        let e = from_status("recall", StatusCode::UNAUTHORIZED, None, "");
        assert!(!e.is_transient() && e.to_string().contains("hindsight.api_token"));
    }
}
