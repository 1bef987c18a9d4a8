//! Redis errors as what happened: timeout, authentication, script, connection,
//! misconfiguration, classified by the error's kind and code, never its text.

use crate::error::StoreError;
use redis::{ErrorKind as ErrorKind_, ServerErrorKind};
use std::sync::Arc;

/// A Redis error as what happened, classified by its kind and code (never its text), the error
/// itself as the source.
pub(crate) fn redis_error(e: redis::RedisError) -> StoreError {
    let kind = e.kind();
    // Redis answers a client that skipped AUTH with `NOAUTH`, or, for a long command, with
    // "Protocol error: unauthenticated multibulk length" before closing the connection.
    let unauthenticated = kind == ErrorKind_::Server(ServerErrorKind::ResponseError)
        && e.detail().is_some_and(|d| d.contains("unauthenticated"));
    let auth = unauthenticated
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
        || matches!(kind, ErrorKind_::AuthenticationFailed | ErrorKind_::Server(ServerErrorKind::NoPerm));
    let timeout = e.is_timeout();
    // A server error of a code the client does not know (`WRONGTYPE`, `OOM`, `BUSY`) is the
    // server refusing to run the script.
    let script = matches!(
        kind,
        ErrorKind_::Server(ServerErrorKind::NoScript | ServerErrorKind::ResponseError | ServerErrorKind::ExecAbort)
            | ErrorKind_::Extension
            | ErrorKind_::UnexpectedReturnType
            | ErrorKind_::Parse
    );
    let connection = matches!(
        kind,
        ErrorKind_::Io
            | ErrorKind_::ClusterConnectionNotFound
            | ErrorKind_::MasterNameNotFoundBySentinel
            | ErrorKind_::NoValidReplicasFoundBySentinel
            | ErrorKind_::Server(
                ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ReadOnly,
            )
    ) || e.is_connection_refusal()
        || e.is_connection_dropped()
        || e.is_io_error();
    let misconfigured = matches!(kind, ErrorKind_::InvalidClientConfig);
    let (context, source) = (String::new(), Some(Arc::new(e) as crate::error::ErrorSource));
    if timeout {
        StoreError::Timeout { after: None, source }
    } else if auth {
        StoreError::Auth { context, source }
    } else if script {
        StoreError::Script { context, source }
    } else if connection {
        StoreError::Connection { context, source }
    } else if misconfigured {
        StoreError::Misconfigured { context, source }
    } else {
        StoreError::Other { context, source }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn error_kinds_come_from_the_error_kind_not_its_text() {
        use super::ErrorKind_;
        use crate::metrics::ErrorKind;
        use std::io;
        let error_kind = |e: redis::RedisError| ErrorKind::of(&super::redis_error(e));
        let io_err = |k: io::ErrorKind| redis::RedisError::from(io::Error::new(k, "secret-host:6379"));
        assert_eq!(error_kind(io_err(io::ErrorKind::ConnectionRefused)), ErrorKind::Connection);
        assert_eq!(error_kind(io_err(io::ErrorKind::ConnectionReset)), ErrorKind::Connection);
        assert_eq!(error_kind(io_err(io::ErrorKind::TimedOut)), ErrorKind::Timeout);
        let of = |k: ErrorKind_| error_kind(redis::RedisError::from((k, "timeout auth script")));
        assert_eq!(of(ErrorKind_::AuthenticationFailed), ErrorKind::Auth);
        assert_eq!(of(ErrorKind_::UnexpectedReturnType), ErrorKind::Script);
        assert_eq!(of(ErrorKind_::ClusterConnectionNotFound), ErrorKind::Connection);
        assert_eq!(of(ErrorKind_::InvalidClientConfig), ErrorKind::Other);
    }
}
