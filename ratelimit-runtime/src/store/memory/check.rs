//! The in-memory decision, rule by rule, as the scripts decide it: each limit checked against
//! its stored state (`check_*`), then recorded (`record`); refusals, rooms and penalties folded
//! into one decision as the script's `deny` and `room` fold them. Peeks read the same steps at
//! cost 0.

use super::carry::{carry, kept_of};
use super::inline::Values;
use super::log::Log;
use super::shard::{block_key, Cells, Guards, Shard, State};
use crate::algorithm::{step, Algorithm};
use crate::model::compiled::CompiledLimit;
use crate::model::decision::{Decision, Why};
use crate::model::member::Member;
use crate::store::Call;

/// How soon a refused call may try a full concurrency limit again: a slot frees when a call
/// ends, which no one can predict; its lease's end is only the latest it frees.
const CONCURRENCY_RETRY_US: u64 = 100_000;

/// The values a plain O(1) limit's rules would store if the call is admitted, as its check
/// stepped them: the record writes them rather than stepping every rule again (the record's
/// state is the one the check read, carried to the same rules, so its steps are these).
#[derive(Clone, Copy)]
pub(super) struct Stepped {
    values: [[u64; 3]; STEPPED_RULES],
    ttl: u64,
}

/// The most rules whose steps a check keeps for the record.
const STEPPED_RULES: usize = 4;

/// Checks limit `g` (its key `key` in `shard`) against what is stored at `now`, folding its
/// refusal or its room into `d` and `tightest`. A limit with a penalty that refused the call
/// itself (not a block already running) joins `starts`, with its refusing rule. Returns the
/// new values of a plain O(1) limit of at most [`STEPPED_RULES`] rules (see [`Stepped`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn check_limit(
    shard: &mut Shard,
    key: &[u8],
    g: usize,
    limit: &CompiledLimit,
    now: u64,
    cost: u64,
    d: &mut Decision,
    tightest: &mut Option<u64>,
    starts: &mut Vec<(usize, usize)>,
) -> Option<Stepped> {
    if limit.is_concurrency() {
        let held: Vec<u64> = match shard.get_mut(key).map(|st| &*st).filter(|st| !st.expired(now)) {
            Some(State::Slots(slots)) => slots.iter().filter(|&&(end, _)| end > now).map(|&(end, _)| end).collect(),
            _ => Vec::new(),
        };
        if held.len() as u64 >= limit.concurrency {
            let first = held.iter().min().map_or(0, |&end| end - now);
            deny_why(d, g, 0, first.min(CONCURRENCY_RETRY_US), Why::Concurrency);
        }
        return None;
    }
    if !limit.has_block_or_slots() {
        return check_rules(shard.get_mut(key), g, limit, now, cost, d, tightest);
    }
    // A limit with a penalty is decided on its own, then merged, to know whether it refused
    // the call itself.
    let (mut own, mut own_tightest) = (Decision::admitted(now), None);
    let mut blocked = false;
    if limit.block_us > 0 {
        if let Some(&mut State::Block { until, rule }) = shard.get_mut(&block_key(key)) {
            if until > now {
                blocked = true;
                deny_why(&mut own, g, rule, until - now, Why::Blocked);
            }
        }
    }
    check_rules(shard.get_mut(key), g, limit, now, cost, &mut own, &mut own_tightest);
    if !own.allowed && !blocked && limit.block_us > 0 {
        starts.push((g, own.rule));
    }
    (*d, *tightest) = merge((*d, *tightest), (own, own_tightest));
    None
}

/// Checks the rules of limit `g` against its stored `state` (expired: nothing stored); the new
/// values of an O(1) limit of at most [`STEPPED_RULES`] rules.
fn check_rules(
    state: Option<&mut State>,
    g: usize,
    limit: &CompiledLimit,
    now: u64,
    cost: u64,
    d: &mut Decision,
    tightest: &mut Option<u64>,
) -> Option<Stepped> {
    let state = state.filter(|st| !st.expired(now));
    if limit.algorithm != Algorithm::SlidingWindow {
        let stored = match state {
            Some(State::Cells(c)) => {
                carry(c, limit, now);
                Some(&c.values[..])
            }
            _ => None,
        };
        let mut stepped = Stepped { values: [[0; 3]; STEPPED_RULES], ttl: 0 };
        each_step(limit, stored, now, cost, |r, s| {
            if s.allowed {
                room(d, tightest, g, r, s.left, s.wait);
            } else {
                deny(d, g, r, s.wait);
            }
            if let Some(slot) = stepped.values.get_mut(r) {
                *slot = s.state;
            }
            stepped.ttl = stepped.ttl.max(s.ttl);
        });
        return (limit.rules.len() <= STEPPED_RULES).then_some(stepped);
    }
    let Some(State::Log(log)) = state else {
        // An empty log: every rule has `count` room.
        for (r, rule) in limit.rules.iter().enumerate() {
            sliding(d, tightest, g, r, rule.count(), 0, cost, rule.window_us(), |_| 0);
        }
        return None;
    };
    check_log(log, g, limit, now, cost, d, tightest);
    None
}

/// Checks the rules of sliding-window limit `g` against its `log` (trimmed to its longest
/// window first).
#[inline]
pub(super) fn check_log(
    log: &mut Log,
    g: usize,
    limit: &CompiledLimit,
    now: u64,
    cost: u64,
    d: &mut Decision,
    tightest: &mut Option<u64>,
) {
    log.longest_us = limit.longest_us();
    log.trim(now);
    for (r, rule) in limit.rules.iter().enumerate() {
        let w = rule.window_us();
        // The longest window holds everything the trim left.
        let (start, before) = if r == 0 { (0, log.base()) } else { log.window_start(now, w) };
        let used = log.total() - before;
        // When the window's `need`th unit leaves it.
        let nth_wait = |need: u64| log.nth_time(start, before, need).map_or(w, |t| t + w - now);
        sliding(d, tightest, g, r, rule.count(), used, cost, w, nth_wait);
    }
}

/// Records an admitted call of `cost` units (its id `member`) in one limit's `state`: the values
/// its check stepped, when it kept them.
pub(super) fn record(
    state: &mut State,
    limit: &CompiledLimit,
    now: u64,
    cost: u64,
    member: Member,
    stepped: Option<&Stepped>,
) {
    if limit.is_concurrency() {
        if !matches!(state, State::Slots(_)) {
            *state = State::Slots(Vec::new());
        }
        if let State::Slots(slots) = state {
            slots.retain(|&(end, _)| end > now);
            slots.push((now + limit.lease_us, member));
        }
    } else if limit.algorithm == Algorithm::SlidingWindow {
        let log = state.live_log(now);
        log.longest_us = limit.longest_us();
        log.admit(now, cost);
    } else {
        let k = limit.algorithm.cells();
        let n = k * limit.rules.len();
        // Expired cells are cleared in place: no allocation when the shape still fits.
        match state {
            State::Cells(c) if c.values.len() == n => {
                if c.expires_at <= now {
                    c.values.fill(None);
                }
            }
            _ => *state = State::Cells(Cells { values: Values::new(n), expires_at: 0, kept: kept_of(limit) }),
        }
        if let State::Cells(cells) = state {
            carry(cells, limit, now);
            if let Some(stepped) = stepped {
                cells.values.set_steps(k, &stepped.values);
                cells.expires_at = now + stepped.ttl;
                return;
            }
            // The same pure steps as the check, now written in place.
            let mut new = [0u64; 3];
            let mut ttl: u64 = 0;
            for r in 0..limit.rules.len() {
                let s = step_rule(limit, r, Some(&cells.values), now, cost, false);
                new[..k].copy_from_slice(&s.state[..k]);
                for (j, v) in new[..k].iter().enumerate() {
                    cells.values[r * k + j] = Some(*v);
                }
                ttl = ttl.max(s.ttl);
            }
            cells.expires_at = now + ttl;
        }
    }
}

/// Starts the penalties of a refused call, `starts` (limit, refusing rule): each for its whole
/// length from now; the retry-after is the longest wait.
pub(super) fn start_blocks(
    guards: &mut Guards<'_>,
    call: &Call<'_>,
    buf: &[u8],
    spans: &[(usize, usize, usize)],
    starts: impl Iterator<Item = (usize, usize)>,
    now: u64,
    d: &mut Decision,
) {
    for (g, rule) in starts {
        let (start, end, shard) = spans[g];
        let until = now + call.limits[g].block_us;
        guards.get(shard).set(&block_key(&buf[start..end]), State::Block { until, rule }, now);
        deny_why(d, g, rule, call.limits[g].block_us, Why::Blocked);
    }
}

/// Two parts of one decision, `a` (the limits before) then `b` (one more limit), as one: a
/// refusal with the longest wait (the earlier on ties), else the tightest rule (the earlier on
/// ties), as deciding them in one pass would have.
fn merge(a: (Decision, Option<u64>), b: (Decision, Option<u64>)) -> (Decision, Option<u64>) {
    let ((da, ta), (db, tb)) = (a, b);
    match (da.allowed, db.allowed) {
        (false, false) if db.retry_after_us > da.retry_after_us => (db, tb),
        (false, _) => (da, ta),
        (true, false) => (db, tb),
        (true, true) => match (ta, tb) {
            (Some(x), Some(y)) if y >= x => (da, ta),
            (_, Some(_)) => (Decision { at_us: da.at_us, ..db }, tb),
            _ => (da, ta),
        },
    }
}

/// A sliding-window rule's remaining units and reset (µs), read without trimming: what is in
/// the window, and when the newest unit leaves it.
pub(super) fn peek_log(log: Option<&Log>, w: u64, count: u64, now: u64) -> (u64, u64) {
    let Some(log) = log else { return (count, 0) };
    let (_, before) = log.window_start(now, w);
    let used = log.total() - before;
    let reset = match log.back() {
        Some((t, _)) if used > 0 => (t + w).saturating_sub(now),
        _ => 0,
    };
    (count.saturating_sub(used), reset)
}

/// An O(1) rule's remaining units and reset (µs), as the script's peek mode: the step of a call
/// of cost 0.
pub(super) fn peek_cells(limit: &CompiledLimit, r: usize, stored: Option<&[Option<u64>]>, now: u64) -> (u64, u64) {
    let s = step_rule(limit, r, stored, now, 0, true);
    (s.left, s.wait)
}

/// One rule of an O(1) limit, from its stored values (`None`: nothing stored).
#[inline(always)]
pub(super) fn step_rule(
    limit: &CompiledLimit,
    r: usize,
    stored: Option<&[Option<u64>]>,
    now: u64,
    cost: u64,
    peek: bool,
) -> crate::algorithm::Step {
    let k = limit.algorithm.cells();
    let rule = limit.rules[r];
    let none = [None; 3];
    let v = stored.filter(|s| s.len() == k * limit.rules.len()).map_or(&none[..k], |s| &s[r * k..(r + 1) * k]);
    step(limit.algorithm, rule.rate(limit.capacity(r)), now, cost, v, peek)
}

fn each_step(
    limit: &CompiledLimit,
    stored: Option<&[Option<u64>]>,
    now: u64,
    cost: u64,
    mut f: impl FnMut(usize, crate::algorithm::Step),
) {
    for r in 0..limit.rules.len() {
        f(r, step_rule(limit, r, stored, now, cost, false));
    }
}

/// The script's `deny`: the denying rule with the longest wait wins.
#[inline]
pub(super) fn deny(d: &mut Decision, limit: usize, rule: usize, wait_us: u64) {
    deny_why(d, limit, rule, wait_us, Why::Exceeded);
}

/// [`deny`], for a refusal other than by a rule.
#[inline]
fn deny_why(d: &mut Decision, limit: usize, rule: usize, wait_us: u64, why: Why) {
    if d.allowed || wait_us > d.retry_after_us {
        *d = Decision::refused(limit, rule, wait_us, d.at_us, why);
    }
}

/// The script's `room`: while allowed, the rule with the least remaining is the tightest.
#[inline]
pub(super) fn room(d: &mut Decision, tightest: &mut Option<u64>, limit: usize, rule: usize, left: u64, reset_us: u64) {
    if d.allowed && tightest.is_none_or(|t| left < t) {
        *tightest = Some(left);
        *d = Decision { limit, rule, remaining: left, reset_us, ..Decision::admitted(d.at_us) };
    }
}

/// One sliding-window rule, as the script's `sw` branch: the waits are computed only when needed.
#[allow(clippy::too_many_arguments)]
#[inline]
fn sliding(
    d: &mut Decision,
    tightest: &mut Option<u64>,
    limit: usize,
    rule: usize,
    count: u64,
    used: u64,
    cost: u64,
    window_us: u64,
    nth_wait: impl Fn(u64) -> u64,
) {
    match sliding_step(count, used, cost, window_us, nth_wait) {
        Ok(left) => room(d, tightest, limit, rule, left, window_us),
        Err(wait) => deny(d, limit, rule, wait),
    }
}

/// A sliding-window rule of `count` units with `used` of them in its window: the units left
/// after a call of `cost`, or, refused, the µs until it fits (`nth_wait(n)`: until the window's
/// `n`th unit leaves it, asked only when needed). Admitted, the quota is whole again when this
/// call's own units leave the window: the rule's reset is its window.
#[inline(always)]
pub(super) fn sliding_step(
    count: u64,
    used: u64,
    cost: u64,
    window_us: u64,
    nth_wait: impl Fn(u64) -> u64,
) -> Result<u64, u64> {
    if used + cost > count {
        Err(if cost <= count { nth_wait(used + cost - count) } else { window_us })
    } else {
        Ok(count - used - cost)
    }
}
