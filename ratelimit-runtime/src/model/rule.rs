//! A rule: at most `count` units per sliding `window`.

use crate::error::RuleError;
use std::fmt;
use std::time::Duration;

/// The longest window accepted: one year. Longer windows are almost certainly a unit mistake,
/// and bounding them keeps every time computation (in microseconds) far from overflow.
pub const MAX_WINDOW: Duration = Duration::from_secs(366 * 24 * 3600);

/// The largest count accepted: 10^9. Every store decides exactly up to it; in Redis the scripts'
/// numbers are doubles, and a count this size keeps every product they form (a count times a
/// window, split as the scripts do) below 2^53. Larger counts are better written as the same
/// rate over a shorter window, or as larger units counted with `cost`.
pub const MAX_COUNT: u64 = 1_000_000_000;

/// At most `count` units in any sliding `window`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rule {
    window_ms: u64,
    count: u64,
}

impl Rule {
    /// `count` units per `window` (millisecond resolution; sub-millisecond parts are dropped).
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratelimit_runtime::Rule;
    /// let rule = Rule::new(Duration::from_secs(20), 10).unwrap();
    /// assert_eq!(rule.to_string(), "10 per 20s");
    /// assert!(Rule::new(Duration::ZERO, 10).is_err());
    /// ```
    pub fn new(window: Duration, count: u64) -> Result<Rule, RuleError> {
        if window > MAX_WINDOW {
            return Err(RuleError::WindowTooLong);
        }
        // Cannot truncate: MAX_WINDOW in ms fits in u64.
        Rule::from_millis(window.as_millis() as u64, count)
    }

    /// `count` units per `window_ms` milliseconds.
    pub const fn from_millis(window_ms: u64, count: u64) -> Result<Rule, RuleError> {
        if window_ms == 0 {
            return Err(RuleError::ZeroWindow);
        }
        if window_ms > MAX_WINDOW.as_millis() as u64 {
            return Err(RuleError::WindowTooLong);
        }
        if count == 0 {
            return Err(RuleError::ZeroCount);
        }
        if count > MAX_COUNT {
            return Err(RuleError::CountTooLarge);
        }
        Ok(Rule { window_ms, count })
    }

    /// The window.
    pub const fn window(&self) -> Duration {
        Duration::from_millis(self.window_ms)
    }

    /// The window in milliseconds.
    pub const fn window_ms(&self) -> u64 {
        self.window_ms
    }

    /// The window in microseconds, the unit every store computes in.
    pub(crate) const fn window_us(&self) -> u64 {
        self.window_ms * 1000
    }

    /// How many units the window admits.
    pub const fn count(&self) -> u64 {
        self.count
    }

    /// A short name for the rule, used in headers: `20s`, `500ms`, `1h`.
    pub(crate) fn window_label(&self) -> String {
        WindowLabel(self.window_ms).to_string()
    }

    /// [`window_label`](Self::window_label) written where it is needed, without a `String`
    /// of its own (header values are built per response).
    pub(crate) fn window_display(&self) -> impl fmt::Display {
        WindowLabel(self.window_ms)
    }
}

/// A window in ms as its label: `20000` → `20s`, `90000` → `90s`, `3600000` → `1h`, `1500` →
/// `1500ms`.
struct WindowLabel(u64);

impl fmt::Display for WindowLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(u64, &str); 4] = [(86_400_000, "d"), (3_600_000, "h"), (60_000, "m"), (1000, "s")];
        let ms = self.0;
        for (size, unit) in UNITS {
            if ms.is_multiple_of(size) {
                return write!(f, "{}{unit}", ms / size);
            }
        }
        write!(f, "{ms}ms")
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} per {}", self.count, WindowLabel(self.window_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates() {
        assert_eq!(Rule::from_millis(0, 1), Err(RuleError::ZeroWindow));
        assert_eq!(Rule::from_millis(1, 0), Err(RuleError::ZeroCount));
        assert_eq!(Rule::from_millis(1, MAX_COUNT + 1), Err(RuleError::CountTooLarge));
        assert_eq!(Rule::new(MAX_WINDOW + Duration::from_millis(1), 1), Err(RuleError::WindowTooLong));
        assert!(Rule::new(MAX_WINDOW, MAX_COUNT).is_ok());
    }

    #[test]
    fn labels() {
        let label = |ms| Rule::from_millis(ms, 1).unwrap().window_label();
        assert_eq!(label(20_000), "20s");
        assert_eq!(label(60_000), "1m");
        assert_eq!(label(1500), "1500ms");
        assert_eq!(label(86_400_000), "1d");
    }
}
