//! Asks a few times for one key and prints each decision and its headers.
//!
//! Start `sluice dev` (NATS on 127.0.0.1:4222), then:
//!
//! ```text
//! cargo run -p sluice-client --example allow -- [KEY] [POLICY] [COST]
//! ```

use sluice_client::Client;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let key = args.next().unwrap_or_else(|| "bob@x.io".to_string());
    let policy = args.next().unwrap_or_else(|| "default".to_string());
    let cost: u64 = args.next().map(|c| c.parse()).transpose()?.unwrap_or(1);
    let url = std::env::var("SLUICE_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into());

    let client = Client::connect(&url).await?;
    for i in 1..=20 {
        match client.ask(&key, &policy, cost).await {
            Ok(a) => {
                let headers: Vec<String> = a.headers().map(|(n, v)| format!("{n}: {v}")).collect();
                println!(
                    "#{i:2} {} by {:<10} remaining {:>3} of {:<3} retry after {:?}  [{}]",
                    if a.allowed { "allowed" } else { "denied " },
                    a.source,
                    a.remaining,
                    a.limit,
                    a.retry_after,
                    headers.join(", ")
                );
            }
            Err(e) => println!("#{i:2} error {}: {e}", e.status()),
        }
    }
    println!("{:?}", client.stats());
    Ok(())
}
