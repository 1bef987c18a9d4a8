//! The attribute's literals checked against the runtime's bounds at compile time.

use crate::model::rule;

/// Why a literal of the attribute is out of the runtime's bounds, as a compile-time message.
///
/// The attribute reads its literals, but the bounds they must respect are the runtime's
/// ([`Rule::from_millis`](crate::model::rule::Rule::from_millis), [`MAX_COUNT`](crate::model::rule::MAX_COUNT)): a
/// proc-macro crate cannot import them, so the expansion asks these `const fn`s in a `const`
/// item spanned at the literal, and a problem becomes a compile error there
/// (`if let Some(p) = window_problem(..) { panic!("{}", p.as_str()) }`).
pub struct Problem {
    text: [u8; 160],
    len: usize,
}

impl Problem {
    const fn new() -> Problem {
        Problem { text: [0; 160], len: 0 }
    }

    const fn push(mut self, s: &str) -> Problem {
        let bytes = s.as_bytes();
        let mut i = 0;
        while i < bytes.len() && self.len < self.text.len() {
            self.text[self.len] = bytes[i];
            self.len += 1;
            i += 1;
        }
        self
    }

    /// `n` in decimal with `_` between groups of three digits, as a Rust literal is written.
    const fn push_number(mut self, n: u64) -> Problem {
        let mut digits = [0u8; 20];
        let (mut count, mut rest) = (0, n);
        loop {
            digits[count] = b'0' + (rest % 10) as u8;
            count += 1;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        while count > 0 && self.len < self.text.len() {
            count -= 1;
            self.text[self.len] = digits[count];
            self.len += 1;
            if count > 0 && count % 3 == 0 && self.len < self.text.len() {
                self.text[self.len] = b'_';
                self.len += 1;
            }
        }
        self
    }

    /// The message.
    pub const fn as_str(&self) -> &str {
        // Only whole `&str`s and ASCII digits are pushed; a message cut at the capacity could
        // split a character, and then reads as its valid start.
        let (valid, _) = self.text.split_at(self.len);
        match std::str::from_utf8(valid) {
            Ok(s) => s,
            Err(e) => match std::str::from_utf8(valid.split_at(e.valid_up_to()).0) {
                Ok(s) => s,
                Err(_) => "",
            },
        }
    }
}

/// Whether `ms` is a valid window; `what` names the literal ("window", or "wait": no refusal
/// asks to wait longer than the longest window, so a longer wait would never be used).
pub const fn window_problem(what: &str, ms: u64) -> Option<Problem> {
    let days = rule::MAX_WINDOW.as_secs() / 86_400;
    match rule::Rule::from_millis(ms, 1) {
        Ok(_) => None,
        Err(crate::error::RuleError::ZeroWindow) => {
            Some(Problem::new().push("the ").push(what).push(" must be at least 1ms"))
        }
        Err(_) => Some(
            Problem::new()
                .push("the ")
                .push(what)
                .push(" is longer than ")
                .push_number(days)
                .push(" days: use at most `")
                .push_number(days)
                .push("d`"),
        ),
    }
}

/// Whether a window of `months` calendar months is valid (`what` is "window"): one of
/// [`CALENDAR_MONTHS`](crate::model::rule::CALENDAR_MONTHS), whose windows align to the year.
pub const fn months_problem(what: &str, months: u64) -> Option<Problem> {
    let fits = months <= u32::MAX as u64;
    if fits && rule::Rule::calendar_months(months as u32, 1).is_ok() {
        return None;
    }
    Some(
        Problem::new()
            .push("a ")
            .push(what)
            .push(" in calendar months is 1, 2, 3, 4, 6 or 12 months, so that its windows align to the year; not ")
            .push_number(months),
    )
}

/// Whether `n` is a valid count; `what` names the literal ("count", or "burst", the capacity
/// of a bucket, bounded as a count).
pub const fn count_problem(what: &str, n: u64) -> Option<Problem> {
    match rule::Rule::from_millis(1, n) {
        Ok(_) => None,
        Err(crate::error::RuleError::ZeroCount) => {
            Some(Problem::new().push("the ").push(what).push(" must be at least 1 (0 would refuse every call)"))
        }
        Err(_) => Some(
            Problem::new()
                .push("the ")
                .push(what)
                .push(" must be at most ")
                .push_number(rule::MAX_COUNT)
                .push(": write the same rate over a shorter window, or count larger units with `cost`"),
        ),
    }
}

/// Whether `n` is a valid `concurrency` (bounded as a count); `what` is "concurrency".
pub const fn concurrency_problem(what: &str, n: u64) -> Option<Problem> {
    match rule::Rule::from_millis(1, n) {
        Ok(_) => None,
        Err(crate::error::RuleError::ZeroCount) => {
            Some(Problem::new().push("the ").push(what).push(" must be at least 1 (0 would refuse every call)"))
        }
        Err(_) => Some(Problem::new().push("the ").push(what).push(" must be at most ").push_number(rule::MAX_COUNT)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(p: Option<Problem>) -> Option<String> {
        p.map(|p| p.as_str().to_owned())
    }

    #[test]
    fn bounds_are_the_rules_bounds() {
        let max_ms = u64::try_from(rule::MAX_WINDOW.as_millis()).unwrap();
        assert_eq!(text(window_problem("window", max_ms)), None);
        assert_eq!(text(window_problem("window", 1)), None);
        assert_eq!(
            text(window_problem("window", max_ms + 1)).as_deref(),
            Some("the window is longer than 366 days: use at most `366d`")
        );
        assert_eq!(text(window_problem("wait", 0)).as_deref(), Some("the wait must be at least 1ms"));
        assert_eq!(text(count_problem("count", rule::MAX_COUNT)), None);
        assert!(rule::Rule::from_millis(1, rule::MAX_COUNT + 1).is_err());
        let over = text(count_problem("burst", rule::MAX_COUNT + 1)).unwrap();
        assert!(over.starts_with("the burst must be at most "), "{over}");
        assert_eq!(
            over.split(' ').nth(6).map(|n| n.trim_end_matches(':').replace('_', "")),
            Some(rule::MAX_COUNT.to_string())
        );
        assert!(text(count_problem("count", 0)).unwrap().contains("at least 1"));
        for months in rule::CALENDAR_MONTHS {
            assert_eq!(text(months_problem("window", u64::from(months))), None);
        }
        for months in [0, 5, 13, 24, u64::MAX] {
            assert!(text(months_problem("window", months)).unwrap().contains("1, 2, 3, 4, 6 or 12"), "{months}");
        }
    }

    #[test]
    fn numbers_read_as_rust_literals() {
        for (n, written) in [(0, "0"), (999, "999"), (1000, "1_000"), (1_000_000_000, "1_000_000_000")] {
            assert_eq!(Problem::new().push_number(n).as_str(), written);
        }
        assert_eq!(Problem::new().push_number(u64::MAX).as_str(), "18_446_744_073_709_551_615");
    }

    #[test]
    fn a_long_message_is_cut_whole() {
        let long = "é".repeat(200);
        let cut = Problem::new().push("x").push(&long);
        assert!(cut.as_str().len() <= 160 && cut.as_str().starts_with("xé"));
    }
}
