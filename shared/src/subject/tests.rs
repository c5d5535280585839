//! The subjects built and parsed side by side.

use super::*;

#[test]
fn link_partition_subjects_parse_for_their_region_only() {
    let subjects = link_partition_subjects("east", 7);
    let kinds = [
        (0, LinkInbound::Batch(7)),
        (5, LinkInbound::Reclaim(7)),
        (6, LinkInbound::Gift(7)),
        (7, LinkInbound::Answered(7)),
        (8, LinkInbound::Tally(7)),
        (9, LinkInbound::Resend(7)),
    ];
    for (at, kind) in kinds {
        assert_eq!(LinkInbound::parse(&subjects[at], "east"), Some(kind));
        assert_eq!(LinkInbound::parse(&subjects[at], "west"), None);
    }
    let hit = link_hit("east", 7, "bob");
    assert_eq!(
        LinkInbound::parse(&hit, "east"),
        Some(LinkInbound::Ask(PartitionSubject {
            partition: 7,
            verb: Verb::Hit,
            key_token: "bob"
        }))
    );
    assert_eq!(
        LinkInbound::parse(&link_ask("east", 7, Verb::Allow, "bob"), "east"),
        Some(LinkInbound::Ask(PartitionSubject {
            partition: 7,
            verb: Verb::Allow,
            key_token: "bob"
        }))
    );
    assert_eq!(
        LinkInbound::parse(&link_ask("east", 7, Verb::Reserve, "bob"), "east"),
        None,
        "only hits, asks, resets and inspects cross"
    );
    assert_eq!(LinkInbound::parse(&hit, "west"), None);
    assert_eq!(LinkInbound::parse(&hit, "eas"), None);
    for bad in [
        "sluice-link.east.p.x.batch",
        "sluice-link.east.p.7.settle.bob",
        "sluice-link.east.p.7.hit.",
        "sluice-link.east.p.7.batch.more",
        "rl.p.7.batch",
    ] {
        assert_eq!(LinkInbound::parse(bad, "east"), None, "{bad}");
    }
}

#[test]
fn inbound_tells_asks_from_partition_batches() {
    assert_eq!(
        Inbound::parse("rl.p.7.inspect.alice"),
        Some(Inbound::Ask(PartitionSubject {
            partition: 7,
            verb: Verb::Inspect,
            key_token: "alice"
        }))
    );
    assert_eq!(
        Inbound::parse("rl.p.7.batch"),
        Some(Inbound::PartitionBatch(7))
    );
    assert_eq!(
        Inbound::parse(&batch_subject(12)),
        Some(Inbound::PartitionBatch(12))
    );
    for bad in [
        "rl.p.7.batchx",
        "rl.p.7.allow",
        "rl.p.7.batch.x.y",
        "rl.w.x.batch",
    ] {
        assert_eq!(Inbound::parse(bad), None, "{bad}");
    }
}

#[test]
fn every_verb_round_trips_and_only_answered_verbs_are_owned() {
    for verb in Verb::ALL {
        let subject = verb.mapped_subject(3, "k");
        assert_eq!(
            PartitionSubject::parse(&subject).map(|p| p.verb),
            Some(verb)
        );
        assert!(verb.client_subject("k").starts_with(ROOT));
    }
    assert_eq!(
        owner_subjects(5),
        [
            "rl.p.5.allow.>",
            "rl.p.5.hit.>",
            "rl.p.5.inspect.>",
            "rl.p.5.reset.>",
            "rl.p.5.usage.>",
            "rl.p.5.reserve.>",
            "rl.p.5.settle.>",
            "rl.p.5.extend.>",
            "rl.p.5.batch"
        ]
    );
    assert_eq!(owner_subjects(5)[0], Verb::Allow.partition_subject(5));
    assert_eq!(owner_subjects(5)[8], batch_subject(5));
    assert_eq!(every_owner_subject().len(), 9);
    assert_eq!(every_owner_subject()[0], "rl.p.*.allow.>");
    assert_eq!(Verb::Usage.client_subject("k"), "rl.usage.k");
    assert_eq!(Verb::Allow.unmapped_wildcard(), "rl.allow.>");
    assert_eq!(worker_batch_subject("w1"), "rl.w.w1.batch");
    assert_eq!(status_stats("abc"), "$SRV.STATS.sluice-worker.abc");
}

#[test]
fn wildcards_cover_one_partition_or_every_partitions_batches() {
    assert_eq!(any_partition_batch_subject(), "rl.p.*.batch");
    assert_eq!(partition_wildcard(3), "rl.p.3.>");
    assert!(every_owner_subject().contains(&any_partition_batch_subject()));
}

#[test]
fn replies_never_go_into_sluice_or_system_subjects() {
    for ok in ["_INBOX.abc.1", "my.inbox.x", "rlx.y", "sluicer.z"] {
        assert!(is_safe_reply_subject(ok), "{ok}");
    }
    for bad in [
        "rl.p.3.reset.bob",
        "rl",
        "rl.w.w1.batch",
        "sluice.journal.w.w1",
        "$KV.sluice-leases.p.3",
        "$JS.API.STREAM.DELETE.KV_sluice-leases",
        "$SRV.PING",
        "sluice-link.east.p.3",
        "sluice-link.west.inbox.abc.1",
    ] {
        assert!(!is_safe_reply_subject(bad), "{bad}");
    }
    assert!(is_link_reply_subject("sluice-link.west.inbox.abc.1"));
    for bad in ["sluice-link.west.hello", "sluice-link.inbox.x", "_INBOX.x"] {
        assert!(!is_link_reply_subject(bad), "{bad}");
    }
}

#[test]
fn client_probe_keys_are_fixed_and_distinguish_common_counts() {
    let keys = probe::client_keys();
    assert_eq!(keys.len(), probe::PROBES);
    assert_eq!(keys[0], "sluice-client-probe-0");
    // Every pair of counts among the usual ones (and their neighbours)
    // is told apart by at least one key.
    let counts = [
        1u32, 2, 4, 8, 15, 16, 17, 32, 48, 63, 64, 65, 100, 128, 256, 512, 1024,
    ];
    for &a in &counts {
        for &b in &counts {
            if a != b {
                assert!(
                    keys.iter()
                        .any(|k| partition_of(k, a) != partition_of(k, b)),
                    "{a} vs {b}"
                );
            }
        }
    }
}

#[test]
fn the_probe_accepts_only_the_computed_partition() {
    let keys = probe::keys("p", "n");
    assert_eq!(keys.len(), probe::PROBES);
    let key = &keys[0];
    assert_eq!(probe::send_subject(key), format!("rl.allow.{key}"));
    assert_eq!(probe::arrival_subject(key), format!("rl.p.*.allow.{key}"));
    let right = partition_of(key, 16);
    assert_eq!(
        probe::check(&format!("rl.p.{right}.allow.{key}"), 16),
        Ok(())
    );
    let wrong = (right + 1) % 16;
    assert_eq!(
        probe::check(&format!("rl.p.{wrong}.allow.{key}"), 16),
        Err(probe::Mismatch {
            key: key.clone(),
            arrived: Some(wrong),
            expected: right
        })
    );
}
