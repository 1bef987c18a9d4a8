//! A call decided slot by slot on a Redis Cluster: the slots its limits live in, each slot's
//! script, and the releases that give a call back when a later slot refuses it.

use super::SlotPart;
use crate::error::StoreError;
use crate::model::compiled::CompiledLimit;
use crate::model::decision::Decision;
use crate::model::key::cluster_slot;
use crate::model::member::Member;
use crate::store::overrides::Known;
use crate::store::redis::batch;
use crate::store::redis::commands::{general_command, ScriptOp};
use crate::store::redis::script::{eval, eval_checked, Script};
use crate::store::Call;
use redis::cluster_async::ClusterConnection;
use redis::Cmd;

/// The `EVALSHA` that decides the limits `indices` of `call` (one slot's) alone, and its script:
/// a batch script's batch of one when one can decide them, else the general script.
pub(super) fn decide_command(
    call: &Call<'_>,
    indices: impl Iterator<Item = usize> + Clone,
    member: Member,
) -> (Cmd, &'static Script) {
    match batch::batchable(call, indices.clone()) {
        Some(kind) => batch::one_command(&batch::encode(call, indices, member, kind)),
        None => general_command(call, indices, member, ScriptOp::Decide),
    }
}

/// The limits `indices` of `call` grouped by the slot of their key, in the order the slots first
/// appear, each group with its decide and release commands.
pub(super) fn slot_parts(call: &Call<'_>, indices: std::ops::Range<usize>, member: Member) -> Vec<SlotPart> {
    slot_parts_by(call, indices, member, |limits| decide_command(call, limits.iter().copied(), member))
}

/// As [`slot_parts`], each group's decision made by `decide`.
pub(super) fn slot_parts_by(
    call: &Call<'_>,
    indices: std::ops::Range<usize>,
    member: Member,
    decide: impl Fn(&[usize]) -> (Cmd, &'static Script),
) -> Vec<SlotPart> {
    by_slot(indices.map(|i| (i, &call.limits[i], call.subjects[i])))
        .into_iter()
        .map(|limits| SlotPart {
            decide: decide(&limits),
            // Given back at once: the units are in the window of "now".
            release: general_command(call, limits.iter().copied(), member, ScriptOp::Release(0, 0)),
            limits,
        })
        .collect()
}

/// The shadow limits of a call the others admitted (`d`), slot by slot: each slot's script
/// decides its share as a shadow group (recording nothing if it would refuse). A slot that would
/// refuse, or fails, has the slots before it give the call back; a refusal is noted on `d`
/// (the limit among the call's shadow limits, which start at `enforced`), a failure logged.
pub(super) async fn shadow_by_slot(
    conn: &mut ClusterConnection,
    parts: &[SlotPart],
    member: Member,
    enforced: usize,
    d: &mut Decision,
) {
    for (done, part) in parts.iter().enumerate() {
        let refusal = match eval(conn, &part.decide, member).await {
            Ok(answer) => match answer.shadow_refusal() {
                None => continue,
                Some((limit, rule, wait)) => {
                    // The script's index counts within this slot's limits.
                    let limit = part.limits.get(limit).map_or(0, |i| i - enforced);
                    Some((limit, rule, u64::try_from(wait.as_micros()).unwrap_or(u64::MAX)))
                }
            },
            Err(e) => {
                tracing::warn!(error = %e, "ratelimit: could not decide the shadow limits on a cluster slot");
                None
            }
        };
        for earlier in &parts[..done] {
            if let Err(e) = eval(conn, &earlier.release, member).await {
                tracing::warn!(error = %e, "ratelimit: could not release a unit admitted on another cluster slot");
            }
        }
        if let Some((limit, rule, wait)) = refusal {
            d.refused_in_shadow(limit, rule, wait);
        }
        return;
    }
}

/// The limits (index, limit, subject) grouped by the slot of their key, in the order the slots
/// first appear: a script, or a `DEL`, may not span slots.
pub(super) fn by_slot<'a>(limits: impl Iterator<Item = (usize, &'a CompiledLimit, &'a [u8])>) -> Vec<Vec<usize>> {
    let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
    for (i, limit, subject) in limits {
        let slot = cluster_slot(&limit.redis_key(subject));
        match groups.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, v)) => v.push(i),
            None => groups.push((slot, vec![i])),
        }
    }
    groups.into_iter().map(|(_, v)| v).collect()
}

/// Decides slot by slot (see the module's documentation); with `known`, each slot's script
/// checks its limits' runtime overrides, and a slot whose overrides changed refuses the call
/// as a slot that denies it does.
pub(super) async fn decide_by_slot(
    conn: &mut ClusterConnection,
    parts: &[SlotPart],
    member: Member,
    known: Option<&Known>,
) -> Result<Decision, StoreError> {
    let mut tightest: Option<Decision> = None;
    // The time of the first slot's decision: what a refund finds the call's windows by.
    let mut first_at = None;
    for (done, part) in parts.iter().enumerate() {
        let decided = match known {
            Some(known) => eval_checked(conn, &part.decide, member, known).await,
            None => eval(conn, &part.decide, member).await,
        };
        let outcome = decided.map(|mut d| {
            // The script's indexes count within this slot's limits.
            d.limit = part.limits.get(d.limit).copied().unwrap_or(0);
            d
        });
        match outcome {
            Ok(d) if d.allowed => {
                let at = *first_at.get_or_insert(d.at_us);
                if tightest.is_none_or(|t| d.remaining < t.remaining) {
                    tightest = Some(Decision { at_us: at, ..d });
                }
            }
            other => {
                for earlier in &parts[..done] {
                    if let Err(e) = eval(conn, &earlier.release, member).await {
                        tracing::warn!(error = %e, "ratelimit: could not release a unit admitted on another cluster slot");
                    }
                }
                return other;
            }
        }
    }
    tightest.ok_or_else(|| StoreError::Protocol("a call with no limits".to_owned()))
}
