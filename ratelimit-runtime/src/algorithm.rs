//! The counting algorithms a limit can use.

/// How a limit counts (the attribute's `algorithm = …`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Algorithm {
    /// An exact sliding log: every admitted unit is remembered for the longest window.
    #[default]
    SlidingWindow,
}

impl Algorithm {
    /// The short code used in keys and in the script's arguments.
    pub(crate) const fn code(self) -> &'static str {
        match self {
            Algorithm::SlidingWindow => "sw",
        }
    }
}
