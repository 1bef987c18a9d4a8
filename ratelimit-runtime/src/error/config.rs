//! Why a configuration, the overrides file or a value read from text was refused.

use super::store::StoreError;
use std::sync::Arc;

/// Why a value did not parse: a [`FailurePolicy`](crate::FailurePolicy), a [`Mode`](crate::Mode),
/// an on/off switch, a number of entries.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// Not one of the names this value takes.
    #[error("unknown {what} {value:?}: expected {expected}")]
    Unknown {
        /// What was read (`failure policy`, `mode`, `switch`).
        what: &'static str,
        /// The text, as given.
        value: String,
        /// The names it takes.
        expected: &'static str,
    },
    /// A number outside the range the value takes.
    #[error("{value:?} is out of range: expected {expected}")]
    OutOfRange {
        /// The text, as given.
        value: String,
        /// The range it takes.
        expected: &'static str,
    },
    /// Not a whole number.
    #[error("{value:?} is not a whole number")]
    Number {
        /// The text, as given.
        value: String,
        /// Why.
        #[source]
        source: std::num::ParseIntError,
    },
}

/// Why an overrides file (`RATELIMIT_CONFIG`) was refused: the file, and where in it and what is
/// wrong. Displays as `overrides.toml:3:9: unknown type "ipp": expected …`.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OverridesError {
    /// The file could not be read.
    #[error("{file}: cannot read the rate-limit configuration: {source}")]
    Read {
        /// The file, as given.
        file: String,
        /// Why.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The file does not say what this library can apply.
    #[error("{}{message}{}", place(.file, *.line, *.column), shown(.value, .message))]
    Invalid {
        /// The file, as given.
        file: String,
        /// The line (1-based; 0 when the problem is the file as a whole).
        line: usize,
        /// The column (1-based, in characters).
        column: usize,
        /// The offending value as written, when there is one.
        value: Option<String>,
        /// What is wrong.
        message: String,
    },
    /// [`reload`](crate::reload) was called but no file was configured.
    #[error("no rate-limit configuration file: set RATELIMIT_CONFIG or Config::overrides_file")]
    NoFile,
}

/// `file:line:column: `, or `file: ` when the problem is the file as a whole.
fn place(file: &str, line: usize, column: usize) -> String {
    if line == 0 {
        format!("{file}: ")
    } else {
        format!("{file}:{line}:{column}: ")
    }
}

/// ` (value: v)` when the message does not show the value already.
fn shown(value: &Option<String>, message: &str) -> String {
    match value {
        Some(v) if !message.contains(v.as_str()) => format!(" (value: {v})"),
        _ => String::new(),
    }
}

impl OverridesError {
    /// The file, as given (empty for [`NoFile`](Self::NoFile)).
    pub fn file(&self) -> &str {
        match self {
            OverridesError::Read { file, .. } | OverridesError::Invalid { file, .. } => file,
            OverridesError::NoFile => "",
        }
    }

    /// The line (1-based; 0 when the problem is not at a line).
    pub fn line(&self) -> usize {
        match self {
            OverridesError::Invalid { line, .. } => *line,
            _ => 0,
        }
    }

    /// The column (1-based, in characters; 0 when the problem is not at a line).
    pub fn column(&self) -> usize {
        match self {
            OverridesError::Invalid { column, .. } => *column,
            _ => 0,
        }
    }

    /// What is wrong, without the place.
    pub fn message(&self) -> &str {
        match self {
            OverridesError::Invalid { message, .. } => message,
            OverridesError::Read { .. } => "cannot read the rate-limit configuration",
            OverridesError::NoFile => "no rate-limit configuration file",
        }
    }

    /// The offending value as written, when there is one.
    pub fn value(&self) -> Option<&str> {
        match self {
            OverridesError::Invalid { value, .. } => value.as_deref(),
            _ => None,
        }
    }
}

/// A configuration ([`Config`](crate::Config), the environment, [`init`](crate::init)) could not
/// be applied.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// An environment variable holds a value this library cannot use.
    #[error("{var}={value:?}: {source}")]
    Var {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// Why it did not parse.
        #[source]
        source: ParseError,
    },
    /// A value given in code cannot apply (`Config::refusal_cache_size(0)`).
    #[error("{setting}({value}): {source}")]
    Setting {
        /// The method it was given to.
        setting: &'static str,
        /// The value.
        value: String,
        /// Why it cannot apply.
        #[source]
        source: ParseError,
    },
    /// A variable is set without the one it goes with.
    #[error("{set} is set without {missing}{}", hint_for(.set, .missing))]
    MissingVar {
        /// The variable that is set.
        set: &'static str,
        /// The one missing.
        missing: &'static str,
    },
    /// More than one store is named (`REDIS_URL`, `REDIS_CLUSTER_URLS`, `REDIS_SENTINEL_URLS`):
    /// no silent pick.
    #[error(
        "{} are set together: name one store (REDIS_URL for one Redis, REDIS_CLUSTER_URLS for a cluster, \
         REDIS_SENTINEL_URLS with REDIS_SENTINEL_MASTER for Sentinel)",
        .0.join(" and ")
    )]
    StoresConflict(Vec<&'static str>),
    /// A tier given with [`Config::tier`](crate::Config::tier) cannot apply.
    #[error("Config::tier({limiter:?}, {limit_type}, {tier:?}, …): {problem}")]
    Tier {
        /// The limiter named.
        limiter: String,
        /// Which of its limits (`ip`, `user`…).
        limit_type: &'static str,
        /// The tier named.
        tier: String,
        /// What is wrong.
        problem: TierProblem,
    },
    /// The overrides file was refused.
    #[error(transparent)]
    Overrides(#[from] OverridesError),
    /// The store could not be built (a malformed URL, a missing feature).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The store an environment variable names could not be built (a malformed URL).
    #[error("{var}: {source}")]
    StoreVar {
        /// The variable (`REDIS_URL`, `REDIS_CLUSTER_URLS`, `REDIS_SENTINEL_URLS`).
        var: &'static str,
        /// Why.
        #[source]
        source: StoreError,
    },
    /// [`init`](crate::init) was called a second time, or after the configuration was taken from
    /// the environment.
    #[error("ratelimit is already initialised")]
    AlreadyInitialised,
}

/// What the message of a missing variable adds, to say what to set.
fn hint_for(set: &str, missing: &str) -> &'static str {
    match set {
        "REDIS_PASSWORD" | "REDIS_USERNAME" => {
            return " (they are the Sentinel primary's; for one Redis or a cluster, give them in the URL: \
                    redis://user:password@host:6379/)"
        }
        "REDIS_CA_CERT" | "REDIS_CLIENT_CERT" | "REDIS_CLIENT_KEY" if missing == "REDIS_URL" => {
            return " (or REDIS_CLUSTER_URLS, or REDIS_SENTINEL_URLS: a Redis to reach over TLS; without one, \
                    counts live in memory)"
        }
        _ => {}
    }
    match missing {
        "REDIS_SENTINEL_MASTER" => " (the name the sentinels monitor the primary under, e.g. mymaster)",
        "REDIS_SENTINEL_URLS" => " (the sentinels, e.g. redis://10.0.0.1:26379,redis://10.0.0.2:26379)",
        _ => "",
    }
}

/// What is wrong with a tier given in code ([`ConfigError::Tier`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TierProblem {
    /// The limiter or the tier has an empty name.
    #[error("the limiter and the tier need names")]
    Unnamed,
    /// The tier has no rule.
    #[error("a tier needs at least one rule")]
    NoRules,
    /// Two of its rules have the same window.
    #[error("two rules with the same window")]
    DuplicateWindow,
    /// The same tier of the same limit is given twice.
    #[error("this tier is given twice")]
    Twice,
}
