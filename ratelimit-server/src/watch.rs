//! Reloading: the configuration's files are looked at every second (their names, lengths and
//! modification times); on a change they are read again. A configuration that is refused is
//! logged with its file, line and reason, and the one in force keeps serving.

use crate::config::{self, fingerprint};
use crate::decide::Loaded;
use crate::service::State;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How often the files are looked at.
pub const EVERY: Duration = Duration::from_secs(1);

/// Watches `path` until the runtime ends.
pub fn spawn(path: PathBuf, options: config::Options, state: Arc<State>) {
    tokio::spawn(async move {
        let mut seen = fingerprint(&path);
        let mut tick = tokio::time::interval(EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let p = path.clone();
            let Ok(now) = tokio::task::spawn_blocking(move || fingerprint(&p)).await else { continue };
            if now == seen {
                continue;
            }
            seen = now;
            let p = path.clone();
            let Ok(result) = tokio::task::spawn_blocking(move || config::load(&p, &options)).await else { continue };
            match result {
                Ok(config) => {
                    let (domains, limits) = (config.domains.len(), config.limits);
                    state.loaded.store(Arc::new(Loaded::new(config)));
                    metrics::counter!("ratelimit_server_config_loads_total", "result" => "ok").increment(1);
                    tracing::info!(
                        "ratelimit-server: configuration reloaded from {} ({domains} domains, {limits} limits)",
                        path.display()
                    );
                }
                Err(e) => {
                    metrics::counter!("ratelimit_server_config_loads_total", "result" => "refused").increment(1);
                    tracing::error!("ratelimit-server: configuration refused, the previous one keeps serving: {e}");
                }
            }
        }
    });
}
