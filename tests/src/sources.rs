//! The workspace's own files, for the tests that read them as a reader
//! would (the architecture map, the length of functions): where the
//! workspace is, and its Rust files under a folder, in a stable order.

use std::path::{Path, PathBuf};

/// The workspace's root folder.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.rs` file under `dir`, sorted, skipping the folders `skip`
/// says to (by their name).
pub fn rust_files(dir: &Path, skip: &dyn Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut found = Vec::new();
    walk(dir, skip, &mut found);
    found
}

fn walk(dir: &Path, skip: &dyn Fn(&str) -> bool, found: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let name = name.unwrap_or_default();
        if path.is_dir() {
            if !skip(&name) {
                walk(&path, skip, found);
            }
        } else if name.ends_with(".rs") {
            found.push(path);
        }
    }
}
