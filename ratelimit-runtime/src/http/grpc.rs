//! gRPC rendering of a refusal (feature `tonic`): `RateLimited` into a `tonic::Status`, with the
//! same header fields as HTTP (from `http_response`) as the status's metadata.

use crate::model::refusal::{Cause, RateLimited};
use http::header::RETRY_AFTER;
use tonic::metadata::MetadataMap;
use tonic::{Code, Status};

impl RateLimited {
    /// The gRPC status code of this refusal: `RESOURCE_EXHAUSTED` (a rule had no room, every
    /// concurrency slot was taken, or the call's cost can never fit); `UNAVAILABLE` when the store could not decide
    /// ([`Cause::StoreUnavailable`]); `INTERNAL` when the server is misconfigured
    /// ([`Cause::SubjectMissing`], [`Cause::Misconfigured`]). The HTTP statuses are 429, 503
    /// and 500.
    pub fn grpc_code(&self) -> Code {
        match self.cause {
            Cause::StoreUnavailable => Code::Unavailable,
            Cause::SubjectMissing | Cause::Misconfigured => Code::Internal,
            Cause::Exceeded | Cause::Concurrency | Cause::CostTooHigh => Code::ResourceExhausted,
        }
    }
}

/// [`RateLimited::grpc_code`], with the refusal's text as the message and as metadata
/// `retry-after` (whole seconds, rounded up, at least 1; absent when no retry can help),
/// `ratelimit-policy` and `ratelimit` (the header fields of an HTTP refusal).
///
/// ```
/// # use ratelimit_runtime::{Limit, Limiter, LimitType, Rule, Subject, store::MemoryStore};
/// # use std::{sync::Arc, time::Duration};
/// let limiter = Limiter::builder("greeter")
///     .limit(Limit::new(LimitType::Ip, [Rule::new(Duration::from_secs(20), 1).unwrap()]))
///     .store(Arc::new(MemoryStore::new()))
///     .build()
///     .unwrap();
/// let ip = [Subject::ip("203.0.113.7".parse().unwrap())];
/// limiter.check(&ip).blocking().unwrap();
/// let status = tonic::Status::from(limiter.check(&ip).blocking().unwrap_err());
/// assert_eq!(status.code(), tonic::Code::ResourceExhausted);
/// assert_eq!(status.metadata().get("retry-after").unwrap(), "20");
/// assert_eq!(status.metadata().get("ratelimit").unwrap(), r#""ip-20s";r=0;t=20"#);
/// ```
impl From<RateLimited> for Status {
    fn from(e: RateLimited) -> Status {
        let mut headers = e.headers();
        if headers.contains_key(RETRY_AFTER) {
            // A gRPC client retrying after 0 s would retry at once: a refusal always waits.
            headers.insert(RETRY_AFTER, e.retry_after_secs().max(1).into());
        }
        Status::with_metadata(e.grpc_code(), e.to_string(), MetadataMap::from_headers(headers))
    }
}
