//! No crate of the workspace has an import cycle between its modules:
//! each module can be read, changed and tested with only the
//! modules below it in mind, the decision core, the reply path and the
//! stats included. The test lives with the worker because the worker's
//! cycles came first; it reads every crate's sources, relative to this
//! crate's manifest, so no crate needs a copy.
//!
//! How the sources are read:
//!
//! - Modules are files: `src/a.rs` and `src/a/mod.rs` are module `a`,
//!   `src/a/b.rs` is `a::b`, and so on down the folders; a file that a
//!   `#[path = "..."] mod x;` in `a.rs` declares is `a::x`. The crate root
//!   (`lib.rs`, `main.rs`) declares the modules and hands over to them, so
//!   it is no module here and a path into it (`crate::Item`) is no edge.
//! - Code is what is left without comments, string and character literals,
//!   and the item after each `#[cfg(test)]` (tests may use anything).
//! - A path is a dependency on the deepest module it names that exists:
//!   `crate::a::b::X` is one on `a::b` when `src/a/b.rs` exists, else on `a`;
//!   `crate::a::X` is one on `a`. `super::` and `self::` paths are read
//!   from the file's own module (`super::x` in `a/b.rs` is `a::x`), and so
//!   is a path that starts with the name of one of the module's own
//!   submodules (`use table::Row;` in `a.rs` is `a::table::Row`). Use trees
//!   count every branch: `crate::{a, b::c}` names `a` and `b::c`.
//! - So a module whose code, or whose re-exports, name a submodule depends on
//!   it, and a submodule that names its parent depends on the parent: a
//!   folder module that re-exports its files, used through that facade by
//!   one of them, is a cycle. A file uses its siblings and its parent's own
//!   items through modules below both.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each module of a crate and the modules its code names.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// Every crate of the workspace: its source folder, relative to the
/// workspace.
fn workspace_crates() -> Vec<String> {
    let mut crates = vec!["shared/src".to_string(), "tests/src".to_string()];
    for service in std::fs::read_dir(workspace().join("services")).unwrap() {
        let service = service.unwrap().file_name().to_string_lossy().into_owned();
        crates.push(format!("services/{service}/src"));
    }
    crates
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The modules of the crate whose sources are in `src`, each with its file.
fn modules_in(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut modules = BTreeMap::new();
    let mut folders = vec![(src.to_path_buf(), String::new())];
    while let Some((folder, prefix)) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
            let module = format!("{prefix}{stem}");
            if path.is_dir() {
                folders.push((path, format!("{module}::")));
            } else if path.extension().is_some_and(|e| e == "rs") {
                let at_root = prefix.is_empty() && (stem == "lib" || stem == "main");
                if stem == "mod" {
                    modules.insert(prefix.trim_end_matches("::").to_string(), path);
                } else if !at_root {
                    modules.insert(module, path);
                }
            }
        }
    }
    renamed_by_path_attributes(modules)
}

/// `modules` with each file that a `#[path = "..."] mod name;` declares
/// named as that declaration makes it: `#[path = "bench/x.rs"] mod x;` in
/// `src/cmd.rs` makes `src/bench/x.rs` module `cmd::x`.
fn renamed_by_path_attributes(modules: BTreeMap<String, PathBuf>) -> BTreeMap<String, PathBuf> {
    let mut renamed = modules.clone();
    for (module, file) in &modules {
        let text = std::fs::read_to_string(file).unwrap();
        for declaration in text.split("#[path = \"").skip(1) {
            let (target, rest) = declaration.split_once('"').unwrap();
            let name = rest.split("mod ").nth(1).unwrap();
            let name: String = identifier_at(&name.chars().collect::<Vec<_>>(), 0);
            let target = file.parent().unwrap().join(target);
            if modules.values().any(|f| *f == target) {
                renamed.retain(|_, f| *f != target);
                renamed.insert(format!("{module}::{name}"), target);
            }
        }
    }
    renamed
}

/// The dependencies of every module of the crate in `src`.
fn dependencies(src: &Path) -> Graph {
    let modules = modules_in(src);
    let mut graph = Graph::new();
    for (module, file) in &modules {
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        let here: Vec<&str> = module.split("::").collect();
        let children: BTreeSet<&str> = modules
            .keys()
            .filter_map(|m| m.strip_prefix(module.as_str())?.strip_prefix("::"))
            .filter(|rest| !rest.contains("::"))
            .collect();
        let mut deps = BTreeSet::new();
        for path in paths_in(&code, &here, &children) {
            let named = (1..=path.len())
                .rev()
                .map(|n| path[..n].join("::"))
                .find(|m| modules.contains_key(m));
            deps.extend(named);
        }
        deps.remove(module);
        graph.insert(module.clone(), deps);
    }
    graph
}

/// `text` without comments, without the contents of string and character
/// literals, and without the item after each `#[cfg(test)]`.
fn code_of(text: &str) -> String {
    let code = without_comments_and_literals(text);
    let mut kept = String::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("#[cfg(test)]") {
        kept.push_str(&rest[..at]);
        rest = &rest[at + item_end(&rest[at..])..];
    }
    kept.push_str(rest);
    kept
}

/// Where the item that starts with the attributes at the start of `code`
/// ends: after its `;` or its closing brace.
fn item_end(code: &str) -> usize {
    let mut depth = 0;
    for (i, c) in code.char_indices() {
        match c {
            '[' | '(' | '{' => depth += 1,
            ']' | ')' => depth -= 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            ';' if depth == 0 => return i + 1,
            _ => {}
        }
    }
    code.len()
}

/// `text` with comments dropped and string and character literals emptied
/// (`"a::b"` becomes `""`), so that neither is read as code.
fn without_comments_and_literals(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut code = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let next = chars.get(i + 1).copied();
        match chars[i] {
            '/' if next == Some('/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '/' if next == Some('*') => {
                let mut depth = 0;
                loop {
                    match (chars.get(i), chars.get(i + 1)) {
                        (Some('/'), Some('*')) => depth += 1,
                        (Some('*'), Some('/')) => depth -= 1,
                        (None, _) => break,
                        _ => {
                            i += 1;
                            continue;
                        }
                    }
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                }
            }
            'r' if is_raw_string_start(&chars[i..]) && starts_literal(&chars[..i]) => {
                let hashes = chars[i + 1..].iter().take_while(|c| **c == '#').count();
                i += 2 + hashes;
                let close: Vec<char> = std::iter::once('"')
                    .chain("#".repeat(hashes).chars())
                    .collect();
                while i < chars.len() && !chars[i..].starts_with(&close) {
                    i += 1;
                }
                i += close.len();
                code.push_str("\"\"");
            }
            '"' => {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
                code.push_str("\"\"");
            }
            '\'' if next == Some('\\') => {
                i += 3;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
                code.push_str("' '");
            }
            '\'' if chars.get(i + 2) == Some(&'\'') => {
                i += 3;
                code.push_str("' '");
            }
            c => {
                code.push(c);
                i += 1;
            }
        }
    }
    code
}

/// Whether `chars` start with a raw string: `r"`, `r#"`, `r##"`, ...
fn is_raw_string_start(chars: &[char]) -> bool {
    let hashes = chars[1..].iter().take_while(|c| **c == '#').count();
    chars.get(1 + hashes) == Some(&'"')
}

/// Whether a literal may start after `before`: not inside an identifier,
/// except for a byte string's `b` (`br"..."`).
fn starts_literal(before: &[char]) -> bool {
    match before.split_last() {
        Some(('b', rest)) => !continues_identifier(rest),
        _ => !continues_identifier(before),
    }
}

/// Whether the code before a character ends inside an identifier or a path
/// (`::`), so that the character continues it rather than starting a path.
fn continues_identifier(before: &[char]) -> bool {
    before
        .last()
        .is_some_and(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
}

/// Every path in `code` that names a module of this crate, as the full path
/// from the crate root: `crate::`, `super::` and `self::` paths, and those
/// starting with the name of one of `children`, the submodules of `here`.
fn paths_in(code: &str, here: &[&str], children: &BTreeSet<&str>) -> Vec<Vec<String>> {
    let chars: Vec<char> = code.chars().collect();
    let mut paths = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if continues_identifier(&chars[..i]) {
            i += 1;
            continue;
        }
        let word: String = identifier_at(&chars, i);
        let anchor = match anchor_at(&chars, i, here) {
            Some((anchor, path_start)) => {
                i = path_start;
                Some(anchor)
            }
            None if children.contains(word.as_str()) && starts_path(&chars, i + word.len()) => {
                Some(here.to_vec())
            }
            None => None,
        };
        match anchor {
            Some(anchor) => {
                for path in use_tree(&chars, &mut i) {
                    let full = anchor.iter().map(|s| s.to_string()).chain(path).collect();
                    paths.push(full);
                }
            }
            None => i += word.len().max(1),
        }
    }
    paths
}

/// The module a `crate::`, `self::` or `super::` (`super::super::`, ...) at
/// `chars[i..]` stands for, and where the rest of the path starts.
fn anchor_at<'a>(chars: &[char], i: usize, here: &[&'a str]) -> Option<(Vec<&'a str>, usize)> {
    let mut anchor = here.to_vec();
    let mut at = i;
    loop {
        let word = identifier_at(chars, at);
        let followed = starts_path(chars, at + word.len());
        match word.as_str() {
            "crate" if at == i && followed => anchor.clear(),
            "self" if at == i && followed => {}
            "super" if followed => {
                anchor.pop();
            }
            _ if at > i => return Some((anchor, at)),
            _ => return None,
        }
        at += word.len() + 2;
    }
}

/// Whether `chars[i..]` starts with `::`.
fn starts_path(chars: &[char], i: usize) -> bool {
    chars[i..].starts_with(&[':', ':'])
}

/// The identifier at `chars[i..]`, empty if there is none.
fn identifier_at(chars: &[char], i: usize) -> String {
    chars[i..]
        .iter()
        .take_while(|c| c.is_alphanumeric() || **c == '_')
        .collect()
}

/// The paths a use tree at `chars[*i..]` spells, moving `i` past it:
/// `a::b` is `[[a, b]]`, `a::{b, c::d as e}` is `[[a, b], [a, c, d]]`, a
/// glob ends its path.
fn use_tree(chars: &[char], i: &mut usize) -> Vec<Vec<String>> {
    skip_whitespace(chars, i);
    if chars.get(*i) == Some(&'{') {
        *i += 1;
        let mut paths = Vec::new();
        loop {
            skip_whitespace(chars, i);
            match chars.get(*i) {
                None => return paths,
                Some('}') => {
                    *i += 1;
                    return paths;
                }
                Some(',') => *i += 1,
                Some(_) => {
                    paths.extend(use_tree(chars, i));
                    // Past a rename (`as e`) to the next branch.
                    while chars.get(*i).is_some_and(|c| *c != ',' && *c != '}') {
                        *i += 1;
                    }
                }
            }
        }
    }
    let name = identifier_at(chars, *i);
    if name.is_empty() {
        return vec![Vec::new()];
    }
    *i += name.len();
    if !starts_path(chars, *i) {
        return vec![vec![name]];
    }
    *i += 2;
    let mut paths = use_tree(chars, i);
    for path in &mut paths {
        path.insert(0, name.clone());
    }
    paths
}

fn skip_whitespace(chars: &[char], i: &mut usize) {
    while chars.get(*i).is_some_and(|c| c.is_whitespace()) {
        *i += 1;
    }
}

/// A cycle for each edge back to a module still being visited, in a
/// depth-first search from every module in order: each cycle written
/// `a -> b -> a`.
fn cycles(graph: &Graph) -> Vec<String> {
    fn visit(
        module: &str,
        graph: &Graph,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        found: &mut Vec<String>,
    ) {
        if let Some(at) = path.iter().position(|p| p == module) {
            found.push(format!("{} -> {module}", path[at..].join(" -> ")));
            return;
        }
        if done.contains(module) {
            return;
        }
        path.push(module.to_string());
        for dependency in graph.get(module).into_iter().flatten() {
            visit(dependency, graph, path, done, found);
        }
        path.pop();
        done.insert(module.to_string());
    }
    let mut found = Vec::new();
    let mut done = BTreeSet::new();
    for module in graph.keys() {
        visit(module, graph, &mut Vec::new(), &mut done, &mut found);
    }
    found
}

#[test]
fn no_module_of_any_crate_imports_itself_through_others() {
    let mut found = BTreeSet::new();
    for src in workspace_crates() {
        let graph = dependencies(&workspace().join(&src));
        assert!(!graph.is_empty(), "no modules read in {src}");
        for cycle in cycles(&graph) {
            found.insert(format!("{src}: import cycle: {cycle}"));
        }
    }
    assert!(found.is_empty(), "import cycles:\n{found:#?}");
}

/// The decision core and every module it reaches, file by file, are free
/// of NATS: decisions are tested with a manual clock and nothing else.
#[test]
fn the_decision_core_needs_no_nats() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = dependencies(&src);
    let modules = modules_in(&src);
    assert!(graph.contains_key("decide") && graph.contains_key("owner"));
    let mut reached = BTreeSet::new();
    let mut next = vec!["decide".to_string()];
    while let Some(module) = next.pop() {
        if reached.insert(module.clone()) {
            next.extend(graph.get(&module).into_iter().flatten().cloned());
        }
    }
    assert!(reached.contains("turn_log") && reached.contains("counters"));
    for module in &reached {
        let code = code_of(&std::fs::read_to_string(&modules[module]).unwrap());
        assert!(
            !code.contains("async_nats"),
            "{module}, which the decision core uses, uses async_nats (it reaches {reached:?})"
        );
    }
}

#[test]
fn the_reader_finds_paths_in_use_trees_and_relative_to_the_file() {
    let code = code_of(
        "use crate::{a, b::c as d};\n// crate::commented\nuse super::x::{self, Y};\n\
         fn f() { table::Row::new(\"crate::in_a_string\"); self::inner::g(); }\n\
         #[cfg(test)]\nmod tests { use crate::only_tested; }\nuse crate::after_tests;",
    );
    let here = ["m", "n"];
    let children = BTreeSet::from(["table"]);
    let paths: Vec<String> = paths_in(&code, &here, &children)
        .iter()
        .map(|p| p.join("::"))
        .collect();
    assert_eq!(
        paths,
        [
            "a",
            "b::c",
            "m::x::self",
            "m::x::Y",
            "m::n::table::Row::new",
            "m::n::inner::g",
            "after_tests"
        ]
    );
}
