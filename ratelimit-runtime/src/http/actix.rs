//! actix-web rendering (feature `actix`): `impl ResponseError for RateLimited`, and an allowed
//! call's header fields as actix-web's types, carried over from the `http` rendering.

use crate::model::policy::Headroom;
use crate::model::refusal::RateLimited;
use actix_web::body::BoxBody;
use actix_web::http::header::{self, HeaderName, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};

impl Headroom {
    /// [`headers`](Headroom::headers) as actix-web's header types, for a middleware that adds
    /// them to allowed responses.
    pub fn actix_headers(&self) -> impl Iterator<Item = (HeaderName, HeaderValue)> {
        actix_headers(self.headers())
    }
}

/// `http` 1 header fields (what the `http` rendering writes) as actix-web's header types (which
/// are another major version of the `http` crate's).
fn actix_headers(headers: http::HeaderMap) -> impl Iterator<Item = (HeaderName, HeaderValue)> {
    let mut name = None;
    headers.into_iter().filter_map(move |(n, value)| {
        // `into_iter` names a field once, before its first value.
        if let Some(n) = n {
            name = HeaderName::from_bytes(n.as_str().as_bytes()).ok();
        }
        Some((name.clone()?, HeaderValue::from_bytes(value.as_bytes()).ok()?))
    })
}

/// `429 Too Many Requests` (`503` when the store was unavailable, `500` when the identity was
/// missing or the limiter is invalid) with `Retry-After`, `RateLimit-Policy`, `RateLimit` and a
/// JSON body `{"error":"rate_limited","retry_after_ms":N}` (`"store_unavailable"` for a 503):
/// the response axum gets.
impl ResponseError for RateLimited {
    fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.status().as_u16()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn error_response(&self) -> HttpResponse<BoxBody> {
        let mut response = HttpResponse::build(self.status_code());
        response.insert_header((header::CONTENT_TYPE, "application/json"));
        for field in actix_headers(self.headers()) {
            response.insert_header(field);
        }
        response.body(self.json_body())
    }
}
