//! What a limit is counted per: everyone, a client IP, a user, or an application key.

use std::fmt;

/// What a limit is counted per (the attribute's `type = …`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LimitType {
    /// One budget shared by every caller (`Default` in the attribute is an alias).
    Global,
    /// One budget per client IP (IPv6 per /64 by default).
    Ip,
    /// One budget per user id.
    User,
    /// One budget per application-chosen key.
    Key,
}

impl LimitType {
    /// The lower-case name used in keys, messages and headers.
    pub const fn as_str(self) -> &'static str {
        match self {
            LimitType::Global => "global",
            LimitType::Ip => "ip",
            LimitType::User => "user",
            LimitType::Key => "key",
        }
    }
}

impl fmt::Display for LimitType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
