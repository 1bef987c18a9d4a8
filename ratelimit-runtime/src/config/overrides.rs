//! Limits from configuration: the overrides file (`RATELIMIT_CONFIG`), parsed with
//! `toml` + `serde`, and the table in force, swapped atomically on [`reload`].
//!
//! ```toml
//! [[limit]]
//! limiter = "server::hello"
//! type = "ip"
//! rules = ["5/10s", "50/1m"]
//! mode = "enforce"
//! block = "2m"
//!
//! [[limit]]                # a hot global limit: decided from per-process reserves
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
//! Limiters read [`generation`] (one atomic load) on every call and rebuild their compiled limits
//! when it changes; a decision keeps the table it started with to the end.

use crate::error::{CidrError, OverridesError};
use crate::model::addr::Cidr;
use crate::model::limit_type::LimitType;
use crate::model::mode::Mode;
use crate::model::rule::Rule;
use crate::rt::lock::lock;
use arc_swap::ArcSwapOption;
use serde::Deserialize;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Once, PoisonError};
use std::time::{Duration, Instant};
use toml::Spanned;

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
    /// Hot-key mode's interval instead of the attribute's (`None`: keep the attribute's).
    pub sync: Option<Duration>,
}

/// A parsed overrides file.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    limits: Vec<LimitOverride>,
    exempt_ips: Vec<Cidr>,
    exempt_users: HashSet<Vec<u8>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDe {
    #[serde(default)]
    limit: Vec<LimitDe>,
    #[serde(default)]
    exempt: Option<ExemptDe>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitDe {
    limiter: Spanned<String>,
    #[serde(rename = "type")]
    limit_type: Spanned<String>,
    #[serde(default)]
    rules: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    mode: Option<Spanned<String>>,
    #[serde(default)]
    tier: Option<Spanned<String>>,
    #[serde(default)]
    block: Option<Spanned<String>>,
    #[serde(default)]
    sync: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExemptDe {
    #[serde(default)]
    ips: Vec<Spanned<String>>,
    #[serde(default)]
    users: Vec<Spanned<String>>,
}

/// Builds errors located in one file's text.
struct Locator<'a> {
    file: &'a str,
    text: &'a str,
}

impl Locator<'_> {
    fn at(&self, span: std::ops::Range<usize>, message: impl Into<String>) -> OverridesError {
        let start = span.start.min(self.text.len());
        let before = self.text.get(..start).unwrap_or("");
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        let value = self.text.get(start..span.end.min(self.text.len())).map(str::trim).filter(|v| !v.is_empty());
        let value = value.map(|v| {
            let first = v.lines().next().unwrap_or(v);
            if first.chars().count() > 60 {
                format!("{}…", first.chars().take(60).collect::<String>())
            } else {
                first.to_owned()
            }
        });
        OverridesError::Invalid { file: self.file.to_owned(), line, column, value, message: message.into() }
    }

    fn spanned(&self, s: &Spanned<String>, message: impl Into<String>) -> OverridesError {
        self.at(s.span(), message)
    }
}

impl Overrides {
    /// No overrides at all.
    pub fn new() -> Overrides {
        Overrides::default()
    }

    /// Parses the text of an overrides file; `file` names it in errors.
    ///
    /// ```
    /// use ratelimit_runtime::config::Overrides;
    /// let o = Overrides::parse("[[limit]]\nlimiter = \"app::f\"\ntype = \"ip\"\nrules = [\"5/10s\"]\n", "o.toml").unwrap();
    /// assert_eq!(o.limits()[0].rules.as_ref().unwrap()[0].to_string(), "5 per 10s");
    /// let e = Overrides::parse("[[limit]]\nlimiter = \"app::f\"\ntype = \"ipp\"\n", "o.toml").unwrap_err();
    /// assert_eq!(e.to_string(), "o.toml:3:8: unknown type \"ipp\": expected \"global\", \"ip\", \"user\" or \"key\"");
    /// ```
    pub fn parse(text: &str, file: &str) -> Result<Overrides, OverridesError> {
        let loc = Locator { file, text };
        let de: FileDe = toml::from_str(text).map_err(|e| match e.span() {
            Some(span) => loc.at(span, e.message().trim().to_owned()),
            None => OverridesError::Invalid {
                file: file.to_owned(),
                line: 0,
                column: 0,
                value: None,
                message: e.message().trim().to_owned(),
            },
        })?;
        let mut out = Overrides::default();
        let mut seen: Vec<(String, LimitType, Option<String>)> = Vec::new();
        for entry in de.limit {
            let limiter = entry.limiter.get_ref().trim();
            if limiter.is_empty() {
                return Err(loc.spanned(
                    &entry.limiter,
                    "`limiter` may not be empty: write the limiter's name, e.g. \"server::hello\"",
                ));
            }
            let limit_type = parse_type(&entry.limit_type).map_err(|m| loc.spanned(&entry.limit_type, m))?;
            let tier = match &entry.tier {
                None => None,
                Some(t) if t.get_ref().trim().is_empty() => {
                    return Err(loc.spanned(t, "`tier` may not be empty: name the tier, e.g. \"pro\""))
                }
                Some(t) => Some(t.get_ref().trim().to_owned()),
            };
            if seen.iter().any(|(l, t, n)| l == limiter && *t == limit_type && *n == tier) {
                let what = match &tier {
                    Some(name) => format!("the {name:?} tier of the {limit_type} limit"),
                    None => format!("the {limit_type} limit"),
                };
                return Err(loc.spanned(
                    entry.tier.as_ref().unwrap_or(&entry.limit_type),
                    format!("a second [[limit]] for {what} of {limiter:?}: keep one"),
                ));
            }
            seen.push((limiter.to_owned(), limit_type, tier.clone()));
            if let (Some(_), Some(mode)) = (&tier, &entry.mode) {
                return Err(loc.spanned(
                    mode,
                    "a tier's [[limit]] gives rules only: set `mode` on the [[limit]] without `tier` (it applies to every tier)",
                ));
            }
            for (option, given) in [("block", &entry.block), ("sync", &entry.sync)] {
                if let (Some(_), Some(given)) = (&tier, given) {
                    return Err(loc.spanned(
                        given,
                        format!(
                            "a tier's [[limit]] gives rules only: set `{option}` on the [[limit]] without `tier` (it applies to every tier)"
                        ),
                    ));
                }
            }
            let rules = match &entry.rules {
                None => None,
                Some(list) => {
                    if list.get_ref().is_empty() {
                        return Err(loc.at(
                            list.span(),
                            "`rules` may not be empty: remove it to keep the attribute's rules, or set mode = \"off\"",
                        ));
                    }
                    let mut rules: Vec<Rule> = Vec::new();
                    for text in list.get_ref() {
                        let rule = parse_rule(text.get_ref()).map_err(|m| loc.spanned(text, m))?;
                        if rules.iter().any(|r| r.window_ms() == rule.window_ms()) {
                            return Err(loc.spanned(
                                text,
                                format!("two rules with the window {}: keep one", rule.window_label()),
                            ));
                        }
                        rules.push(rule);
                    }
                    Some(rules)
                }
            };
            let mode = match &entry.mode {
                None => None,
                Some(m) => Some(m.get_ref().parse::<Mode>().map_err(|e| loc.spanned(m, e.to_string()))?),
            };
            let block = match &entry.block {
                None => None,
                Some(b) => Some(parse_duration("block", b.get_ref()).map_err(|msg| loc.spanned(b, msg))?),
            };
            let sync = match &entry.sync {
                None => None,
                Some(s) => Some(parse_duration("sync", s.get_ref()).map_err(|msg| loc.spanned(s, msg))?),
            };
            out.limits.push(LimitOverride { limiter: limiter.to_owned(), limit_type, rules, mode, tier, block, sync });
        }
        if let Some(exempt) = de.exempt {
            for ip in &exempt.ips {
                let cidr: Cidr = ip.get_ref().parse().map_err(|e: CidrError| loc.spanned(ip, e.to_string()))?;
                out.exempt_ips.push(cidr);
            }
            for user in &exempt.users {
                if user.get_ref().is_empty() {
                    return Err(loc.spanned(user, "an exempt user may not be empty"));
                }
                out.exempt_users.insert(user.get_ref().as_bytes().to_vec());
            }
        }
        Ok(out)
    }

    /// Reads and parses the file at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<Overrides, OverridesError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| OverridesError::Read { file: name.clone(), source: Arc::new(e) })?;
        Overrides::parse(&text, &name)
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

fn parse_type(s: &Spanned<String>) -> Result<LimitType, String> {
    match s.get_ref().as_str() {
        "global" | "default" => Ok(LimitType::Global),
        "ip" => Ok(LimitType::Ip),
        "user" => Ok(LimitType::User),
        "key" => Ok(LimitType::Key),
        other => Err(format!("unknown type {other:?}: expected \"global\", \"ip\", \"user\" or \"key\"")),
    }
}

/// `"2m"`: the length of `option` (a block, a sync interval), written as a rule's window.
fn parse_duration(option: &str, text: &str) -> Result<Duration, String> {
    parse_rule(&format!("1/{text}")).map(|rule| rule.window()).map_err(|_| {
        format!("{option} {text:?}: expected a duration from 1ms to 366d such as \"2m\" (units ms, s, m, h, d)")
    })
}

/// `"5/10s"`: a count, `/`, a window with its unit (ms, s, m, h, d).
fn parse_rule(text: &str) -> Result<Rule, String> {
    let expected = "expected count/window such as \"5/10s\" or \"100/1m\" (units ms, s, m, h, d)";
    let Some((count, window)) = text.split_once('/') else {
        return Err(format!("rule {text:?}: {expected}"));
    };
    let (count, window) = (count.trim(), window.trim());
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b == b'_') && !s.starts_with('_');
    if !digits(count) {
        return Err(format!("rule {text:?}: the count {count:?} is not a whole number; {expected}"));
    }
    let count: u64 = count.replace('_', "").parse().map_err(|_| format!("rule {text:?}: the count is too large"))?;
    let split = window.find(|c: char| !(c.is_ascii_digit() || c == '_')).unwrap_or(window.len());
    let (amount, unit) = window.split_at(split);
    if !digits(amount) {
        return Err(format!("rule {text:?}: the window {window:?} needs a number before its unit; {expected}"));
    }
    let amount: u64 = amount.replace('_', "").parse().map_err(|_| format!("rule {text:?}: the window is too long"))?;
    let unit_ms: u64 = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "" => return Err(format!("rule {text:?}: the window {window:?} has no unit; {expected}")),
        other => return Err(format!("rule {text:?}: unknown unit {other:?}; {expected}")),
    };
    let ms = amount.checked_mul(unit_ms).ok_or_else(|| format!("rule {text:?}: the window is too long"))?;
    Rule::from_millis(ms, count).map_err(|e| format!("rule {text:?}: {e}"))
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

/// No table was ever considered: the global configuration was not built yet.
pub(crate) const UNSET: u64 = u64::MAX;

static GENERATION: AtomicU64 = AtomicU64::new(UNSET);
static NEXT: AtomicU64 = AtomicU64::new(1);
static TABLE: ArcSwapOption<Table> = ArcSwapOption::const_empty();
static PATH: Mutex<Option<PathBuf>> = Mutex::new(None);
/// The tiers given in code, kept in every table installed after them.
static CODE_TIERS: Mutex<Option<Arc<[LimitOverride]>>> = Mutex::new(None);
/// Limiters that decided under some table (for the unknown-name warning), at most [`MAX_SEEN`].
static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);
/// Names of the file in force already warned about, so each is warned once.
static WARNED: Mutex<Option<HashSet<String>>> = Mutex::new(None);
/// When to warn about the unknown names of which generation: the next check, if any.
static PENDING_CHECK: Mutex<Option<(Instant, u64)>> = Mutex::new(None);
static CHECK_DUE: Condvar = Condvar::new();
static CHECKER: Once = Once::new();

/// The most limiter names remembered as having decided: far more than a program has
/// functions; the bound is for programs that build limiters under names made at run time (a
/// name past it may be warned about as unknown, never more).
const MAX_SEEN: usize = 10_000;

/// How long limiters have to make themselves known (attribute limiters are built on their first
/// call) before names the file gives and no limiter used are warned about.
const UNKNOWN_GRACE: Duration = Duration::from_secs(60);

/// The generation of the table in force: 0 for none, [`UNSET`] before the configuration.
#[inline]
pub(crate) fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

/// The table in force.
pub(crate) fn table() -> Option<Arc<Table>> {
    TABLE.load_full()
}

/// Records that limiter `name` decides under the current table.
pub(crate) fn seen(name: &str) {
    let mut seen = lock(&SEEN);
    let seen = seen.get_or_insert_with(HashSet::new);
    if seen.len() < MAX_SEEN && !seen.contains(name) {
        seen.insert(name.to_owned());
    }
}

/// Called once by the global configuration: the file (already parsed), where it lives, and
/// the tiers given in code.
pub(crate) fn configure(path: Option<PathBuf>, overrides: Option<Overrides>, code_tiers: Vec<LimitOverride>) {
    *lock(&PATH) = path;
    let has_code_tiers = !code_tiers.is_empty();
    *lock(&CODE_TIERS) = Some(code_tiers.into());
    match overrides {
        Some(o) => {
            install(o);
        }
        // Tiers in code need a table, as a file's would.
        None if has_code_tiers => {
            install(Overrides::new());
        }
        None => GENERATION.store(0, Ordering::Release),
    }
}

fn install(overrides: Overrides) -> u64 {
    let generation = NEXT.fetch_add(1, Ordering::Relaxed);
    let code_tiers = lock(&CODE_TIERS).clone().unwrap_or_else(|| Arc::from(Vec::new()));
    TABLE.store(Some(Arc::new(Table { generation, overrides, code_tiers })));
    GENERATION.store(generation, Ordering::Release);
    schedule_unknown_check(generation);
    generation
}

/// See [`crate::reload`].
pub(crate) fn reload_file() -> Result<u64, OverridesError> {
    let path = lock(&PATH).clone();
    let Some(path) = path else {
        let e = OverridesError::NoFile;
        tracing::error!(error = %e, "ratelimit: cannot reload the configuration");
        return Err(e);
    };
    match Overrides::load(&path) {
        Ok(o) => {
            let generation = install(o);
            tracing::info!(file = %path.display(), generation, "ratelimit: configuration reloaded");
            warn_unknown(generation);
            Ok(generation)
        }
        Err(e) => {
            tracing::error!(error = %e, "ratelimit: configuration not reloaded; the rules in force stay");
            Err(e)
        }
    }
}

/// The limiter names the file in force gives that no limiter has used since the process
/// started (a typo, or a limiter not called yet: attribute limiters are built on first call).
/// They are also logged, once each, 60 s after the file is loaded and at every reload.
pub fn unknown_limiters() -> Vec<String> {
    let Some(table) = table() else { return Vec::new() };
    let seen = lock(&SEEN);
    let mut names: Vec<String> = table
        .overrides
        .limits
        .iter()
        .map(|o| o.limiter.clone())
        .filter(|n| !seen.as_ref().is_some_and(|s| s.contains(n)))
        .collect();
    names.sort();
    names.dedup();
    names
}

fn warn_unknown(generation: u64) {
    let Some(table) = table().filter(|t| t.generation == generation) else { return };
    let unknown = unknown_limiters();
    let mut warned = lock(&WARNED);
    let warned = warned.get_or_insert_with(HashSet::new);
    // Only names of the file in force are remembered, so reloads cannot grow the set.
    warned.retain(|name| table.overrides.limits.iter().any(|o| &o.limiter == name));
    for name in unknown {
        if warned.insert(name.clone()) {
            tracing::warn!(limiter = %name, "ratelimit: the configuration names a limiter that no function has used (a typo?)");
        }
    }
}

/// Warns about `generation`'s unknown names after [`UNKNOWN_GRACE`], unless another table
/// is installed first (its own check replaces this one). One thread serves every reload.
fn schedule_unknown_check(generation: u64) {
    *lock(&PENDING_CHECK) = Some((Instant::now() + UNKNOWN_GRACE, generation));
    CHECK_DUE.notify_one();
    CHECKER.call_once(|| {
        let _ = std::thread::Builder::new().name("ratelimit-config".to_owned()).spawn(check_unknown_names);
    });
}

/// The checking thread: sleeps until the pending check is due, runs it, waits for the next.
fn check_unknown_names() {
    let mut pending = lock(&PENDING_CHECK);
    loop {
        pending = match *pending {
            None => CHECK_DUE.wait(pending).unwrap_or_else(PoisonError::into_inner),
            Some((due, generation)) => match due.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => {
                    CHECK_DUE.wait_timeout(pending, left).map_or_else(|e| e.into_inner().0, |(guard, _)| guard)
                }
                _ => {
                    *pending = None;
                    drop(pending);
                    warn_unknown(generation);
                    lock(&PENDING_CHECK)
                }
            },
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> OverridesError {
        Overrides::parse(text, "o.toml").unwrap_err()
    }

    #[test]
    fn parses_the_documented_example() {
        let o = Overrides::parse(
            r#"
[[limit]]                      # replaces the rules of one limit of one limiter
limiter = "server::hello"
type = "ip"
rules = ["5/10s", "50/1m"]
mode = "enforce"

[[limit]]
limiter = "server::global"
type = "global"
mode = "shadow"

[exempt]
ips = ["10.0.0.0/8", "192.0.2.7/32"]
users = ["ops-bot"]
"#,
            "o.toml",
        )
        .unwrap();
        assert_eq!(o.limits().len(), 2);
        let hello = o.find("server::hello", LimitType::Ip).unwrap();
        let rules: Vec<String> = hello.rules.as_ref().unwrap().iter().map(Rule::to_string).collect();
        assert_eq!(rules, ["5 per 10s", "50 per 1m"]);
        assert_eq!(hello.mode, Some(Mode::Enforce));
        let global = o.find("server::global", LimitType::Global).unwrap();
        assert_eq!((global.rules.as_ref(), global.mode), (None, Some(Mode::Shadow)));
        assert!(o.is_exempt_ip("10.1.2.3".parse().unwrap()));
        assert!(o.is_exempt_ip("192.0.2.7".parse().unwrap()));
        assert!(!o.is_exempt_ip("192.0.2.8".parse().unwrap()));
        assert!(o.is_exempt_user(b"ops-bot"));
        assert!(!o.is_exempt_user(b"ops"));
        assert!(Overrides::parse("", "o.toml").unwrap().limits().is_empty());
    }

    #[test]
    fn blocks_are_durations() {
        let o = Overrides::parse("[[limit]]\nlimiter = \"a\"\ntype = \"ip\"\nblock = \"2m\"\n", "o.toml").unwrap();
        assert_eq!(o.limits()[0].block, Some(Duration::from_secs(120)));
        let e = err("[[limit]]\nlimiter = \"a\"\ntype = \"ip\"\nblock = \"2x\"\n");
        assert!(e.message().contains("block \"2x\": expected a duration"), "{e}");
        assert_eq!(e.line(), 4);
        let o = Overrides::parse("[[limit]]\nlimiter = \"a\"\ntype = \"global\"\nsync = \"50ms\"\n", "o.toml").unwrap();
        assert_eq!(o.limits()[0].sync, Some(Duration::from_millis(50)));
        let e = err("[[limit]]\nlimiter = \"a\"\ntype = \"global\"\nsync = \"soon\"\n");
        assert!(e.message().contains("sync \"soon\": expected a duration"), "{e}");
        let e = err("[[limit]]\nlimiter = \"a\"\ntype = \"global\"\ntier = \"pro\"\nsync = \"50ms\"\n");
        assert!(e.message().contains("set `sync` on the [[limit]] without `tier`"), "{e}");
        assert_eq!(e.line(), 5);
    }

    #[test]
    fn errors_name_file_line_and_value() {
        let e = err("[[limit]]\nlimiter = \"a\"\ntype = \"ip\"\nrules = [\"5/10x\"]\n");
        assert_eq!((e.file(), e.line(), e.column()), ("o.toml", 4, 10));
        assert_eq!(e.value(), Some("\"5/10x\""));
        assert!(e.to_string().starts_with("o.toml:4:10: rule \"5/10x\": unknown unit \"x\""), "{e}");

        let e = err("[[limit]]\nlimiter = \"a\"\ntype = \"ip\"\nmode = \"loud\"\n");
        assert_eq!(e.line(), 4);
        assert!(e.message().contains("unknown mode \"loud\""), "{e}");

        let e = err("[[limit]]\nlimiter = \"a\"\ntype = \"ip\"\nrules = [\"0/10s\"]\n");
        assert!(e.message().contains("the count must be at least 1"), "{e}");
        let e = err("[[limit]]\nlimiter = \"a\"\ntype = \"ip\"\nrules = [\"5/0s\"]\n");
        assert!(e.message().contains("at least 1ms"), "{e}");
        let e = err("[[limit]]\nlimiter = \"a\"\ntype = \"ip\"\nrules = [\"5/10\"]\n");
        assert!(e.message().contains("has no unit"), "{e}");
        let e = err("[[limit]]\nlimiter = \"a\"\ntype = \"ip\"\nrules = [\"five/10s\"]\n");
        assert!(e.message().contains("not a whole number"), "{e}");
        let e = err("[[limit]]\nlimiter = \"a\"\ntype = \"ip\"\nrules = [\"5/10s\", \"6/10000ms\"]\n");
        assert!(e.message().contains("two rules with the window 10s"), "{e}");
        let e = err("[[limit]]\nlimiter = \"a\"\ntype = \"ip\"\nrules = []\n");
        assert!(e.message().contains("may not be empty"), "{e}");
        let e = err("[[limit]]\nlimiter = \"a\"\ntype = \"ip\"\nrules = [\"5/400d\"]\n");
        assert!(e.message().contains("366 days"), "{e}");

        // Structure: missing fields, unknown keys, wrong types, TOML syntax.
        let e = err("[[limit]]\nlimiter = \"a\"\n");
        assert_eq!(e.line(), 1, "{e}");
        assert!(e.message().contains("type"), "{e}");
        let e = err("[[limit]]\nlimiter = \"a\"\ntype = \"ip\"\nrule = [\"5/10s\"]\n");
        assert_eq!(e.line(), 4, "{e}");
        assert!(e.message().contains("unknown field `rule`"), "{e}");
        let e = err("[[limit]]\nlimiter = \"a\"\ntype = \"ip\"\nrules = \"5/10s\"\n");
        assert_eq!(e.line(), 4, "{e}");
        let e = err("[[limit]]\nlimiter = \"a\"\ntype = ip\n");
        assert_eq!(e.line(), 3, "{e}");
        let e = err("[exempt]\nips = [\"10.0.0.1/8\"]\n");
        assert_eq!((e.line(), e.value()), (2, Some("\"10.0.0.1/8\"")));
        assert!(e.message().contains("did you mean 10.0.0.0/8?"), "{e}");
        let e = err("[exempt]\nips = [\"10.0.0.0/8\",\n  \"[2001:db8::1]:443\"]\n");
        assert_eq!((e.line(), e.value()), (3, Some("\"[2001:db8::1]:443\"")));
        assert!(e.message().contains("not an IP address"), "{e}");
        let e = err("[exempt]\nips = [\"::ffff:10.0.0.1/104\"]\n");
        assert!(e.message().contains("did you mean 10.0.0.0/8?"), "{e}");
        let o = Overrides::parse("[exempt]\nips = [\"::ffff:10.0.0.0/104\", \"[2001:db8::]/32\"]\n", "o.toml").unwrap();
        assert!(o.is_exempt_ip("10.1.2.3".parse().unwrap()));
        assert!(o.is_exempt_ip("::ffff:10.1.2.3".parse().unwrap()));
        assert!(o.is_exempt_ip("2001:db8::7".parse().unwrap()));
        assert!(!o.is_exempt_ip("11.0.0.1".parse().unwrap()));
        // Subjects as keyed: an IPv6 client is its /64 group.
        let o = Overrides::parse(
            "[exempt]\nips = [\"::ffff:10.0.0.0/104\", \"2001:db8:1:2::7\", \"2001:db8:5::/48\"]\n",
            "o.toml",
        )
        .unwrap();
        let exempt = |ip: &str| {
            o.is_exempt_ip_subject(crate::model::subject::Subject::ip(ip.parse().unwrap()).as_bytes().unwrap())
        };
        assert!(exempt("10.1.2.3") && exempt("::ffff:10.1.2.3"));
        assert!(exempt("2001:db8:1:2::7") && exempt("2001:db8:5:9::1"));
        assert!(!exempt("11.0.0.1") && !exempt("2001:db8:1:3::7") && !exempt("2001:db8:6::1"));
        assert!(!o.is_exempt_ip_subject(b"not an ip"));
        let e = err("[[limit]]\nlimiter = \"a\"\ntype = \"ip\"\n[[limit]]\nlimiter = \"a\"\ntype = \"ip\"\n");
        assert_eq!(e.line(), 6, "{e}");
        assert!(e.message().contains("a second [[limit]]"), "{e}");
    }

    #[test]
    fn a_missing_file_is_an_error_naming_it() {
        let e = Overrides::load("/nonexistent/ratelimit.toml").unwrap_err();
        assert!(e.to_string().starts_with("/nonexistent/ratelimit.toml: cannot read"), "{e}");
    }
}
