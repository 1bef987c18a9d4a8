//! Logs that an outage cannot turn into one line per request.

use crate::rt::lock::lock;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Lets one event through per period, counting the ones it holds back.
pub(crate) struct Throttle {
    period: Duration,
    state: Mutex<(Option<Instant>, u64)>,
}

impl Throttle {
    pub(crate) const fn new(period: Duration) -> Throttle {
        Throttle { period, state: Mutex::new((None, 0)) }
    }

    /// `Some(events held back since the last one let through)` if this one may pass.
    pub(crate) fn admit(&self, now: Instant) -> Option<u64> {
        let mut state = lock(&self.state);
        let (last, held) = &mut *state;
        if last.is_some_and(|t| now.saturating_duration_since(t) < self.period) {
            *held += 1;
            return None;
        }
        *last = Some(now);
        Some(std::mem::take(held))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_logs_once_per_period() {
        let throttle = Throttle::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(throttle.admit(t0), Some(0));
        let passed = (1..=1000).filter(|i| throttle.admit(t0 + Duration::from_millis(*i)).is_some()).count();
        assert_eq!(passed, 0, "1000 failures within the period log nothing more");
        assert_eq!(throttle.admit(t0 + Duration::from_secs(10)), Some(1000), "then one line counts them");
        assert_eq!(throttle.admit(t0 + Duration::from_secs(11)), None);
    }
}
