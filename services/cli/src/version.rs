//! What `sluice --version` (and `-V`) prints:
//!
//! ```text
//! sluice 0.2.0 (commit abc1234)
//! formats: snapshot 3, journal 7, holder 2, usage 2
//! ```
//!
//! Why more than the release: a build between releases is told apart by
//! its commit (build.rs), and during a rolling upgrade what an operator
//! needs to know is which stored formats each binary reads and writes
//! (sluice_core::format): a worker refuses state in a format newer than it
//! reads, so a worker whose journal format is older than its peers' cannot
//! take their partitions over. The wire protocol has no version number of
//! its own, so none is printed for it.

use sluice_core::format;
use std::sync::LazyLock;

/// The text after `sluice `, built once (clap wants a `&'static str`).
static TEXT: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{} (commit {})\nformats: snapshot {}, journal {}, holder {}, usage {}",
        env!("CARGO_PKG_VERSION"),
        env!("SLUICE_COMMIT"),
        format::SNAPSHOT,
        format::JOURNAL,
        format::HOLDER,
        format::USAGE,
    )
});

/// The version text clap prints after the binary's name.
pub fn text() -> &'static str {
    &TEXT
}
