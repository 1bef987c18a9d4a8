//! The library's own I/O runtime: every Redis connection lives and every Redis call runs here.
//!
//! Connections are bound to the runtime that drives them. Running them on the caller's runtime
//! would break when that runtime is dropped (each `#[tokio::test]` has its own) and would not
//! work at all for plain `fn`s; a dedicated runtime costs no extra thread wake-up compared with a
//! multiplexed connection's own hand-off.

use crate::StoreError;
use std::future::Future;
use std::sync::OnceLock;
use tokio::runtime::{Handle, Runtime};

fn runtime() -> Result<&'static Runtime, StoreError> {
    static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("ratelimit-io")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| StoreError::Unavailable(format!("cannot start the I/O runtime: {e}")))
}

/// The handle of the I/O runtime.
pub(crate) fn handle() -> Result<&'static Handle, StoreError> {
    runtime().map(Runtime::handle)
}

/// Runs `fut` on the I/O runtime and awaits it from any executor.
pub(crate) async fn run<T: Send + 'static>(
    fut: impl Future<Output = Result<T, StoreError>> + Send + 'static,
) -> Result<T, StoreError> {
    let task = handle()?.spawn(fut);
    task.await.map_err(|e| StoreError::Unavailable(format!("store task failed: {e}")))?
}

/// Runs `fut` on the I/O runtime and blocks this thread until it is done.
pub(crate) fn block_on<T: Send + 'static>(
    fut: impl Future<Output = Result<T, StoreError>> + Send + 'static,
) -> Result<T, StoreError> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    handle()?.spawn(async move {
        let _ = tx.send(fut.await);
    });
    rx.recv().map_err(|_| StoreError::Unavailable("store task failed".to_owned()))?
}
