//! A rule: at most `count` units per `window`, a span of time or a number of calendar months.

use crate::algorithm::calendar::DAY_US;
use crate::algorithm::Rate;
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

/// The numbers of months a calendar window may hold: the divisors of 12, so that its windows
/// align to the year (a window of 5 months would start in a different month every year).
pub const CALENDAR_MONTHS: [u32; 6] = [1, 2, 3, 4, 6, 12];

/// The longest window of each of [`CALENDAR_MONTHS`], in days: July and August (62), the third
/// and fourth quarters (92), May to August (123), July to December (184), a leap year (366).
const LONGEST_DAYS: [u64; 6] = [31, 62, 92, 123, 184, 366];

/// At most `count` units in any `window`, or, for a rule in calendar months, in each window of
/// that many months (UTC; see [`Rule::calendar_months`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rule {
    /// The window; for calendar months, the longest such a window can be.
    window_ms: u64,
    count: u64,
    /// Calendar months per window (0: the window is `window_ms`).
    months: u32,
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
        Ok(Rule { window_ms, count, months: 0 })
    }

    /// `count` units per window of `months` calendar months, in UTC: windows start at the first
    /// instant of a month (`00:00:00` on the 1st), so a monthly quota resets on the 1st whatever
    /// the month's length. `months` is one of [`CALENDAR_MONTHS`] (1, 2, 3, 4, 6 or 12), so that
    /// the windows align to the year: `3` counts per quarter, `12` per calendar year. Such a
    /// rule counts in fixed windows: its limit's algorithm is [`FixedWindow`](crate::Algorithm::FixedWindow).
    ///
    /// ```
    /// use ratelimit_runtime::Rule;
    /// let monthly = Rule::calendar_months(1, 10_000).unwrap();
    /// assert_eq!(monthly.to_string(), "10000 per 1mo");
    /// assert_eq!(monthly.months(), Some(1));
    /// assert!(Rule::calendar_months(5, 10).is_err());
    /// ```
    pub const fn calendar_months(months: u32, count: u64) -> Result<Rule, RuleError> {
        let mut i = 0;
        while i < CALENDAR_MONTHS.len() {
            if CALENDAR_MONTHS[i] == months {
                return match Rule::from_millis(LONGEST_DAYS[i] * (DAY_US / 1000), count) {
                    Ok(rule) => Ok(Rule { months, ..rule }),
                    Err(e) => Err(e),
                };
            }
            i += 1;
        }
        Err(RuleError::Months)
    }

    /// The months per window of a rule in calendar months ([`Rule::calendar_months`]); `None`
    /// for a rule whose window is a span of time.
    pub const fn months(&self) -> Option<u32> {
        if self.months > 0 {
            Some(self.months)
        } else {
            None
        }
    }

    /// How rules are ordered and told apart by window: longest first in a limit, one rule per
    /// window. A calendar window ranks by the longest it can be, after a span of that length.
    pub(crate) const fn window_order(&self) -> (u64, u32) {
        (self.window_ms, self.months)
    }

    /// This rule as the algorithms' steps read it, holding at most `cap` units.
    pub(crate) const fn rate(&self, cap: u64) -> Rate {
        Rate { w: self.window_us(), count: self.count, cap, months: self.months as u64 }
    }

    /// The window; for a rule in calendar months, the longest such a window can be (31 days for
    /// one month).
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

    /// A short name for the rule, used in headers: `20s`, `500ms`, `1h`, `1mo`.
    pub(crate) fn window_label(&self) -> String {
        self.window_display().to_string()
    }

    /// [`window_label`](Self::window_label) written where it is needed, without a `String`
    /// of its own (header values are built per response).
    pub(crate) fn window_display(&self) -> impl fmt::Display {
        WindowLabel(self.window_ms, self.months)
    }
}

/// A window in ms (or in calendar months, when not 0) as its label: `20000` → `20s`, `90000` →
/// `90s`, `3600000` → `1h`, `1500` → `1500ms`; 1 month → `1mo`.
struct WindowLabel(u64, u32);

impl fmt::Display for WindowLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(u64, &str); 4] = [(86_400_000, "d"), (3_600_000, "h"), (60_000, "m"), (1000, "s")];
        if self.1 > 0 {
            return write!(f, "{}mo", self.1);
        }
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
        write!(f, "{} per {}", self.count, self.window_display())
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
        assert_eq!(Rule::calendar_months(3, 1).unwrap().window_label(), "3mo");
    }

    #[test]
    fn calendar_windows_are_bounded_by_their_longest_span() {
        use crate::algorithm::calendar::month_window;
        assert_eq!(Rule::calendar_months(0, 1), Err(RuleError::Months));
        assert_eq!(Rule::calendar_months(1, 0), Err(RuleError::ZeroCount));
        assert_eq!(Rule::calendar_months(12, MAX_COUNT + 1), Err(RuleError::CountTooLarge));
        // Over 400 years (a whole cycle of leap years), every window's length is at most the
        // rule's window, and some window is that long.
        for months in CALENDAR_MONTHS {
            let rule = Rule::calendar_months(months, 1).unwrap();
            let (mut t, mut longest) = (0, 0);
            while t < 400 * 366 * DAY_US {
                let (_, start, end) = month_window(u64::from(months), t);
                longest = longest.max(end - start);
                t = end;
            }
            assert_eq!(longest, rule.window_us(), "{months} months");
            assert!(rule.window() <= MAX_WINDOW);
        }
    }
}
