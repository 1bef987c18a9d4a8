//! The model: plain values and what they mean, with no I/O and no global state but the
//! registry of limit identities: rules, limit types, subjects and IP addresses, modes, keys,
//! compiled limits, the rules in force as headers name them, and a store's decision.

pub(crate) mod addr;
pub(crate) mod compiled;
pub(crate) mod decision;
pub(crate) mod key;
pub(crate) mod limit;
pub(crate) mod limit_type;
pub(crate) mod member;
pub(crate) mod mode;
pub(crate) mod overriding;
pub(crate) mod policy;
pub(crate) mod refusal;
pub(crate) mod rule;
pub(crate) mod subject;
