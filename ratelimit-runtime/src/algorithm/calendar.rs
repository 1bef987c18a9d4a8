//! Calendar months in UTC, on integer microseconds since the Unix epoch (proleptic Gregorian
//! calendar, leap years included): where the fixed windows of a rule counted in months start and
//! end. The Redis scripts hold the same arithmetic in Lua (`store/redis/lua/parts/calendar.lua`).
//!
//! The conversions are Howard Hinnant's `days_from_civil` / `civil_from_days`: a year is counted
//! from March, so that the leap day is its last day and every month's offset in the year is the
//! same linear formula; 400 years (an era) are exactly 146 097 days. Only times from 1970 on
//! occur (they are unsigned), so every quotient is of non-negative numbers.

/// A day in µs.
pub(crate) const DAY_US: u64 = 86_400_000_000;

/// The days from 1970-01-01 to the first day of month `m`, counted in months from 1970-01.
pub(crate) const fn month_start_days(m: u64) -> u64 {
    // March-based year: January and February belong to the year before.
    let (year, month) = (1970 + m / 12, m % 12);
    let y = if month < 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    // Months since March: March 0, …, January 10, February 11.
    let mp = (month + 10) % 12;
    let doy = (153 * mp + 2) / 5;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    // 719 468: the days from 0000-03-01 to 1970-01-01.
    era * 146_097 + doe - 719_468
}

/// The month (counted from 1970-01) holding day `days` (counted from 1970-01-01).
pub(crate) const fn month_of_day(days: u64) -> u64 {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    // Back from the March-based year: mp 10 and 11 are January and February of the next year.
    if mp < 10 {
        (yoe + era * 400 - 1970) * 12 + mp + 2
    } else {
        (yoe + era * 400 + 1 - 1970) * 12 + mp - 10
    }
}

/// The window of `months` calendar months holding `now` (µs): its index (windows counted from
/// 1970-01), its start and its end (µs). Windows start at months that are multiples of `months`
/// since 1970-01; as `months` divides 12, they align to the year (quarters start in January,
/// April, July and October).
pub(crate) const fn month_window(months: u64, now: u64) -> (u64, u64, u64) {
    let idx = month_of_day(now / DAY_US) / months;
    let start = month_start_days(idx * months).saturating_mul(DAY_US);
    let end = month_start_days((idx + 1) * months).saturating_mul(DAY_US);
    (idx, start, end)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Days from 1970-01-01 to y-m-d, counted the slow way.
    fn days(y: u64, m: u64, d: u64) -> u64 {
        let leap = |y: u64| (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400);
        let lengths = |y| [31, if leap(y) { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
        let mut n = (1970..y).map(|y| if leap(y) { 366 } else { 365 }).sum::<u64>();
        n += lengths(y)[..(m - 1) as usize].iter().sum::<u64>();
        n + d - 1
    }

    #[test]
    fn months_start_where_the_calendar_says() {
        assert_eq!(month_start_days(0), 0);
        for y in 1970..2500 {
            for m in 1..=12 {
                let idx = (y - 1970) * 12 + m - 1;
                assert_eq!(month_start_days(idx), days(y, m, 1), "{y}-{m}");
                // The first and the last day of the month are in it; the day before is not.
                assert_eq!(month_of_day(days(y, m, 1)), idx);
                assert_eq!(month_of_day(month_start_days(idx + 1) - 1), idx);
                if idx > 0 {
                    assert_eq!(month_of_day(days(y, m, 1) - 1), idx - 1);
                }
            }
        }
    }

    #[test]
    fn february_has_its_leap_day() {
        let feb = |y: u64| (y - 1970) * 12 + 1;
        let length = |y| month_start_days(feb(y) + 1) - month_start_days(feb(y));
        assert_eq!(length(2027), 28);
        assert_eq!(length(2028), 29);
        assert_eq!(length(2100), 28);
        assert_eq!(length(2000), 29);
    }

    #[test]
    fn windows_of_several_months_align_to_the_year() {
        // 2028-05-17 12:00 UTC.
        let now = days(2028, 5, 17) * DAY_US + DAY_US / 2;
        assert_eq!(month_window(1, now).1, days(2028, 5, 1) * DAY_US);
        assert_eq!(month_window(1, now).2, days(2028, 6, 1) * DAY_US);
        assert_eq!(month_window(3, now).1, days(2028, 4, 1) * DAY_US);
        assert_eq!(month_window(3, now).2, days(2028, 7, 1) * DAY_US);
        assert_eq!(month_window(12, now).1, days(2028, 1, 1) * DAY_US);
        assert_eq!(month_window(12, now).2, days(2029, 1, 1) * DAY_US);
        // The last µs of a window is in it, the next one is in the next window.
        let (idx, _, end) = month_window(2, now);
        assert_eq!(month_window(2, end - 1).0, idx);
        assert_eq!(month_window(2, end).0, idx + 1);
    }
}
