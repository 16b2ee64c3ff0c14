//! The API's one error shape: `{"error": {"code", "message", "field"}}` with a fitting status.

use crate::spec::SpecErrors;
use crate::supervisor::SupervisorError;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

pub use crate::protocol::ErrorBody;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub body: ErrorBody,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            body: ErrorBody { code: code.to_string(), message: message.into(), field: None, errors: Vec::new() },
        }
    }
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
    }
    pub fn internal(e: impl std::fmt::Display) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
    }
    pub fn field(mut self, field: &str) -> ApiError {
        self.body.field = Some(field.to_string());
        self
    }
    pub fn invalid_spec(errors: SpecErrors) -> ApiError {
        let mut e = ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_spec", errors.to_string());
        e.body.field = errors.0.first().map(|f| f.path.clone()).filter(|p| !p.is_empty());
        e.body.errors = errors.0;
        e
    }
}

impl From<SupervisorError> for ApiError {
    fn from(e: SupervisorError) -> ApiError {
        match e {
            SupervisorError::NotFound(_) => ApiError::new(StatusCode::NOT_FOUND, "not_found", e.to_string()),
            SupervisorError::Failed(_) => ApiError::new(StatusCode::CONFLICT, "failed", e.to_string()),
            SupervisorError::Conflict(_) => ApiError::new(StatusCode::CONFLICT, "conflict", e.to_string()),
            SupervisorError::Invalid(_) => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid", e.to_string()),
            SupervisorError::InvalidSpec(errors) => ApiError::invalid_spec(errors),
            SupervisorError::Store(_) | SupervisorError::Cgroups(_) | SupervisorError::Io(_) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", e.to_string())
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(crate::protocol::ErrorResponse { error: self.body })).into_response()
    }
}
