//! What the handlers share: OpenAI's error shape, the API key check, the body's size cap and
//! parse, and a place among the server's requests.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::{App, Served};

/// Request bodies beyond this are refused with 413.
const MAX_BODY: usize = 8 << 20;

/// An error in OpenAI's shape.
pub(crate) fn error(status: StatusCode, message: impl Into<String>, param: Option<&str>) -> Response {
    let kind = match status {
        StatusCode::UNAUTHORIZED => "authentication_error",
        StatusCode::NOT_FOUND => "not_found_error",
        StatusCode::PAYLOAD_TOO_LARGE | StatusCode::BAD_REQUEST => "invalid_request_error",
        StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
        StatusCode::SERVICE_UNAVAILABLE => "unavailable_error",
        StatusCode::NOT_IMPLEMENTED => "not_implemented_error",
        StatusCode::METHOD_NOT_ALLOWED => "invalid_request_error",
        _ => "server_error",
    };
    // OpenAI's `code`: a string naming the error where it has one, else null.
    let code = match status {
        StatusCode::UNAUTHORIZED => json!("invalid_api_key"),
        StatusCode::NOT_FOUND => json!("not_found"),
        StatusCode::METHOD_NOT_ALLOWED => json!("method_not_allowed"),
        StatusCode::PAYLOAD_TOO_LARGE => json!("request_too_large"),
        StatusCode::TOO_MANY_REQUESTS => json!("rate_limit_exceeded"),
        StatusCode::SERVICE_UNAVAILABLE => json!("model_loading"),
        _ => serde_json::Value::Null,
    };
    let body = json!({"error": {"message": message.into(), "type": kind, "param": param, "code": code}});
    (status, axum::Json(body)).into_response()
}

/// A refusal on its way out of a helper (boxed: a response is large).
pub(crate) type Reject = Box<Response>;

pub(crate) fn reject(message: impl Into<String>, param: &str) -> Reject {
    Box::new(bad(message, param))
}

pub(crate) fn bad(message: impl Into<String>, param: &str) -> Response {
    error(StatusCode::BAD_REQUEST, message, Some(param))
}

/// The loaded model, or 503 while it loads, or 400 where it is an embedding model (the chat
/// model loads first, so an embedder without one is the served model itself).
pub(crate) fn served(app: &App) -> Result<&Served, Reject> {
    if let Some(s) = app.served.get() {
        return Ok(s);
    }
    Err(Box::new(match app.embedder.get() {
        Some(_) => bad(
            format!(
                "{} is an embedding model: it serves /v1/embeddings and /api/embed only",
                app.model_id
            ),
            "model",
        ),
        None => error(StatusCode::SERVICE_UNAVAILABLE, "the model is loading", None),
    }))
}

/// Checks `Authorization: Bearer KEY` where the server has a key.
pub(crate) fn authorize(app: &App, headers: &HeaderMap) -> Result<(), Reject> {
    let Some(key) = &app.api_key else { return Ok(()) };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(g) if g == key => Ok(()),
        Some(_) => Err(Box::new(error(StatusCode::UNAUTHORIZED, "invalid API key", None))),
        None => Err(Box::new(error(
            StatusCode::UNAUTHORIZED,
            "missing API key (Authorization: Bearer …)",
            None,
        ))),
    }
}

/// The body as `T`: 413 beyond `MAX_BODY` (announced by its length, or found reading it),
/// 400 naming what does not parse.
pub(crate) async fn body_json<T: serde::de::DeserializeOwned>(headers: &HeaderMap, body: Body) -> Result<T, Reject> {
    let too_large = || {
        error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body over {MAX_BODY} bytes"),
            None,
        )
    };
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > MAX_BODY as u64) {
        return Err(Box::new(too_large()));
    }
    let bytes = axum::body::to_bytes(body, MAX_BODY)
        .await
        .map_err(|_| Box::new(too_large()))?;
    serde_json::from_slice(&bytes).map_err(|e| Box::new(bad(format!("invalid JSON body: {e}"), "body")))
}

/// Authorization, the loaded model and the parsed body, or the response that says why not.
pub(crate) async fn prelude<'a, T: serde::de::DeserializeOwned>(
    app: &'a App,
    headers: &HeaderMap,
    body: Body,
) -> Result<(&'a Served, T), Reject> {
    authorize(app, headers)?;
    let s = served(app)?;
    Ok((s, body_json(headers, body).await?))
}

/// Holds a place among the server's requests; the place is given back on drop.
pub(crate) struct Place(Arc<App>);

impl Place {
    pub(crate) fn take(app: &Arc<App>) -> Result<Place, Reject> {
        let n = app.in_flight.fetch_add(1, Ordering::SeqCst);
        if n >= app.capacity {
            app.in_flight.fetch_sub(1, Ordering::SeqCst);
            let mut r = error(
                StatusCode::TOO_MANY_REQUESTS,
                format!("{} requests are running or queued; try again shortly", app.capacity),
                None,
            );
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return Err(Box::new(r));
        }
        Ok(Place(app.clone()))
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
