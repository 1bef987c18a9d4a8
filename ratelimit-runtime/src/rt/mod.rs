//! Runtime plumbing: the library's own I/O runtime, clocks, and locks that outlive a panic.

pub mod clock;
pub(crate) mod hash;
pub(crate) mod io;
pub(crate) mod lock;
pub(crate) mod throttle;
