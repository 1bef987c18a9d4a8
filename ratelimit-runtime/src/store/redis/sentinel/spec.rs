//! Where a Sentinel-managed primary is found ([`SentinelSpec`]), from code or from the
//! environment.

use super::super::commands::redact;
use std::fmt;

/// Where a Sentinel-managed primary is found: the sentinels, the name they monitor it under, and
/// the credentials of the data nodes (the sentinels' own go in their URLs).
#[derive(Clone, PartialEq, Eq)]
pub struct SentinelSpec {
    pub(crate) urls: Vec<String>,
    pub(crate) master: String,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
}

impl SentinelSpec {
    /// Sentinels at `urls` (`redis://[:password@]host:port`, the password being the sentinels'
    /// own) monitoring the primary named `master`.
    pub fn new(urls: impl IntoIterator<Item = impl Into<String>>, master: impl Into<String>) -> SentinelSpec {
        SentinelSpec {
            urls: urls.into_iter().map(Into::into).collect(),
            master: master.into(),
            username: None,
            password: None,
        }
    }

    /// The credentials of the primary and replicas (`AUTH [username] password`).
    pub fn primary_auth(mut self, username: Option<String>, password: impl Into<String>) -> SentinelSpec {
        self.username = username;
        self.password = Some(password.into());
        self
    }

    fn sentinel_list(&self) -> String {
        self.urls.iter().map(|u| redact(u)).collect::<Vec<_>>().join(",")
    }

    /// For logs: the sentinels without their passwords, and the monitored name.
    pub(super) fn describe(&self) -> String {
        format!("redis sentinel ({} master {})", self.sentinel_list(), self.master)
    }
}

/// Never shows a password.
impl fmt::Debug for SentinelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelSpec")
            .field("urls", &self.sentinel_list())
            .field("master", &self.master)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_debug_hides_passwords() {
        let spec = SentinelSpec::new(["redis://:sentinel-secret@10.0.0.1:26379"], "mymaster")
            .primary_auth(None, "data-secret");
        let shown = format!("{spec:?}");
        assert!(!shown.contains("secret"), "{shown}");
        assert!(shown.contains("10.0.0.1:26379") && shown.contains("mymaster"), "{shown}");
    }
}
