//! The one error shape every route answers: `{"error": {"code", "message"}}`.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use mneme_core::BackendError;

use crate::queue::spool::SpoolError;
use crate::session::SessionError;

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable code.
    pub code: &'static str,
    /// For a person.
    pub message: String,
}

impl ApiError {
    /// Any status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into() }
    }

    /// 400 invalid_request.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }
}

/// The JSON body of an error.
pub fn error_body(code: &str, message: &str) -> serde_json::Value {
    serde_json::json!({ "error": { "code": code, "message": message } })
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(error_body(self.code, &self.message))).into_response()
    }
}

impl From<SessionError> for ApiError {
    fn from(e: SessionError) -> Self {
        match e {
            SessionError::NotFound(_) => ApiError::new(StatusCode::NOT_FOUND, "unknown_session", e.to_string()),
            SessionError::Invalid(m) => ApiError::invalid(m),
            SessionError::Backend(b) => b.into(),
            SessionError::Spool(s) => s.into(),
        }
    }
}

impl From<BackendError> for ApiError {
    fn from(e: BackendError) -> Self {
        match &e {
            BackendError::Unsupported(m) => ApiError::new(StatusCode::NOT_IMPLEMENTED, "unsupported", m.clone()),
            BackendError::Transient { .. } => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "backend_unavailable",
                format!("memory backend unavailable: {e}"),
            ),
            BackendError::Permanent { .. } => {
                ApiError::new(StatusCode::BAD_GATEWAY, "backend_error", format!("memory backend refused: {e}"))
            }
        }
    }
}

impl From<SpoolError> for ApiError {
    fn from(e: SpoolError) -> Self {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "spool_unavailable", format!("nothing was stored: {e}"))
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        let status = r.status();
        let code = match status {
            StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
            StatusCode::UNPROCESSABLE_ENTITY => "invalid_field",
            _ => "invalid_json",
        };
        ApiError::new(status, code, r.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        ApiError::invalid(r.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> Self {
        ApiError::invalid(r.body_text())
    }
}
