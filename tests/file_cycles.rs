//! No file of `src/` depends on itself through other files: the `use`s and paths between files
//! (`crate::…`, `super::…`, `self::…`, a child module's name) form no cycle. A `mod` line is no
//! dependency, and a name is where the path to it leads (a re-export counts as the file that
//! re-exports it), so a `mod.rs` that only declares and re-exports is a table of contents its
//! children never depend on.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// A module path (`["providers", "openai"]`); the crate root is empty.
type ModulePath = Vec<String>;

/// Every file's module path, with its path under `src/` and its code.
fn source_files(src: &Path) -> BTreeMap<ModulePath, (String, String)> {
    let mut files = BTreeMap::new();
    let mut pending = vec![src.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).expect("src/ is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            if path.extension().is_none_or(|ext| ext != "rs") {
                continue;
            }
            let relative = path.strip_prefix(src).expect("a file under src/");
            let mut module: ModulePath = relative
                .iter()
                .map(|part| part.to_string_lossy().trim_end_matches(".rs").to_string())
                .collect();
            if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
                module.pop();
            }
            let text = fs::read_to_string(&path).expect("a readable source file");
            let name = relative.to_string_lossy().into_owned();
            files.insert(module, (name, code_of(&text)));
        }
    }
    files
}

/// The code of a source text: comments, string and character literals blanked, and the test
/// module at the bottom left out.
fn code_of(text: &str) -> String {
    let test_module = text
        .match_indices("#[cfg(test)]")
        .find(|(at, marker)| text[at + marker.len()..].trim_start().starts_with("mod "));
    let text = &text[..test_module.map_or(text.len(), |(at, _)| at)];
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let rest = &chars[i..];
        match rest {
            ['/', '/', ..] => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            ['/', '*', ..] => {
                i += 2;
                while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                    i += 1;
                }
                i += 2;
            }
            ['r', '#' | '"', ..] if raw_string_hashes(rest).is_some() => {
                let hashes = raw_string_hashes(rest).unwrap_or(0);
                i += 2 + hashes;
                let close: Vec<char> = std::iter::once('"')
                    .chain(std::iter::repeat_n('#', hashes))
                    .collect();
                while i < chars.len() && !chars[i..].starts_with(&close) {
                    i += 1;
                }
                i += close.len();
                out.push_str("\"\"");
            }
            ['"', ..] => {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            ['\'', '\\', ..] => {
                i += 3;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
            }
            ['\'', _, '\'', ..] => {
                i += 3;
                out.push_str("' '");
            }
            [c, ..] => {
                out.push(*c);
                i += 1;
            }
            [] => break,
        }
    }
    out
}

/// `r"` or `r#…#"` at the start of `rest` (after a non-identifier character): how many `#`s.
fn raw_string_hashes(rest: &[char]) -> Option<usize> {
    let hashes = rest[1..].iter().take_while(|c| **c == '#').count();
    (rest.get(1 + hashes) == Some(&'"')).then_some(hashes)
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Inline modules (`mod name { … }`) with the module they sit in, and for every position of
/// the code the inline modules around it.
fn inline_modules(code: &str) -> Vec<(usize, usize, String)> {
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(offset) = code[at..].find("mod ") {
        let start = at + offset;
        at = start + 4;
        if start > 0 && is_ident(bytes[start - 1] as char) {
            continue;
        }
        let name: String = code[at..].chars().take_while(|c| is_ident(*c)).collect();
        let after = code[at + name.len()..].trim_start();
        if name.is_empty() || !after.starts_with('{') {
            continue;
        }
        let open = code.len() - after.len();
        let mut depth = 0;
        let mut close = code.len();
        for (index, c) in code[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = open + index;
                        break;
                    }
                }
                _ => {}
            }
        }
        found.push((open, close, name));
    }
    found
}

/// A path the code names: where it stands, its segments, and for a `use` the name it brings
/// into scope.
struct NamedPath {
    at: usize,
    segments: Vec<String>,
    imports: Option<String>,
}

/// Every path a piece of code names: each `use` tree expanded, and every other path of two or
/// more segments.
fn named_paths(code: &str) -> Vec<NamedPath> {
    let mut paths = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        let c = bytes[i] as char;
        let starts_word = i == 0 || !(is_ident(bytes[i - 1] as char) || bytes[i - 1] == b':');
        if !starts_word || !(is_ident(c) || c == '$') {
            i += 1;
            continue;
        }
        if code[i..].starts_with("use ") {
            let end = code[i..].find(';').map_or(code.len(), |end| i + end);
            let mut expanded = Vec::new();
            expand_use_tree(&code[i + 4..end], Vec::new(), &mut expanded);
            paths.extend(expanded.into_iter().map(|(segments, name)| NamedPath {
                at: i,
                segments,
                imports: Some(name),
            }));
            i = end;
            continue;
        }
        let len = code[i..]
            .find(|c: char| !(is_ident(c) || c == ':' || c == '$'))
            .unwrap_or(code.len() - i);
        let segments: Vec<String> = code[i..i + len]
            .split("::")
            .map(str::to_string)
            .filter(|segment| !segment.is_empty())
            .collect();
        if segments.len() > 1 {
            paths.push(NamedPath {
                at: i,
                segments,
                imports: None,
            });
        }
        i += len.max(1);
    }
    paths
}

/// `a::{b, c::{self, d as e}}` -> `a::b` (b), `a::c` (c), `a::c::d` (e); globs dropped. Each
/// path with the name it brings into scope.
fn expand_use_tree(tree: &str, prefix: Vec<String>, out: &mut Vec<(Vec<String>, String)>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let mut base = prefix;
        base.extend(segments_of(&tree[..open]));
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let mut depth = 0;
        let mut start = 0;
        for (index, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand_use_tree(&inner[start..index], base.clone(), out);
                    start = index + 1;
                }
                _ => {}
            }
        }
        expand_use_tree(&inner[start..], base, out);
        return;
    }
    let mut parts = tree.split(" as ");
    let mut path = prefix;
    for segment in segments_of(parts.next().unwrap_or(tree)) {
        if segment != "self" || path.is_empty() {
            path.push(segment);
        }
    }
    let name = parts
        .next()
        .map(str::trim)
        .or(path.last().map(String::as_str))
        .map(str::to_string);
    if let Some(name) = name {
        out.push((path, name));
    }
}

fn segments_of(text: &str) -> Vec<String> {
    text.split("::")
        .map(|segment| segment.trim().trim_start_matches("pub ").to_string())
        .filter(|segment| !segment.is_empty() && segment != "*")
        .collect()
}

/// Where a path written in `module` leads: its first segment resolved (`crate`, `super`,
/// `self`, a child module, or a module a `use` brought in), then as far down the module tree as
/// it goes; with whether every segment was a module.
fn resolve(
    modules: &BTreeMap<ModulePath, ModulePath>,
    imported: &BTreeMap<String, ModulePath>,
    module: &ModulePath,
    path: &[String],
) -> Option<(ModulePath, bool)> {
    let mut at = module.clone();
    let mut segments = path.iter().peekable();
    match segments.peek().map(|s| s.as_str()) {
        Some("crate" | "$crate") => {
            at.clear();
            segments.next();
        }
        Some("self") => {
            segments.next();
        }
        Some("super") => {
            while segments.peek().map(|s| s.as_str()) == Some("super") {
                at.pop()?;
                segments.next();
            }
        }
        Some(first) => {
            let mut child = at.clone();
            child.push(first.to_string());
            if !modules.contains_key(&child) {
                at = imported.get(first)?.clone();
                segments.next();
            }
        }
        None => return None,
    }
    for segment in segments.by_ref() {
        let mut child = at.clone();
        child.push(segment.clone());
        if !modules.contains_key(&child) {
            return Some((at, false));
        }
        at = child;
    }
    Some((at, true))
}

/// For each file (by module path), the files its code depends on.
fn dependencies(
    files: &BTreeMap<ModulePath, String>,
) -> BTreeMap<ModulePath, BTreeSet<ModulePath>> {
    // Every module, files and inline ones, with the file that holds it.
    let mut modules: BTreeMap<ModulePath, ModulePath> = files
        .keys()
        .map(|module| (module.clone(), module.clone()))
        .collect();
    let mut inline = BTreeMap::new();
    for (file, code) in files {
        let found = inline_modules(code);
        for (open, _, name) in &found {
            let mut path = file.clone();
            path.extend(enclosing(&found, *open));
            path.push(name.clone());
            modules.insert(path, file.clone());
        }
        inline.insert(file.clone(), found);
    }
    let mut graph = BTreeMap::new();
    for (file, code) in files {
        let paths = named_paths(code);
        let scope = |at: usize| {
            let mut module = file.clone();
            module.extend(enclosing(&inline[file], at));
            module
        };
        // Modules a `use` brings in by name (`use crate::x::{self, y}` then `x::z`).
        let mut imported = BTreeMap::new();
        for path in &paths {
            if let Some(name) = &path.imports
                && let Some((target, true)) =
                    resolve(&modules, &BTreeMap::new(), &scope(path.at), &path.segments)
            {
                imported.insert(name.clone(), target);
            }
        }
        let mut depends = BTreeSet::new();
        for path in &paths {
            let Some((target, _)) = resolve(&modules, &imported, &scope(path.at), &path.segments)
            else {
                continue;
            };
            if modules[&target] != *file {
                depends.insert(modules[&target].clone());
            }
        }
        graph.insert(file.clone(), depends);
    }
    graph
}

/// The inline modules around a position, outermost first.
fn enclosing(found: &[(usize, usize, String)], at: usize) -> Vec<String> {
    let mut around: Vec<&(usize, usize, String)> = found
        .iter()
        .filter(|(open, close, _)| *open < at && at < *close)
        .collect();
    around.sort_by_key(|(open, _, _)| *open);
    around
        .into_iter()
        .map(|(_, _, name)| name.clone())
        .collect()
}

/// The groups of files that depend on each other (strongly connected, more than one file).
fn cycles(graph: &BTreeMap<ModulePath, BTreeSet<ModulePath>>) -> Vec<Vec<ModulePath>> {
    let reaches = |from: &ModulePath| {
        let mut seen = BTreeSet::new();
        let mut pending = vec![from.clone()];
        while let Some(next) = pending.pop() {
            for target in graph.get(&next).into_iter().flatten() {
                if seen.insert(target.clone()) {
                    pending.push(target.clone());
                }
            }
        }
        seen
    };
    let reach: BTreeMap<&ModulePath, BTreeSet<ModulePath>> =
        graph.keys().map(|file| (file, reaches(file))).collect();
    let mut grouped = BTreeSet::new();
    let mut groups = Vec::new();
    for file in graph.keys() {
        if grouped.contains(file) || !reach[file].contains(file) {
            continue;
        }
        let group: Vec<ModulePath> = reach[file]
            .iter()
            .filter(|other| reach[*other].contains(file))
            .cloned()
            .collect();
        grouped.extend(group.iter().cloned());
        groups.push(group);
    }
    groups
}

#[test]
fn no_file_depends_on_itself() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = source_files(&src);
    let code = files
        .iter()
        .map(|(module, (_, code))| (module.clone(), code.clone()))
        .collect();
    let found: Vec<Vec<&str>> = cycles(&dependencies(&code))
        .iter()
        .map(|group| group.iter().map(|file| files[file].0.as_str()).collect())
        .collect();
    assert!(
        found.is_empty(),
        "files that depend on each other: {found:#?}"
    );
}

fn tree(files: &[(&str, &str)]) -> BTreeMap<ModulePath, String> {
    files
        .iter()
        .map(|(module, text)| {
            let path = module
                .split('/')
                .filter(|part| !part.is_empty())
                .map(str::to_string)
                .collect();
            (path, code_of(text))
        })
        .collect()
}

#[test]
fn the_checker_sees_a_cycle_through_super_and_child_paths() {
    let files = tree(&[
        ("", "mod a;"),
        ("a", "pub mod b; pub mod c; pub use b::B; fn f() { c::g() }"),
        ("a/b", "use super::{c::C, x as y}; pub struct B;"),
        (
            "a/c",
            "use crate::a as top; pub struct C; pub fn g() { let _ = top::B; }",
        ),
    ]);
    let graph = dependencies(&files);
    let a: ModulePath = vec!["a".into()];
    let b: ModulePath = vec!["a".into(), "b".into()];
    let c: ModulePath = vec!["a".into(), "c".into()];
    assert_eq!(graph[&b], BTreeSet::from([a.clone(), c.clone()]));
    assert_eq!(graph[&c], BTreeSet::from([a.clone()]));
    assert_eq!(cycles(&graph), vec![vec![a, b, c]]);
}

#[test]
fn the_checker_reads_code_only() {
    let files = tree(&[
        ("", "mod a; mod b;"),
        (
            "a",
            "// use crate::b;\nconst S: &str = \"crate::b::x\"; const C: char = '\"';\n\
             mod inner { use super::super::b::X; }\n#[cfg(test)]\nmod tests { use crate::b::Y; }",
        ),
        ("b", "pub struct X;"),
    ]);
    let graph = dependencies(&files);
    assert_eq!(
        graph[&vec!["a".to_string()]],
        BTreeSet::from([vec!["b".to_string()]])
    );
    assert!(cycles(&graph).is_empty());
}

#[test]
fn the_checker_follows_modules_a_use_brought_in() {
    let files = tree(&[
        ("", "mod x; mod z;"),
        ("x", "pub mod y;"),
        ("x/y", "pub fn f() {}"),
        ("z", "use crate::x; fn g() { x::y::f() }"),
    ]);
    let graph = dependencies(&files);
    let x: ModulePath = vec!["x".into()];
    let y: ModulePath = vec!["x".into(), "y".into()];
    assert_eq!(graph[&vec!["z".to_string()]], BTreeSet::from([x, y]));
}
