//! # sluice-bench
//!
//! The load generator engine behind `sluice bench` (sluice and the echo
//! ceiling, over NATS) and `sluice-bench-redis` (Redis + Lua limiters, for
//! comparison). Both binaries drive their targets with this same code, the
//! same flags and the same report, so their numbers compare; only the
//! targets differ, and the product binary carries no client for other
//! systems. See docs/BENCHMARKS.md, "How the load is generated".
//!
//! - [`LoadArgs`] / [`Plan`] (`run.rs`): the load flags every binary
//!   flattens into its command line, checked; [`Plan::run`] loads a target
//!   and prints the report (text, or one JSON object with `--json`).
//! - [`Connect`] / [`Target`] (`target.rs`): the seam to what is loaded;
//!   one `Target` per connection, asked by key number.
//! - `load.rs`: the threads, the closed and open loops, the measured window.
//! - `keys.rs`: uniform, Zipf or sequential key numbers (optionally with a
//!   few hot keys), and the [`Rng`].
//! - `admission.rs`: over- and under-admission of fixed-window limits,
//!   per key and window, from the windows the targets' answers name.
//! - `report.rs`: outcomes, HDR latency histograms, the [`Report`].
//!
//! A target that allows everything, loaded with 1000 requests:
//!
//! ```
//! use sluice_bench::{load, Connect, Dist, Keys, LoadOptions, Outcome, Reply, Target};
//! use std::time::Duration;
//!
//! #[derive(Clone)]
//! struct Yes;
//!
//! impl Connect for Yes {
//!     type Target = Yes;
//!     async fn connect(&self, _index: usize) -> anyhow::Result<Yes> {
//!         Ok(Yes)
//!     }
//! }
//!
//! impl Target for Yes {
//!     async fn ask(&self, _key: usize) -> Reply {
//!         Reply::from(Outcome::Allowed)
//!     }
//! }
//!
//! let opts = LoadOptions {
//!     concurrency: 8,
//!     connections: 2,
//!     threads: 2,
//!     duration: Duration::ZERO,
//!     warmup: Duration::ZERO,
//!     requests: Some(1000),
//!     rate: None,
//!     progress: false,
//!     admission: None,
//! };
//! let measured = load::run(Yes, Keys::new(100, Dist::Zipf, 1.0), &opts)?;
//! assert_eq!(measured.recorder.allowed, 1000);
//! # anyhow::Ok(())
//! ```

pub mod admission;
pub mod keys;
pub mod load;
pub mod report;
mod run;
mod target;

pub use keys::{Dist, Keys, Rng};
pub use load::LoadOptions;
pub use report::{Outcome, Report};
pub use run::{parse_duration, LoadArgs, Plan};
pub use target::{Connect, Reply, Target};
