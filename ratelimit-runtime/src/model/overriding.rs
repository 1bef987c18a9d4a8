//! Runtime overrides as values: the rules one subject of one limiter is given while the
//! processes run, how they are written in the store (the override's key holds its rules; the
//! limiter's index holds each subject's rules and end), and what a listing returns.

use crate::error::BuildError;
use crate::model::limit_type::LimitType;
use crate::model::rule::{Rule, MAX_WINDOW};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The most rules one override holds (as many as a limit reasonably stacks; it bounds what a
/// decision sends).
pub(crate) const MAX_OVERRIDE_RULES: usize = 8;

/// A runtime override in force, as [`Limiter::overrides`](crate::Limiter::overrides) lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Override {
    /// Which of the limiter's limits it overrides (the subject's type).
    pub limit_type: LimitType,
    /// The subject's bytes, as the limiter counts them.
    pub subject: Vec<u8>,
    /// The rules in force for this subject, longest window first.
    pub rules: Vec<Rule>,
    /// When it ends (`None`: when cleared), on the store's clock.
    pub expires: Option<SystemTime>,
}

/// Validates an override's rules: at least one, at most [`MAX_OVERRIDE_RULES`], no window
/// twice; sorted longest window first, as a limit's.
pub(crate) fn checked_rules(mut rules: Vec<Rule>) -> Result<Vec<Rule>, BuildError> {
    if rules.is_empty() {
        return Err(BuildError::NoRules);
    }
    if rules.len() > MAX_OVERRIDE_RULES {
        return Err(BuildError::TooManyOverrideRules(MAX_OVERRIDE_RULES));
    }
    rules.sort_by(|a, b| b.window_ms().cmp(&a.window_ms()).then(a.count().cmp(&b.count())));
    if let Some(pair) = rules.windows(2).find(|p| p[0].window_ms() == p[1].window_ms()) {
        return Err(BuildError::DuplicateWindow(pair[0].window()));
    }
    Ok(rules)
}

/// Validates an override's TTL (whole milliseconds, 1ms to 366 days): in ms.
pub(crate) fn checked_ttl(ttl: Duration) -> Result<u64, BuildError> {
    let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    if ms == 0 || ttl > MAX_WINDOW {
        return Err(BuildError::InvalidOverrideTtl(ttl));
    }
    Ok(ms)
}

/// The override's value in its key: `<window ms>:<count>` per rule, comma separated, longest
/// window first. The same rules always give the same text: a process compares texts to know
/// whether it decides with the rules in force.
pub(crate) fn encode_rules(rules: &[Rule]) -> Vec<u8> {
    let text: Vec<String> = rules.iter().map(|r| format!("{}:{}", r.window_ms(), r.count())).collect();
    text.join(",").into_bytes()
}

/// The rules of an override's value; `None` if it is not one (written by something else).
pub(crate) fn decode_rules(value: &[u8]) -> Option<Vec<Rule>> {
    let text = std::str::from_utf8(value).ok()?;
    let rules = text
        .split(',')
        .map(|pair| {
            let (window, count) = pair.split_once(':')?;
            Rule::from_millis(window.parse().ok()?, count.parse().ok()?).ok()
        })
        .collect::<Option<Vec<Rule>>>()?;
    checked_rules(rules).ok()
}

/// The field of a subject's override in the limiter's index: `<type>|<subject bytes>`.
pub(crate) fn index_field(limit_type: LimitType, subject: &[u8]) -> Vec<u8> {
    [limit_type.as_str().as_bytes(), b"|", subject].concat()
}

/// The value of an index field: `<end, ms since the epoch, 0 for none>|<rules>`.
pub(crate) fn index_value(expires_ms: u64, rules: &[u8]) -> Vec<u8> {
    [expires_ms.to_string().as_bytes(), b"|", rules].concat()
}

/// An index entry read back, unless it ended by `now_ms` (or is not one).
pub(crate) fn read_index(field: &[u8], value: &[u8], now_ms: u64) -> Option<Override> {
    let bar = field.iter().position(|&b| b == b'|')?;
    let limit_type = [LimitType::Global, LimitType::Ip, LimitType::User, LimitType::Key]
        .into_iter()
        .find(|t| t.as_str().as_bytes() == &field[..bar])?;
    let split = value.iter().position(|&b| b == b'|')?;
    let expires_ms: u64 = std::str::from_utf8(&value[..split]).ok()?.parse().ok()?;
    if expires_ms != 0 && expires_ms <= now_ms {
        return None;
    }
    Some(Override {
        limit_type,
        subject: field[bar + 1..].to_vec(),
        rules: decode_rules(&value[split + 1..])?,
        expires: (expires_ms != 0).then(|| UNIX_EPOCH + Duration::from_millis(expires_ms)),
    })
}

/// Whether an index entry ended by `now_ms` (or is unreadable): listing removes those.
pub(crate) fn index_entry_ended(value: &[u8], now_ms: u64) -> bool {
    let expires = value.iter().position(|&b| b == b'|').and_then(|split| std::str::from_utf8(&value[..split]).ok());
    match expires.and_then(|e| e.parse::<u64>().ok()) {
        Some(ms) => ms != 0 && ms <= now_ms,
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(ms: u64, count: u64) -> Rule {
        Rule::from_millis(ms, count).unwrap()
    }

    #[test]
    fn rules_round_trip_in_one_canonical_text() {
        let rules = checked_rules(vec![rule(10_000, 2), rule(60_000, 5)]).unwrap();
        let text = encode_rules(&rules);
        assert_eq!(text, b"60000:5,10000:2");
        assert_eq!(decode_rules(&text).unwrap(), rules);
        for bad in [&b""[..], b"x", b"10:0", b"0:5", b"10:1,10:2", b"10:1;20:2", b"\xff"] {
            assert_eq!(decode_rules(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn invalid_overrides_are_refused() {
        assert_eq!(checked_rules(vec![]), Err(BuildError::NoRules));
        assert!(matches!(checked_rules(vec![rule(1000, 1), rule(1000, 2)]), Err(BuildError::DuplicateWindow(_))));
        let many = (1..=9).map(|i| rule(i * 1000, 1)).collect();
        assert_eq!(checked_rules(many), Err(BuildError::TooManyOverrideRules(8)));
        assert!(checked_ttl(Duration::ZERO).is_err());
        assert!(checked_ttl(Duration::from_micros(999)).is_err());
        assert!(checked_ttl(MAX_WINDOW + Duration::from_secs(1)).is_err());
        assert_eq!(checked_ttl(Duration::from_secs(30)), Ok(30_000));
    }

    #[test]
    fn index_entries_end_on_time() {
        let field = index_field(LimitType::User, b"a|b");
        let value = index_value(5_000, b"10000:2");
        let entry = read_index(&field, &value, 4_999).unwrap();
        assert_eq!((entry.limit_type, &entry.subject[..]), (LimitType::User, &b"a|b"[..]));
        assert_eq!(entry.expires, Some(UNIX_EPOCH + Duration::from_millis(5_000)));
        assert!(read_index(&field, &value, 5_000).is_none());
        assert!(index_entry_ended(&value, 5_000) && !index_entry_ended(&value, 4_999));
        let forever = index_value(0, b"10000:2");
        assert!(read_index(&field, &forever, u64::MAX).is_some_and(|o| o.expires.is_none()));
        assert!(index_entry_ended(b"garbage", 0));
    }
}
