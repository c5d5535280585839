//! One request, many answers: publish once with a fresh inbox and read
//! whatever replies come within a time. The top-keys scatter, `sluice
//! status`'s worker ping and the region hellos all ask this way; each stops
//! reading when it has what it needs (every partition, every live worker)
//! or when the time is over.

use anyhow::Result;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use std::time::Duration;

/// Publishes `body` on `subject` with a new inbox of `client` as the reply
/// subject; the replies that arrive within `wait`, in order.
pub async fn scatter(
    client: &async_nats::Client,
    subject: String,
    body: Bytes,
    wait: Duration,
) -> Result<impl Stream<Item = async_nats::Message> + Unpin> {
    let inbox = client.new_inbox();
    let replies = client.subscribe(inbox.clone()).await?;
    client.publish_with_reply(subject, inbox, body).await?;
    client.flush().await?;
    Ok(replies.take_until(Box::pin(tokio::time::sleep(wait))))
}
