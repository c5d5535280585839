//! The worker's modules depend on each other without a cycle (issue 16):
//! the decision core, the reply path and the stats can be read, changed and
//! tested on their own. Reads the sources; a `crate::m` path in code (not
//! in comments or tests) is a dependency on `m`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

fn dependencies() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut graph = BTreeMap::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let module = path.file_stem().unwrap().to_string_lossy().into_owned();
        if module == "lib" || path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap();
        let mut deps = BTreeSet::new();
        for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for (i, _) in line.match_indices("crate::") {
                let name: String = line[i + 7..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() && name != module {
                    deps.insert(name);
                }
            }
        }
        graph.insert(module, deps);
    }
    graph
}

#[test]
fn no_module_of_the_worker_imports_itself_through_others() {
    let graph = dependencies();
    assert!(graph.contains_key("decide") && graph.contains_key("shard"));
    // Depth-first search for a back edge.
    fn visit(
        m: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) {
        if done.contains(m) {
            return;
        }
        if let Some(at) = path.iter().position(|p| p == m) {
            panic!("import cycle: {} -> {m}", path[at..].join(" -> "));
        }
        path.push(m.to_string());
        for d in graph.get(m).into_iter().flatten() {
            visit(d, graph, path, done);
        }
        path.pop();
        done.insert(m.to_string());
    }
    let mut done = BTreeSet::new();
    for m in graph.keys() {
        visit(m, &graph, &mut Vec::new(), &mut done);
    }
}

#[test]
fn the_decision_core_needs_no_nats() {
    let graph = dependencies();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/decide.rs");
    let text = std::fs::read_to_string(src).unwrap();
    assert!(!text.contains("async_nats"), "decide.rs uses async_nats");
    let allowed: BTreeSet<String> = [
        "counters",
        "journal",
        "live_policies",
        "stats",
        "tally",
        "usage",
    ]
    .map(String::from)
    .into();
    assert!(
        graph["decide"].is_subset(&allowed),
        "decide.rs depends on {:?}",
        graph["decide"]
    );
}
