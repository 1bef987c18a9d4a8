//! The store side of peek and reset: which subjects a store is asked about ([`Targets`]), and
//! how it reads a peek's answer.

use crate::error::StoreError;
use crate::model::compiled::CompiledLimit;
use crate::model::policy::Policy;
use crate::model::policy::RuleStatus;
use std::time::Duration;

/// The subjects of a peek or reset: one per limit, `None` to leave that limit alone.
pub struct Targets<'a> {
    pub(crate) limits: &'a [CompiledLimit],
    pub(crate) subjects: &'a [Option<&'a [u8]>],
    /// Pinned time in µs since the Unix epoch (peek; as a [`Call`](super::Call)'s).
    pub(crate) now_us: Option<u64>,
}

impl Targets<'_> {
    /// The limits with a subject, and the subject.
    pub(crate) fn present(&self) -> impl Iterator<Item = (usize, &CompiledLimit, &[u8])> + Clone + '_ {
        self.limits
            .iter()
            .zip(self.subjects)
            .enumerate()
            .filter_map(|(i, (limit, subject))| subject.map(|s| (i, limit, s)))
    }
}

/// The rules of the limits a peek reads, by limit index: what its flat answer is read with,
/// owned so that the answer can be read after the call's borrows end.
pub(crate) type Shapes = Vec<(usize, Vec<Policy>)>;

/// The shapes of the limits `indices` of `targets`.
pub(crate) fn shapes(targets: &Targets<'_>, indices: &[usize]) -> Shapes {
    indices.iter().map(|&i| (i, targets.limits[i].policies().collect())).collect()
}

/// Reads the flat answer of a peek (`remaining, reset µs` per rule, limit after limit) into
/// `out`.
pub(crate) fn read_statuses(shapes: &Shapes, flat: &[i64], out: &mut Vec<RuleStatus>) -> Result<(), StoreError> {
    let rules: usize = shapes.iter().map(|(_, p)| p.len()).sum();
    if flat.len() != 2 * rules {
        return Err(StoreError::Protocol(format!("a peek answered {} values instead of {}", flat.len(), 2 * rules)));
    }
    let mut values = flat.chunks_exact(2);
    for (limit, policies) in shapes {
        for (&policy, pair) in policies.iter().zip(&mut values) {
            out.push(RuleStatus {
                limit: *limit,
                policy,
                remaining: u64::try_from(pair[0]).unwrap_or(0),
                reset: Duration::from_micros(u64::try_from(pair[1]).unwrap_or(0)),
            });
        }
    }
    Ok(())
}
