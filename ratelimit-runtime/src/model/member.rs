//! A call's id in a store: what finds its sliding-window entries and concurrency slots again
//! when it gives them back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// A call's id in a store (the member of its sliding-window entries and concurrency slots): one
/// no other call, in this process or any other, will use. Kept as the per-call counter it is
/// made from, 8 bytes: every decision and permit carries one, and most (in memory) carry none.
/// Its bytes, as a store keeps them, are a random per-process UUID with the counter folded
/// into its low half ([`bytes`](Self::bytes)); 16 raw bytes keep a Redis ZSET small.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Member(u64);

impl Member {
    /// No member: the call left nothing in the store that a member finds.
    pub(crate) const NONE: Member = Member(0);

    /// The member's bytes in a store (zeros for none).
    pub(crate) fn bytes(self) -> [u8; 16] {
        static PROCESS: OnceLock<u128> = OnceLock::new();
        if self == Member::NONE {
            return [0; 16];
        }
        let base = *PROCESS.get_or_init(|| uuid::Uuid::new_v4().as_u128());
        (base ^ u128::from(self.0)).to_be_bytes()
    }
}

/// A member no other call uses (see [`Member`]).
pub(crate) fn unique_member() -> Member {
    // From 1: 0 is no member.
    static COUNTER: AtomicU64 = AtomicU64::new(1);
    Member(COUNTER.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    #[test]
    fn members_are_unique() {
        let a = super::unique_member();
        let b = super::unique_member();
        assert_ne!(a, b);
        assert_ne!(a.bytes(), b.bytes());
        assert_ne!(a.bytes(), super::Member::NONE.bytes());
        assert_eq!(super::Member::NONE.bytes(), [0; 16]);
    }
}
