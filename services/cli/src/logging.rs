//! Where logs go and in which form: `--log-format text` (the default, one
//! readable line per event) or `--log-format json` (one JSON object per
//! line, for a log pipeline that parses them), both to stderr and filtered
//! by `SLUICE_LOG` (default `info,async_nats=warn`).
//!
//! JSON lines are tracing-subscriber's own formatter, with each event's
//! fields flattened beside `timestamp`, `level` and `target`, so they hold
//! the same fields as a text line (`message`, `worker`, `partitions`, ...)
//! under the same names, and the spans an event happened in.

use tracing_subscriber::EnvFilter;

/// How log events are written.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// One readable line per event.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the process's logger.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_env("SLUICE_LOG")
        .unwrap_or_else(|_| EnvFilter::new("info,async_nats=warn"));
    let logs = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    match format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().flatten_event(true).with_ansi(false).init(),
    }
}
