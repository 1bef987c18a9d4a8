//! `ratelimit-server`: an Envoy rate-limit service (`envoy.service.ratelimit.v3`) reading
//! envoyproxy/ratelimit's YAML configuration and deciding with the `ratelimit` library's exact
//! algorithms and stores. The binary is the product; this library is what it and its tests
//! share (docs/rls.md in the repository is the guide).

pub mod config;
pub mod decide;
pub mod proto;
pub mod server;
pub mod service;
mod status;
mod watch;
