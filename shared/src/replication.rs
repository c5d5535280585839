//! How many JetStream replicas sluice keeps its state with: leases,
//! snapshots, policies, the journal, alerts and usage.
//!
//! Replication used to be off unless asked for (`--replicas 1` by
//! default), so a worker that followed the README onto a 3-node cluster
//! kept everything on one node, and losing that node lost the state. Now
//! a worker given no `--replicas` matches the cluster it is connected to
//! ([`choose`]): 3 replicas when the NATS servers' cluster has 3 or more
//! servers, 1 on a single server. What it sees of the cluster is the
//! connection's INFO ([`ClusterView`]): whether the server is clustered,
//! and the client URLs the cluster advertises (one per server). A server
//! that names a cluster but advertises no URL is either a single server
//! with a cluster block (a region's server, SPEC §12) or a cluster set up
//! with `no_advertise` (the NATS Helm chart's default): the INFO cannot
//! tell them apart, and 3 replicas on a single server would stop the
//! worker, so it keeps 1 and says to give `--replicas 3` on a cluster (the
//! Kubernetes manifests do). A cluster whose other servers have not joined yet shows fewer:
//! the worker says what it saw, and `sluice status` warns later
//! ([`below_cluster`]), when the cluster could give more than the state
//! is kept with.
//!
//! Only the first worker's choice makes the buckets and streams; later
//! workers open them as they are (only the alerts stream and the usage
//! tiers are brought to each worker's count).

use std::fmt;

/// The replicas a worker keeps its state with in a cluster of 3 or more.
pub const CLUSTER_REPLICAS: usize = 3;

/// What a client connection sees of its NATS servers (from their INFO).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterView {
    /// The server belongs to a cluster (its INFO names one).
    pub clustered: bool,
    /// The distinct client URLs the cluster advertises: one per server
    /// when it advertises them; 0 with `no_advertise`.
    pub advertised: usize,
}

impl ClusterView {
    /// The view from a server's INFO: its cluster's name, if any, and its
    /// `connect_urls` (duplicates counted once).
    pub fn from_info<S: AsRef<str>>(cluster: Option<&str>, connect_urls: &[S]) -> ClusterView {
        let mut urls: Vec<&str> = connect_urls.iter().map(AsRef::as_ref).collect();
        urls.sort_unstable();
        urls.dedup();
        ClusterView {
            clustered: cluster.is_some_and(|c| !c.is_empty()),
            advertised: urls.len(),
        }
    }

    /// How many replicas the cluster could give sluice's state, up to
    /// [`CLUSTER_REPLICAS`].
    pub fn could_give(&self) -> usize {
        match (self.clustered, self.advertised) {
            (false, _) => 1,
            (true, n) if n >= CLUSTER_REPLICAS => CLUSTER_REPLICAS,
            (true, _) => 1,
        }
    }
}

/// The replicas chosen, and why: what a worker says at start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    pub replicas: usize,
    pub why: Why,
}

/// Why a worker keeps its state with the replicas it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// `--replicas N` (or `SLUICE_REPLICAS`).
    Given,
    /// One NATS server, no cluster.
    SingleServer,
    /// A cluster advertising this many servers.
    Cluster(usize),
    /// A cluster that advertises no servers (`no_advertise`).
    Unadvertised,
}

/// The replicas of a worker given `given` (`--replicas`), on servers seen
/// as `view`.
pub fn choose(given: Option<usize>, view: &ClusterView) -> Choice {
    if let Some(replicas) = given {
        return Choice {
            replicas,
            why: Why::Given,
        };
    }
    let why = match (view.clustered, view.advertised) {
        (false, _) => Why::SingleServer,
        (true, 0) => Why::Unadvertised,
        (true, n) => Why::Cluster(n),
    };
    Choice {
        replicas: view.could_give(),
        why,
    }
}

impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.replicas;
        match self.why {
            Why::Given => write!(f, "{r} replicas, as --replicas says"),
            Why::SingleServer => write!(f, "{r} replica: the NATS server is not clustered"),
            Why::Cluster(n) if r >= CLUSTER_REPLICAS => {
                write!(f, "{r} replicas: the NATS cluster has {n} servers")
            }
            Why::Cluster(n) => write!(
                f,
                "{r} replica: the NATS cluster shows only {n} server(s) so far \
                 (if it will have {CLUSTER_REPLICAS} or more, start workers once it has, \
                 or give --replicas {CLUSTER_REPLICAS})"
            ),
            Why::Unadvertised => write!(
                f,
                "{r} replica: the NATS server names a cluster but advertises no servers \
                 (a single server with a cluster block, or a cluster with no_advertise); \
                 on a cluster of {CLUSTER_REPLICAS} or more give --replicas {CLUSTER_REPLICAS}"
            ),
        }
    }
}

/// A bucket or stream of sluice's, and the replicas it is kept with.
// Its OpenAPI schema keeps the name it was published under (`Kept`).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = Kept))]
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StreamReplicas {
    /// The stream's name (a KV bucket's is `KV_<bucket>`).
    pub stream: String,
    pub replicas: usize,
}

/// Those of `kept` with fewer replicas than the cluster seen as `view`
/// could give: what `sluice status` warns of.
pub fn below_cluster<'a>(
    kept: &'a [StreamReplicas],
    view: &ClusterView,
) -> Vec<&'a StreamReplicas> {
    let could = view.could_give();
    kept.iter().filter(|k| k.replicas < could).collect()
}

/// The streams sluice keeps its state in: the buckets' streams, the
/// journal, alerts, and the usage tier of each of `usage_steps` (a tier's
/// name, `1m`).
pub fn sluice_streams<S: AsRef<str>>(usage_steps: &[S]) -> Vec<String> {
    use crate::storage::{
        bucket_stream, usage_stream, ALERT_STREAM, JOURNAL_STREAM, LEASE_BUCKET, POLICY_BUCKET,
        SNAPSHOT_BUCKET,
    };
    let mut streams: Vec<String> = [LEASE_BUCKET, SNAPSHOT_BUCKET, POLICY_BUCKET]
        .iter()
        .map(|b| bucket_stream(b))
        .collect();
    streams.push(JOURNAL_STREAM.to_string());
    streams.push(ALERT_STREAM.to_string());
    streams.extend(usage_steps.iter().map(|s| usage_stream(s.as_ref())));
    streams
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(cluster: Option<&str>, urls: &[&str]) -> ClusterView {
        ClusterView::from_info(cluster, urls)
    }

    #[test]
    fn a_single_server_keeps_one_replica() {
        let choice = choose(None, &view(None, &["127.0.0.1:4222"]));
        assert_eq!(choice.replicas, 1);
        assert_eq!(choice.why, Why::SingleServer);
        assert!(choice.to_string().contains("not clustered"), "{choice}");
    }

    #[test]
    fn a_cluster_of_three_or_more_keeps_three() {
        let three = view(Some("c"), &["a:4222", "b:4222", "c:4222"]);
        assert_eq!(choose(None, &three).replicas, 3);
        let five = view(Some("c"), &["a:1", "b:1", "c:1", "d:1", "e:1"]);
        let choice = choose(None, &five);
        assert_eq!(choice.replicas, 3);
        assert_eq!(
            choice.to_string(),
            "3 replicas: the NATS cluster has 5 servers"
        );
    }

    #[test]
    fn urls_advertised_twice_count_once() {
        let twice = view(Some("c"), &["a:4222", "a:4222", "b:4222"]);
        assert_eq!(twice.advertised, 2);
        assert_eq!(choose(None, &twice).replicas, 1);
    }

    #[test]
    fn a_cluster_showing_fewer_than_three_keeps_one_and_says_how_to_get_three() {
        let choice = choose(None, &view(Some("c"), &["a:4222", "b:4222"]));
        assert_eq!(choice.replicas, 1);
        assert!(choice.to_string().contains("--replicas 3"), "{choice}");
    }

    #[test]
    fn a_cluster_that_advertises_nothing_keeps_one_and_says_how_to_get_three() {
        let choice = choose(None, &view(Some("c"), &[] as &[&str]));
        assert_eq!((choice.replicas, choice.why), (1, Why::Unadvertised));
        assert!(choice.to_string().contains("--replicas 3"), "{choice}");
    }

    #[test]
    fn replicas_given_win() {
        let three = view(Some("c"), &["a:4222", "b:4222", "c:4222"]);
        let choice = choose(Some(1), &three);
        assert_eq!((choice.replicas, choice.why), (1, Why::Given));
    }

    #[test]
    fn status_warns_of_state_kept_below_what_the_cluster_could_give() {
        let kept = vec![
            StreamReplicas {
                stream: "KV_sluice-leases".into(),
                replicas: 1,
            },
            StreamReplicas {
                stream: "SLUICE_JOURNAL".into(),
                replicas: 3,
            },
        ];
        let three = view(Some("c"), &["a:4222", "b:4222", "c:4222"]);
        let below: Vec<&str> = below_cluster(&kept, &three)
            .iter()
            .map(|k| k.stream.as_str())
            .collect();
        assert_eq!(below, ["KV_sluice-leases"]);
        assert!(below_cluster(&kept, &view(None, &["a:4222"])).is_empty());
    }

    #[test]
    fn sluice_streams_are_the_buckets_the_journal_alerts_and_usage() {
        assert_eq!(
            sluice_streams(&["1m", "1h"]),
            [
                "KV_sluice-leases",
                "KV_sluice-snapshots",
                "KV_sluice-policies",
                "SLUICE_JOURNAL",
                "SLUICE_ALERTS",
                "SLUICE_USAGE_1m",
                "SLUICE_USAGE_1h",
            ]
        );
    }
}
