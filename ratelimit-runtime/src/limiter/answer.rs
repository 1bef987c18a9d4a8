//! [`StoreFuture`]: a store's answer awaited, at once in memory, from the I/O runtime for a
//! remote store. What a peek, a reset and a refund are when awaited.

use crate::error::StoreError;
use crate::rt::io;
use crate::store::Answer;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A store's answer to a [`Peek`](crate::request::Peek), a [`Reset`](crate::request::Reset) or a
/// [`Settle`](crate::request::Settle) (a refund too), being
/// awaited.
#[must_use = "futures do nothing unless awaited"]
pub struct StoreFuture<T>(Answering<T>);

enum Answering<T> {
    Ready(Option<Result<T, StoreError>>),
    Remote(io::Remote<T>),
}

impl<T: Send + 'static> StoreFuture<T> {
    pub(crate) fn of(answer: Answer<T>) -> StoreFuture<T> {
        StoreFuture(match answer {
            Answer::Ready(r) => Answering::Ready(Some(r)),
            Answer::Remote(fut) => Answering::Remote(io::Remote::new(fut)),
        })
    }
}

impl<T: Unpin> Future for StoreFuture<T> {
    type Output = Result<T, StoreError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.get_mut().0 {
            Answering::Ready(r) => Poll::Ready(r.take().unwrap_or_else(|| Err(StoreError::other("polled again")))),
            Answering::Remote(remote) => Pin::new(remote).poll(cx),
        }
    }
}
