//! The repository's text speaks to readers outside the project: pages and
//! source comments cite docs/SPEC.md (as "SPEC §N") or the page that
//! explains a thing, never the project's own issue numbers or commit
//! hashes, which such a reader cannot follow. The files checked are the
//! tracked ones (`git ls-files`, run from the workspace root), so a file
//! that is not committed yet is not checked.
//!
//! Pages are also read as people read them: a table cell too long to read
//! in a row of a table, and a word the glossary defines met on a page with
//! no way to its definition, are refused too.
//!
//! Five checks, each listing every `file:line` it refuses:
//!
//! - the old name of the external contract (the word spelled in
//!   [`RETIRED_NAME`]) appears in no file but docs/SPEC.md;
//! - no page and no comment names one of the project's own issues
//!   ([`own_issues`]);
//! - no page names a commit hash ([`commit_hashes`]);
//! - no table cell of a page is longer than [`MAX_CELL`] characters
//!   ([`long_cells`]): say more in a list or in prose under the table;
//! - every page of [`GLOSSARY_READERS`] that uses a word docs/GLOSSARY.md
//!   defines ([`GLOSSARY_TERMS`]) links to docs/GLOSSARY.md at least once
//!   ([`glossary_terms_used`], [`links_to_glossary`]).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The word that must appear nowhere but in docs/SPEC.md, case-sensitive.
/// Spelled in two halves so that this file does not contain it.
const RETIRED_NAME: &str = concat!("CON", "TRACT");

/// The files the old contract's name is looked for in, by how their names end.
const TEXT_EXTENSIONS: &[&str] = &[
    "md", "rs", "toml", "yaml", "yml", "py", "sh", "conf", "html", "js",
];

/// Pages that may name the project's own issues: docs/BENCHMARKS-HISTORY.md
/// is the dated record of what each change measured, kept as it was
/// written, and CHANGELOG.md says what each version brought in the words
/// of its time.
const ISSUES_EXEMPT: &[&str] = &["docs/BENCHMARKS-HISTORY.md", "CHANGELOG.md"];

/// Pages that may name commit hashes: docs/BENCHMARKS-HISTORY.md, the dated
/// record.
const HASHES_EXEMPT: &[&str] = &["docs/BENCHMARKS-HISTORY.md"];

/// The words right before "issue" that make it another project's issue,
/// compared without case: as in redis-cell issues #11 and #80, or their
/// issues #185 and #440.
const OTHER_PROJECTS: &[&str] = &[
    "their",
    "redis-cell",
    "envoy",
    "ratelimit",
    "envoyproxy/ratelimit",
    "nats-server",
    "async-nats",
    "librechat",
];

/// The project's issues are numbered below this; other projects' issues
/// cited in the pages have larger numbers or name their project.
const OWN_ISSUES_BELOW: u64 = 100;

/// The longest a table cell may be, in characters, its Markdown included.
const MAX_CELL: usize = 300;

/// The glossary, as a path from the workspace root.
const GLOSSARY: &str = "docs/GLOSSARY.md";

/// The pages that must link to the glossary when they use its words: the
/// README, CONTRIBUTING.md, the Python client's README and every page of
/// docs/ (but the glossary itself).
const GLOSSARY_READERS: &[&str] = &["README.md", "CONTRIBUTING.md", "clients/python/README.md"];

/// The glossary's distinctive words: those a reader may take in their
/// everyday sense and so misread, looked for as whole words (plurals
/// too), without case, outside code blocks.
const GLOSSARY_TERMS: &[&str] = &[
    "slice",
    "share",
    "part",
    "home",
    "delegate",
    "grant",
    "reclaim",
    "tally",
    "lease",
    "fence",
    "snapshot",
    "journal",
    "hold",
    "window",
    "partition",
    "owner",
    "handover",
    "takeover",
    "override",
    "refund",
    "peek",
    "tier",
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The tracked files, as paths relative to the workspace root.
fn tracked_files() -> Vec<String> {
    let root = workspace_root();
    let out = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(&root)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "the hygiene checks list the repository's files with `git ls-files`, \
                 and git could not be run ({e}): install git and run the tests \
                 from a git checkout"
            )
        });
    assert!(
        out.status.success(),
        "the hygiene checks list the repository's files with `git ls-files` in {}, \
         and it failed ({}): run the tests from a git checkout. {}",
        root.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    String::from_utf8_lossy(&out.stdout)
        .split('\0')
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect()
}

fn extension(path: &str) -> Option<&str> {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.rsplit_once('.').map(|(_, ext)| ext)
}

/// Each tracked file with one of `extensions`, with its text. A file listed
/// but gone from the work tree (deleted, not yet committed) is skipped.
fn texts(extensions: &[&str]) -> Vec<(String, String)> {
    let root = workspace_root();
    tracked_files()
        .into_iter()
        .filter(|p| extension(p).is_some_and(|e| extensions.contains(&e)))
        .filter_map(|p| {
            let bytes = std::fs::read(root.join(&p)).ok()?;
            Some((p, String::from_utf8_lossy(&bytes).into_owned()))
        })
        .collect()
}

fn line_of(text: &str, at: usize) -> usize {
    text[..at].matches('\n').count() + 1
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Where `text` names one of the project's own issues: "issue N",
/// "issues N", "Issue #N" (any case, and across a line break, where a
/// comment's marker on the next line is skipped) with N below
/// [`OWN_ISSUES_BELOW`], unless the word before "issue" names another
/// project ([`OTHER_PROJECTS`]). Returns the byte offset of each.
fn own_issues(text: &str) -> Vec<usize> {
    let lower = text.to_ascii_lowercase();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(i) = lower[from..].find("issue") {
        let at = from + i;
        from = at + "issue".len();
        if text[..at].chars().next_back().is_some_and(is_word_char) {
            continue;
        }
        let rest = &text[from..];
        let rest = rest.strip_prefix(['s', 'S']).unwrap_or(rest);
        let mut chars = rest.char_indices().peekable();
        let mut crossed_line = false;
        let mut start = rest.len();
        while let Some(&(j, c)) = chars.peek() {
            let skip = match c {
                ' ' | '\t' | '\r' => true,
                '\n' => {
                    crossed_line = true;
                    true
                }
                '/' | '!' | '*' | '>' => crossed_line,
                _ => false,
            };
            if !skip {
                start = j;
                break;
            }
            chars.next();
        }
        if start == 0 {
            // "issues" or "issue" glued to what follows: "issue-free", "issued".
            continue;
        }
        let number = rest[start..].strip_prefix('#').unwrap_or(&rest[start..]);
        let digits: String = number.chars().take_while(char::is_ascii_digit).collect();
        if digits.is_empty()
            || number[digits.len()..]
                .chars()
                .next()
                .is_some_and(char::is_alphabetic)
        {
            continue;
        }
        if digits.parse::<u64>().is_ok_and(|n| n >= OWN_ISSUES_BELOW) {
            continue;
        }
        let before = text[..at].trim_end();
        let word = before
            .rsplit(|c: char| c.is_whitespace() || c == '(' || c == '[')
            .next()
            .unwrap_or("");
        if OTHER_PROJECTS.iter().any(|p| word.eq_ignore_ascii_case(p)) {
            continue;
        }
        found.push(at);
    }
    found
}

/// The comments of Rust source, in place: every other character (code,
/// string and character literals, the comment markers) becomes as many
/// spaces as it has bytes, line breaks stay, so byte offsets and line
/// numbers are those of the source.
fn rust_comments(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let blank = |out: &mut String, ch: char| {
        if ch == '\n' {
            out.push('\n');
        } else {
            out.extend(std::iter::repeat_n(' ', ch.len_utf8()));
        }
    };
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut i = 0;
    while i < c.len() {
        let next = c.get(i + 1).copied();
        if c[i] == '/' && next == Some('/') {
            // A line comment, doc comments (`///`, `//!`) included.
            let mut j = i + 2;
            while j < c.len() && (c[j] == '/' || c[j] == '!') {
                j += 1;
            }
            out.extend(std::iter::repeat_n(' ', j - i));
            while j < c.len() && c[j] != '\n' {
                out.push(c[j]);
                j += 1;
            }
            i = j;
        } else if c[i] == '/' && next == Some('*') {
            let mut depth = 1;
            out.push_str("  ");
            let mut j = i + 2;
            while j < c.len() && depth > 0 {
                match (c[j], c.get(j + 1).copied()) {
                    ('/', Some('*')) => {
                        depth += 1;
                        out.push_str("  ");
                        j += 2;
                    }
                    ('*', Some('/')) => {
                        depth -= 1;
                        out.push_str("  ");
                        j += 2;
                    }
                    (ch, _) => {
                        out.push(ch);
                        j += 1;
                    }
                }
            }
            i = j;
        } else if c[i] == '"' {
            // A raw string (`r"…"`, `r#"…"#`, `br#"…"#`) ends at `"` and as
            // many `#` as it opened with; any other string at an unescaped `"`.
            let mut hashes = 0;
            while i > hashes && c[i - 1 - hashes] == '#' {
                hashes += 1;
            }
            let r = i.checked_sub(hashes + 1).map(|k| (k, c[k]));
            let raw = match r {
                Some((k, 'r')) => {
                    k == 0 || !ident(c[k - 1]) || (c[k - 1] == 'b' && (k < 2 || !ident(c[k - 2])))
                }
                _ => false,
            };
            blank(&mut out, c[i]);
            let mut j = i + 1;
            while j < c.len() {
                if raw {
                    if c[j] == '"' && (1..=hashes).all(|h| c.get(j + h) == Some(&'#')) {
                        out.extend(std::iter::repeat_n(' ', hashes + 1));
                        j += hashes + 1;
                        break;
                    }
                } else if c[j] == '\\' && j + 1 < c.len() {
                    blank(&mut out, c[j]);
                    blank(&mut out, c[j + 1]);
                    j += 2;
                    continue;
                } else if c[j] == '"' {
                    out.push(' ');
                    j += 1;
                    break;
                }
                blank(&mut out, c[j]);
                j += 1;
            }
            i = j;
        } else if c[i] == '\'' {
            // A character literal (`'x'`, `'\n'`, `'\u{7f}'`), else a lifetime.
            let end = if next == Some('\\') {
                (i + 2..c.len()).find(|&j| c[j] == '\'')
            } else if c.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            let end = end.unwrap_or(i);
            for &ch in &c[i..=end] {
                blank(&mut out, ch);
            }
            i = end + 1;
        } else {
            blank(&mut out, c[i]);
            i += 1;
        }
    }
    out
}

/// Where a page names a commit hash: 7 to 12 lowercase hex characters with
/// at least one letter and one digit, in backticks (`` `b216646` ``) or after
/// "at " ("measured at 21a4d05"). A whole number of days (`` `213503d` ``,
/// the longest duration a config takes) is not a hash. Returns byte offsets.
fn commit_hashes(text: &str) -> Vec<usize> {
    let is_hash = |s: &str| {
        (7..=12).contains(&s.len())
            && s.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f'))
            && s.chars().any(|c| c.is_ascii_digit())
            && s.chars().any(|c| c.is_ascii_lowercase())
            && !(s.ends_with('d') && s[..s.len() - 1].chars().all(|c| c.is_ascii_digit()))
    };
    let mut found = Vec::new();
    for (at, _) in text.match_indices('`') {
        let rest = &text[at + 1..];
        if let Some(end) = rest.find('`') {
            if is_hash(&rest[..end]) {
                found.push(at);
            }
        }
    }
    for (at, _) in text.match_indices("at ") {
        if text[..at].chars().next_back().is_some_and(is_word_char) {
            continue;
        }
        let rest = &text[at + 3..];
        let end = rest.find(|c: char| !is_word_char(c)).unwrap_or(rest.len());
        if is_hash(&rest[..end]) {
            found.push(at);
        }
    }
    found.sort_unstable();
    found
}

/// The lines of a page outside its fenced code blocks, numbered from 1.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<&str> = None;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(open), Some(m)) if m == open && trimmed.trim_end() == m => fence = None,
            (None, None) => out.push((n + 1, line)),
            _ => {}
        }
    }
    out
}

/// The cells of a table row (a line that starts with `|`), split at every
/// `|` not escaped as `\|`, as GitHub splits them (in code spans too).
fn table_cells(line: &str) -> Option<Vec<&str>> {
    let row = line.trim().strip_prefix('|')?;
    let mut cells = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, c) in row.char_indices() {
        match c {
            '\\' if !escaped => escaped = true,
            '|' if !escaped => {
                cells.push(row[start..i].trim());
                start = i + 1;
            }
            _ => escaped = false,
        }
    }
    let last = row[start..].trim();
    if !last.is_empty() {
        cells.push(last);
    }
    Some(cells)
}

/// Each table cell of `text` longer than [`MAX_CELL`] characters: its line
/// and its length.
fn long_cells(text: &str) -> Vec<(usize, usize)> {
    let mut found = Vec::new();
    for (n, line) in prose_lines(text) {
        for cell in table_cells(line).unwrap_or_default() {
            let len = cell.chars().count();
            if len > MAX_CELL {
                found.push((n, len));
            }
        }
    }
    found
}

/// The glossary's words a page uses: each term with the first line it is
/// on. Code blocks are skipped; inline code is not, since a page that
/// shows `lease_ttl` still speaks of leases.
fn glossary_terms_used(text: &str) -> Vec<(&'static str, usize)> {
    let lines = prose_lines(text);
    let mut used = Vec::new();
    for &term in GLOSSARY_TERMS {
        let found = lines.iter().find(|(_, line)| {
            line.to_lowercase()
                .split(|c: char| !c.is_alphanumeric())
                .any(|w| {
                    w == term
                        || w.strip_suffix('s') == Some(term)
                        || w.strip_suffix("es") == Some(term)
                })
        });
        if let Some(&(n, _)) = found {
            used.push((term, n));
        }
    }
    used
}

/// Whether the page at `path` (from the workspace root) has a Markdown
/// link that leads to [`GLOSSARY`], resolved from the page's folder
/// (`[GLOSSARY](GLOSSARY.md)` in docs/, `(docs/GLOSSARY.md)` at the root,
/// an anchor after it allowed).
fn links_to_glossary(path: &str, text: &str) -> bool {
    let mut folder: Vec<&str> = path.split('/').collect();
    folder.pop();
    text.match_indices("](").any(|(at, _)| {
        let rest = &text[at + 2..];
        let Some(end) = rest.find([')', ' ']) else {
            return false;
        };
        let target = rest[..end].split('#').next().unwrap_or("");
        let mut parts = folder.clone();
        for step in target.split('/') {
            match step {
                "" | "." => {}
                ".." => {
                    if parts.pop().is_none() {
                        return false;
                    }
                }
                _ => parts.push(step),
            }
        }
        parts.join("/") == GLOSSARY
    })
}

fn report(failures: &[String], what: &str, instead: &str) {
    assert!(
        failures.is_empty(),
        "{what}; {instead}:\n  {}",
        failures.join("\n  ")
    );
}

#[test]
fn the_old_contract_name_is_only_in_the_spec() {
    let mut failures = Vec::new();
    for (path, text) in texts(TEXT_EXTENSIONS) {
        if path == "docs/SPEC.md" {
            continue;
        }
        for (n, line) in text.lines().enumerate() {
            if line.contains(RETIRED_NAME) {
                failures.push(format!("{path}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    report(
        &failures,
        &format!("`{RETIRED_NAME}` appears outside docs/SPEC.md"),
        "the external contract is docs/SPEC.md: cite it as \"SPEC §N\"",
    );
}

#[test]
fn pages_and_comments_do_not_cite_the_projects_issues() {
    let mut failures = Vec::new();
    for (path, text) in texts(&["md", "rs", "py", "sh"]) {
        if ISSUES_EXEMPT.contains(&path.as_str()) {
            continue;
        }
        // Rust: the comments. Python and shell: the whole file, since their
        // docstrings, comments and the text they print (bench/report*.py
        // renders docs/BENCHMARKS.md) are all read by people.
        let checked = if extension(&path) == Some("rs") {
            rust_comments(&text)
        } else {
            text.clone()
        };
        for at in own_issues(&checked) {
            let line = line_of(&checked, at);
            let shown = text.lines().nth(line - 1).unwrap_or("").trim();
            failures.push(format!("{path}:{line}: {shown}"));
        }
    }
    report(
        &failures,
        "a page or comment names one of the project's own issues",
        "cite docs/SPEC.md (\"SPEC §N\") or the page that explains it, not an issue number",
    );
}

#[test]
fn pages_do_not_cite_commit_hashes() {
    let mut failures = Vec::new();
    for (path, text) in texts(&["md"]) {
        if HASHES_EXEMPT.contains(&path.as_str()) {
            continue;
        }
        for at in commit_hashes(&text) {
            let line = line_of(&text, at);
            let shown = text.lines().nth(line - 1).unwrap_or("").trim();
            failures.push(format!("{path}:{line}: {shown}"));
        }
    }
    report(
        &failures,
        "a page names a commit hash",
        "give the date of the measurement (and the page that has it), not a commit",
    );
}

#[test]
fn table_cells_are_short() {
    let mut failures = Vec::new();
    for (path, text) in texts(&["md"]) {
        for (line, len) in long_cells(&text) {
            let shown: String = text
                .lines()
                .nth(line - 1)
                .unwrap_or("")
                .chars()
                .take(80)
                .collect();
            failures.push(format!(
                "{path}:{line}: a cell of {len} characters: {shown}…"
            ));
        }
    }
    report(
        &failures,
        &format!("a table cell is longer than {MAX_CELL} characters"),
        "keep the cell short and say the rest in a list or in prose under the table",
    );
}

#[test]
fn pages_that_use_the_glossarys_words_link_to_it() {
    let mut failures = Vec::new();
    for (path, text) in texts(&["md"]) {
        let reader = GLOSSARY_READERS.contains(&path.as_str())
            || (path.starts_with("docs/") && path.matches('/').count() == 1 && path != GLOSSARY);
        if !reader || links_to_glossary(&path, &text) {
            continue;
        }
        let used = glossary_terms_used(&text);
        if let Some(line) = used.iter().map(|&(_, line)| line).min() {
            let words: Vec<&str> = used.iter().map(|(t, _)| *t).collect();
            failures.push(format!(
                "{path}:{line}: uses {} and has no link to {GLOSSARY}",
                words.join(", ")
            ));
        }
    }
    report(
        &failures,
        "a page uses words the glossary defines but does not link to it",
        "add a link near the top, e.g. \"Words: see [GLOSSARY](GLOSSARY.md).\" (the path relative to the page)",
    );
}

#[test]
fn long_cells_are_found_in_tables_only() {
    let long = "x".repeat(MAX_CELL + 1);
    let ok = "y".repeat(MAX_CELL);
    let page = format!(
        "| a | b |\n|---|---|\n| {ok} | {long} |\n| {ok} \\| {ok} | c |\n\n{long}\n\n```\n| {long} |\n```\n"
    );
    assert_eq!(
        long_cells(&page),
        [(3, MAX_CELL + 1), (4, 2 * MAX_CELL + 4)]
    );
}

#[test]
fn glossary_links_are_resolved_from_the_page() {
    assert!(links_to_glossary(
        "docs/USAGE.md",
        "Words: [GLOSSARY](GLOSSARY.md)."
    ));
    assert!(links_to_glossary(
        "docs/USAGE.md",
        "[a lease](./GLOSSARY.md#workers-and-ownership)"
    ));
    assert!(links_to_glossary(
        "README.md",
        "[docs/GLOSSARY.md](docs/GLOSSARY.md)"
    ));
    assert!(links_to_glossary(
        "clients/python/README.md",
        "[words](../../docs/GLOSSARY.md)"
    ));
    assert!(!links_to_glossary("README.md", "[words](GLOSSARY.md)"));
    assert!(!links_to_glossary("docs/USAGE.md", "see GLOSSARY.md"));
    assert!(!links_to_glossary("docs/USAGE.md", "[x](../GLOSSARY.md)"));
}

#[test]
fn glossary_terms_are_whole_words_outside_code_blocks() {
    let page = "Leases expire; a partitioned key.\n```\nhome\n```\nthe `window_ms` field\n";
    assert_eq!(glossary_terms_used(page), [("lease", 1), ("window", 5)]);
    assert_eq!(
        glossary_terms_used("departure, homely, parts-bin"),
        [("part", 1)]
    );
}

#[test]
fn own_issues_are_found_and_other_projects_issues_are_not() {
    for text in [
        "the hot-key workload (issue 21)",
        "Issue 40: a newcomer's first example",
        "(issue 22 item 1)",
        "hold items (issues 36 and 37)",
        "see issue #7.",
        "within issue\n  22's 0.5 s",
        "// within issue\n// 22's 0.5 s",
    ] {
        assert_eq!(own_issues(text).len(), 1, "{text:?}");
    }
    for text in [
        "envoy ratelimit issue 435",
        "LibreChat issue 14349",
        "redis-cell issues #11 and #80",
        "(their issues #185 and #440)",
        "tissue 5",
        "an issue-free page",
        "issued 3 times",
        "the issue asks for 3 things",
        "SPEC §13",
    ] {
        assert!(own_issues(text).is_empty(), "{text:?}");
    }
}

#[test]
fn rust_comments_keep_comments_and_drop_code_and_strings() {
    let src = "let s = \"// issue 4\"; // issue 5\n\
               let r = r#\"/* issue 6 */\"#; /* issue 7 */\n\
               fn f<'a>(c: char) -> bool { c == '\"' } /// issue 8\n\
               //! issue 9\n";
    let comments = rust_comments(src);
    assert_eq!(comments.len(), src.len());
    assert_eq!(comments.lines().count(), src.lines().count());
    let lines: Vec<usize> = own_issues(&comments)
        .into_iter()
        .map(|at| line_of(src, at))
        .collect();
    assert_eq!(lines, [1, 2, 3, 4], "{comments:?}");
    for n in ["4", "6"] {
        assert!(!comments.contains(&format!("issue {n}")), "{comments:?}");
    }
}

#[test]
fn commit_hashes_are_found_and_other_hex_is_not() {
    for text in [
        "measured at `b216646`.",
        "(`0a675d5`)",
        "measured at 21a4d05 on a quiet machine",
        "at `e2fc3371ab`",
    ] {
        assert_eq!(commit_hashes(text).len(), 1, "{text:?}");
    }
    for text in [
        "anything longer than `213503d`",
        "`1234567`",
        "`deadbeef`",
        "`B216646`",
        "at 2026-11-25",
        "flat 21a4d05",
        "`0123456789abc`",
    ] {
        assert!(commit_hashes(text).is_empty(), "{text:?}");
    }
}
