//! Shows the three fallbacks. Run it against `sluice dev`, then stop the
//! workers (or run it with no worker at all, only a nats-server with the
//! mapping from `sluice nats-config`) and run it again:
//!
//! ```text
//! cargo run -p sluice-client --example fallback
//! ```
//!
//! With no worker, NATS answers "no responders" within a fraction of a
//! millisecond, so each fallback decides in a few ms (the client retries
//! twice first, in case the partition is only changing owners), far below
//! the 100 ms timeout.

use sluice_client::{Client, ClientOptions, Fallback};
use std::time::Instant;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("SLUICE_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into());
    for fallback in [Fallback::Open, Fallback::Closed, Fallback::Local] {
        let opts = ClientOptions::default().fallback(fallback);
        let client = Client::connect_with(&url, opts).await?;
        println!("fallback = {fallback}");
        for i in 1..=3 {
            let started = Instant::now();
            let result = client.allow("fallback-demo").await;
            let took = started.elapsed();
            match result {
                Ok(a) => println!(
                    "  #{i} {} by {} in {took:.2?}",
                    if a.allowed { "allowed" } else { "denied" },
                    a.source
                ),
                Err(e) => println!("  #{i} error {} in {took:.2?}: {e}", e.status()),
            }
        }
    }
    Ok(())
}
