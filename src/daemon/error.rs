//! The one error shape every route answers: `{"error": {"code", "message"}}`.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use mneme_core::BackendError;

use crate::queue::SpoolFault;
use crate::session::SessionError;
use crate::spool::SpoolError;

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable code.
    pub code: &'static str,
    /// For a person.
    pub message: String,
    /// Seconds after which a retry may succeed (`Retry-After`), for 503 and 507.
    pub retry_after: Option<u64>,
}

/// What a client is told to wait before retrying a request the spool could not take.
const SPOOL_RETRY_AFTER_SECS: u64 = 5;

impl ApiError {
    /// Any status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into(), retry_after: None }
    }

    /// The same error, telling the client when to try again.
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }

    /// 400 invalid_request.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }
}

/// The JSON body of an error.
pub fn error_body(code: &str, message: &str) -> serde_json::Value {
    let answer = super::api::ErrorAnswer {
        error: super::api::ErrorDetail { code: code.to_owned(), message: message.to_owned() },
    };
    serde_json::to_value(answer).expect("plain data serializes")
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(error_body(self.code, &self.message))).into_response();
        if let Some(secs) = self.retry_after {
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        response
    }
}

impl From<SessionError> for ApiError {
    fn from(e: SessionError) -> Self {
        match e {
            SessionError::NotFound(_) => ApiError::new(StatusCode::NOT_FOUND, "unknown_session", e.to_string()),
            SessionError::Invalid(m) => ApiError::invalid(m),
            SessionError::Backend(b) => b.into(),
            SessionError::BackendAfter { error, done } => {
                let mut refused = ApiError::from(error);
                refused.message = format!("{} — {done}", refused.message);
                refused
            }
            SessionError::Spool(s) => s.into(),
        }
    }
}

impl From<BackendError> for ApiError {
    fn from(e: BackendError) -> Self {
        // Only 503 and 507 among the 5xx: a server error that is not "try again later" or "no
        // room" is a bug. What the backend cannot do at all is the caller's to know (422).
        match e.cause() {
            BackendError::Unsupported(m) => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "unsupported", m.clone()),
            BackendError::NotFound(m) => ApiError::new(StatusCode::NOT_FOUND, "not_found", m.clone()),
            BackendError::Invalid(m) => ApiError::invalid(m.clone()),
            BackendError::Transient { retry_after, .. } | BackendError::Unavailable { retry_after, .. } => {
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "backend_unavailable",
                    format!("memory backend unavailable: {e}"),
                )
                .retry_after(retry_after.map_or(SPOOL_RETRY_AFTER_SECS, |d| d.as_secs().max(1)))
            }
            BackendError::Unreachable { .. } => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "backend_unavailable",
                format!("memory backend unavailable: {e}"),
            )
            .retry_after(SPOOL_RETRY_AFTER_SECS),
            BackendError::StorageFull { .. } => ApiError::new(
                StatusCode::INSUFFICIENT_STORAGE,
                "storage_full",
                format!("the memory store's disk is full: {e}"),
            )
            .retry_after(SPOOL_RETRY_AFTER_SECS),
            // A 503 always says when to ask again (the README's promise): the server may be
            // mended meanwhile (a token, a mission).
            // (`cause` is never one: it unwraps them.)
            BackendError::Permanent { .. } | BackendError::PartlyStored { .. } => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "backend_error", format!("memory backend refused: {e}"))
                    .retry_after(SPOOL_RETRY_AFTER_SECS)
            }
        }
    }
}

impl ApiError {
    /// A flush the spool stopped: `delivered` went before it did, and what waits stays spooled
    /// (a flush answering 0 delivered and 0 failed said nothing was left).
    pub fn flush_stopped(fault: SpoolFault, delivered: u64, waiting: u64) -> Self {
        let (status, code, why) = match fault {
            SpoolFault::Full => (
                StatusCode::INSUFFICIENT_STORAGE,
                "storage_full",
                "the spool's disk is full, and a delivery cannot start without writing to it; free some space and flush again",
            ),
            SpoolFault::Failed => (
                StatusCode::SERVICE_UNAVAILABLE,
                "spool_unavailable",
                "the spool cannot be read or written (see the daemon's log); flush again later",
            ),
        };
        let waiting = if waiting == 1 { "1 retain waits".to_owned() } else { format!("{waiting} retains wait") };
        ApiError::new(status, code, format!("{delivered} delivered, {waiting} in the spool: {why}"))
            .retry_after(SPOOL_RETRY_AFTER_SECS)
    }
}

impl From<SpoolError> for ApiError {
    fn from(e: SpoolError) -> Self {
        if e.is_full() {
            return ApiError::new(
                StatusCode::INSUFFICIENT_STORAGE,
                "storage_full",
                format!(
                    "nothing was stored: {e}; free some space and try again (mneme accepts retains again as soon as there is room)"
                ),
            )
            .retry_after(SPOOL_RETRY_AFTER_SECS);
        }
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "spool_unavailable", format!("nothing was stored: {e}"))
            .retry_after(SPOOL_RETRY_AFTER_SECS)
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        ApiError::of_json_rejection(r, quoting_input)
    }
}

impl ApiError {
    /// A refused JSON body, its message (which quotes the body) passed through `quoting`.
    pub(crate) fn of_json_rejection(r: JsonRejection, quoting: fn(String) -> String) -> Self {
        let status = r.status();
        let code = match status {
            StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
            StatusCode::UNPROCESSABLE_ENTITY => "invalid_field",
            _ => "invalid_json",
        };
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            // A body sent without its length (chunked), found too long as it was read: axum's
            // "Failed to buffer the request body: length limit exceeded" named no bound
            // (review110 #3), where one declared too long is told the number.
            let why =
                "the request body is longer than the daemon takes (server.max_body_bytes; an import, 64 KiB more)";
            return ApiError::new(status, code, why);
        }
        ApiError::new(status, code, quoting(r.body_text()))
    }
}

/// The longest message an error repeats from the request (serde's messages quote the value).
const MAX_MESSAGE_CHARS: usize = 1_000;

/// A message that quotes the request (serde's repeat a bad value), cut to
/// [`MAX_MESSAGE_CHARS`]: a 100 KB bad value is not worth sending back (twice, under
/// `/hindsight`).
///
/// One that holds a `<private>` tag says what is wrong without the quoted value: private text is
/// never sent back, as it is never logged. The quoted part goes whole, from the first quote to the
/// last, because the quoting escapes the value (`\t` for a tab), so the tags in it can no longer
/// be told apart from text.
pub(crate) fn quoting_input(message: String) -> String {
    let message = surrogates_explained(message);
    let message = match mneme_core::text::has_private_tag(&message) {
        true => unquoted(message),
        false => message,
    };
    cut(message)
}

/// [`quoting_input`] for a request that holds `<private>` text somewhere: no value of it is
/// repeated, with a tag or not (an item an earlier item's open span hides has none of its own).
pub(crate) fn quoting_no_input(message: String) -> String {
    cut(unquoted(surrogates_explained(message)))
}

/// A message that quotes `request` (serde's, about it), as [`quoting_input`] or, when the request
/// holds `<private>` text anywhere, [`quoting_no_input`].
pub(crate) fn quoting_request(message: String, request: &[u8]) -> String {
    match holds_private_text(request) {
        true => quoting_no_input(message),
        false => quoting_input(message),
    }
}

/// Whether a body holds a `<private>` tag: in its text, or in a string of it once read as JSON
/// (escaped, `\u003cprivate\u003e`), read as every route reads it (half an emoji elsewhere in the
/// body, `\ud83d`, hid the escaped tags, and the error quoted what the span hides).
pub(crate) fn holds_private_text(bytes: &[u8]) -> bool {
    use mneme_core::text::has_private_tag;
    fn any_string(v: &serde_json::Value) -> bool {
        match v {
            serde_json::Value::String(s) => has_private_tag(s),
            serde_json::Value::Array(a) => a.iter().any(any_string),
            serde_json::Value::Object(o) => o.iter().any(|(k, v)| has_private_tag(k) || any_string(v)),
            _ => false,
        }
    }
    has_private_tag(&String::from_utf8_lossy(bytes))
        || crate::json_text::from_slice_mended::<serde_json::Value>(bytes).is_ok_and(|v| any_string(&v))
}

/// `message` without what it quotes, from the first quote to the last.
fn unquoted(message: String) -> String {
    let is_quote = |c: char| c == '"' || c == '`';
    let unquoted = match (message.find(is_quote), message.rfind(is_quote)) {
        (Some(first), Some(last)) if first < last => format!("{}…{}", &message[..first], &message[last + 1..]),
        _ => message,
    };
    if mneme_core::text::has_private_tag(&unquoted) {
        "the request is not valid, and its value holds a <private> span, which is not repeated".to_owned()
    } else {
        format!("{unquoted} (a value holding a <private> span is not repeated)")
    }
}

/// `message` cut to [`MAX_MESSAGE_CHARS`].
fn cut(message: String) -> String {
    match message.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((at, _)) => format!("{}…", &message[..at]),
        None => message,
    }
}

/// serde_json names a bad `\u` escape by where its reader stood: a lone low surrogate is "lone
/// leading surrogate", a high one followed by anything but its low half "unexpected end of hex
/// escape" (as is an escape cut short). Said as what the client sent.
fn surrogates_explained(message: String) -> String {
    message
        .replace(
            "lone leading surrogate in hex escape",
            "an unpaired UTF-16 surrogate in a \\u escape (U+D800 to U+DFFF must come as a high and low pair)",
        )
        .replace(
            "unexpected end of hex escape",
            "a \\u escape cut short, or a high surrogate (U+D800 to U+DBFF) without its low half",
        )
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        ApiError::invalid(quoting_input(r.body_text()))
    }
}

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> Self {
        ApiError::invalid(quoting_input(r.body_text()))
    }
}

#[cfg(test)]
mod tests {
    use super::quoting_input;

    #[test]
    fn an_unpaired_surrogate_is_named_as_sent() {
        for body in [r#"{"a": "x\udc00"}"#, r#"{"a": "x\ud800"}"#] {
            let e = serde_json::from_str::<serde_json::Value>(body).unwrap_err();
            let said = quoting_input(e.to_string());
            assert!(said.contains("surrogate") && !said.contains("lone leading"), "{body}: {said}");
        }
    }

    #[test]
    fn every_503_says_when_to_ask_again() {
        use axum::response::IntoResponse;
        let refused: super::ApiError = mneme_core::BackendError::permanent("401 unauthorized").into();
        let r = refused.into_response();
        assert_eq!(r.status(), 503);
        assert!(r.headers().contains_key(axum::http::header::RETRY_AFTER));
    }

    #[test]
    fn a_flush_the_spool_stopped_says_what_waits_and_when_to_ask_again() {
        use crate::queue::SpoolFault;
        let full = super::ApiError::flush_stopped(SpoolFault::Full, 3, 1);
        assert_eq!((full.status.as_u16(), full.code, full.retry_after), (507, "storage_full", Some(5)));
        assert!(full.message.starts_with("3 delivered, 1 retain waits in the spool: the spool's disk is full"));
        let failed = super::ApiError::flush_stopped(SpoolFault::Failed, 0, 12);
        assert_eq!((failed.status.as_u16(), failed.code), (503, "spool_unavailable"));
        assert!(failed.message.starts_with("0 delivered, 12 retains wait in the spool"), "{}", failed.message);
    }

    #[test]
    fn a_quoted_value_with_a_private_tag_is_left_out_whole() {
        let escaped = r#"invalid type: string "<private\tx>S3CRET</private>", expected a sequence"#;
        assert_eq!(
            quoting_input(escaped.into()),
            "invalid type: string …, expected a sequence (a value holding a <private> span is not repeated)"
        );
        // A backtick inside the value does not end the cut early.
        let variant = "unknown variant `a`<private>S3CRET`, expected `x` or `y`";
        assert!(!quoting_input(variant.into()).contains("S3CRET"));
        // Unquoted: nothing of the message is kept.
        assert!(!quoting_input("bad <private>S3CRET".into()).contains("S3CRET"));
        assert_eq!(quoting_input("expected a boolean".into()), "expected a boolean");
    }
}
