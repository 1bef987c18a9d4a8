//! Whether a limit refuses calls: [`Mode`].

use crate::error::ParseError;
use std::fmt;
use std::str::FromStr;

/// What a limit does with a call over its rules.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Refuse it (the default).
    #[default]
    Enforce,
    /// Decide and count as usual, but let it through: the would-be refusal is logged (throttled)
    /// and counted as `shadow_denied`. For trying a limit before enforcing it.
    Shadow,
    /// Do not decide at all (from the configuration file only).
    Off,
}

impl Mode {
    /// The name used in the configuration file: `enforce`, `shadow`, `off`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Shadow => "shadow",
            Mode::Off => "off",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Mode {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Mode, ParseError> {
        match s {
            "enforce" => Ok(Mode::Enforce),
            "shadow" => Ok(Mode::Shadow),
            "off" => Ok(Mode::Off),
            other => Err(ParseError::Unknown {
                what: "mode",
                value: other.to_owned(),
                expected: "\"enforce\", \"shadow\" or \"off\"",
            }),
        }
    }
}
