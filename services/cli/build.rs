//! Records the git commit the `sluice` binary is built from, as the
//! compile-time variable `SLUICE_COMMIT` that `sluice --version` prints
//! (src/version.rs).
//!
//! The commit is `git rev-parse --short HEAD`, or `SLUICE_COMMIT` from the
//! build's environment when set (an image built from a context without
//! .git can pass it), or "unknown" when there is no git or no repository:
//! a build from a source tarball must still work.
//!
//! Cargo reruns this script when HEAD moves, so the commit stays right
//! across checkouts and commits: it watches the HEAD file (a checkout, a
//! detached HEAD), the branch file HEAD names (a commit on that branch)
//! and packed-refs (where `git gc` moves branch files).

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=SLUICE_COMMIT");
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let from_env = std::env::var("SLUICE_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty());
    let commit = from_env
        .or_else(|| git(&dir, &["rev-parse", "--short", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_string());
    watch_head(&dir);
    println!("cargo:rustc-env=SLUICE_COMMIT={}", commit.trim());
}

/// What `git args` prints in `dir`, trimmed; `None` when git is missing or
/// fails (no repository).
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
}

/// Tells cargo to rerun this script when HEAD moves. Only paths that exist
/// are named: cargo reruns a script on every build while a path it
/// watches is missing.
fn watch_head(dir: &Path) {
    // A linked worktree has its own HEAD but shares the branch files.
    let (Some(git_dir), Some(common)) = (
        git(dir, &["rev-parse", "--git-dir"]),
        git(dir, &["rev-parse", "--git-common-dir"]),
    ) else {
        return;
    };
    let absolute = |p: String| {
        let p = dir.join(p);
        p.canonicalize().unwrap_or(p)
    };
    let (git_dir, common) = (absolute(git_dir), absolute(common));
    let head = git_dir.join("HEAD");
    watch(&head);
    watch(&common.join("packed-refs"));
    let Ok(head) = std::fs::read_to_string(&head) else {
        return;
    };
    if let Some(branch) = head.trim().strip_prefix("ref: ") {
        let branch = common.join(branch);
        if branch.exists() {
            watch(&branch);
        } else if let Some(parent) = branch.parent() {
            // The branch is only in packed-refs until its next commit
            // writes its file here.
            watch(parent);
        }
    }
}

fn watch(path: &Path) {
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}
