//! A bucket's values carried to the rules that decide the call, when a runtime override was set,
//! changed or ended since they were written: the units in the bucket stay the units in the
//! bucket (`algorithm::carry_level`; see docs/design.md, "Runtime overrides").

use super::shard::{Cells, Kept};
use crate::algorithm::{carry_level, Algorithm};
use crate::model::compiled::CompiledLimit;
use crate::model::rule::Rule;

/// What `Cells::kept` is once `limit` wrote them.
pub(super) fn kept_of(limit: &CompiledLimit) -> Option<Box<Kept>> {
    limit.overrides.as_ref().map(|_| Box::new(Kept(limit.rules.clone())))
}

/// Converts `cells` of `limit` at `now` to `limit`'s rules, in place, when they were kept under
/// others. A state of another shape (another number of rules) is left as it is: the stores read
/// it as empty, as before overrides.
#[inline(always)]
pub(super) fn carry(cells: &mut Cells, limit: &CompiledLimit, now: u64) {
    // The usual case: no override wrote them, none decides now. Tested where the call is
    // decided: the call of the whole function, on every decision, cost more than the test.
    if cells.kept.is_some() || limit.overrides.is_some() {
        carry_kept(cells, limit, now);
    }
}

#[inline(never)]
fn carry_kept(cells: &mut Cells, limit: &CompiledLimit, now: u64) {
    if !matches!(limit.algorithm, Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::Gcra) {
        return;
    }
    let kept = cells.kept.take();
    let from: &[Rule] = match (&kept, &limit.overrides) {
        (Some(k), _) => &k.0,
        (None, Some(base)) => base,
        (None, None) => return,
    };
    let k = limit.algorithm.cells();
    if from != &limit.rules[..] && cells.values.len() == k * limit.rules.len() && from.len() == limit.rules.len() {
        for (r, (was, to)) in from.iter().zip(&limit.rules).enumerate() {
            // A calendar window is no fixed rate: its level is read as it is.
            if was.months().is_some() || to.months().is_some() {
                continue;
            }
            let (Some(e), Some(f)) = (cells.values[r * k], cells.values[r * k + 1]) else { continue };
            let carried = carry_level(was.rate(was.count()), to.rate(limit.capacity(r)), now, e, f);
            let [e, f] = carried.map_or([None, None], |[e, f, _]| [Some(e), Some(f)]);
            cells.values[r * k] = e;
            cells.values[r * k + 1] = f;
        }
    }
    cells.kept = kept_of(limit);
}
