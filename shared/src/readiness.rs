//! `GET /livez` and `GET /readyz`: what an orchestrator asks a worker (on
//! its `--metrics-listen`) and a gateway (on its HTTP listener) before it
//! sends traffic or restarts the process (docs/OPERATIONS.md,
//! "Readiness"). The judgements are here, without I/O; the services read
//! their state and answer with [`Verdict::body`].
//!
//! - **Live**: the process answers HTTP at all. A worker answers on its one
//!   runtime thread, so a runtime stuck in a loop does not answer, and the
//!   probe times out: restart it.
//! - **Ready, a worker** ([`worker`]): connected to NATS, its view of the
//!   lease bucket read, and its heartbeat stored in the lease bucket less
//!   than a lease ttl ago, so JetStream answers it and it owns partitions
//!   or may take them; not ready once it has begun to stop (its partitions
//!   are being handed over). A rolling restart waits for the new worker to
//!   be ready before it stops the next.
//! - **Ready, a gateway** ([`gateway`]): connected to NATS, and a worker
//!   answered its peek. Without a worker a gateway still answers, by its
//!   fallback, but an ask it decides then holds no shared limit.

use std::time::Duration;

/// A probe's answer: ready (HTTP 200) or not, and why not (HTTP 503).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Why it is not ready; `None` when it is.
    pub not_ready: Option<String>,
}

impl Verdict {
    /// Ready.
    pub const READY: Verdict = Verdict { not_ready: None };

    fn not(why: impl Into<String>) -> Verdict {
        Verdict {
            not_ready: Some(why.into()),
        }
    }

    pub fn is_ready(&self) -> bool {
        self.not_ready.is_none()
    }

    /// The HTTP status: 200 when ready, 503 when not.
    pub fn http_status(&self) -> u16 {
        if self.is_ready() {
            200
        } else {
            503
        }
    }

    /// The JSON body: `{"status":"ready"}`, or `{"status":"not ready",
    /// "why":"..."}`.
    pub fn body(&self) -> String {
        match &self.not_ready {
            None => r#"{"status":"ready"}"#.to_string(),
            Some(why) => serde_json::json!({"status": "not ready", "why": why}).to_string(),
        }
    }
}

/// `/livez`'s body: it answered, so it lives.
pub const LIVE_BODY: &str = r#"{"status":"live"}"#;

/// What a worker knows of itself when asked whether it is ready.
#[derive(Clone, Debug)]
pub struct WorkerState {
    pub nats_connected: bool,
    /// It has read the lease bucket (its view is current).
    pub lease_view_current: bool,
    /// How long ago its heartbeat was last stored; `None`: never yet.
    pub since_heartbeat: Option<Duration>,
    pub lease_ttl: Duration,
    /// It is stopping (handing its partitions over).
    pub stopping: bool,
}

/// Whether a worker in `s` is ready.
pub fn worker(s: &WorkerState) -> Verdict {
    if s.stopping {
        return Verdict::not("stopping: handing its partitions over");
    }
    if !s.nats_connected {
        return Verdict::not("not connected to NATS");
    }
    match s.since_heartbeat {
        None => return Verdict::not("not registered in the lease bucket yet"),
        Some(age) if age >= s.lease_ttl => {
            return Verdict::not(format!(
                "its heartbeat was last stored {:.1}s ago (lease_ttl {:?}): JetStream does not answer it",
                age.as_secs_f64(),
                s.lease_ttl
            ))
        }
        Some(_) => {}
    }
    if !s.lease_view_current {
        return Verdict::not("still reading the lease bucket");
    }
    Verdict::READY
}

/// Whether a gateway is ready: `nats_connected`, and what came of its
/// peek at a worker (`Err` says what went wrong).
pub fn gateway(nats_connected: bool, worker_peek: Result<(), String>) -> Verdict {
    if !nats_connected {
        return Verdict::not("not connected to NATS");
    }
    match worker_peek {
        Ok(()) => Verdict::READY,
        Err(why) => Verdict::not(format!("no worker answered: {why}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready_worker() -> WorkerState {
        WorkerState {
            nats_connected: true,
            lease_view_current: true,
            since_heartbeat: Some(Duration::from_millis(300)),
            lease_ttl: Duration::from_secs(3),
            stopping: false,
        }
    }

    #[test]
    fn a_joined_worker_with_a_fresh_heartbeat_is_ready() {
        let v = worker(&ready_worker());
        assert!(v.is_ready());
        assert_eq!(
            (v.http_status(), v.body().as_str()),
            (200, r#"{"status":"ready"}"#)
        );
    }

    #[test]
    fn a_worker_is_not_ready_for_each_reason_and_says_which() {
        type Change = fn(&mut WorkerState);
        let cases: [(Change, &str); 5] = [
            (|s| s.stopping = true, "stopping"),
            (|s| s.nats_connected = false, "not connected to NATS"),
            (|s| s.since_heartbeat = None, "not registered"),
            (
                |s| s.since_heartbeat = Some(Duration::from_secs(3)),
                "heartbeat was last stored 3.0s ago",
            ),
            (|s| s.lease_view_current = false, "reading the lease bucket"),
        ];
        for (change, why) in cases {
            let mut s = ready_worker();
            change(&mut s);
            let v = worker(&s);
            assert_eq!(v.http_status(), 503, "{why}");
            let body: serde_json::Value = serde_json::from_str(&v.body()).unwrap();
            assert_eq!(body["status"], "not ready");
            assert!(body["why"].as_str().unwrap().contains(why), "{body}");
        }
    }

    #[test]
    fn a_gateway_is_ready_when_connected_and_a_worker_answered() {
        assert!(gateway(true, Ok(())).is_ready());
        let v = gateway(true, Err("no responders".into()));
        assert_eq!(
            v.not_ready.as_deref(),
            Some("no worker answered: no responders")
        );
        let v = gateway(false, Ok(()));
        assert_eq!(v.not_ready.as_deref(), Some("not connected to NATS"));
    }
}
