//! How a Redis-backed store reaches the node that takes its commands ([`Link`]): one server
//! through a connection that reconnects by itself, or the primary that Redis Sentinel names
//! (`sentinel/`). Everything else, from the decision to the timeout, is the store's
//! (`backed.rs`), written once for both.

use crate::error::StoreError;
use redis::aio::{ConnectionLike, ConnectionManager};
use std::future::Future;

/// The way to the node a Redis-backed store sends its commands to. Cheap to clone: each call
/// takes its own handle into its future.
pub(crate) trait Link: Clone + Send + Sync + 'static {
    /// Sends `request` to the node and reads its reply (the caller's timeout covers it all).
    fn send<R: Request>(&self, request: &R) -> impl Future<Output = Result<R::Reply, StoreError>> + Send;
}

/// A command a store sends, and how its reply is read.
pub(crate) trait Request: Sync {
    /// The reply, read.
    type Reply: Send;

    /// Sends the command on `conn` and reads the reply.
    fn send_on<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
    ) -> impl Future<Output = Result<Self::Reply, StoreError>> + Send;
}

/// One server (or a primary behind a proxy).
impl Link for ConnectionManager {
    async fn send<R: Request>(&self, request: &R) -> Result<R::Reply, StoreError> {
        // The manager reconnects by itself: a command is never sent twice here.
        request.send_on(&mut self.clone()).await
    }
}

/// A Redis Cluster: its connection routes each command by its key, so the requests of one
/// server work as they are (a runtime override's write and listing).
#[cfg(feature = "cluster")]
impl Link for redis::cluster_async::ClusterConnection {
    async fn send<R: Request>(&self, request: &R) -> Result<R::Reply, StoreError> {
        request.send_on(&mut self.clone()).await
    }
}
