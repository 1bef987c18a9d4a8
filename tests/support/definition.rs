//! The algorithms' definitions, plainly, in exact integers: the reference the stores are held
//! to (tests/exact.rs, tests/exact_settle.rs), and how a call is compared
//! with it. Refunds, settles and blocks follow docs/design.md ("Refunds, blocks and concurrency
//! limits").
#![allow(dead_code)]

use ratelimit::store::StoreHandle;
use ratelimit::{Algorithm, Limit, LimitType, Limiter, Permit, Rule, Subject};

/// One rule under its algorithm's definition, in exact integers (products as u128), kept apart
/// from the scripts' arithmetic: only whether a call of cost c passes at t, and what an
/// admission records. Retry-after, remaining and reset follow from those two by their
/// definitions (searches over a monotone predicate), not by formulas.
#[derive(Clone, Debug)]
pub struct RuleModel {
    pub alg: Algorithm,
    pub w: u64,
    pub n: u64,
    pub cap: u64,
    /// A fixed window of this many calendar months (UTC), 0: of `w` µs.
    pub months: u64,
    pub state: State,
}

/// The calendar month (counted from 1970-01, UTC) holding `t` µs, counted plainly: whole years,
/// then whole months, by the Gregorian rule for leap years.
pub fn calendar_month(t: u64) -> u64 {
    let leap = |y: u64| (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400);
    let (mut days, mut year, mut month) = (t / 86_400_000_000, 1970, 0);
    while days >= if leap(year) { 366 } else { 365 } {
        days -= if leap(year) { 366 } else { 365 };
        year += 1;
        month += 12;
    }
    for length in [31, if leap(year) { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31] {
        if days < length {
            break;
        }
        days -= length;
        month += 1;
    }
    month
}

#[derive(Clone, Debug)]
pub enum State {
    /// SlidingWindow: (admitted at, units).
    Log(Vec<(u64, u64)>),
    /// FixedWindow and SlidingWindowCounter: the count of window `idx` and of the one before.
    Windows { idx: u64, cur: u64, prev: u64 },
    /// TokenBucket: tokens × W at `at` (below zero: debt, from a settle); tokens refill at N per
    /// W up to the burst.
    Tokens { tokens_w: i128, at: u64 },
    /// LeakyBucket: level × W at `at`; the level drains at N per W.
    Level { level_w: u128, at: u64 },
    /// Gcra: the theoretical arrival time × N.
    Tat(Option<u128>),
}

/// Past any wait a rule can ask for (366 days < 2^45 µs).
pub const FOREVER: u64 = 1 << 46;

impl RuleModel {
    pub fn new(alg: Algorithm, rule: Rule, burst: Option<u64>) -> RuleModel {
        let (w, n) = (u64::try_from(rule.window().as_micros()).unwrap(), rule.count());
        let cap = if alg.supports_burst() { burst.unwrap_or(n) } else { n };
        let state = match alg {
            Algorithm::SlidingWindow => State::Log(Vec::new()),
            Algorithm::TokenBucket => State::Tokens { tokens_w: i128::from(cap) * i128::from(w), at: 0 },
            Algorithm::LeakyBucket => State::Level { level_w: 0, at: 0 },
            Algorithm::Gcra => State::Tat(None),
            _ => State::Windows { idx: 0, cur: 0, prev: 0 },
        };
        RuleModel { alg, w, n, cap, months: rule.months().map_or(0, u64::from), state }
    }

    /// The index of the fixed window holding t: multiples of W since the epoch, or groups of
    /// `months` calendar months since 1970-01.
    pub fn window_index(&self, t: u64) -> u64 {
        match self.months {
            0 => t / self.w,
            months => calendar_month(t) / months,
        }
    }

    /// (count of the window t falls in, count of the window before it).
    fn windows_at(&self, t: u64) -> (u64, u64) {
        let State::Windows { idx, cur, prev } = self.state else { unreachable!() };
        let i = self.window_index(t);
        if i == idx {
            (cur, prev)
        } else if i == idx + 1 {
            (0, cur)
        } else {
            (0, 0)
        }
    }

    pub fn passes(&self, t: u64, c: u64) -> bool {
        let (w, n, b, c128) = (u128::from(self.w), u128::from(self.n), u128::from(self.cap), u128::from(c));
        match &self.state {
            State::Log(log) => {
                // Settled debt may hold up to u64::MAX units: summed in u128.
                let used: u128 = log.iter().filter(|(s, _)| t - s < self.w).map(|(_, u)| u128::from(*u)).sum();
                used + c128 <= n
            }
            State::Windows { .. } if self.alg == Algorithm::FixedWindow => self.windows_at(t).0 + c <= self.n,
            State::Windows { .. } => {
                let (cur, prev) = self.windows_at(t);
                let e = u128::from(t % self.w);
                u128::from(prev) * (w - e) + (u128::from(cur) + c128) * w <= n * w
            }
            State::Tokens { tokens_w, at } => {
                let tokens_w = (tokens_w + i128::from(t - at) * n as i128).min((b * w) as i128);
                tokens_w >= (c128 * w) as i128
            }
            State::Level { level_w, at } => {
                let level_w = level_w.saturating_sub(u128::from(t - at) * n);
                level_w + c128 * w <= b * w
            }
            State::Tat(tat) => {
                let now = u128::from(t) * n;
                let tat = tat.unwrap_or(now).max(now);
                tat + c128 * w - now <= b * w
            }
        }
    }

    pub fn record(&mut self, t: u64, c: u64) {
        let (w, n, b, c128) = (u128::from(self.w), u128::from(self.n), u128::from(self.cap), u128::from(c));
        let i = if matches!(self.state, State::Windows { .. }) { self.window_index(t) } else { 0 };
        let (cur, prev) = if matches!(self.state, State::Windows { .. }) { self.windows_at(t) } else { (0, 0) };
        match &mut self.state {
            State::Log(log) => log.push((t, c)),
            State::Windows { idx, cur: c0, prev: p0 } => (*idx, *c0, *p0) = (i, cur + c, prev),
            State::Tokens { tokens_w, at } => {
                *tokens_w = (*tokens_w + i128::from(t - *at) * n as i128).min((b * w) as i128) - (c128 * w) as i128;
                *at = t;
            }
            State::Level { level_w, at } => {
                *level_w = level_w.saturating_sub(u128::from(t - *at) * n) + c128 * w;
                *at = t;
            }
            State::Tat(tat) => {
                let now = u128::from(t) * n;
                *tat = Some(tat.unwrap_or(now).max(now) + c128 * w);
            }
        }
    }

    /// Gives back a call of cost `c` admitted at `at`, at `t >= at`: only what still counts.
    pub fn refund(&mut self, t: u64, at: u64, c: u64) {
        let (w, n, b, c128) = (u128::from(self.w), u128::from(self.n), u128::from(self.cap), u128::from(c));
        let i = if matches!(self.state, State::Windows { .. }) { self.window_index(at) } else { 0 };
        let counter = self.alg == Algorithm::SlidingWindowCounter;
        match &mut self.state {
            // The call's units leave the log (units admitted at the same µs are alike); units
            // that left their window count nowhere already.
            State::Log(log) => {
                let mut left = c;
                for e in log.iter_mut().filter(|e| e.0 == at) {
                    let k = e.1.min(left);
                    e.1 -= k;
                    left -= k;
                }
            }
            // The count of window ⌊at / W⌋ drops while that window is the current one (fixed
            // window), or the current or previous one (counter); never below 0.
            State::Windows { idx, cur, prev } => {
                if *idx == i {
                    *cur = cur.saturating_sub(c);
                } else if counter && *idx == i + 1 {
                    *prev = prev.saturating_sub(c);
                }
            }
            // E ← max(E − c·T, t), only while E > t and t − at < B·T (all × N).
            _ => {
                let (e, now) = (self.empty_n(), u128::from(t) * n);
                if e > now && u128::from(t - at) * n < b * w {
                    self.set_empty_n(e.saturating_sub(c128 * w).max(now));
                }
            }
        }
    }

    /// Settles a call of cost `c` admitted at `at` to `actual` units, at `t >= at`. Fewer: a
    /// refund of the difference. More: the extra units x are debt, taken past the limit:
    /// - sliding window: x more units admitted at `at` (they count while `at` is in the window);
    /// - fixed window: the count of window ⌊at / W⌋ grows by x, at most to 2N (counting only
    ///   while that window is the current one);
    /// - sliding window counter: the same count grows by x, at most to 2N, while that window is
    ///   the current one or the previous one;
    /// - buckets and GCRA: poured in at t: E ← max(E, min(max(E, t) + x·T, t + B·T + W)).
    pub fn settle(&mut self, t: u64, at: u64, c: u64, actual: u64) {
        if actual <= c {
            if actual < c {
                self.refund(t, at, c - actual);
            }
            return;
        }
        let x = actual - c;
        let (w, n, b) = (u128::from(self.w), u128::from(self.n), u128::from(self.cap));
        let i = at / self.w;
        let (counter, most) = (self.alg == Algorithm::SlidingWindowCounter, self.n.saturating_mul(2));
        match &mut self.state {
            State::Log(log) => log.push((at, x)),
            State::Windows { idx, cur, prev } => {
                if *idx == i {
                    *cur = cur.saturating_add(x).min(most);
                } else if counter && *idx == i + 1 {
                    *prev = prev.saturating_add(x).min(most);
                }
            }
            _ => {
                let (e, now) = (self.empty_n(), u128::from(t) * n);
                let poured = (e.max(now) + u128::from(x) * w).min(now + b * w + w * n);
                self.set_empty_n(poured.max(e));
            }
        }
    }

    /// A bucket's empty instant E (GCRA's TAT), × N.
    fn empty_n(&self) -> u128 {
        let (w, n, b) = (u128::from(self.w), u128::from(self.n), u128::from(self.cap));
        match self.state {
            State::Tokens { tokens_w, at } => (i128::from(at) * n as i128 + ((b * w) as i128 - tokens_w)) as u128,
            State::Level { level_w, at } => u128::from(at) * n + level_w,
            State::Tat(tat) => tat.unwrap_or(0),
            _ => unreachable!("not a bucket"),
        }
    }

    /// Sets a bucket's empty instant (× N). An instant before the state's own time is kept
    /// exactly, the state's time moved back to it: no later call can tell it from an empty
    /// bucket at the state's time, but a settle at an earlier pinned time pours from
    /// `max(E, t)`, and E is then the earlier instant.
    fn set_empty_n(&mut self, e: u128) {
        let (w, n, b) = (u128::from(self.w), u128::from(self.n), u128::from(self.cap));
        match &mut self.state {
            State::Tokens { tokens_w, at } => {
                *at = (*at).min((e / n) as u64);
                *tokens_w = (b * w) as i128 - (e - u128::from(*at) * n) as i128
            }
            State::Level { level_w, at } => {
                *at = (*at).min((e / n) as u64);
                *level_w = e - u128::from(*at) * n
            }
            State::Tat(tat) => *tat = Some(e),
            _ => unreachable!("not a bucket"),
        }
    }

    /// How many cost-1 calls would pass at t (the most units one call could take).
    pub fn room(&self, t: u64) -> u64 {
        // The largest j <= cap with passes(t, j): passes is monotone in the cost.
        let (mut lo, mut hi) = (0, self.cap);
        if !self.passes(t, 0) {
            return 0;
        }
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if self.passes(t, mid) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lo
    }

    /// The least d > 0 after which a call of cost c passes.
    pub fn retry(&self, t: u64, c: u64) -> u64 {
        least(1, |d| self.passes(t + d, c))
    }

    /// The least d >= 0 after which the rule's quota is whole.
    pub fn reset(&self, t: u64) -> u64 {
        least(0, |d| self.room(t + d) == self.cap)
    }
}

/// The least d >= from (below FOREVER) with `ok(d)`, for a predicate that stays true once true.
pub fn least(from: u64, ok: impl Fn(u64) -> bool) -> u64 {
    let (mut lo, mut hi) = (from, FOREVER);
    assert!(ok(hi), "never");
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if ok(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

/// A call's expected answer for limits of `models` (limit order, each limit's rules longest
/// window first), recording it when admitted: the refusing rule with the longest wait (first on
/// ties), or the tightest rule (least remaining, first on ties) and its reset. `None`: a cost
/// that can never fit (refused before any store is asked; nothing recorded).
pub fn expect(models: &mut [Vec<RuleModel>], t: u64, c: u64) -> Option<Expected> {
    expect_blocked(models, &mut [], t, c)
}

/// A limit's penalty: its length (`block = D`, µs) and the block in force, (end µs, rule).
#[derive(Clone, Debug, Default)]
pub struct Penalty {
    pub length: Option<u64>,
    pub until: Option<(u64, usize)>,
}

/// As [`expect`], with the limits' penalties (`blocks[g]` for limit g; missing: none). A limit
/// blocked at t refuses with the rest of its block, or its rules' wait if longer; if the whole
/// call is refused, each limit whose own rules refused it (its longest wait, first on ties)
/// starts a block `(t + D, rule)`, and the call's retry-after becomes D if longer. Refusals
/// during a block start nothing.
pub fn expect_blocked(models: &mut [Vec<RuleModel>], blocks: &mut [Penalty], t: u64, c: u64) -> Option<Expected> {
    if models.iter().flatten().any(|m| c > m.cap) {
        return None;
    }
    // Each limit's refusal: (rule, wait, refused by its own rules).
    let mut refusals: Vec<Option<(usize, u64, bool)>> = Vec::new();
    for (g, limit) in models.iter().enumerate() {
        let block = blocks.get(g).and_then(|p| p.until).filter(|&(end, _)| end > t);
        // Blocked: the rest of the block, or its rules' own wait when longer (the call passes
        // only once both allow it).
        let mut own: Option<(usize, u64, bool)> = block.map(|(end, r)| (r, end - t, false));
        for (r, m) in limit.iter().enumerate() {
            if !m.passes(t, c) {
                let d = m.retry(t, c);
                if own.is_none_or(|(_, best, _)| d > best) {
                    own = Some((r, d, block.is_none()));
                }
            }
        }
        refusals.push(own);
    }
    if refusals.iter().any(Option::is_some) {
        let mut refusal: Option<(usize, usize, u64)> = None;
        for (g, own) in refusals.iter().enumerate() {
            if let Some((r, d, _)) = *own {
                if refusal.is_none_or(|(_, _, best)| d > best) {
                    refusal = Some((g, r, d));
                }
            }
        }
        // The blocks start, and the call's retry-after becomes a block's length if longer (that
        // limit and rule then answer; the first such limit on ties).
        for (g, own) in refusals.into_iter().enumerate() {
            let Some((r, _, true)) = own else { continue };
            let Some(p) = blocks.get_mut(g) else { continue };
            if let Some(length) = p.length {
                p.until = Some((t + length, r));
                if refusal.is_none_or(|(_, _, best)| length > best) {
                    refusal = Some((g, r, length));
                }
            }
        }
        let (g, r, d) = refusal.expect("a refusal");
        return Some(Expected { limit: g, rule: r, allowed: false, retry_us: d, remaining: 0, reset_us: d });
    }
    models.iter_mut().flatten().for_each(|m| m.record(t, c));
    let mut best: Option<(usize, usize, u64)> = None;
    for (g, limit) in models.iter().enumerate() {
        for (r, m) in limit.iter().enumerate() {
            let room = m.room(t);
            if best.is_none_or(|(_, _, least)| room < least) {
                best = Some((g, r, room));
            }
        }
    }
    let (g, r, room) = best.expect("a rule");
    // An admission's reset, for the sliding and the fixed window, is when the call's units
    // leave (its window's end), even for a call of cost 0.
    let m = &models[g][r];
    let reset_us = match m.alg {
        Algorithm::SlidingWindow => m.w,
        // The window's end: the least d after which t + d is in another window.
        Algorithm::FixedWindow => least(1, |d| m.window_index(t + d) != m.window_index(t)),
        _ => m.reset(t),
    };
    Some(Expected { limit: g, rule: r, allowed: true, retry_us: 0, remaining: room, reset_us })
}

/// The definition of a stack of limits whose subjects vary from call to call: one model per
/// limit and subject. Several limiters may share it for the limits they share (two limiters of
/// one name count on the same keys): a call through a limiter of the first `n` limits passes
/// those `n` subjects.
pub struct Stack {
    pub limits: Vec<LimitSpec>,
    models: std::collections::HashMap<(usize, Subject<'static>), Vec<RuleModel>>,
}

impl Stack {
    pub fn new(limits: Vec<LimitSpec>) -> Stack {
        Stack { limits, models: std::collections::HashMap::new() }
    }

    /// The answer the definition gives a call of cost `c` at `t` for `subjects` (one per limit,
    /// in order, for the first `subjects.len()` limits), recorded when admitted.
    pub fn expect(&mut self, subjects: &[Subject<'_>], t: u64, c: u64) -> Option<Expected> {
        let mut models: Vec<Vec<RuleModel>> = subjects
            .iter()
            .enumerate()
            .map(|(g, s)| {
                let l = &self.limits[g];
                let fresh = || l.rules.iter().map(|&r| RuleModel::new(l.alg, r, l.burst)).collect();
                self.models.remove(&(g, s.clone().into_owned())).unwrap_or_else(fresh)
            })
            .collect();
        let want = expect(&mut models, t, c);
        for (g, (s, m)) in subjects.iter().zip(models).enumerate() {
            self.models.insert((g, s.clone().into_owned()), m);
        }
        want
    }

    /// Runs one call through `l` (a limiter of the first `subjects.len()` limits) and the
    /// definition; Err says how they differ.
    pub async fn compare(
        &mut self,
        l: &Limiter,
        subjects: &[Subject<'_>],
        t: u64,
        c: u64,
    ) -> Result<Option<Expected>, String> {
        let got = l.check(subjects).cost(c).at(std::time::UNIX_EPOCH + std::time::Duration::from_micros(t)).await;
        let want = self.expect(subjects, t, c);
        judge(got, &self.limits[..subjects.len()], want, t, c).map(|(e, _)| e)
    }
}

#[derive(Debug, PartialEq, Eq)]
pub struct Expected {
    pub limit: usize,
    pub rule: usize,
    pub allowed: bool,
    pub retry_us: u64,
    pub remaining: u64,
    pub reset_us: u64,
}

/// One limit of a stack: its type (distinct per limit: it names the limit in the answers), its
/// algorithm, rules (longest window first, as the limiter orders them) and burst.
#[derive(Clone, Debug)]
pub struct LimitSpec {
    pub limit_type: LimitType,
    pub alg: Algorithm,
    pub rules: Vec<Rule>,
    pub burst: Option<u64>,
    /// `block = D`, in µs.
    pub block: Option<u64>,
}

pub fn build(store: &StoreHandle, name: &str, limits: &[LimitSpec]) -> Limiter {
    let mut b = Limiter::builder(name);
    for l in limits {
        let mut limit = Limit::new(l.limit_type, l.rules.iter().copied()).algorithm(l.alg);
        if let Some(n) = l.burst {
            limit = limit.burst(n);
        }
        if let Some(us) = l.block {
            limit = limit.block(std::time::Duration::from_micros(us));
        }
        b = b.limit(limit);
    }
    b.store(store.clone()).refusal_cache(false).build().unwrap()
}

pub fn subjects(limits: &[LimitSpec]) -> Vec<Subject<'static>> {
    limits
        .iter()
        .map(|l| match l.limit_type {
            LimitType::Global => Subject::global(),
            LimitType::Ip => Subject::ip("192.0.2.1".parse().unwrap()),
            LimitType::User => Subject::bytes(&b"user"[..]),
            _ => Subject::bytes(&b"key"[..]),
        })
        .collect()
}

/// Runs one call through the limiter and the models; Err says how they differ.
pub async fn compare(
    l: &Limiter,
    limits: &[LimitSpec],
    models: &mut [Vec<RuleModel>],
    subjects: &[Subject<'_>],
    t: u64,
    c: u64,
) -> Result<Option<Expected>, String> {
    let got = l.check(subjects).cost(c).at(std::time::UNIX_EPOCH + std::time::Duration::from_micros(t)).await;
    judge(got, limits, expect(models, t, c), t, c).map(|(e, _)| e)
}

/// The store's answer `got` to a call of cost `c` at `t` against the definition's `want`: the
/// expectation and the permit when they agree, else how they differ.
pub fn judge<'l>(
    got: Result<Permit<'l>, ratelimit::RateLimited>,
    limits: &[LimitSpec],
    want: Option<Expected>,
    t: u64,
    c: u64,
) -> Result<(Option<Expected>, Option<Permit<'l>>), String> {
    let Some(want) = want else {
        return match got {
            Err(_) => Ok((None, None)),
            Ok(_) => Err(format!("cost {c} at {t}: admitted, though it can never fit")),
        };
    };
    // A limit is named by its type, and by its rule where two limits share a type.
    let rule_of = |limit_type: LimitType, rule: Option<Rule>| {
        let of_type = || limits.iter().enumerate().filter(|(_, s)| s.limit_type == limit_type);
        let by_rule = of_type().find_map(|(g, s)| Some((g, s.rules.iter().position(|&x| Some(x) == rule)?)));
        match by_rule {
            Some((g, r)) => (Some(g), Some(r)),
            None => (of_type().next().map(|(g, _)| g), None),
        }
    };
    let have = match &got {
        Ok(p) => {
            let q = p.quota().ok_or("no quota")?;
            let (g, r) = rule_of(q.policy.limit_type, Some(q.policy.rule));
            (g, r, true, 0, q.remaining, u64::try_from(q.reset.as_micros()).unwrap())
        }
        Err(e) => {
            let d = u64::try_from(e.retry_after().as_micros()).unwrap();
            let (g, r) = rule_of(e.limit_type(), e.rule());
            (g, r, false, d, 0, d)
        }
    };
    let expected = (Some(want.limit), Some(want.rule), want.allowed, want.retry_us, want.remaining, want.reset_us);
    if have == expected {
        Ok((Some(want), got.ok()))
    } else {
        Err(format!(
            "cost {c} at {t}: store (limit, rule, allowed, retry, remaining, reset) = {have:?}, definition {expected:?}"
        ))
    }
}
