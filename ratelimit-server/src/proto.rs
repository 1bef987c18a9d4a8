//! The messages of Envoy's rate-limit service that this server reads and writes, written with
//! prost's derive from `envoy/service/ratelimit/v3/rls.proto` and its imports (no `protoc`, no
//! build script). Field numbers and the package are the published ones, so any Envoy (and any
//! client generated from the published files) talks to this server. Fields this server never
//! reads are left out: protobuf skips unknown fields.

use tonic::transport::Channel;
use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;

/// The service's name: `/<package>.<service>`.
pub const SERVICE: &str = "envoy.service.ratelimit.v3.RateLimitService";
/// The method's path.
pub const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// `envoy.service.ratelimit.v3.RateLimitRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitRequest {
    /// The configuration domain the descriptors are looked up in.
    #[prost(string, tag = "1")]
    pub domain: String,
    /// Each descriptor is matched against the domain's configuration; all are decided together.
    #[prost(message, repeated, tag = "2")]
    pub descriptors: Vec<RateLimitDescriptor>,
    /// Units the request takes from each matched limit (0 means 1).
    #[prost(uint32, tag = "3")]
    pub hits_addend: u32,
}

/// `envoy.extensions.common.ratelimit.v3.RateLimitDescriptor` (without `limit`, the override
/// this server does not honour).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitDescriptor {
    /// The hierarchical entries, outermost first.
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<Entry>,
    /// This descriptor's own units, instead of the request's `hits_addend` (zero allowed).
    #[prost(message, optional, tag = "3")]
    pub hits_addend: Option<UInt64Value>,
}

/// `envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.Entry`.
#[derive(Clone, PartialEq, Eq, Hash, prost::Message)]
pub struct Entry {
    /// The entry's key (`remote_address`, `path`, …).
    #[prost(string, tag = "1")]
    pub key: String,
    /// Its value in this request.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `google.protobuf.UInt64Value`.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct UInt64Value {
    /// The value.
    #[prost(uint64, tag = "1")]
    pub value: u64,
}

/// `google.protobuf.Duration`.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct Duration {
    /// Whole seconds.
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    /// The nanoseconds beyond them.
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

impl From<std::time::Duration> for Duration {
    fn from(d: std::time::Duration) -> Duration {
        Duration {
            seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
        }
    }
}

/// `envoy.service.ratelimit.v3.RateLimitResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitResponse {
    /// [`Code`]: `OVER_LIMIT` when any descriptor is.
    #[prost(enumeration = "Code", tag = "1")]
    pub overall_code: i32,
    /// One status per request descriptor, in the request's order.
    #[prost(message, repeated, tag = "2")]
    pub statuses: Vec<DescriptorStatus>,
    /// Header fields Envoy adds to the client's response (`RateLimit`, `RateLimit-Policy`).
    #[prost(message, repeated, tag = "3")]
    pub response_headers_to_add: Vec<HeaderValue>,
}

/// `envoy.service.ratelimit.v3.RateLimitResponse.Code`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, prost::Enumeration)]
#[repr(i32)]
pub enum Code {
    /// Not known.
    Unknown = 0,
    /// Under the limit.
    Ok = 1,
    /// Over the limit.
    OverLimit = 2,
}

/// `envoy.service.ratelimit.v3.RateLimitResponse.DescriptorStatus`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DescriptorStatus {
    /// [`Code`] of this descriptor.
    #[prost(enumeration = "Code", tag = "1")]
    pub code: i32,
    /// The limit that applied, if any.
    #[prost(message, optional, tag = "2")]
    pub current_limit: Option<RateLimit>,
    /// Units left under it.
    #[prost(uint32, tag = "3")]
    pub limit_remaining: u32,
    /// How long until its quota is whole again.
    #[prost(message, optional, tag = "4")]
    pub duration_until_reset: Option<Duration>,
}

/// `envoy.service.ratelimit.v3.RateLimitResponse.RateLimit`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimit {
    /// The limit's `name` in the configuration (or its window, for a window no unit names).
    #[prost(string, tag = "3")]
    pub name: String,
    /// Units per [`Unit`].
    #[prost(uint32, tag = "1")]
    pub requests_per_unit: u32,
    /// [`Unit`].
    #[prost(enumeration = "Unit", tag = "2")]
    pub unit: i32,
}

/// `envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, prost::Enumeration)]
#[repr(i32)]
pub enum Unit {
    /// No unit names the window.
    Unknown = 0,
    /// 1 s.
    Second = 1,
    /// 60 s.
    Minute = 2,
    /// 3600 s.
    Hour = 3,
    /// 86 400 s.
    Day = 4,
    /// 30 days, as envoyproxy/ratelimit counts it.
    Month = 5,
    /// 365 days.
    Year = 6,
    /// 7 days.
    Week = 7,
}

/// `envoy.config.core.v3.HeaderValue`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct HeaderValue {
    /// The field's name.
    #[prost(string, tag = "1")]
    pub key: String,
    /// Its value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// Calls `ShouldRateLimit` on `channel` (what a generated client's method does).
pub async fn should_rate_limit(
    channel: Channel,
    request: RateLimitRequest,
) -> Result<Response<RateLimitResponse>, Status> {
    let mut client = tonic::client::Grpc::new(channel);
    client.ready().await.map_err(|e| Status::unavailable(format!("the service is not ready: {e}")))?;
    let path = http::uri::PathAndQuery::from_static(SHOULD_RATE_LIMIT);
    client.unary(Request::new(request), path, ProstCodec::default()).await
}
