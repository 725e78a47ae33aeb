//! Hindsight API v1 under `/hindsight` (see [`crate::hindsight_api`]): decode, call, encode.
//! Errors carry Hindsight's `detail` (what its clients read) beside mneme's `error` object.

use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};

use super::api::ErrorDetail;
use super::error::{quoting_input, ApiError};
use super::AppState;
use crate::hindsight_api::wire::*;
use crate::hindsight_api::{BankWrite, CompatError, HindsightApi};

/// Where the API is served: `HINDSIGHT_API_URL=http://127.0.0.1:6366/hindsight`.
pub const PREFIX: &str = "/hindsight";

type St = State<Arc<AppState>>;
type Answer<T> = Result<Json<T>, HindsightError>;

/// The routes, relative to [`PREFIX`].
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/health", get(health))
        .route("/version", get(version))
        .route("/v1/default/banks", get(list_banks))
        .route("/v1/default/banks/{bank}", put(put_bank).patch(put_bank))
        .route("/v1/default/banks/{bank}/memories", post(retain))
        .route("/v1/default/banks/{bank}/memories/recall", post(recall))
        .route("/v1/default/banks/{bank}/reflect", post(reflect))
        .route("/v1/default/banks/{bank}/mental-models", get(list_models).post(create_model))
        .route("/v1/default/banks/{bank}/mental-models/{id}", get(get_model).patch(update_model).delete(delete_model))
        .route("/v1/default/banks/{bank}/mental-models/{id}/refresh", post(refresh_model))
        .route("/v1/default/banks/{bank}/mental-models/{id}/history", get(model_history))
        .fallback(not_served)
}

/// The body of a [`HindsightError`].
#[derive(Debug, serde::Serialize)]
struct HindsightErrorBody {
    /// What Hindsight's clients read.
    detail: ErrorDetailField,
    /// What mneme's do.
    error: ErrorDetail,
}

impl HindsightErrorBody {
    fn of(e: &ApiError) -> Self {
        let detail = if e.status == StatusCode::UNPROCESSABLE_ENTITY {
            ErrorDetailField::Invalid(vec![ValueError::of_body(e.message.clone())])
        } else {
            ErrorDetailField::Message(e.message.clone())
        };
        HindsightErrorBody { detail, error: ErrorDetail { code: e.code.to_owned(), message: e.message.clone() } }
    }
}

/// Marks a response that has Hindsight's `detail` already ([`with_detail`] leaves it alone).
#[derive(Debug, Clone, Copy)]
struct HasDetail;

/// An error in both shapes: `{"detail": …, "error": {"code", "message"}}`. A request Hindsight
/// would refuse as invalid is a 422 whose `detail` is a list, as FastAPI answers.
#[derive(Debug)]
pub struct HindsightError(ApiError);

impl IntoResponse for HindsightError {
    fn into_response(self) -> Response {
        let e = self.0;
        let body = HindsightErrorBody::of(&e);
        let mut response = (e.status, Json(body)).into_response();
        response.extensions_mut().insert(HasDetail);
        if let Some(secs) = e.retry_after {
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        response
    }
}

/// Gives an error answered under the prefix before its routes ran (401 from the guard, 405, 404
/// for the prefix itself) the `detail` Hindsight's clients read, beside the API's `error`.
pub async fn with_detail(response: Response) -> Response {
    const MOST: usize = 64 * 1024;
    if response.extensions().get::<HasDetail>().is_some() {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MOST).await else {
        // Not an error body of ours (they are small): answer the status in both shapes.
        let e =
            ApiError::new(parts.status, "request_failed", parts.status.canonical_reason().unwrap_or("request failed"));
        parts.headers.remove(axum::http::header::CONTENT_LENGTH);
        let body = serde_json::to_vec(&HindsightErrorBody::of(&e)).expect("plain data serializes");
        return Response::from_parts(parts, axum::body::Body::from(body));
    };
    let mut value: serde_json::Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(_) => return Response::from_parts(parts, axum::body::Body::from(bytes)),
    };
    if let Some(map) = value.as_object_mut().filter(|m| !m.contains_key("detail")) {
        let message = map.get("error").and_then(|e| e.get("message")).cloned();
        map.insert("detail".to_owned(), message.unwrap_or_else(|| "request failed".into()));
        parts.headers.remove(axum::http::header::CONTENT_LENGTH);
        return Response::from_parts(parts, axum::body::Body::from(value.to_string()));
    }
    Response::from_parts(parts, axum::body::Body::from(bytes))
}

impl From<CompatError> for HindsightError {
    fn from(e: CompatError) -> Self {
        HindsightError(match e {
            CompatError::Invalid(m) => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_request", m),
            CompatError::Refused(m) => ApiError::new(StatusCode::BAD_REQUEST, "bad_request", m),
            CompatError::NotFound(m) => ApiError::new(StatusCode::NOT_FOUND, "not_found", m),
            CompatError::Conflict(m) => ApiError::new(StatusCode::CONFLICT, "conflict", m),
            CompatError::Backend(b) => b.into(),
            CompatError::Spool(s) => s.into(),
        })
    }
}

impl From<JsonRejection> for HindsightError {
    fn from(r: JsonRejection) -> Self {
        let mut e: ApiError = r.into();
        // FastAPI answers a body that is not JSON (or none) as any invalid body: 422 with a list.
        if e.status == StatusCode::BAD_REQUEST {
            e.status = StatusCode::UNPROCESSABLE_ENTITY;
        }
        HindsightError(e)
    }
}

impl From<super::json_object::ObjectJsonRejection> for HindsightError {
    fn from(r: super::json_object::ObjectJsonRejection) -> Self {
        match r {
            super::json_object::ObjectJsonRejection::Json(r) => r.into(),
            not_an_object => HindsightError(not_an_object.into()),
        }
    }
}

impl From<QueryRejection> for HindsightError {
    fn from(r: QueryRejection) -> Self {
        // A query parameter of the wrong type: FastAPI's validation answer, 422.
        HindsightError(ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_request", ApiError::from(r).message))
    }
}

/// A JSON body whose rejections answer with `detail`.
#[derive(FromRequest)]
#[from_request(via(super::json_object::ObjectJson), rejection(HindsightError))]
pub struct Body<T>(pub T);

fn api(s: &AppState) -> &HindsightApi {
    &s.hindsight
}

async fn health() -> Json<Health> {
    Json(Health { status: "healthy".into(), database: "connected".into() })
}

async fn version() -> Json<VersionAnswer> {
    Json(VersionAnswer {
        api_version: "1.1.0".into(),
        // What a client may use: mental models are served, with no LLM, worker, uploads,
        // document API, audit log or traces behind them.
        features: serde_json::json!({
            "observations": false,
            "mcp": true,
            "worker": false,
            "bank_config_api": false,
            "bank_llm_health": false,
            "file_upload_api": false,
            "document_export_api": false,
            "document_import_api": false,
            "audit_log": false,
            "llm_trace": false,
            "store_document_text": true,
        }),
        server: "mneme".into(),
        mneme_version: env!("CARGO_PKG_VERSION").into(),
    })
}

async fn list_banks(State(s): St, q: Result<Query<BankListQuery>, QueryRejection>) -> Answer<BankList> {
    let Query(q) = q?;
    Ok(Json(api(&s).banks(q.q.as_deref(), q.limit.unwrap_or(100), q.offset.unwrap_or(0)).await?))
}

async fn put_bank(
    State(s): St,
    method: axum::http::Method,
    Path(bank): Path<String>,
    body: axum::body::Bytes,
) -> Answer<BankProfile> {
    // A PATCH changes a bank there is, as the server's does (404); a PUT makes one.
    let write = if method == axum::http::Method::PATCH { BankWrite::Change } else { BankWrite::Make };
    // Hindsight accepts an empty body (every field optional).
    let update: BankUpdate = if body.iter().all(u8::is_ascii_whitespace) {
        BankUpdate::default()
    } else {
        let invalid = |message: String| {
            HindsightError(ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_field", quoting_input(message)))
        };
        // An object: serde would also read a struct from an array (`[]`).
        match crate::json_text::from_slice_mended::<serde_json::Value>(&body) {
            Ok(v) if v.is_object() => serde_json::from_value(v).map_err(|e| invalid(format!("invalid body: {e}")))?,
            Ok(_) => return Err(invalid("the body must be a JSON object".into())),
            Err(e) => return Err(invalid(format!("invalid body: {e}"))),
        }
    };
    Ok(Json(api(&s).update_bank(&bank, update, write).await?))
}

async fn retain(State(s): St, Path(bank): Path<String>, Body(b): Body<RetainRequest>) -> Answer<RetainResponse> {
    Ok(Json(api(&s).retain(&bank, b).await?))
}

async fn recall(State(s): St, Path(bank): Path<String>, Body(b): Body<RecallRequest>) -> Answer<RecallResponse> {
    let started = std::time::Instant::now();
    let answer = api(&s).recall(&bank, b).await?;
    s.metrics.recall_seconds.observe(started.elapsed());
    Ok(Json(answer))
}

async fn reflect(State(s): St, Path(bank): Path<String>, Body(b): Body<ReflectRequest>) -> Answer<ReflectResponse> {
    Ok(Json(api(&s).reflect(&bank, b).await?))
}

async fn list_models(
    State(s): St,
    Path(bank): Path<String>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Answer<MentalModelList> {
    let Query(pairs) = q?;
    let query = ModelListQuery::parse(&pairs).map_err(|m| CompatError::Invalid(quoting_input(m)))?;
    Ok(Json(api(&s).mental_models(&bank, &query).await?))
}

async fn create_model(
    State(s): St,
    Path(bank): Path<String>,
    Body(b): Body<CreateMentalModel>,
) -> Answer<OperationAnswer> {
    Ok(Json(api(&s).create_mental_model(&bank, b).await?))
}

async fn get_model(
    State(s): St,
    Path((bank, id)): Path<(String, String)>,
    q: Result<Query<DetailQuery>, QueryRejection>,
) -> Answer<serde_json::Value> {
    let Query(q) = q?;
    // One model is shown whole unless asked otherwise (a list shows metadata).
    Ok(Json(api(&s).mental_model(&bank, &id, q.detail.unwrap_or(Detail::Full)).await?))
}

async fn update_model(
    State(s): St,
    Path((bank, id)): Path<(String, String)>,
    Body(b): Body<UpdateMentalModel>,
) -> Answer<serde_json::Value> {
    Ok(Json(api(&s).update_mental_model(&bank, &id, b).await?))
}

async fn delete_model(State(s): St, Path((bank, id)): Path<(String, String)>) -> Answer<DeletedAnswer> {
    api(&s).delete_mental_model(&bank, &id).await?;
    Ok(Json(DeletedAnswer { status: "deleted".into() }))
}

async fn refresh_model(State(s): St, Path((bank, id)): Path<(String, String)>) -> Answer<RefreshAnswer> {
    Ok(Json(api(&s).refresh_mental_model(&bank, &id).await?))
}

async fn model_history(State(s): St, Path((bank, id)): Path<(String, String)>) -> Answer<Vec<serde_json::Value>> {
    // The model must exist; mneme keeps no previous contents.
    api(&s).mental_model(&bank, &id, Detail::Metadata).await?;
    Ok(Json(Vec::new()))
}

async fn not_served() -> HindsightError {
    HindsightError(ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        "Not Found: mneme serves the part of Hindsight's API its clients use (banks, memories, recall, reflect, mental models); see the README",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error body is what Hindsight's clients parse: FastAPI's shape, byte for byte.
    #[test]
    fn error_bodies_have_fastapis_shape_beside_mneme_s() {
        let body = |e: ApiError| serde_json::to_value(HindsightErrorBody::of(&e)).unwrap();
        let invalid = body(ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_request", "no content"));
        assert_eq!(
            invalid,
            serde_json::json!({
                "detail": [{"type": "value_error", "loc": ["body"], "msg": "no content", "input": null, "ctx": {"error": {}}}],
                "error": {"code": "invalid_request", "message": "no content"},
            })
        );
        let missing = body(ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such model"));
        assert_eq!(
            missing,
            serde_json::json!({"detail": "no such model", "error": {"code": "not_found", "message": "no such model"}})
        );
    }
}
