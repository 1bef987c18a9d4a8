//! The startup probe: once, when a remote store is configured, connect, authenticate and load
//! the scripts in the background, and log what happened (info with the latency, or error with
//! the store's own words). Decisions never wait for it.

use super::tls;
use crate::error::StoreError;
use crate::rt::io;
use std::future::Future;
use std::time::{Duration, Instant};

/// The probe's own limit: a connection and two script loads, so longer than one call's
/// timeout, but short enough for an operator to see a failure within seconds.
pub(crate) fn probe_timeout(call_timeout: Duration) -> Duration {
    (call_timeout * 4).clamp(Duration::from_secs(2), Duration::from_secs(10))
}

/// Runs `probe` on the I/O runtime and logs its outcome for `store` (a description without
/// passwords).
pub(crate) fn spawn(
    store: String,
    within: Duration,
    probe: impl Future<Output = Result<(), StoreError>> + Send + 'static,
) {
    let Ok(handle) = io::handle() else { return };
    handle.spawn(async move {
        let start = Instant::now();
        match io::timeout(within, probe).await {
            Ok(()) => {
                let latency_ms = start.elapsed().as_secs_f64() * 1000.0;
                tracing::info!(store = %store, latency_ms = format_args!("{latency_ms:.1}"), "rate-limit store reachable");
            }
            Err(e) => {
                let error = e.to_string();
                match hint(&e, &error) {
                    Some(hint) => tracing::error!(store = %store, error = %error, hint, "rate-limit store unreachable; the failure policy decides calls until it answers"),
                    None => tracing::error!(store = %store, error = %error, "rate-limit store unreachable; the failure policy decides calls until it answers"),
                }
            }
        }
    });
}

/// What an error most likely means, when the store's words alone are cryptic.
fn hint(error: &StoreError, text: &str) -> Option<&'static str> {
    match error {
        // A client that sent no password is answered NOAUTH, or, for a command as long as a
        // script, "unauthenticated bulk length" before the server hangs up.
        StoreError::Auth { .. } if text.contains("NOAUTH") || text.contains("unauthenticated") => {
            Some("NOAUTH: the server requires a password; give it in the URL (redis://:password@host)")
        }
        // redis-rs reports the server's WRONGPASS without the server's text.
        StoreError::Auth { .. } => Some("WRONGPASS: the server refused the user name or password in the URL"),
        _ => tls::hint(text),
    }
}

/// A cluster's error, with what its first seed says when asked alone (unless it answers).
#[cfg(feature = "cluster")]
pub(crate) async fn explain_with_seed(error: StoreError, seed: redis::Client) -> StoreError {
    let alone = async {
        let mut conn = seed.get_multiplexed_async_connection().await?;
        redis::cmd("PING").query_async::<()>(&mut conn).await
    };
    match alone.await {
        Ok(()) => error,
        // The seed's own error says more precisely what is wrong (refused, unauthenticated).
        Err(why) => super::error::redis_error(why).within(&format!("{error}; the first seed node says")),
    }
}
