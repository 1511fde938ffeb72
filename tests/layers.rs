//! The core's layers point one way: model <- wire <- http <- providers <- call/runtime <- stream
//! <- lane <- py.
//! A module may name (`crate::x`) only its own layer or the layers below it, so a cycle between
//! layers cannot build up unnoticed.

use std::fs;
use std::path::{Path, PathBuf};

/// Top-level modules of `src/` from the bottom up; equal ranks may not name each other.
const LAYERS: &[(&str, u8)] = &[
    ("model", 0),
    ("wire", 1),
    ("http", 2),
    ("providers", 3),
    ("call", 4),
    ("runtime", 4),
    ("stream", 5),
    ("lane", 6),
    ("py", 7),
];

fn rank(module: &str) -> Option<u8> {
    LAYERS
        .iter()
        .find(|(name, _)| *name == module)
        .map(|(_, rank)| *rank)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to (`src/providers/bedrock/mod.rs` -> `providers`).
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).ok()?;
    let first = relative.components().next()?.as_os_str().to_str()?;
    Some(first.trim_end_matches(".rs").to_string())
}

/// Every `crate::<module>` a source text names.
fn named_modules(text: &str) -> Vec<String> {
    text.match_indices("crate::")
        .map(|(at, _)| {
            text[at + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

#[test]
fn layers_only_depend_downwards() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut violations = Vec::new();
    for file in &files {
        let Some(module) = top_module(&src, file) else {
            continue;
        };
        let Some(own_rank) = rank(&module) else {
            assert_eq!(
                module,
                "lib",
                "{} is in no layer: add it to LAYERS",
                file.display()
            );
            continue;
        };
        let text = fs::read_to_string(file).expect("a readable source file");
        for named in named_modules(&text) {
            let Some(named_rank) = rank(&named) else {
                violations.push(format!("{}: crate::{named} is in no layer", file.display()));
                continue;
            };
            if named != module && named_rank >= own_rank {
                violations.push(format!("{}: {module} names crate::{named}", file.display()));
            }
        }
    }
    assert!(violations.is_empty(), "{violations:#?}");
}

#[test]
fn the_checker_sees_a_violation() {
    assert_eq!(
        named_modules("use crate::providers::Deployment; x(crate::py::y)"),
        ["providers", "py"]
    );
}
