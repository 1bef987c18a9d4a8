//! Deciding one `ShouldRateLimit` request: match each descriptor, drop what `unlimited` and
//! `replaces` drop, then decide every counted descriptor together. The descriptors that count
//! in the same limiter (by default `rls:<domain>`) at the same cost are the limits of one
//! [`Limiter`], built once per combination and cached: one atomic step and one store round
//! trip, in which a refused request counts in none. Descriptors of different limiters or
//! different per-descriptor `hits_addend`s are decided one group after the other, and a refusal
//! gives back what the groups before it took.

use crate::config::matcher::{self, Matched};
use crate::config::{Config, LimitSpec};
use crate::proto::{Code, DescriptorStatus, RateLimitRequest, RateLimitResponse};
use crate::status;
use ratelimit::{Cause, Limiter, Permit, RateLimited, Subject};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tonic::Status;

/// Most limiters (descriptor combinations) kept per configuration; past it the cache restarts.
const MAX_LIMITERS: usize = 10_000;

/// A configuration in force and the limiters built for it.
pub struct Loaded {
    pub config: Config,
    limiters: Mutex<HashMap<Vec<usize>, Arc<Limiter>>>,
}

impl Loaded {
    pub fn new(config: Config) -> Loaded {
        Loaded { config, limiters: Mutex::new(HashMap::new()) }
    }

    /// The limiter deciding `specs` together (in this order), built on first use.
    fn limiter(&self, specs: &[&Arc<LimitSpec>]) -> Result<Arc<Limiter>, Status> {
        let ids: Vec<usize> = specs.iter().map(|s| s.id).collect();
        let mut cache = self.limiters.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(l) = cache.get(&ids) {
            return Ok(l.clone());
        }
        let name = specs.first().map_or("rls", |s| s.limiter.as_str());
        let mut builder = Limiter::builder(name);
        for spec in specs {
            if let Some(limit) = spec.limit() {
                builder = builder.limit(limit);
            }
        }
        let limiter = Arc::new(builder.build().map_err(|e| Status::internal(format!("limiter {name}: {e}")))?);
        if cache.len() >= MAX_LIMITERS {
            cache.clear();
        }
        cache.insert(ids, limiter.clone());
        Ok(limiter)
    }
}

/// One request descriptor on its way.
struct Slot {
    matched: Option<Matched>,
    cost: u64,
}

/// Decides `request` under `loaded`; `headers`: add the `RateLimit` fields to the response.
pub async fn decide(loaded: &Loaded, request: RateLimitRequest, headers: bool) -> Result<RateLimitResponse, Status> {
    if request.domain.is_empty() {
        return Err(Status::invalid_argument("rate limit domain must not be empty"));
    }
    if request.descriptors.is_empty() {
        return Err(Status::invalid_argument("rate limit descriptor list must not be empty"));
    }
    let request_cost = u64::from(request.hits_addend.max(1));
    let mut slots: Vec<Slot> = request
        .descriptors
        .iter()
        .map(|d| Slot {
            matched: matcher::find(&loaded.config, &request.domain, &d.entries),
            cost: d.hits_addend.map_or(request_cost, |h| h.value),
        })
        .collect();
    // `replaces`: a limit named by another matched limit's `replaces` is not applied.
    let replaced: Vec<&str> = slots
        .iter()
        .filter_map(|s| s.matched.as_ref())
        .flat_map(|m| m.spec.replaces.iter().map(String::as_str))
        .collect();
    let replaced: Vec<String> = replaced.into_iter().map(str::to_owned).collect();
    for slot in &mut slots {
        if slot.matched.as_ref().is_some_and(|m| !m.spec.name.is_empty() && replaced.contains(&m.spec.name)) {
            slot.matched = None;
        }
    }
    let mut statuses: Vec<DescriptorStatus> = slots.iter().map(|s| status::initial(s.matched.as_ref())).collect();
    let mut response = RateLimitResponse { overall_code: Code::Ok as i32, ..Default::default() };
    // `requests_per_unit: 0` refuses without counting anything (as any refusal here).
    if statuses.iter().zip(&slots).any(|(st, s)| st.code == Code::OverLimit as i32 && !is_shadow(s)) {
        response.overall_code = Code::OverLimit as i32;
        response.statuses = statuses;
        status::count(&slots.iter().map(|s| s.matched.as_ref()).collect::<Vec<_>>(), &response);
        return Ok(response);
    }
    // Groups: (limiter, cost) in the order first met, each with its descriptors' indexes.
    let mut groups: Vec<((&str, u64), Vec<usize>)> = Vec::new();
    for (i, slot) in slots.iter().enumerate() {
        let Some(m) = &slot.matched else { continue };
        if m.spec.rules.is_none() || m.spec.refuse_all {
            continue;
        }
        let key = (m.spec.limiter.as_str(), slot.cost);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push(i),
            None => groups.push((key, vec![i])),
        }
    }
    let mut limiters = Vec::with_capacity(groups.len());
    for (_, members) in &groups {
        let specs: Vec<&Arc<LimitSpec>> =
            members.iter().filter_map(|&i| slots[i].matched.as_ref().map(|m| &m.spec)).collect();
        let subjects: Vec<Subject<'static>> =
            members.iter().filter_map(|&i| slots[i].matched.as_ref().map(|m| m.subject.clone())).collect();
        limiters.push((loaded.limiter(&specs)?, subjects));
    }
    let mut permits: Vec<Permit<'_>> = Vec::with_capacity(groups.len());
    let mut refusal: Option<(usize, RateLimited)> = None;
    for (g, ((_, cost), _)) in groups.iter().enumerate() {
        let (limiter, subjects) = &limiters[g];
        match limiter.check(subjects).cost(*cost).await {
            Ok(permit) => permits.push(permit),
            Err(refused) => {
                refusal = Some((g, refused));
                break;
            }
        }
    }
    match refusal {
        None => {
            for (g, permit) in permits.iter().enumerate() {
                status::allowed(&mut statuses, &groups[g].1, &slots_specs(&slots), permit.quota());
            }
            if headers {
                // The tightest group's fields (a request has one group but in rare cases).
                if let Some(q) = permits.iter().filter_map(Permit::quota).min_by_key(|q| q.remaining) {
                    response.response_headers_to_add = status::header_values(&q.headers());
                }
            }
        }
        Some((g, refused)) => {
            // What earlier groups took is given back: the request counts in none.
            for permit in permits {
                if let Err(e) = permit.refund().await {
                    tracing::warn!("ratelimit-server: giving back an earlier group's units failed: {e}");
                }
            }
            match refused.cause() {
                Cause::Exceeded | Cause::CostTooHigh | Cause::Concurrency => {}
                Cause::StoreUnavailable => return Err(Status::unavailable(refused.to_string())),
                Cause::SubjectMissing => {
                    return Err(Status::invalid_argument(format!(
                    "{refused}: a descriptor's value is not the subject its limiter counts (an IP address for type ip)"
                )))
                }
                _ => return Err(Status::internal(refused.to_string())),
            }
            status::refused(&mut statuses, &groups[g].1, &slots_specs(&slots), &refused);
            response.overall_code = Code::OverLimit as i32;
            if headers {
                response.response_headers_to_add = status::header_values(&refused.headers());
            }
        }
    }
    response.statuses = statuses;
    status::count(&slots.iter().map(|s| s.matched.as_ref()).collect::<Vec<_>>(), &response);
    Ok(response)
}

fn is_shadow(slot: &Slot) -> bool {
    slot.matched.as_ref().is_some_and(|m| m.spec.shadow)
}

fn slots_specs(slots: &[Slot]) -> Vec<Option<&LimitSpec>> {
    slots.iter().map(|s| s.matched.as_ref().map(|m| &*m.spec)).collect()
}
