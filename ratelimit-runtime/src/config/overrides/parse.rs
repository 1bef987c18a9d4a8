//! Reading an overrides file: TOML through `serde`, every value checked, and every error
//! located (file, line, column, the value as written).

use super::{LimitOverride, Overrides};
use crate::error::{CidrError, OverridesError};
use crate::model::addr::Cidr;
use crate::model::limit_type::LimitType;
use crate::model::mode::Mode;
use crate::model::rule::Rule;
use serde::Deserialize;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use toml::Spanned;

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
                        if rules.iter().any(|r| r.window_order() == rule.window_order()) {
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
pub(crate) fn parse_duration(option: &str, text: &str) -> Result<Duration, String> {
    // A calendar month is no duration: a block or an interval needs a fixed length.
    let rule = parse_rule(&format!("1/{text}")).ok().filter(|rule| rule.months().is_none());
    rule.map(|rule| rule.window()).ok_or_else(|| {
        format!("{option} {text:?}: expected a duration from 1ms to 366d such as \"2m\" (units ms, s, m, h, d)")
    })
}

/// `"5/10s"`: a count, `/`, a window with its unit (ms, s, m, h, d; mo: calendar months).
pub(crate) fn parse_rule(text: &str) -> Result<Rule, String> {
    let expected =
        "expected count/window such as \"5/10s\" or \"100/1m\" (units ms, s, m, h, d; mo for calendar months)";
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
    if unit == "mo" {
        let months = u32::try_from(amount).unwrap_or(u32::MAX);
        return Rule::calendar_months(months, count).map_err(|e| format!("rule {text:?}: {e}"));
    }
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
            o.is_exempt_ip_subject(crate::model::subject::Subject::ip(ip.parse().unwrap()).key_bytes().unwrap())
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
