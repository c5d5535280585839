//! No function of the product's code is longer than [`MAX_LINES`] lines, so
//! that each does one job a reader can hold at once: a loop that starts a
//! task, arms its timers, answers and hands over reads as four functions
//! named for those jobs, not one that has to be read whole to change any of
//! them.
//!
//! The code checked is every `.rs` file under `shared/src` and
//! `services/*/src`, but test code: files named `tests.rs`, directories
//! named `tests`, and `#[cfg(test)] mod NAME { ... }` blocks. A function's
//! length counts the lines from the one holding `fn` to the one holding its
//! closing brace, both included; a function inside another counts in both.
//!
//! The scan is textual, not a parse: comments, strings (raw and byte ones
//! too) and character literals are blanked first, so that a brace in them
//! is not counted, and then braces are matched. That is enough for
//! rustfmt-formatted code; the tests below show it on small samples.

use sluice_tests::sources::{rust_files, workspace_root};

/// The most lines a function may take, its signature and closing brace
/// included.
const MAX_LINES: usize = 120;

/// `src` with every comment, string literal and character literal replaced
/// by spaces, line breaks kept, so that the braces left are the code's and
/// every byte keeps its line.
fn blank_out(src: &str) -> String {
    let chars: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    // Whether the character before `at` can end an identifier, so that the
    // `r` of `for"` is not read as a raw string's.
    let ident_before =
        |at: usize| at > 0 && (chars[at - 1].is_alphanumeric() || chars[at - 1] == '_');
    let blank = |out: &mut String, from: &[char]| {
        out.extend(from.iter().map(|&c| if c == '\n' { '\n' } else { ' ' }));
    };
    while i < chars.len() {
        let rest = &chars[i..];
        let end = if rest.starts_with(&['/', '/']) {
            // A line comment: up to the line break, which is kept.
            rest.iter().position(|&c| c == '\n').unwrap_or(rest.len())
        } else if rest.starts_with(&['/', '*']) {
            block_comment_len(rest)
        } else if let Some(len) = raw_string_len(rest).filter(|_| !ident_before(i)) {
            len
        } else if rest[0] == 'b' && !ident_before(i) && raw_string_len(&rest[1..]).is_some() {
            1 + raw_string_len(&rest[1..]).expect("just seen")
        } else if rest[0] == '"' {
            quoted_len(rest, '"')
        } else if rest[0] == '\'' {
            char_literal_len(rest).unwrap_or(0)
        } else {
            0
        };
        if end == 0 {
            out.push(rest[0]);
            i += 1;
        } else {
            blank(&mut out, &rest[..end]);
            i += end;
        }
    }
    out
}

/// The length of the block comment `rest` starts with, nested ones included.
fn block_comment_len(rest: &[char]) -> usize {
    let mut depth = 0;
    let mut i = 0;
    while i < rest.len() {
        if rest[i..].starts_with(&['/', '*']) {
            depth += 1;
            i += 2;
        } else if rest[i..].starts_with(&['*', '/']) {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    rest.len()
}

/// The length of the raw string `rest` starts with (`r"..."`, `r#"..."#`),
/// or `None` if it starts with none.
fn raw_string_len(rest: &[char]) -> Option<usize> {
    if rest.first() != Some(&'r') {
        return None;
    }
    let hashes = rest[1..].iter().take_while(|&&c| c == '#').count();
    if rest.get(1 + hashes) != Some(&'"') {
        return None;
    }
    let body = 2 + hashes;
    let closing: Vec<char> = std::iter::once('"')
        .chain(std::iter::repeat_n('#', hashes))
        .collect();
    let found = (body..rest.len()).find(|&at| rest[at..].starts_with(&closing));
    Some(found.map_or(rest.len(), |at| at + closing.len()))
}

/// The length of the literal `rest` starts with, opened and closed by
/// `quote`, backslash escapes skipped.
fn quoted_len(rest: &[char], quote: char) -> usize {
    let mut i = 1;
    while i < rest.len() {
        match rest[i] {
            '\\' => i += 2,
            c if c == quote => return i + 1,
            _ => i += 1,
        }
    }
    rest.len()
}

/// The length of the character literal `rest` starts with (`'{'`, `'\''`,
/// `'\u{7b}'`), or `None` for a lifetime or a label (`'a`, `'outer:`).
fn char_literal_len(rest: &[char]) -> Option<usize> {
    match rest.get(1)? {
        '\\' => Some(quoted_len(rest, '\'')),
        _ if rest.get(2) == Some(&'\'') => Some(3),
        _ => None,
    }
}

/// The index of the brace that closes the one at `open`.
fn closing_brace(code: &[u8], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (at, &b) in code.iter().enumerate().skip(open) {
        match b {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(at);
                }
            }
            _ => {}
        }
    }
    None
}

/// `code` (already blanked) with every `#[cfg(test)] mod NAME { ... }`
/// block blanked too.
fn without_test_modules(code: &str) -> String {
    let mut bytes = code.as_bytes().to_vec();
    let mut from = 0;
    while let Some(found) = code[from..].find("#[cfg(test)]") {
        let attribute = from + found;
        from = attribute + 1;
        let after = &code[attribute + "#[cfg(test)]".len()..];
        let item = after.trim_start();
        let Some(named) = item.strip_prefix("mod ") else {
            continue;
        };
        let name_len = named
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(named.len());
        if !named[name_len..].trim_start().starts_with('{') {
            continue; // `mod tests;`: a file of its own, skipped by name.
        }
        let open = code.len() - named[name_len..].trim_start().len();
        let close = closing_brace(code.as_bytes(), open).unwrap_or(code.len() - 1);
        for b in &mut bytes[attribute..=close] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
    }
    String::from_utf8(bytes).expect("only ASCII bytes were replaced, by spaces")
}

/// A function over the limit: where it starts, its name, its lines.
#[derive(Debug, PartialEq)]
struct Long {
    line: usize,
    name: String,
    lines: usize,
}

/// Every function of `src` (a file's text) with a body longer than `max`
/// lines.
fn long_functions(src: &str, max: usize) -> Vec<Long> {
    let code = without_test_modules(&blank_out(src));
    let bytes = code.as_bytes();
    let line_of = |at: usize| 1 + bytes[..at].iter().filter(|&&b| b == b'\n').count();
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut long = Vec::new();
    let mut from = 0;
    while let Some(found) = code[from..].find("fn") {
        let at = from + found;
        from = at + 2;
        let word_before = at > 0 && is_ident(bytes[at - 1]);
        if word_before || bytes.get(at + 2) != Some(&b' ') {
            continue;
        }
        let rest = code[at + 2..].trim_start();
        let name_len = rest.bytes().take_while(|&b| is_ident(b)).count();
        if name_len == 0 {
            continue; // `fn(u64) -> u64`, a pointer type
        }
        let name = &rest[..name_len];
        // The body opens at the first `{` outside parentheses and brackets;
        // a `;` there first means a declaration without a body (a trait's).
        let mut depth = 0i32;
        let mut open = None;
        for (offset, b) in code[at..].bytes().enumerate() {
            match b {
                b'(' | b'[' => depth += 1,
                b')' | b']' => depth -= 1,
                b';' if depth == 0 => break,
                b'{' if depth == 0 => {
                    open = Some(at + offset);
                    break;
                }
                _ => {}
            }
        }
        let Some(open) = open else { continue };
        let Some(close) = closing_brace(bytes, open) else {
            continue;
        };
        let lines = line_of(close) - line_of(at) + 1;
        if lines > max {
            long.push(Long {
                line: line_of(at),
                name: name.to_owned(),
                lines,
            });
        }
    }
    long
}

#[test]
fn no_function_of_the_product_is_over_the_limit() {
    let root = workspace_root();
    let mut dirs = vec![root.join("shared/src")];
    let services = std::fs::read_dir(root.join("services")).expect("services/");
    for service in services {
        let src = service.expect("a directory entry").path().join("src");
        if src.is_dir() {
            dirs.push(src);
        }
    }
    // Test code by its name: a `tests.rs`, or under a `tests` folder.
    let files: Vec<_> = dirs
        .iter()
        .flat_map(|dir| rust_files(dir, &|name| name == "tests"))
        .filter(|file| !file.ends_with("tests.rs"))
        .collect();
    assert!(files.len() > 100, "found only {files:?}");
    let mut offenders = Vec::new();
    for file in &files {
        let src = std::fs::read_to_string(file).expect("a source file");
        let shown = file.strip_prefix(&root).unwrap_or(file).display();
        for f in long_functions(&src, MAX_LINES) {
            offenders.push(format!("{shown}:{} {} {}", f.line, f.name, f.lines));
        }
    }
    assert!(
        offenders.is_empty(),
        "these functions are over {MAX_LINES} lines (file:line name length):\n  {}\n\
         split each by job into functions (or a small struct) named for what they do, \
         each with a doc comment saying why, behaviour unchanged",
        offenders.join("\n  ")
    );
}

/// A function of `body_lines` lines between its signature and closing brace.
fn sample(name: &str, body_lines: usize) -> String {
    let body: String = (0..body_lines)
        .map(|i| format!("    let _x{i} = {i};\n"))
        .collect();
    format!("fn {name}() {{\n{body}}}\n")
}

#[test]
fn a_function_of_121_lines_is_reported_with_its_line_name_and_length() {
    let src = format!("use std::fmt;\n\n{}", sample("too_long", 119));
    assert_eq!(
        long_functions(&src, MAX_LINES),
        [Long {
            line: 3,
            name: "too_long".into(),
            lines: 121
        }]
    );
    let reported = long_functions(&src, MAX_LINES)
        .iter()
        .map(|f| format!("shard.rs:{} {} {}", f.line, f.name, f.lines))
        .collect::<Vec<_>>();
    assert_eq!(reported, ["shard.rs:3 too_long 121"]);
}

#[test]
fn a_function_of_120_lines_passes() {
    assert_eq!(long_functions(&sample("just_fits", 118), MAX_LINES), []);
}

#[test]
fn braces_in_strings_chars_and_comments_are_not_counted() {
    let src = r####"
fn tricky<'a>(s: &'a str) -> [u8; 2] {
    let _ = "}}} \" }";
    let _ = r#"}" }"#;
    let _ = br"}";
    let _ = b'}';
    let _ = '}';
    let _ = '\'';
    let _ = '\u{7d}';
    // }
    /* } /* nested } */ } */
    'outer: loop { break 'outer; }
    [b'{', b'}']
}
fn after() {
    let _ = 1;
}
"####;
    let long = long_functions(src, 0);
    let seen: Vec<_> = long
        .iter()
        .map(|f| (f.name.as_str(), f.line, f.lines))
        .collect();
    assert_eq!(seen, [("tricky", 2, 13), ("after", 15, 3)]);
}

#[test]
fn test_modules_and_declarations_without_a_body_are_skipped() {
    let src = format!(
        "trait T {{\n    fn declared(&self);\n}}\n#[cfg(test)]\nmod tests {{\n{}}}\n{}",
        sample("a_test", 200),
        sample("product", 3),
    );
    let names: Vec<_> = long_functions(&src, 0)
        .into_iter()
        .map(|f| f.name)
        .collect();
    assert_eq!(names, ["product"]);
}

#[test]
fn pointer_types_and_nested_functions() {
    let src = "fn outer(f: fn(u8) -> u8) {\n    fn inner() {\n    }\n}\n";
    let seen: Vec<_> = long_functions(src, 0)
        .into_iter()
        .map(|f| (f.name, f.lines))
        .collect();
    assert_eq!(seen, [("outer".into(), 4), ("inner".into(), 2)]);
}
