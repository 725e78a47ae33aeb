//! A JSON request body that must be an object. axum's `Json` reads a struct from an array too
//! (serde takes its fields by position), so `["s1", "/tmp"]` started a session and
//! `[[["a fact", null]]]` was retained: the API's contract is a 422 for an array where an
//! object goes.

use axum::body::Bytes;
use axum::extract::rejection::{JsonRejection, MissingJsonContentType};
use axum::extract::{FromRequest, Request};
use axum::http::{header, HeaderMap, StatusCode};
use serde::de::{DeserializeOwned, IgnoredAny};

use super::error::ApiError;

/// `axum::Json<T>` for a body that is a JSON object.
pub struct ObjectJson<T>(pub T);

/// Why an [`ObjectJson`] body was refused.
pub enum ObjectJsonRejection {
    /// As `axum::Json` refuses: no JSON content type, not JSON, the wrong fields, too long.
    Json(JsonRejection),
    /// As `Json`, for a body that holds `<private>` text: its message repeats no value of it
    /// (the value it quotes may be hidden by a span another value opens).
    HoldingPrivate(JsonRejection),
    /// JSON, but not an object.
    NotAnObject,
}

impl From<JsonRejection> for ObjectJsonRejection {
    fn from(r: JsonRejection) -> Self {
        ObjectJsonRejection::Json(r)
    }
}

impl From<ObjectJsonRejection> for ApiError {
    fn from(r: ObjectJsonRejection) -> Self {
        match r {
            ObjectJsonRejection::Json(r) => r.into(),
            ObjectJsonRejection::HoldingPrivate(r) => ApiError::of_json_rejection(r, super::error::quoting_no_input),
            ObjectJsonRejection::NotAnObject => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_field", "the body must be a JSON object")
            }
        }
    }
}

impl axum::response::IntoResponse for ObjectJsonRejection {
    fn into_response(self) -> axum::response::Response {
        ApiError::from(self).into_response()
    }
}

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ObjectJson<T> {
    type Rejection = ObjectJsonRejection;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        if !json_content_type(req.headers()) {
            return Err(JsonRejection::from(MissingJsonContentType::default()).into());
        }
        let bytes = Bytes::from_request(req, state).await.map_err(JsonRejection::from)?;
        let opens_an_object = bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
        // Not JSON at all is left to axum's message (where the syntax breaks).
        if !opens_an_object && serde_json::from_slice::<IgnoredAny>(&bytes).is_ok() {
            return Err(ObjectJsonRejection::NotAnObject);
        }
        let mut refused = match axum::Json::<T>::from_bytes(&bytes) {
            Ok(axum::Json(value)) => return Ok(ObjectJson(value)),
            Err(r) => r,
        };
        // Half an emoji (a client's text cut by UTF-16 units, as JavaScript's `slice` cuts it),
        // which JSON.stringify writes as `\ud83d`: read as U+FFFD, as the Hindsight server reads
        // it. Refused, a client's recall failed, and every later turn of a session sent with it.
        // Refused still, the mended body's error says what else is wrong (the raw one blamed
        // the half emoji for a wrong type elsewhere).
        if let Some(mended) = crate::json_text::lone_surrogates_mended(&bytes) {
            match axum::Json::<T>::from_bytes(&mended) {
                Ok(axum::Json(value)) => return Ok(ObjectJson(value)),
                Err(r) => refused = r,
            }
        }
        match super::error::holds_private_text(&bytes) {
            true => Err(ObjectJsonRejection::HoldingPrivate(refused)),
            false => Err(refused.into()),
        }
    }
}

/// `application/json` or `application/…+json`, as `axum::Json` takes them.
fn json_content_type(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else { return false };
    let essence = value.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    essence.strip_prefix("application/").is_some_and(|sub| sub == "json" || sub.ends_with("+json"))
}
