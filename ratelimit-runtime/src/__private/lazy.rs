//! [`LazyLimiter`]: the `static` an annotated function's limiter lives in, built on its first
//! call (or when the registry is asked for it) and registered by name; and [`Declared`], how
//! every such static is known from the start of the process.

use crate::error::BuildError;
use crate::limiter::{registry, Limiter};
use crate::model::limit_type::LimitType;
use crate::model::refusal::{Cause, Failure, RateLimited};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// A limiter built on first use: what the attribute expands to.
pub struct LazyLimiter {
    cell: OnceLock<Built>,
    name: fn() -> String,
    build: fn(&str) -> Result<Limiter, BuildError>,
}

/// The limiter, or the refusal every call of a limiter that could not be built gets.
enum Built {
    Limiter(Limiter),
    Invalid(RateLimited),
}

impl LazyLimiter {
    /// The limiter `build` makes, under the name `name` gives, on first use.
    pub const fn new(name: fn() -> String, build: fn(&str) -> Result<Limiter, BuildError>) -> LazyLimiter {
        LazyLimiter { cell: OnceLock::new(), name, build }
    }

    /// The limiter, or the refusal of a limiter that could not be built: a server error naming
    /// the limiter, never a store outage. (The attribute checks at compile time everything the
    /// builder does, so an invalid limiter cannot happen; the refusal is there so that no input
    /// can make generated code panic.)
    #[inline]
    pub fn get(&self) -> Result<&Limiter, RateLimited> {
        match self.cell.get_or_init(|| self.init()) {
            Built::Limiter(limiter) => Ok(limiter),
            Built::Invalid(refused) => Err(refused.clone()),
        }
    }

    /// The limiter's name, without building it.
    pub(crate) fn name(&self) -> String {
        (self.name)()
    }

    #[cold]
    fn init(&self) -> Built {
        let name = (self.name)();
        match (self.build)(&name) {
            Ok(limiter) => {
                registry::register(&limiter);
                Built::Limiter(limiter)
            }
            Err(e) => Built::Invalid(RateLimited {
                limiter: Arc::from(name),
                policy: None,
                policies: Arc::from(Vec::new()),
                retry_after: Duration::ZERO,
                cause: Cause::Misconfigured,
                limit_type: LimitType::Global,
                source: Some(Box::new(Failure::Build(e))),
            }),
        }
    }
}

/// One annotated function's limiter, submitted by the expansion to a collection the linker
/// gathers (`inventory`), so that the registry knows every declared limiter from the start of
/// the process, before its function is first called: an admin API can list them and override
/// one never called yet.
pub struct Declared(pub &'static LazyLimiter);

inventory::collect!(Declared);

/// Every limiter the attribute declared in the program (its functions called or not).
pub(crate) fn declared() -> impl Iterator<Item = &'static LazyLimiter> {
    inventory::iter::<Declared>.into_iter().map(|d| d.0)
}
