//! Subjects and the rendered nats-server config (SPEC §3, §5). These
//! check the text only; the harness runs the real server.

use sluice_core::config::Config;
use sluice_core::nats_config::{mapping, Cluster, NatsServerConfig};
use sluice_core::subject::{
    allow_subject, hit_subject, PartitionSubject, Verb, ALLOW_PREFIX, HIT_PREFIX, PARTITION_PREFIX,
};

fn cluster_server(i: u32) -> NatsServerConfig {
    NatsServerConfig {
        server_name: format!("n{i}"),
        listen: "0.0.0.0:4222".to_string(),
        store_dir: Some(format!("/var/lib/nats/n{i}")),
        cluster: Some(Cluster {
            name: "sluice".to_string(),
            listen: "0.0.0.0:6222".to_string(),
            routes: (1..=3).map(|j| format!("nats-route://n{j}:6222")).collect(),
        }),
        ..NatsServerConfig::new(16)
    }
}

/// The non-comment lines, trimmed: what the server reads.
fn settings(text: &str) -> Vec<&str> {
    text.lines()
        .map(|l| l.split("  #").next().unwrap().trim())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

#[test]
fn client_and_partition_subjects_follow_the_contract() {
    assert_eq!(ALLOW_PREFIX, "rl.allow");
    assert_eq!(HIT_PREFIX, "rl.hit");
    assert_eq!(PARTITION_PREFIX, "rl.p");
    assert_eq!(Verb::Allow.client_subject("alice"), "rl.allow.alice");
    assert_eq!(
        Verb::Hit.client_subject("bob%40x%2Eio"),
        "rl.hit.bob%40x%2Eio"
    );
    assert_eq!(allow_subject(7), "rl.p.7.allow.>");
    assert_eq!(hit_subject(63), "rl.p.63.hit.>");
    assert_eq!(Verb::Hit.partition_subject(0), hit_subject(0));
}

#[test]
fn mapping_hashes_only_the_first_key_token_into_n_partitions() {
    let pairs = |verb, n| -> Vec<(String, String)> { mapping(verb, n) };
    let owned = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    assert_eq!(
        pairs(Verb::Allow, 64),
        owned(&[
            (
                "rl.allow.*",
                "rl.p.{{partition(64,1)}}.allow.{{wildcard(1)}}"
            ),
            (
                "rl.allow.*.*",
                "rl.p.{{partition(64,1)}}.allow.{{wildcard(1)}}.{{wildcard(2)}}"
            ),
            (
                "rl.allow.*.*.*",
                "rl.p.{{partition(64,1)}}.allow.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}"
            ),
        ])
    );
    assert_eq!(
        pairs(Verb::Hit, 1024)[0],
        (
            "rl.hit.*".to_string(),
            "rl.p.{{partition(1024,1)}}.hit.{{wildcard(1)}}".to_string()
        )
    );
}

#[test]
fn a_mapped_subject_parses_back_to_partition_verb_and_key() {
    assert_eq!(
        PartitionSubject::parse("rl.p.7.allow.alice"),
        Some(PartitionSubject {
            partition: 7,
            verb: Verb::Allow,
            key_token: "alice"
        })
    );
    assert_eq!(
        PartitionSubject::parse("rl.p.1023.hit.bob%40x%2Eio"),
        Some(PartitionSubject {
            partition: 1023,
            verb: Verb::Hit,
            key_token: "bob%40x%2Eio"
        })
    );
}

#[test]
fn a_grouped_key_arrives_whole_for_its_decoder_to_check() {
    assert_eq!(
        PartitionSubject::parse("rl.p.7.allow.acme.eng.alice"),
        Some(PartitionSubject {
            partition: 7,
            verb: Verb::Allow,
            key_token: "acme.eng.alice"
        })
    );
}

#[test]
fn subjects_that_are_not_mapped_partition_subjects_do_not_parse() {
    for s in [
        "rl.allow.alice",
        "rl.p.7.allow",
        "rl.p.7.allow.",
        "rl.p.x.allow.alice",
        "rl.p.-1.allow.alice",
        "rl.p..allow.alice",
        "rl.p.7.peek.alice",
        "rl.p.99999999999.allow.alice",
        "rl.px.7.allow.alice",
        "xrl.p.7.allow.alice",
    ] {
        assert_eq!(PartitionSubject::parse(s), None, "{s}");
    }
}

#[test]
fn single_server_config_has_listen_jetstream_and_every_mapping() {
    let text = NatsServerConfig::new(64).render();
    assert_eq!(
        settings(&text),
        [
            "server_name: \"sluice\"",
            "listen: \"127.0.0.1:4222\"",
            "max_payload: 8388608",
            "jetstream {",
            "}",
            "mappings = {",
            "\"rl.allow.*\": \"rl.p.{{partition(64,1)}}.allow.{{wildcard(1)}}\"",
            "\"rl.allow.*.*\": \"rl.p.{{partition(64,1)}}.allow.{{wildcard(1)}}.{{wildcard(2)}}\"",
            "\"rl.allow.*.*.*\": \"rl.p.{{partition(64,1)}}.allow.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}\"",
            "\"rl.hit.*\": \"rl.p.{{partition(64,1)}}.hit.{{wildcard(1)}}\"",
            "\"rl.hit.*.*\": \"rl.p.{{partition(64,1)}}.hit.{{wildcard(1)}}.{{wildcard(2)}}\"",
            "\"rl.hit.*.*.*\": \"rl.p.{{partition(64,1)}}.hit.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}\"",
            "\"rl.inspect.*\": \"rl.p.{{partition(64,1)}}.inspect.{{wildcard(1)}}\"",
            "\"rl.inspect.*.*\": \"rl.p.{{partition(64,1)}}.inspect.{{wildcard(1)}}.{{wildcard(2)}}\"",
            "\"rl.inspect.*.*.*\": \"rl.p.{{partition(64,1)}}.inspect.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}\"",
            "\"rl.reset.*\": \"rl.p.{{partition(64,1)}}.reset.{{wildcard(1)}}\"",
            "\"rl.reset.*.*\": \"rl.p.{{partition(64,1)}}.reset.{{wildcard(1)}}.{{wildcard(2)}}\"",
            "\"rl.reset.*.*.*\": \"rl.p.{{partition(64,1)}}.reset.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}\"",
            "\"rl.usage.*\": \"rl.p.{{partition(64,1)}}.usage.{{wildcard(1)}}\"",
            "\"rl.usage.*.*\": \"rl.p.{{partition(64,1)}}.usage.{{wildcard(1)}}.{{wildcard(2)}}\"",
            "\"rl.usage.*.*.*\": \"rl.p.{{partition(64,1)}}.usage.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}\"",
            "\"rl.reserve.*\": \"rl.p.{{partition(64,1)}}.reserve.{{wildcard(1)}}\"",
            "\"rl.reserve.*.*\": \"rl.p.{{partition(64,1)}}.reserve.{{wildcard(1)}}.{{wildcard(2)}}\"",
            "\"rl.reserve.*.*.*\": \"rl.p.{{partition(64,1)}}.reserve.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}\"",
            "\"rl.settle.*\": \"rl.p.{{partition(64,1)}}.settle.{{wildcard(1)}}\"",
            "\"rl.settle.*.*\": \"rl.p.{{partition(64,1)}}.settle.{{wildcard(1)}}.{{wildcard(2)}}\"",
            "\"rl.settle.*.*.*\": \"rl.p.{{partition(64,1)}}.settle.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}\"",
            "\"rl.extend.*\": \"rl.p.{{partition(64,1)}}.extend.{{wildcard(1)}}\"",
            "\"rl.extend.*.*\": \"rl.p.{{partition(64,1)}}.extend.{{wildcard(1)}}.{{wildcard(2)}}\"",
            "\"rl.extend.*.*.*\": \"rl.p.{{partition(64,1)}}.extend.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}\"",
            "}",
        ]
    );
    assert!(!text.contains("cluster {"));
    assert!(text.contains("-p PORT, -js, -sd DIR"), "{text}");
    assert!(text.contains("store_dir is not set"), "{text}");
}

#[test]
fn default_matches_the_default_partition_count() {
    assert_eq!(
        NatsServerConfig::default(),
        NatsServerConfig::new(Config::default().partitions)
    );
}

#[test]
fn optional_settings_are_rendered_when_given() {
    let text = NatsServerConfig {
        http: Some("127.0.0.1:8222".to_string()),
        store_dir: Some("/var/lib/nats".to_string()),
        max_memory_store: Some(256 << 20),
        max_file_store: Some(2 << 30),
        ..NatsServerConfig::new(8)
    }
    .render();
    let settings = settings(&text);
    for line in [
        "http: \"127.0.0.1:8222\"",
        "store_dir: \"/var/lib/nats\"",
        "max_memory_store: 268435456",
        "max_file_store: 2147483648",
        "\"rl.allow.*\": \"rl.p.{{partition(8,1)}}.allow.{{wildcard(1)}}\"",
    ] {
        assert!(settings.contains(&line), "{line:?} missing in\n{text}");
    }
    assert!(text.contains("max_memory_store: 268435456  # 256 MiB"));
    assert!(text.contains("max_file_store: 2147483648  # 2 GiB"));
    assert!(!text.contains("store_dir is not set"));
}

#[test]
fn strings_are_quoted_for_the_server_config_syntax() {
    let text = NatsServerConfig {
        store_dir: Some(r#"C:\nats "data""#.to_string()),
        ..NatsServerConfig::new(8)
    }
    .render();
    assert!(text.contains(r#"store_dir: "C:\\nats \"data\"""#), "{text}");
}

#[test]
fn cluster_config_adds_a_cluster_block_with_every_route() {
    let text = cluster_server(2).render();
    let settings = settings(&text);
    let cluster_at = settings.iter().position(|l| *l == "cluster {").unwrap();
    assert_eq!(
        settings[cluster_at..],
        [
            "cluster {",
            "name: \"sluice\"",
            "listen: \"0.0.0.0:6222\"",
            "routes: [",
            "\"nats-route://n1:6222\"",
            "\"nats-route://n2:6222\"",
            "\"nats-route://n3:6222\"",
            "]",
            "}",
        ]
    );
    assert!(settings.contains(&"server_name: \"n2\""));
    assert!(text.contains("server_name must differ"), "{text}");
}

#[test]
fn every_server_of_a_cluster_gets_the_identical_mapping() {
    let mappings = |text: &str| -> String {
        let start = text.find("mappings = {").unwrap();
        let end = start + text[start..].find("\n}").unwrap();
        text[start..end].to_string()
    };
    let first = mappings(&cluster_server(1).render());
    assert!(first.contains("partition(16,1)"));
    for i in 2..=3 {
        assert_eq!(mappings(&cluster_server(i).render()), first);
    }
}

#[test]
fn rendered_config_warns_that_all_servers_and_leaf_nodes_need_the_same_mapping() {
    let text = NatsServerConfig::new(64).render();
    assert!(
        text.contains(
            "Every server in a cluster, and every leaf node, must carry these exact\n# mappings"
        ),
        "{text}"
    );
    assert!(text.contains("must equal `partitions` in\n# sluice's config (64)"));
}
