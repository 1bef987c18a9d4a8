//! Every error the library returns, but the refusal itself ([`RateLimited`](crate::RateLimited),
//! which reports a decision rather than a failure): what a store failed with (`store`), why a
//! rule, a prefix, a network or a limiter was refused (`build`), and why a configuration or a
//! value was (`config`). Each keeps the error that caused it as its `source()`, and none holds
//! a password.
//!
//! They sit below everything else (the model builds its values with them), so they name no
//! type of the model but the algorithm a limit chose.

mod build;
mod config;
mod store;

pub use build::{BuildError, CidrError, OverrideError, PrefixError, RuleError};
pub use config::{ConfigError, OverridesError, ParseError, TierProblem};
pub use store::{ErrorSource, StoreError};
