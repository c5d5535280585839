//! The region fields (SPEC §12): the top-level `region`, and a policy's
//! `scope`, `home`, `regions`, `region_shares` and `on_cut`: what parses,
//! what is refused with which field and reason, in the file and as JSON.

use super::{assert_error, parse};
use sluice_core::config::{check_region, PolicyTable};
use sluice_core::policy::Mode;
use sluice_core::region::{OnCut, RegionName};

const GLOBAL: &str = r#"
region = "west"

[policies.plan]
algorithm = "fixed_window"
limits = [ { max = 1000, per = "1m" } ]
scope = "global"
home = "east"
regions = ["east", "west"]
region_shares = { east = 3 }
on_cut = "closed"
"#;

#[test]
fn global_policies_are_accepted_split_as_they_say_and_the_rest_refused_with_the_reason() {
    let config = parse(GLOBAL);
    let plan = config.policies.get("plan").expect("plan");
    assert!(plan.scope().global().is_some());
    // Any but a fixed window splits into parts when a cut-off region keeps
    // its share; `GLOBAL` says on_cut = "closed", so the home keeps all.
    for algorithm in ["token_bucket", "gcra", "sliding_window", "sliding_log"] {
        let reserved = global_with("fixed_window", algorithm).replace("\"closed\"", "\"reserved\"");
        let config = parse(&reserved);
        let plan = config.policies.get("plan").expect("plan");
        let west = RegionName::new("west").unwrap();
        let part = plan.part_in(&west).expect("west keeps a part");
        assert_eq!(part.limits()[0].max(), 250, "weights 3:1 of 1000");
        assert!(part.scope().global().is_none());
        let closed = parse(&global_with("fixed_window", algorithm));
        assert!(closed
            .policies
            .get("plan")
            .unwrap()
            .part_in(&west)
            .is_none());
    }
    // A window of several limits is split into parts (one of one limit
    // shares itself out at the home).
    let two = global_with(
        "{ max = 1000, per = \"1m\" }",
        "{ max = 1000, per = \"1m\" }, { max = 5000, per = \"1h\" }",
    )
    .replace("\"closed\"", "\"reserved\"");
    let west = RegionName::new("west").unwrap();
    let config = parse(&two);
    let part = config.policies.get("plan").unwrap().part_in(&west).unwrap();
    let maxes: Vec<u64> = part.limits().iter().map(|l| l.max()).collect();
    assert_eq!(maxes, [250, 1250]);
    let one = parse(&GLOBAL.replace("\"closed\"", "\"reserved\""));
    let one = one.policies.get("plan").unwrap();
    assert!(one.part_in(&west).is_none(), "one limit: shares, no parts");
    // Shadow: the parts decide as enforced, the region answers in shadow.
    let shadow = global_with("fixed_window", "gcra")
        .replace("\"closed\"", "\"reserved\"")
        .replace("on_cut", "mode = \"shadow\"\non_cut");
    let config = parse(&shadow);
    let plan = config.policies.get("plan").expect("plan");
    assert_eq!(plan.mode(), Mode::Shadow);
    let west = RegionName::new("west").unwrap();
    assert_eq!(plan.part_in(&west).unwrap().mode(), Mode::Enforce);
    // Alerts: the key counters watch none (the home's holds the other
    // regions' shares from the window's start, a part only its region's);
    // the tallies of what was spent do, and the parts fire nothing.
    for on_cut in ["closed", "reserved"] {
        let two_limits = two.replace("\"reserved\"", &format!("\"{on_cut}\""));
        let alerting = parse(&GLOBAL.replace(
            "on_cut = \"closed\"",
            &format!("alerts = [80, 100]\non_cut = \"{on_cut}\""),
        ));
        for config in [alerting, parse(&(two_limits + "alerts = [50]\n"))] {
            let plan = config.policies.get("plan").unwrap();
            assert!(!plan.alerts().is_empty(), "the policy says its thresholds");
            assert!(
                plan.threshold_units().floors().is_empty(),
                "its counters watch none"
            );
            let tallies = plan.tallies().expect("tallies");
            assert!(!tallies.alerting.threshold_units().floors().is_empty());
            assert!(tallies.silent.threshold_units().floors().is_empty());
            assert!(tallies.alerting.scope().global().is_none());
            if let Some(part) = plan.part_in(&west) {
                assert!(
                    part.threshold_units().floors().is_empty(),
                    "a part fires none"
                );
            }
        }
    }
    assert!(one.tallies().is_none(), "no alerts, no tallies");
    // Local budgets: refused on a global window too.
    assert_error(
        &(GLOBAL.to_string() + "local_budget = true\n"),
        "policies.plan.scope",
        "cannot have local_budget = true",
    );
}

#[test]
fn a_global_policy_table_reads_and_goes_through_json_unchanged() {
    let config = parse(
        &global_with("scope = \"global\"", "")
            .replace("home = \"east\"\n", "")
            .replace("regions = [\"east\", \"west\"]\n", "")
            .replace("region_shares = { east = 3 }\n", "")
            .replace("on_cut = \"closed\"\n", ""),
    );
    assert_eq!(config.region, Some(RegionName::new("west").unwrap()));
    let table = PolicyTable::from_json(
        br#"{"algorithm":"fixed_window","limits":[{"max":1000,"per":"1m"}],"scope":"global","home":"east","regions":["east","west"],"region_shares":{"east":3},"on_cut":"closed"}"#,
    )
    .unwrap();
    let plan = &table.to_policy("plan").unwrap();
    let global = plan.scope().global().expect("global");
    assert_eq!(global.home().as_str(), "east");
    assert_eq!(global.on_cut(), OnCut::Closed);
    let west = RegionName::new("west").unwrap();
    assert_eq!(global.reserved(&west, 1000), 250, "weights 3:1");
    assert!(config.default_policy().scope().global().is_none());

    let json = serde_json::to_vec(&PolicyTable::of(plan)).unwrap();
    let again = PolicyTable::from_json(&json)
        .unwrap()
        .to_policy("plan")
        .unwrap();
    assert_eq!(&again, plan, "{}", String::from_utf8_lossy(&json));
}

#[test]
fn without_region_nothing_changes() {
    let config = parse("[policies.p]\nalgorithm = \"gcra\"\nlimits = [ { max = 5, per = \"1s\" } ]\nscope = \"region\"\n");
    assert_eq!(config.region, None);
    assert!(config.policies.get("p").unwrap().scope().global().is_none());
}

/// GLOBAL with `from` replaced by `to`.
fn global_with(from: &str, to: &str) -> String {
    assert!(GLOBAL.contains(from), "{from}");
    GLOBAL.replacen(from, to, 1)
}

#[test]
fn bad_region_fields_are_refused_with_the_field_and_reason() {
    assert_error(
        &global_with("region = \"west\"", "region = \"West_1\""),
        "region",
        "a-z, 0-9 and -",
    );
    assert_error(
        &global_with("home = \"east\"\n", ""),
        "policies.plan.home",
        "missing; a global policy names the region",
    );
    assert_error(
        &global_with("home = \"east\"", "home = \"north\""),
        "policies.plan.home",
        "not one of the policy's regions",
    );
    assert_error(
        &global_with("regions = [\"east\", \"west\"]\n", ""),
        "policies.plan.regions",
        "missing; a global policy lists the regions",
    );
    assert_error(
        &global_with("\"west\"]", "\"we st\"]"),
        "policies.plan.regions",
        "is not a region name",
    );
    assert_error(
        &global_with("east = 3", "east = 0"),
        "policies.plan.region_shares.east",
        "whole number from 1",
    );
    assert_error(
        &global_with("east = 3", "east = -2"),
        "policies.plan.region_shares.east",
        "whole number from 1",
    );
    assert_error(
        &global_with("east = 3", "north = 1"),
        "policies.plan.region_shares.north",
        "not in the policy's regions",
    );
    assert_error(
        &global_with("on_cut = \"closed\"", "on_cut = \"sometimes\""),
        "policies.plan.on_cut",
        "\"reserved\"",
    );
    assert_error(
        &global_with("scope = \"global\"", "scope = \"planet\""),
        "policies.plan.scope",
        "is not a scope",
    );
    // Global fields on a regional policy: refused, not ignored.
    assert_error(
        &global_with("scope = \"global\"", "scope = \"region\""),
        "policies.plan.home",
        "only a global policy takes it",
    );
    // The process's region must be set and listed.
    assert_error(
        &global_with("region = \"west\"", ""),
        "policies.plan.scope",
        "needs regions",
    );
    assert_error(
        &global_with("region = \"west\"", "region = \"south\""),
        "policies.plan.regions",
        "this region (south) is not listed",
    );
    // Holds stay in one region.
    assert_error(
        &global_with("on_cut = \"closed\"", "concurrency = 3"),
        "policies.plan.scope",
        "cannot have concurrency",
    );
    // Local budgets on a global sliding log: refused as on any sliding log.
    assert_error(
        &(global_with("fixed_window", "sliding_log").replace("max = 1000", "max = 10")
            + "local_budget = true\n"),
        "policies.plan.local_budget",
        "local_budget needs fixed_window",
    );
}

#[test]
fn a_live_policy_is_checked_against_the_workers_region() {
    let json = br#"{"algorithm":"fixed_window","limits":[{"max":10,"per":"1s"}],"scope":"global","home":"east","regions":["east","west"]}"#;
    let policy = PolicyTable::from_json(json)
        .unwrap()
        .to_policy("p")
        .unwrap();
    let east = RegionName::new("east").unwrap();
    let south = RegionName::new("south").unwrap();
    assert!(check_region(&policy, Some(&east)).is_ok());
    let e = check_region(&policy, Some(&south)).unwrap_err();
    assert_eq!(e.field, "regions");
    let e = check_region(&policy, None).unwrap_err();
    assert_eq!(e.field, "scope");
    let e = PolicyTable::from_json(br#"{"algorithm":"gcra","limits":[{"max":10,"per":"1s"}],"scope":"global","home":"east","regions":["east"],"region_shares":{"east":1.5}}"#)
        .and_then(|t| t.to_policy("p"))
        .unwrap_err();
    assert!(e.field.starts_with("region_shares"), "{e:?}");
}
