//! Which connection a Redis call goes on ([`Lanes`]): the store's shared one, driven by the
//! library's I/O runtime, or one driven by the calling task's own Tokio runtime.
//!
//! A reply read by the I/O runtime's thread has to wake the caller's worker from another
//! thread, and a request has to wake the I/O thread to be written: two thread hops per call,
//! about 25 µs of a lone caller's 70 µs round trip on a 2-core machine (BENCHMARKS.md, "One
//! caller"). A connection whose driver task runs on the caller's runtime is written and read
//! by the worker the caller runs on, as a plain `redis-rs` connection would be. But such a
//! connection dies with that runtime (each `#[tokio::test]` has its own), cannot serve blocking
//! callers (their thread is not driving any runtime) and must not be used from a runtime that
//! is not running. So each runtime that calls from a task gets its own lane (a connection and
//! the batcher that coalesces on it, and the connection of its lone calls, see direct/),
//! made in the background on that runtime and ended with it or with the store; every other
//! call, and a call made before its lane is ready, goes on the shared lane.

use super::batch::Batcher;
use super::commands::LoadScripts;
use super::direct::{Direct, DirectConfig};
use super::link::Link;
use crate::error::StoreError;
use crate::rt::io;
use crate::rt::lock::lock;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::Poll;
use std::time::Duration;
use tokio::runtime::{Handle, Id};
use tokio::sync::oneshot;

/// How long a lane that could not connect waits before trying again (calls go on the shared
/// lane meanwhile, which reconnects by itself).
const RETRY: Duration = Duration::from_secs(1);

/// Makes a link whose connection is driven by the runtime it is made on.
pub(crate) type MakeLink<L> = Arc<dyn Fn() -> Result<L, StoreError> + Send + Sync>;

/// A connection and the batcher that coalesces decisions on it.
#[derive(Clone)]
pub(crate) struct Lane<L: Link> {
    pub(crate) link: L,
    pub(crate) batcher: Arc<Batcher>,
    /// The connection of lone calls (direct/), on a runtime's own lane where the server
    /// allows them.
    pub(crate) direct: Option<Arc<Direct>>,
}

/// The shared lane and the lanes of the runtimes that called.
pub(crate) struct Lanes<L: Link> {
    shared: Lane<L>,
    /// `None`: every call goes on the shared lane (a link that cannot be made per runtime).
    make: Option<MakeLink<L>>,
    direct: Option<DirectConfig>,
    timeout: Duration,
    local: Mutex<Vec<(Id, Arc<Local<L>>)>>,
}

/// One runtime's lane, once made.
struct Local<L: Link> {
    lane: OnceLock<Lane<L>>,
    /// False once the runtime is gone (its tasks, the keeper among them, were dropped): a new
    /// runtime may be given the same id.
    alive: AtomicBool,
    /// Dropped with the store: the keeper then ends, and the lane's connection with it.
    stop: Mutex<Option<oneshot::Sender<()>>>,
}

/// Marks a lane dead when its keeper is dropped, with its runtime or after the store.
struct Dead<L: Link>(Arc<Local<L>>);

impl<L: Link> Drop for Dead<L> {
    fn drop(&mut self) {
        self.0.alive.store(false, Ordering::Release);
        if let Some(lane) = self.0.lane.get() {
            lane.batcher.close();
            if let Some(direct) = &lane.direct {
                direct.close();
            }
        }
    }
}

impl<L: Link> Lanes<L> {
    /// The lanes of a store whose shared connection is `link`; `make` makes a connection on the
    /// runtime it is called on. Starts the shared lane's batcher on the I/O runtime.
    pub(crate) fn new(
        link: L,
        make: Option<MakeLink<L>>,
        direct: Option<DirectConfig>,
        timeout: Duration,
    ) -> Result<Lanes<L>, StoreError> {
        let batcher = Batcher::start(link.clone(), timeout, io::handle()?);
        let shared = Lane { link, batcher, direct: None };
        Ok(Lanes { shared, make, direct, timeout, local: Mutex::new(Vec::new()) })
    }

    /// The lane for a call polled here: the calling task's runtime's once it is ready, else the
    /// shared one (and the runtime's lane is started, if it is not). Called when the call's
    /// future is first polled, never when it is built: a blocking call's future is built on the
    /// caller's thread but polled on the I/O runtime, and must go on the shared lane.
    pub(crate) fn here(&self) -> Lane<L> {
        self.local().unwrap_or_else(|| self.shared.clone())
    }

    fn local(&self) -> Option<Lane<L>> {
        let make = self.make.as_ref()?;
        let runtime = io::caller_runtime()?;
        let id = runtime.id();
        let mut local = lock(&self.local);
        if let Some((_, lane)) = local.iter().find(|(i, lane)| *i == id && lane.alive.load(Ordering::Acquire)) {
            return lane.lane.get().cloned();
        }
        // A runtime first seen (or a new one given a dead one's id): its lane is made on it.
        local.retain(|(_, lane)| lane.alive.load(Ordering::Acquire));
        let (stop, stopped) = oneshot::channel();
        let lane =
            Arc::new(Local { lane: OnceLock::new(), alive: AtomicBool::new(true), stop: Mutex::new(Some(stop)) });
        local.push((id, lane.clone()));
        drop(local);
        let direct = self.direct.clone().map(|config| Arc::new(Direct::new(config)));
        runtime.spawn(keep(Dead(lane), make.clone(), direct, self.timeout, stopped));
        None
    }
}

impl<L: Link> Drop for Lanes<L> {
    fn drop(&mut self) {
        // The batching tasks send what is queued, then end; the keepers end, dropping their
        // connections.
        self.shared.batcher.close();
        for (_, lane) in lock(&self.local).drain(..) {
            lock(&lane.stop).take();
        }
    }
}

/// A runtime's lane keeper, on that runtime: connects (loading the scripts, and one connection
/// for lone calls, if the lane has them), starts the lane's batcher, then holds the lane until
/// the store is dropped. Dropped with its runtime.
async fn keep<L: Link>(
    dead: Dead<L>,
    make: MakeLink<L>,
    direct: Option<Arc<Direct>>,
    timeout: Duration,
    mut stopped: oneshot::Receiver<()>,
) {
    let link = loop {
        let ready = match make() {
            Ok(link) => io::timeout(super::probe::probe_timeout(timeout), link.send(&LoadScripts)).await.map(|()| link),
            Err(e) => Err(e),
        };
        match ready {
            Ok(link) => break link,
            // The shared lane's probe and breaker report the store's failures: a lane that
            // cannot connect just tries again later.
            Err(_) => {
                let Ok(mut pause) = io::sleep(RETRY) else { return };
                let stop = std::future::poll_fn(|cx| {
                    if Pin::new(&mut stopped).poll(cx).is_ready() {
                        return Poll::Ready(true);
                    }
                    pause.as_mut().poll(cx).map(|()| false)
                });
                if stop.await {
                    return;
                }
            }
        }
    };
    if let Some(direct) = &direct {
        // On this runtime, whose I/O driver the connection registers with.
        let _ = io::timeout(super::probe::probe_timeout(timeout), async {
            direct.prepare().await;
            Ok(())
        })
        .await;
    }
    let batcher = Batcher::start(link.clone(), timeout, &Handle::current());
    // Only this keeper sets its lane.
    let _ = dead.0.lane.set(Lane { link, batcher, direct });
    let _ = stopped.await;
}
