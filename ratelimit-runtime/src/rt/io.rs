//! The library's own I/O runtime: the shared Redis connections live here, and every blocking
//! call runs here.
//!
//! A connection is bound to the runtime that drives it, and dies with it (each `#[tokio::test]`
//! has its own); a plain `fn` has no runtime at all. So every store has a connection here that
//! works for any caller. Async callers on a Tokio runtime await their requests in place (a
//! multiplexed request is a message to the driver task, wherever it runs), and a task's calls
//! go on a connection of its own runtime once one is made (store/redis/lanes.rs, with
//! [`caller_runtime`]); others, and blocking callers, hand the request to this runtime.

use crate::error::StoreError;
use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::runtime::{Handle, Runtime};
use tokio::task::JoinHandle;
use tokio::time::Sleep;

/// An answer still travelling from a remote store. It owns everything it needs (`'static`) so
/// it can run on the I/O runtime whatever runtime, if any, the caller has.
pub type RemoteAnswer<T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'static>>;

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
        .map_err(|e| StoreError::other(format!("cannot start the I/O runtime: {e}")))
        .inspect(|rt| keep_timer_near(rt))
}

/// How far ahead the I/O runtime's timer always has a deadline (see [`keep_timer_near`]).
const TIMER_TICK: Duration = Duration::from_millis(50);

/// Keeps a deadline at most [`TIMER_TICK`] ahead on the I/O runtime's timer, so that a store
/// call's timeout (registered there from the caller's thread) never wakes the I/O thread. When
/// its timer holds no earlier deadline, Tokio wakes the parked driver to take a new one into
/// account: with one caller at a time, that was a syscall and a context switch per call, about
/// 10 µs of a decision's latency (BENCHMARKS.md, section 1). The tick costs 20 wakeups a second
/// of a runtime that exists only once a Redis store does; timeouts shorter than the tick still
/// work, paying the wake-up.
fn keep_timer_near(rt: &Runtime) {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        rt.spawn(async {
            loop {
                tokio::time::sleep(TIMER_TICK).await;
            }
        });
    });
}

/// The handle of the I/O runtime.
pub(crate) fn handle() -> Result<&'static Handle, StoreError> {
    runtime().map(Runtime::handle)
}

/// The runtime whose task is being polled here, unless it is the I/O runtime: `None` outside a
/// task (in a `block_on`, on a plain thread). Only a task's runtime is surely running while the
/// task waits, so only it can drive a connection the task waits on (store/redis/lanes.rs).
pub(crate) fn caller_runtime() -> Option<Handle> {
    tokio::task::try_id()?;
    let current = Handle::try_current().ok()?;
    let io = handle().ok()?;
    (current.id() != io.id()).then_some(current)
}

/// Runs `fut` on the I/O runtime and awaits it from any executor.
pub(crate) async fn run<T: Send + 'static>(
    fut: impl Future<Output = Result<T, StoreError>> + Send + 'static,
) -> Result<T, StoreError> {
    let task = handle()?.spawn(fut);
    task.await.map_err(|e| StoreError::other(format!("store task failed: {e}")))?
}

/// Runs `fut` on the I/O runtime and blocks this thread until it is done.
pub(crate) fn block_on<T: Send + 'static>(
    fut: impl Future<Output = Result<T, StoreError>> + Send + 'static,
) -> Result<T, StoreError> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    handle()?.spawn(async move {
        let _ = tx.send(fut.await);
    });
    rx.recv().map_err(|_| StoreError::other("store task failed"))?
}

/// Runs `fut` with a time limit measured by the I/O runtime's timer, so that it works when
/// polled from any runtime (even one without a time driver, or none at all).
pub(crate) async fn timeout<T>(
    limit: Duration,
    fut: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    let sleep = {
        let _io = handle()?.enter();
        tokio::time::sleep(limit)
    };
    let mut sleep = std::pin::pin!(sleep);
    let mut fut = std::pin::pin!(fut);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(r) = fut.as_mut().poll(cx) {
            return Poll::Ready(r);
        }
        if sleep.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(StoreError::Timeout { after: Some(limit), source: None }));
        }
        Poll::Pending
    })
    .await
}

/// A sleep of `d` on the I/O runtime's timer, so that it works when polled from any runtime
/// (even one without a time driver, or none at all). Boxed: waiting is the slow path.
pub(crate) fn sleep(d: Duration) -> Result<Pin<Box<Sleep>>, StoreError> {
    let _io = handle()?.enter();
    Ok(Box::pin(tokio::time::sleep(d)))
}

/// A remote answer, awaited: polled in place when the caller runs on a Tokio runtime (the
/// connection's driver task lives on the I/O runtime either way, so a reply wakes the caller
/// directly), else handed to the I/O runtime, which any executor can await.
pub(crate) enum Remote<T> {
    InPlace(RemoteAnswer<T>),
    Handed(JoinHandle<Result<T, StoreError>>),
    Failed(Option<StoreError>),
}

impl<T: Send + 'static> Remote<T> {
    pub(crate) fn new(answer: RemoteAnswer<T>) -> Remote<T> {
        if Handle::try_current().is_ok() {
            return Remote::InPlace(answer);
        }
        match handle() {
            Ok(io) => Remote::Handed(io.spawn(answer)),
            Err(e) => Remote::Failed(Some(e)),
        }
    }
}

impl<T> Future for Remote<T> {
    type Output = Result<T, StoreError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Remote::InPlace(answer) => answer.as_mut().poll(cx),
            Remote::Handed(task) => Pin::new(task)
                .poll(cx)
                .map(|joined| joined.map_err(|e| StoreError::other(format!("store task failed: {e}")))?),
            Remote::Failed(e) => Poll::Ready(Err(e.take().unwrap_or_else(|| StoreError::other("polled again")))),
        }
    }
}
