//! [`StoreError`]: what went wrong in a store, classified, with the store's own words.

use std::sync::Arc;
use std::time::Duration;

/// The error a store call ended with: the store's own error, when there is one.
pub type ErrorSource = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// A store could not decide: what happened, with the store's own error as
/// [`source`](std::error::Error::source). Its text never holds a password.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No answer within the store's timeout (or the client's own).
    #[error("the rate-limit store did not answer in time{}", after.map(|d| format!(" ({d:?})")).unwrap_or_default())]
    Timeout {
        /// The time limit, when it was this library's.
        after: Option<Duration>,
        /// The client's error, when the client gave up.
        #[source]
        source: Option<ErrorSource>,
    },
    /// The store could not be reached, or the connection broke (refused, reset, no primary).
    #[error("cannot reach the rate-limit store: {}", words(.context, .source))]
    Connection {
        /// Where, or what was tried.
        context: String,
        /// The client's error.
        #[source]
        source: Option<ErrorSource>,
    },
    /// The store refused the credentials (`NOAUTH`, `WRONGPASS`, a missing ACL permission).
    #[error("the rate-limit store refused the credentials: {}", words(.context, .source))]
    Auth {
        /// Where, or what was tried.
        context: String,
        /// The client's error.
        #[source]
        source: Option<ErrorSource>,
    },
    /// The decision script failed on the server.
    #[error("the rate-limit script failed: {}", words(.context, .source))]
    Script {
        /// Where, or what was tried.
        context: String,
        /// The server's error.
        #[source]
        source: Option<ErrorSource>,
    },
    /// The store answered something this library cannot read.
    #[error("unexpected answer from the rate-limit store: {0}")]
    Protocol(String),
    /// The store is configured wrongly (a malformed URL, a missing feature): no retry can succeed
    /// until the configuration is fixed.
    #[error("misconfigured: {}", words(.context, .source))]
    Misconfigured {
        /// What is wrong, naming the store.
        context: String,
        /// The underlying error.
        #[source]
        source: Option<ErrorSource>,
    },
    /// The store was not called: it failed several times in a row, and its circuit breaker
    /// holds calls off for a pause (the failure policy answers them meanwhile).
    #[error("the rate-limit store is not called for {retry_in:?} after repeated failures (circuit open){}", after_colon(.source))]
    CircuitOpen {
        /// How long until one trial call goes to the store again.
        retry_in: Duration,
        /// The failure that opened the breaker, or the last trial's.
        #[source]
        source: Option<ErrorSource>,
    },
    /// Anything else the store or its client reported.
    #[error("rate-limit store error: {}", words(.context, .source))]
    Other {
        /// Where, or what was tried.
        context: String,
        /// The client's error.
        #[source]
        source: Option<ErrorSource>,
    },
}

/// `context: source`, or whichever of the two there is: logs print an error's own text only,
/// so the store's words are part of it.
fn words(context: &str, source: &Option<ErrorSource>) -> String {
    match (context.is_empty(), source) {
        (_, None) => context.to_owned(),
        (true, Some(s)) => s.to_string(),
        (false, Some(s)) => format!("{context}: {s}"),
    }
}

/// `: source`, or nothing.
fn after_colon(source: &Option<ErrorSource>) -> String {
    source.as_ref().map(|s| format!(": {s}")).unwrap_or_default()
}

impl StoreError {
    /// A misconfiguration described by `context` alone.
    pub(crate) fn misconfigured(context: impl Into<String>) -> StoreError {
        StoreError::Misconfigured { context: context.into(), source: None }
    }

    /// A misconfiguration with the error that revealed it.
    pub(crate) fn misconfigured_by(
        context: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> StoreError {
        StoreError::Misconfigured { context: context.into(), source: Some(Arc::new(source)) }
    }

    /// A failure of the library's own machinery (its I/O runtime), not of the store.
    pub(crate) fn other(context: impl Into<String>) -> StoreError {
        StoreError::Other { context: context.into(), source: None }
    }

    /// The same error with `context` in front of its own (a host, a seed node).
    pub(crate) fn within(self, outer: &str) -> StoreError {
        let prefix =
            |context: String| if context.is_empty() { outer.to_owned() } else { format!("{outer}: {context}") };
        match self {
            StoreError::Connection { context, source } => StoreError::Connection { context: prefix(context), source },
            StoreError::Auth { context, source } => StoreError::Auth { context: prefix(context), source },
            StoreError::Script { context, source } => StoreError::Script { context: prefix(context), source },
            StoreError::Misconfigured { context, source } => {
                StoreError::Misconfigured { context: prefix(context), source }
            }
            StoreError::Other { context, source } => StoreError::Other { context: prefix(context), source },
            StoreError::Protocol(what) => StoreError::Protocol(format!("{outer}: {what}")),
            timeout @ StoreError::Timeout { .. } => timeout,
            open @ StoreError::CircuitOpen { .. } => open,
        }
    }
}
