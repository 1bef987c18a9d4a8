//! The request context: who is calling, for limits whose attribute names no `ip = …` /
//! `user = …`. The HTTP layer installs it; anyone can, with [`scope`] (async) or
//! [`sync_scope`] (plain code).
//!
//! ```
//! use ratelimit_runtime::context::{self, RequestContext};
//! let ctx = RequestContext::new().with_ip("203.0.113.7".parse().unwrap());
//! context::sync_scope(ctx, || {
//!     context::set_user("alice");
//!     assert_eq!(context::current().unwrap().user().as_deref(), Some("alice"));
//! });
//! ```

use crate::model::policy::Headroom;
use crate::model::subject::Subject;
use crate::model::subject::DEFAULT_IPV6_PREFIX;
use crate::rt::lock::lock;
use std::cell::RefCell;
use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// What the current request is known by, and the quota its last allowed check left.
#[derive(Debug, Default)]
pub struct RequestContext {
    ip: Option<IpAddr>,
    v6_prefix: Option<u8>,
    /// Bytes: an identity from a header need not be UTF-8.
    user: Mutex<Option<Vec<u8>>>,
    quota: Mutex<Option<Headroom>>,
}

impl RequestContext {
    /// An empty context.
    pub fn new() -> RequestContext {
        RequestContext::default()
    }

    /// With the client's IP.
    pub fn with_ip(mut self, ip: IpAddr) -> RequestContext {
        self.ip = Some(ip);
        self
    }

    /// With the IPv6 prefix length clients are grouped by (default 64).
    pub fn with_ipv6_prefix(mut self, bits: u8) -> RequestContext {
        self.v6_prefix = Some(bits);
        self
    }

    /// With the user id.
    pub fn with_user(self, user: impl Into<String>) -> RequestContext {
        self.with_user_bytes(user.into())
    }

    /// With the user id as bytes (a header value: non-ASCII, or not even UTF-8, is still a user).
    pub fn with_user_bytes(self, user: impl Into<Vec<u8>>) -> RequestContext {
        *lock(&self.user) = Some(user.into());
        self
    }

    /// The client's IP.
    pub fn ip(&self) -> Option<IpAddr> {
        self.ip
    }

    /// The user id, if one was set (bytes that are not UTF-8 are shown as `U+FFFD`; see
    /// [`user_bytes`](Self::user_bytes)).
    pub fn user(&self) -> Option<String> {
        lock(&self.user).as_deref().map(|u| String::from_utf8_lossy(u).into_owned())
    }

    /// The user id as it was set, bytes for bytes.
    pub fn user_bytes(&self) -> Option<Vec<u8>> {
        lock(&self.user).clone()
    }

    /// The quota the last allowed check in this request left (for `RateLimit` headers).
    pub fn quota(&self) -> Option<Headroom> {
        lock(&self.quota).clone()
    }

    fn ip_subject(&self) -> Subject<'static> {
        match self.ip {
            Some(ip) => Subject::ip_with_prefix(ip, self.v6_prefix.unwrap_or(DEFAULT_IPV6_PREFIX)),
            None => Subject::missing(),
        }
    }

    fn user_subject(&self) -> Subject<'static> {
        match lock(&self.user).as_deref() {
            Some(u) if !u.is_empty() => Subject::bytes(u.to_vec()),
            _ => Subject::missing(),
        }
    }
}

tokio::task_local! {
    static TASK: Arc<RequestContext>;
}

thread_local! {
    static THREAD: RefCell<Option<Arc<RequestContext>>> = const { RefCell::new(None) };
}

/// Whether any request context was ever entered in this process: until then `current` answers
/// `None` without looking (decisions outside HTTP pay nothing for the lookup).
static ENTERED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn entered() {
    if !ENTERED.load(std::sync::atomic::Ordering::Relaxed) {
        ENTERED.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Runs `fut` with `ctx` as its request context.
pub async fn scope<F: Future>(ctx: impl Into<Arc<RequestContext>>, fut: F) -> F::Output {
    entered();
    TASK.scope(ctx.into(), fut).await
}

/// Runs `f` on this thread with `ctx` as its request context.
pub fn sync_scope<R>(ctx: impl Into<Arc<RequestContext>>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Arc<RequestContext>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let prev = self.0.take();
            THREAD.with(|t| *t.borrow_mut() = prev);
        }
    }
    entered();
    let prev = THREAD.with(|t| t.borrow_mut().replace(ctx.into()));
    let _restore = Restore(prev);
    f()
}

/// The current request context: the task's, else the thread's.
#[inline]
pub fn current() -> Option<Arc<RequestContext>> {
    // Inlined up to here: a decision outside HTTP (most of them) asks, and pays a call for
    // nothing but this look.
    if !ENTERED.load(std::sync::atomic::Ordering::Relaxed) {
        return None;
    }
    current_entered()
}

#[inline(never)]
fn current_entered() -> Option<Arc<RequestContext>> {
    TASK.try_with(Arc::clone).ok().or_else(|| THREAD.with(|t| t.borrow().clone()))
}

/// Sets the user id of the current request (from an extractor or middleware). Returns `false`
/// when there is no request context.
pub fn set_user(user: impl Into<String>) -> bool {
    set_user_bytes(user.into())
}

/// Sets the user id of the current request as bytes (e.g. a header value, which may hold any
/// bytes). Returns `false` when there is no request context.
pub fn set_user_bytes(user: impl Into<Vec<u8>>) -> bool {
    match current() {
        Some(ctx) => {
            *lock(&ctx.user) = Some(user.into());
            true
        }
        None => false,
    }
}

/// The current client's IP subject, or a missing subject.
pub fn ip_subject() -> Subject<'static> {
    current().map_or(Subject::missing(), |c| c.ip_subject())
}

/// The current user's subject, or a missing subject.
pub fn user_subject() -> Subject<'static> {
    current().map_or(Subject::missing(), |c| c.user_subject())
}

impl RequestContext {
    pub(crate) fn record_quota(&self, quota: Headroom) {
        *lock(&self.quota) = Some(quota);
    }
}
