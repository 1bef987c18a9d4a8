//! Windows of calendar months (`rules = [(1mo, 3)]`): fixed windows from the first instant of a
//! month (UTC) to the next month's, whatever the month's length. On a manual clock across
//! February of a leap and of a common year and across New Year; both stores against the
//! definition (tests/support/definition.rs) at pinned times over two centuries; the scripts'
//! calendar arithmetic (lua/parts/calendar.lua) against a plain count of days; and the example
//! server's `GET /api/export` under a faked clock as a month ends.

#[path = "support/definition.rs"]
mod definition;
#[path = "../examples/server.rs"]
#[allow(dead_code)]
mod server;
mod support;

use definition::{build, calendar_month, subjects, LimitSpec, RuleModel};
use ratelimit::clock::ManualClock;
use ratelimit::store::{MemoryStore, StoreHandle};
use ratelimit::{Algorithm, Cause, Limit, LimitType, Limiter, Rule, Subject};
use std::sync::Arc;
use std::time::Duration;
use support::{RedisServer, Rng};

const DAY: u64 = 86_400_000_000;
const SECOND: u64 = 1_000_000;

/// Not a test of its own: the body of the server processes `export_quota_turns_with_the_month`
/// starts (see tests/support/server_process.rs).
#[test]
#[ignore = "the server process the other tests start"]
fn server_process() {
    support::server_process::child_main(server::run);
}

fn leap(y: u64) -> bool {
    (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400)
}

/// The days from 1970-01-01 to the first day of month `m` (counted from 1970-01), counted
/// plainly.
fn first_day(m: u64) -> u64 {
    let (years, month) = (m / 12, m % 12);
    let mut days: u64 = (1970..1970 + years).map(|y| if leap(y) { 366 } else { 365 }).sum();
    let y = 1970 + years;
    let lengths = [31, if leap(y) { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    days += lengths[..month as usize].iter().sum::<u64>();
    days
}

/// y-mo-d hh:mi:ss UTC in µs since the epoch.
fn utc(y: u64, mo: u64, d: u64, hh: u64, mi: u64, ss: u64) -> u64 {
    (first_day((y - 1970) * 12 + mo - 1) + d - 1) * DAY + ((hh * 60 + mi) * 60 + ss) * SECOND
}

fn monthly(store: StoreHandle, name: &str, months: u32, count: u64) -> Limiter {
    let rule = Rule::calendar_months(months, count).unwrap();
    Limiter::builder(name).limit(Limit::new(LimitType::User, [rule])).store(store).build().unwrap()
}

#[test]
fn the_plain_calendar_is_right() {
    assert_eq!(utc(1970, 1, 1, 0, 0, 0), 0);
    // 2000-03-01 (after a leap day of a year divisible by 400) is day 11 017.
    assert_eq!(utc(2000, 3, 1, 0, 0, 0), 11_017 * DAY);
    assert_eq!(utc(2028, 2, 29, 0, 0, 0) + DAY, utc(2028, 3, 1, 0, 0, 0));
    assert_eq!(calendar_month(utc(2028, 2, 29, 23, 59, 59)), (2028 - 1970) * 12 + 1);
}

/// A memory store on a manual clock: three calls a month, the fourth refused until the first
/// instant of the next month, exactly, in February of a leap year (29 days) and of a common
/// year (28), and across New Year.
#[test]
fn memory_months_turn_at_their_first_instant() {
    let user = [Subject::bytes(&b"alice"[..])];
    for (start, next_month) in [
        (utc(2028, 2, 28, 23, 59, 50), utc(2028, 3, 1, 0, 0, 0)),
        (utc(2027, 2, 28, 23, 59, 50), utc(2027, 3, 1, 0, 0, 0)),
        (utc(2026, 12, 31, 23, 59, 50), utc(2027, 1, 1, 0, 0, 0)),
    ] {
        let clock = Arc::new(ManualClock::new(start));
        let limiter = monthly(Arc::new(MemoryStore::with_clock(clock.clone())), "calendar::memory", 1, 3);
        for left in [2, 1, 0] {
            let permit = limiter.check(&user).blocking().unwrap();
            let quota = permit.quota().unwrap();
            assert_eq!((quota.remaining, quota.reset), (left, Duration::from_micros(next_month - start)));
            assert_eq!(quota.policy.name(), "user-1mo");
        }
        let refused = limiter.check(&user).blocking().unwrap_err();
        assert_eq!(refused.cause(), Cause::Exceeded);
        assert_eq!(refused.retry_after(), Duration::from_micros(next_month - start), "from {start}");
        assert_eq!(refused.rule(), Some(Rule::calendar_months(1, 3).unwrap()));
        // A µs before the month ends: still refused, for that µs.
        clock.advance(Duration::from_micros(next_month - start - 1));
        assert_eq!(limiter.check(&user).blocking().unwrap_err().retry_after(), Duration::from_micros(1));
        // The month turns: three more, the next refused for the whole new month.
        clock.advance(Duration::from_micros(1));
        for _ in 0..3 {
            limiter.check(&user).blocking().unwrap();
        }
        let after = next_month + 1;
        let month_after = first_day(calendar_month(after) + 1) * DAY;
        assert_eq!(
            limiter.check(&user).blocking().unwrap_err().retry_after(),
            Duration::from_micros(month_after - next_month)
        );
    }
}

/// February 2028 has 29 days and February 2027 28: a call on the 28th at noon waits a day and a
/// half in the one, half a day in the other. A quarter (`3mo`) ends on March 31st.
#[test]
fn february_has_its_leap_day_and_quarters_their_months() {
    let user = [Subject::bytes(&b"bob"[..])];
    for (noon, wait) in [(utc(2028, 2, 28, 12, 0, 0), DAY + DAY / 2), (utc(2027, 2, 28, 12, 0, 0), DAY / 2)] {
        let clock = Arc::new(ManualClock::new(noon));
        let limiter = monthly(Arc::new(MemoryStore::with_clock(clock)), "calendar::february", 1, 1);
        limiter.check(&user).blocking().unwrap();
        assert_eq!(limiter.check(&user).blocking().unwrap_err().retry_after(), Duration::from_micros(wait));
        let peeked = limiter.peek(&user).blocking().unwrap();
        assert_eq!((peeked[0].remaining, peeked[0].reset), (0, Duration::from_micros(wait)));
    }
    let clock = Arc::new(ManualClock::new(utc(2028, 2, 15, 0, 0, 0)));
    let limiter = monthly(Arc::new(MemoryStore::with_clock(clock)), "calendar::quarter", 3, 1);
    limiter.check(&user).blocking().unwrap();
    let refused = limiter.check(&user).blocking().unwrap_err();
    assert_eq!(refused.retry_after(), Duration::from_micros(utc(2028, 4, 1, 0, 0, 0) - utc(2028, 2, 15, 0, 0, 0)));
    assert_eq!(refused.policies()[0].name(), "user-3mo");
}

/// Rules in months count in fixed windows only; the builder says so.
#[test]
fn months_need_fixed_windows() {
    let rule = Rule::calendar_months(1, 3).unwrap();
    for alg in Algorithm::ALL.into_iter().filter(|&a| a != Algorithm::FixedWindow) {
        let built = Limiter::builder("calendar::alg")
            .limit(Limit::new(LimitType::User, [rule]).algorithm(alg))
            .store(Arc::new(MemoryStore::new()))
            .build();
        assert!(built.unwrap_err().to_string().contains("calendar months count in fixed windows"), "{alg:?}");
    }
    // Beside a span under FixedWindow, and by default alone.
    let day = Rule::new(Duration::from_secs(86_400), 2).unwrap();
    Limiter::builder("calendar::mixed")
        .limit(Limit::new(LimitType::User, [day, rule]).algorithm(Algorithm::FixedWindow))
        .store(Arc::new(MemoryStore::new()))
        .build()
        .unwrap();
    assert!(Rule::calendar_months(5, 3).is_err());
    assert!(Rule::calendar_months(13, 3).is_err());
    assert_eq!(ratelimit::rule::CALENDAR_MONTHS, [1, 2, 3, 4, 6, 12]);
}

/// The overrides file reads `3/1mo` as three per calendar month, and refuses a month where a
/// duration is meant.
#[test]
fn the_overrides_file_reads_months() {
    use ratelimit::config::Overrides;
    let file = "[[limit]]\nlimiter = \"server::export\"\ntype = \"user\"\nrules = [\"3/1mo\", \"100/12mo\"]\n";
    let o = Overrides::parse(file, "o.toml").unwrap();
    let rules = o.limits()[0].rules.clone().unwrap();
    assert_eq!(rules, [Rule::calendar_months(1, 3).unwrap(), Rule::calendar_months(12, 100).unwrap()]);
    for bad in ["\"3/5mo\"", "\"3/0mo\""] {
        let e = Overrides::parse(&format!("[[limit]]\nlimiter = \"a\"\ntype = \"user\"\nrules = [{bad}]\n"), "o.toml");
        assert!(e.unwrap_err().to_string().contains("1, 2, 3, 4, 6 or 12"), "{bad}");
    }
    let e = Overrides::parse("[[limit]]\nlimiter = \"a\"\ntype = \"ip\"\nblock = \"1mo\"\n", "o.toml").unwrap_err();
    assert!(e.message().contains("expected a duration"), "{e}");
}

/// Both stores at pinned times from 2027 to 2254 (after now, so that Redis keeps the keys their
/// pinned expiry names, and below 2^53 µs): around month starts (a µs before, at, after), at
/// random instants, with costs 1 to 3, under rules of 1, 3 and 12 months and a month beside a
/// day; every answer (admitted or refused, remaining, reset, retry-after) as the definition's.
#[test]
fn both_stores_decide_months_as_the_definition() {
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let stores: [StoreHandle; 2] = rt.block_on(async {
        let redis = ratelimit::store::RedisStore::open(&server.url(), Duration::from_secs(5)).unwrap();
        [Arc::new(MemoryStore::new()) as StoreHandle, Arc::new(redis)]
    });
    let rule = |months, count| Rule::calendar_months(months, count).unwrap();
    let day = Rule::new(Duration::from_secs(86_400), 2).unwrap();
    let specs: [Vec<Rule>; 4] = [vec![rule(1, 3)], vec![rule(3, 5)], vec![rule(12, 4)], vec![rule(1, 3), day]];
    let (first, last) = ((2027 - 1970) * 12, (2254 - 1970) * 12);
    let mut calls = 0;
    for (s, store) in stores.iter().enumerate() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for case in 0..120 {
            let rules = specs[case % specs.len()].clone();
            let spec =
                LimitSpec { limit_type: LimitType::User, alg: Algorithm::FixedWindow, rules, burst: None, block: None };
            let limits = [spec];
            let limiter = build(store, &format!("calendar::def::{s}::{case}"), &limits);
            let who = subjects(&limits);
            let mut models =
                vec![limits[0].rules.iter().map(|&r| RuleModel::new(Algorithm::FixedWindow, r, None)).collect()];
            // A month start, then calls around it and into the months after.
            let mut t = first_day(first + rng.below(last - first)) * DAY;
            t -= [0, 1, SECOND, DAY][rng.below(4) as usize];
            for _ in 0..12 {
                let c = 1 + rng.below(3);
                let got = rt.block_on(definition::compare(&limiter, &limits, &mut models, &who, t, c));
                if let Err(e) = got {
                    panic!("store {s}, case {case}: {e}");
                }
                calls += 1;
                t += match rng.below(4) {
                    0 => 0,
                    1 => 1 + rng.below(SECOND),
                    2 => rng.below(40 * DAY),
                    // To the next month start, or a µs before it.
                    _ => first_day(calendar_month(t) + 1) * DAY - t - rng.below(2),
                };
            }
        }
    }
    assert_eq!(calls, 2 * 120 * 12);
}

/// A month with a penalty goes through the general script (decide.lua) on Redis: it answers as
/// the memory store, call by call, across a month's end (a refusal blocks for an hour; its
/// retry-after is the later of the block's end and the month's).
#[test]
fn the_general_script_decides_months_as_memory() {
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let user = [Subject::bytes(&b"erin"[..])];
    let limit = || Limit::new(LimitType::User, [Rule::calendar_months(1, 2).unwrap()]).block(Duration::from_secs(3600));
    let answers = |store: StoreHandle| {
        let limiter =
            Limiter::builder("calendar::block").limit(limit()).store(store).refusal_cache(false).build().unwrap();
        let start = utc(2031, 1, 31, 22, 0, 0);
        let times = [0, 1, 2, 1_800 * SECOND, 7_200 * SECOND, 7_200 * SECOND + 1, 7_200 * SECOND + 2, 7_201 * SECOND];
        let answers: Vec<(bool, Duration)> = times
            .iter()
            .map(|&d| {
                rt.block_on(async {
                    match limiter.check(&user).at(support::at(start + d)).await {
                        Ok(p) => (true, p.quota().unwrap().reset),
                        Err(e) => (false, e.retry_after()),
                    }
                })
            })
            .collect();
        answers
    };
    let redis =
        rt.block_on(async { ratelimit::store::RedisStore::open(&server.url(), Duration::from_secs(5)).unwrap() });
    let memory = answers(Arc::new(MemoryStore::new()));
    assert_eq!(answers(Arc::new(redis)), memory);
    let hour = Duration::from_secs(3600);
    assert_eq!(
        memory[..3],
        [(true, 2 * hour), (true, 2 * hour - Duration::from_micros(1)), (false, 2 * hour - Duration::from_micros(2))]
    );
    // February (the hour's block over): two calls, then refusals until March.
    assert_eq!(memory[4..].iter().map(|a| a.0).collect::<Vec<_>>(), [true, true, false, false]);
    let march = Duration::from_micros(utc(2031, 3, 1, 0, 0, 0) - utc(2031, 2, 1, 0, 0, 0) - 2);
    assert_eq!(memory[6].1, march);
}

/// The scripts' calendar arithmetic (lua/parts/calendar.lua, run by redis-server) against the
/// plain count of days, for windows of every allowed length: at each month start from 1970 to
/// 2254 (a µs before, at, a µs after) and at random instants up to 2^53 µs.
#[test]
fn the_scripts_calendar_is_the_plain_one() {
    let server = RedisServer::start();
    let mut con = server.client();
    // The part fills the two locals a script declares for it.
    let part = include_str!("../ratelimit-runtime/src/store/redis/lua/parts/calendar.lua");
    let script = format!(
        "local month_start, month_window\n{part}\nlocal n, out = ARGV[1] + 0, {{}}\n\
         for i = 2, #ARGV do\n\
           local idx, s, e = month_window(n, ARGV[i] + 0)\n\
           out[#out + 1] = idx; out[#out + 1] = s; out[#out + 1] = e\n\
         end\n\
         return out"
    );
    let mut times = Vec::new();
    for m in 1..(2254 - 1970) * 12 {
        let start = first_day(m) * DAY;
        times.extend([start - 1, start, start + 1]);
    }
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    // Below 2^53 µs and the end of its window (in 2255).
    let top = first_day((2255 - 1970) * 12) * DAY;
    times.extend((0..20_000).map(|_| rng.below(top)));
    let mut checked = 0;
    for months in ratelimit::rule::CALENDAR_MONTHS {
        let months = u64::from(months);
        for chunk in times.chunks(2_000) {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(&script).arg(0).arg(months);
            for t in chunk {
                cmd.arg(*t);
            }
            let got: Vec<u64> = cmd.query(&mut con).expect("EVAL");
            for (t, answer) in chunk.iter().zip(got.chunks(3)) {
                let idx = calendar_month(*t) / months;
                let want = [idx, first_day(idx * months) * DAY, first_day((idx + 1) * months) * DAY];
                assert_eq!(answer, want, "{months} months at {t} µs");
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 6 * times.len());
}

/// The example server's `GET /api/export` (3 per user per calendar month) in a process whose
/// clock reads 2026-11-30 23:59:4x and runs: three exports pass, the fourth is refused until the
/// month ends (about 12 s), and once December starts three pass again.
#[test]
fn export_quota_turns_with_the_month() {
    use support::server_process::{loopback, request_blocking, Process};
    let process = Process::spawn_under(
        &["faketime", "-f", "@2026-11-30 23:59:44"],
        &[],
        &[("FAKETIME_DONT_FAKE_MONOTONIC", "1")],
    );
    let addr = process.addr();
    let get = |path: &str, user: Option<&str>| {
        let headers: Vec<(&str, &str)> = user.map(|u| ("x-user-id", u)).into_iter().collect();
        request_blocking(addr, loopback(2), "GET", path, &headers)
    };
    // The server's clock, in seconds of the day, from a response's Date header.
    let clock = |reply: &support::server_process::Reply| -> u64 {
        let date = reply.header("date").expect("a Date header");
        assert!(date.contains("30 Nov 2026") || date.contains("01 Dec 2026"), "faked date: {date}");
        let hms = date.split_whitespace().nth(4).expect("hh:mm:ss");
        let parts: Vec<u64> = hms.split(':').map(|p| p.parse().expect("a number")).collect();
        let secs = parts[0] * 3600 + parts[1] * 60 + parts[2];
        if date.contains("01 Dec") {
            secs + 86_400
        } else {
            secs
        }
    };
    // From 12 s before the month ends (startup may take a few seconds of the lead).
    let end = 86_400;
    support::poll_until(
        Duration::from_secs(20),
        Duration::from_millis(100),
        "the faked clock to reach 23:59:48",
        || (clock(&get("/healthz", None)) >= end - 12).then_some(()),
    );
    assert_eq!(get("/api/export", None).status, 401, "no X-User-Id");
    for i in 0..3 {
        let ok = get("/api/export", Some("carol"));
        assert_eq!(ok.status, 200, "export {i}: {ok:?}");
        assert!(ok.header("ratelimit-policy").unwrap_or("").contains(r#""user-1mo";q=3;w=2592000"#), "{ok:?}");
    }
    let refused = get("/api/export", Some("carol"));
    let now = clock(&refused);
    assert!(now < end - 2, "the month must not have ended yet (server clock {now})");
    assert_eq!(refused.status, 429, "{refused:?}");
    let retry: u64 = refused.header("retry-after").expect("Retry-After").parse().unwrap();
    assert!(retry <= 12 && retry + 1 >= end - now && retry <= end - now + 1, "Retry-After {retry} at {now}");
    // Another user has a quota of their own.
    assert_eq!(get("/api/export", Some("dave")).status, 200);
    // The month turns: after the Retry-After, three exports pass again (December: 31 days).
    std::thread::sleep(Duration::from_secs(retry + 1));
    for i in 0..3 {
        let ok = get("/api/export", Some("carol"));
        assert_eq!(ok.status, 200, "export {i} in December: {ok:?}");
        assert!(clock(&ok) >= end);
        assert!(ok.header("ratelimit-policy").unwrap_or("").contains(r#""user-1mo";q=3;w=2678400"#), "{ok:?}");
    }
    let refused = get("/api/export", Some("carol"));
    let retry: u64 = refused.header("retry-after").expect("Retry-After").parse().unwrap();
    assert!((31 * 86_400 - 120..=31 * 86_400).contains(&retry), "the whole of December: {retry}");
}
