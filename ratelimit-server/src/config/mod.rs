//! The configuration in force: envoyproxy/ratelimit's YAML files, read from a file or a
//! directory, compiled into one tree per domain ([`Config`]); the descriptors of a request are
//! matched against it in `matcher`. A file that cannot be read is refused whole with its name,
//! line and reason ([`ConfigError`]).

mod load;
pub mod matcher;
pub mod yaml;

pub use load::{fingerprint, load, Fingerprint};

use crate::proto::Unit;
use ratelimit::{Algorithm, LimitType, Rule};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// A configuration file refused: which, where, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file.
    pub file: String,
    /// 1-based line, when the reader knows it.
    pub line: Option<usize>,
    /// 1-based column, with the line.
    pub column: Option<usize>,
    /// Why.
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.column) {
            (Some(l), Some(c)) => write!(f, "{}:{l}:{c}: {}", self.file, self.reason),
            (Some(l), None) => write!(f, "{}:{l}: {}", self.file, self.reason),
            _ => write!(f, "{}: {}", self.file, self.reason),
        }
    }
}

impl std::error::Error for ConfigError {}

/// What the reference service's variables change in reading the configuration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// `MERGE_DOMAIN_CONFIG`: files naming the same domain add up (a descriptor given twice is
    /// still refused), instead of the second being refused.
    pub merge_domains: bool,
    /// `SHADOW_MODE`: every limit in shadow mode (decided and counted, never refused).
    pub shadow: bool,
}

impl Options {
    /// From `MERGE_DOMAIN_CONFIG` and `SHADOW_MODE`, read as the reference reads booleans
    /// (`true`, `1`, `t`, … / `false`, `0`, `f`, …; unset or blank: false).
    pub fn from_env() -> Result<Options, String> {
        let flag = |name: &str| -> Result<bool, String> {
            match std::env::var(name).unwrap_or_default().trim() {
                "" | "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
                "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
                other => Err(format!("{name}={other:?}: expected true or false")),
            }
        };
        Ok(Options { merge_domains: flag("MERGE_DOMAIN_CONFIG")?, shadow: flag("SHADOW_MODE")? })
    }
}

/// The limit of one configured descriptor, ready to decide with.
#[derive(Debug)]
pub struct LimitSpec {
    /// Unique within one [`Config`]: the limiter cache's key.
    pub id: usize,
    /// `domain.key_value.key`: names the descriptor in metrics and logs.
    pub path: String,
    /// `None`: unlimited (never counted).
    pub rules: Option<Vec<Rule>>,
    /// What `current_limit` reports: count, unit, name.
    pub shown: (u32, Unit, String),
    /// `requests_per_unit: 0`: every request is over the limit (no store call).
    pub refuse_all: bool,
    pub algorithm: Algorithm,
    pub burst: Option<u64>,
    pub shadow: bool,
    pub name: String,
    pub replaces: Vec<String>,
    pub detailed_metric: bool,
    /// The limiter whose keys count this descriptor (default: `rls:<domain>`), and its type.
    pub limiter: String,
    pub limit_type: LimitType,
    /// `ratelimit_server_descriptors_total{descriptor = path}` with code `ok` and `over_limit`,
    /// registered once (a request then allocates no label).
    pub counters: [metrics::Counter; 2],
}

/// One level of a domain's tree.
#[derive(Debug, Default)]
pub struct Node {
    /// Children by `key_value` or `key`.
    pub children: HashMap<String, Node>,
    /// Children whose value holds `*`, in file order: (`key_value` pattern, its parts on `*`,
    /// whether they share one count).
    pub wildcards: Vec<(String, Vec<String>, bool)>,
    pub limit: Option<Arc<LimitSpec>>,
}

/// Every domain's tree.
#[derive(Debug, Default)]
pub struct Config {
    pub domains: HashMap<String, Node>,
    /// How many descriptors carry a limit (for the startup line).
    pub limits: usize,
}

impl LimitSpec {
    /// The library's limit counting this descriptor (`None`: unlimited).
    pub fn limit(&self) -> Option<ratelimit::Limit> {
        let rules = self.rules.as_ref()?;
        let mut limit = ratelimit::Limit::new(self.limit_type, rules.iter().copied()).algorithm(self.algorithm);
        if let Some(burst) = self.burst {
            limit = limit.burst(burst);
        }
        if self.shadow {
            limit = limit.mode(ratelimit::Mode::Shadow);
        }
        Some(limit)
    }
}
