//! docs/ARCHITECTURE.md's map of the worker ("The worker's files") names
//! every source file of `services/worker/src`, so that a reader can find
//! where a thing lives without reading the tree, and a new file cannot be
//! added without saying what it holds. A file is named by its path under
//! `src`, in backquotes (`decide/global.rs`).

use sluice_tests::sources::{rust_files, workspace_root};

/// The text of the section `heading` of `page`, up to the next heading
/// of the same level.
fn section<'a>(page: &'a str, heading: &str) -> &'a str {
    let start = page
        .find(heading)
        .unwrap_or_else(|| panic!("no section {heading:?}"));
    let rest = &page[start + heading.len()..];
    let end = rest.find("\n## ").unwrap_or(rest.len());
    &rest[..end]
}

fn missing_from_map(map: &str, files: &[String]) -> Vec<String> {
    files
        .iter()
        .filter(|f| !map.contains(&format!("`{f}`")))
        .cloned()
        .collect()
}

#[test]
fn every_worker_source_file_is_on_the_architecture_map() {
    let root = workspace_root();
    let src = root.join("services/worker/src");
    // Each as its path under `src`, with `/`.
    let files: Vec<String> = rust_files(&src, &|_| false)
        .iter()
        .map(|file| {
            let relative = file.strip_prefix(&src).expect("under src");
            let parts: Vec<_> = relative.iter().map(|p| p.to_string_lossy()).collect();
            parts.join("/")
        })
        .collect();
    assert!(files.len() > 40, "found only {files:?}");
    let page = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).expect("the page");
    let map = section(&page, "## The worker's files");
    let missing = missing_from_map(map, &files);
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md, \"The worker's files\", does not name {missing:?}: add each, \
         in backquotes as its path under services/worker/src, with what it holds"
    );
}

/// The check names a file the map leaves out, and only that one.
#[test]
fn a_file_left_off_the_map_is_named() {
    let map = "| `shard.rs` (+ `shard/turns.rs`) | the task |";
    let files = ["shard.rs", "shard/turns.rs", "global.rs"].map(String::from);
    assert_eq!(missing_from_map(map, &files), ["global.rs"]);
}
