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

/// The environment's store variables, checked: `REDIS_SENTINEL_URLS` (comma-separated) with
/// `REDIS_SENTINEL_MASTER`, and `REDIS_PASSWORD` / `REDIS_USERNAME` for the primary. `None`
/// when Sentinel is not asked for; an error when it is half asked for, or when more than one of
/// `REDIS_URL`, `REDIS_CLUSTER_URLS` and Sentinel is set (no silent pick).
pub(crate) fn spec_from_env(var: &dyn Fn(&str) -> Option<String>) -> Result<Option<SentinelSpec>, String> {
    let named: Vec<&str> = ["REDIS_URL", "REDIS_CLUSTER_URLS", "REDIS_SENTINEL_URLS"]
        .into_iter()
        .filter(|name| var(name).is_some())
        .collect();
    if named.len() > 1 {
        return Err(format!(
            "{} are set together: name one store (REDIS_URL for one Redis, REDIS_CLUSTER_URLS for a cluster, \
             REDIS_SENTINEL_URLS with REDIS_SENTINEL_MASTER for Sentinel)",
            named.join(" and ")
        ));
    }
    let (urls, master) = match (var("REDIS_SENTINEL_URLS"), var("REDIS_SENTINEL_MASTER")) {
        (None, None) => return Ok(None),
        (Some(urls), Some(master)) => (urls, master),
        (Some(_), None) => {
            return Err("REDIS_SENTINEL_URLS is set without REDIS_SENTINEL_MASTER (the name the sentinels \
                        monitor the primary under, e.g. mymaster)"
                .to_owned())
        }
        (None, Some(_)) => {
            return Err("REDIS_SENTINEL_MASTER is set without REDIS_SENTINEL_URLS (the sentinels, e.g. \
                        redis://10.0.0.1:26379,redis://10.0.0.2:26379)"
                .to_owned())
        }
    };
    let urls = urls.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned);
    let mut spec = SentinelSpec::new(urls, master.trim());
    if let Some(password) = var("REDIS_PASSWORD") {
        spec = spec.primary_auth(var("REDIS_USERNAME"), password);
    }
    Ok(Some(spec))
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

    #[test]
    fn environment_conflicts_are_errors() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
        };
        assert_eq!(spec_from_env(&env(&[("REDIS_URL", "redis://a")])), Ok(None));
        let both = spec_from_env(&env(&[("REDIS_URL", "redis://a"), ("REDIS_SENTINEL_URLS", "redis://b")]));
        assert!(both.as_ref().is_err_and(|e| e.contains("REDIS_URL and REDIS_SENTINEL_URLS")), "{both:?}");
        let both = spec_from_env(&env(&[("REDIS_URL", "redis://a"), ("REDIS_CLUSTER_URLS", "redis://b")]));
        assert!(both.is_err());
        let half = spec_from_env(&env(&[("REDIS_SENTINEL_URLS", "redis://b")]));
        assert!(half.as_ref().is_err_and(|e| e.contains("without REDIS_SENTINEL_MASTER")), "{half:?}");
        let half = spec_from_env(&env(&[("REDIS_SENTINEL_MASTER", "m")]));
        assert!(half.as_ref().is_err_and(|e| e.contains("without REDIS_SENTINEL_URLS")), "{half:?}");
        let spec = spec_from_env(&env(&[
            ("REDIS_SENTINEL_URLS", " redis://a:26379, redis://b:26379 ,"),
            ("REDIS_SENTINEL_MASTER", "mymaster"),
            ("REDIS_PASSWORD", "pw"),
        ]));
        let expected = SentinelSpec::new(["redis://a:26379", "redis://b:26379"], "mymaster").primary_auth(None, "pw");
        assert_eq!(spec, Ok(Some(expected)));
    }
}
