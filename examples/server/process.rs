//! What the example server needs of its process: signals (shut down on Ctrl-C or `SIGTERM`,
//! re-read the limits file on `SIGHUP`) and logs on stderr.

/// Resolves on Ctrl-C (or `SIGTERM`). On Unix the handlers are installed by this call, not on
/// first poll, so a signal sent right after the startup line is not missed.
pub(crate) fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let handlers = signal(SignalKind::interrupt()).and_then(|int| Ok((int, signal(SignalKind::terminate())?)));
        async move {
            match handlers {
                Ok((mut int, mut term)) => {
                    tokio::select! {
                        _ = int.recv() => {}
                        _ = term.recv() => {}
                    }
                }
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Re-reads `RATELIMIT_CONFIG` on `SIGHUP`; a malformed file is reported and the limits in
/// force stay. Installed before the startup line, so that a `SIGHUP` right after it is handled
/// (its default action would end the process).
pub(crate) fn reload_on_sighup() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::hangup()) {
            Ok(mut hup) => {
                tokio::spawn(async move {
                    while hup.recv().await.is_some() {
                        match ratelimit::reload() {
                            Ok(generation) => {
                                eprintln!(
                                    "server: SIGHUP: limits reloaded from RATELIMIT_CONFIG (generation {generation})"
                                )
                            }
                            Err(e) => eprintln!("server: SIGHUP: {e}; the limits in force stay"),
                        }
                    }
                });
            }
            Err(e) => eprintln!("server: cannot handle SIGHUP: {e}"),
        }
    }
}

/// Prints `tracing` events on stderr: `RUST_LOG` if set and valid, else `info`.
pub(crate) fn init_logs() {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::prelude::*;
    // `Targets` reads `warn`, `ratelimit_runtime=debug`, `info,ratelimit_runtime=trace`: what
    // `EnvFilter` reads but span and field filters, and without its regex engine to compile.
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|v| v.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_default(LevelFilter::INFO));
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_filter(filter);
    // A subscriber already set (by an embedding program) is kept.
    let _ = tracing_subscriber::registry().with(logs).try_init();
}
