//! Limits from configuration: the overrides file (`RATELIMIT_CONFIG`), read by `parse`, and
//! the table in force (`in_force`), swapped atomically on [`reload`](crate::reload).
//!
//! ```toml
//! [[limit]]
//! limiter = "server::hello"
//! type = "ip"
//! rules = ["5/10s", "50/1m"]
//! mode = "enforce"
//! block = "2m"
//!
//! [[limit]]                # a hot global limit: synced from per-process reserves
//! limiter = "server::search"
//! type = "global"
//! sync = "50ms"
//!
//! [[limit]]                # the rules of the "pro" tier of the same limit
//! limiter = "server::hello"
//! type = "ip"
//! tier = "pro"
//! rules = ["50/10s"]
//!
//! [exempt]
//! ips = ["10.0.0.0/8"]
//! users = ["ops-bot"]
//! ```
//!
//! Limiters read the generation in force (one atomic load) on every call and rebuild their
//! compiled limits when it changes; a decision keeps the table it started with to the end.

pub(crate) mod in_force;
mod parse;

use crate::model::addr::Cidr;
use crate::model::limit_type::LimitType;
use crate::model::mode::Mode;
use crate::model::rule::Rule;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// A rule written as the overrides file writes one, `"5/10s"`: a count, `/`, a window with its
/// unit (ms, s, m, h, d). The error says what is wrong, for a person (an admin API's 400).
///
/// ```
/// use ratelimit_runtime::{config::parse_rule, Rule};
/// assert_eq!(parse_rule("5/10s"), Ok(Rule::from_millis(10_000, 5).unwrap()));
/// assert!(parse_rule("5/10x").unwrap_err().contains("unknown unit"));
/// ```
pub fn parse_rule(text: &str) -> Result<Rule, String> {
    parse::parse_rule(text)
}

/// A duration written as a rule's window, `"30s"` (1ms to 366d; units ms, s, m, h, d); the
/// error names it `what`.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(ratelimit_runtime::config::parse_duration("ttl", "2m"), Ok(Duration::from_secs(120)));
/// assert!(ratelimit_runtime::config::parse_duration("ttl", "0s").is_err());
/// ```
pub fn parse_duration(what: &str, text: &str) -> Result<Duration, String> {
    parse::parse_duration(what, text)
}

/// One `[[limit]]` of the file: new rules and/or a mode for one limit of one limiter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitOverride {
    /// The limiter's name (`name = "…"` of the attribute, or `module::path::function`).
    pub limiter: String,
    /// Which of its limits (stacked attributes) this replaces.
    pub limit_type: LimitType,
    /// The rules in force instead of the attribute's (`None`: keep the attribute's).
    pub rules: Option<Vec<Rule>>,
    /// The mode instead of the attribute's (`None`: keep the attribute's).
    pub mode: Option<Mode>,
    /// The tier these rules are for (`None`: every call without a tier of its own). A tier's
    /// entry has no mode and no block: the limit's apply.
    pub tier: Option<String>,
    /// The penalty after a refusal as exceeded instead of the attribute's (`None`: keep the
    /// attribute's).
    pub block: Option<Duration>,
    /// The sync interval instead of the attribute's (`None`: keep the attribute's).
    pub sync: Option<Duration>,
}

/// A parsed overrides file.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub(crate) limits: Vec<LimitOverride>,
    pub(crate) exempt_ips: Vec<Cidr>,
    pub(crate) exempt_users: HashSet<Vec<u8>>,
}

impl Overrides {
    /// No overrides at all.
    pub fn new() -> Overrides {
        Overrides::default()
    }

    /// The `[[limit]]` entries, in file order.
    pub fn limits(&self) -> &[LimitOverride] {
        &self.limits
    }

    /// The networks of `[exempt] ips`.
    pub fn exempt_ips(&self) -> &[Cidr] {
        &self.exempt_ips
    }

    /// Whether `[exempt]` names any IP or user.
    pub fn has_exemptions(&self) -> bool {
        !self.exempt_ips.is_empty() || !self.exempt_users.is_empty()
    }

    /// Whether `ip` is in an exempt network.
    pub fn is_exempt_ip(&self, ip: std::net::IpAddr) -> bool {
        self.exempt_ips.iter().any(|c| c.contains(ip))
    }

    /// Whether the clients an IP subject's key stands for are exempt: an IPv4 client in an
    /// exempt network, or an IPv6 group (one client, keyed by its /64) that overlaps one: an
    /// exempt host exempts the group it is counted in, an exempt /48 every group inside it.
    pub(crate) fn is_exempt_ip_subject(&self, key: &[u8]) -> bool {
        let Some(group) = crate::model::subject::ip_group_of_key(key) else { return false };
        self.exempt_ips.iter().any(|net| net.contains(group.addr()) || group.contains(net.addr()))
    }

    /// Whether `user` is an exempt user.
    pub fn is_exempt_user(&self, user: &[u8]) -> bool {
        self.exempt_users.contains(user)
    }

    /// The overrides of `limiter`'s limit of type `limit_type` (for calls without a tier).
    pub(crate) fn find(&self, limiter: &str, limit_type: LimitType) -> Option<&LimitOverride> {
        self.limits.iter().find(|o| o.limiter == limiter && o.limit_type == limit_type && o.tier.is_none())
    }
}

/// The table in force, with its generation.
pub(crate) struct Table {
    pub(crate) generation: u64,
    pub(crate) overrides: Overrides,
    /// The tiers given in code ([`Config::tier`](crate::Config::tier)); the file's entries
    /// for the same tier win.
    pub(crate) code_tiers: Arc<[LimitOverride]>,
}

impl Table {
    /// The entry that gives tier `tier` of `limiter`'s `limit_type` limit its rules: the
    /// file's, else the code's.
    pub(crate) fn tier(&self, limiter: &str, limit_type: LimitType, tier: &str) -> Option<&LimitOverride> {
        let is =
            |o: &&LimitOverride| o.limiter == limiter && o.limit_type == limit_type && o.tier.as_deref() == Some(tier);
        self.overrides.limits.iter().find(is).or_else(|| self.code_tiers.iter().find(is))
    }

    /// The tiers the file and the code name for `limiter` (with repeats).
    pub(crate) fn tier_names<'t>(&'t self, limiter: &'t str) -> impl Iterator<Item = &'t str> + 't {
        self.overrides
            .limits
            .iter()
            .chain(self.code_tiers.iter())
            .filter(move |o| o.limiter == limiter)
            .filter_map(|o| o.tier.as_deref())
    }
}
