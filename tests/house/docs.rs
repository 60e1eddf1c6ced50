//! The documents keep to the tree: the README shows its examples exactly as `examples/` holds them, and every
//! repository path the documents name exists.
//!
//! The README's Rust blocks are also compiled as doc tests (`src/lib.rs`, `ReadmeDoctests`), and
//! `scripts/examples` runs the example files against local nodes; this file checks what neither can: that the
//! text a reader copies is the text that runs.

use std::fs;
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[track_caller]
fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The fenced code blocks that follow a `<!-- example: PATH -->` line: `(PATH, the block's text, its line)`.
fn tagged_blocks(text: &str) -> Vec<(String, String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(path) = line
            .trim()
            .strip_prefix("<!-- example:")
            .and_then(|rest| rest.strip_suffix("-->"))
        else {
            continue;
        };
        let fence = lines.get(i + 1).copied().unwrap_or_default();
        assert!(
            fence.starts_with("```"),
            "README.md:{}: the example marker for {} is not followed by a code block",
            i + 1,
            path.trim()
        );
        let body: Vec<&str> = lines[i + 2..]
            .iter()
            .take_while(|l| !l.starts_with("```"))
            .copied()
            .collect();
        let mut block = body.join("\n");
        block.push('\n');
        found.push((path.trim().to_string(), block, i + 1));
    }
    found
}

#[test]
fn the_readme_shows_each_example_file_exactly() {
    let readme = read(&root().join("README.md"));
    let blocks = tagged_blocks(&readme);
    let mut shown: Vec<&str> = blocks.iter().map(|(p, _, _)| p.as_str()).collect();
    shown.sort();
    assert_eq!(
        shown,
        [
            "examples/cli.sh",
            "examples/first_lock.rs",
            "examples/first_lock_async.rs"
        ],
        "the README's tagged examples"
    );
    for (path, block, line) in &blocks {
        let file = read(&root().join(path));
        assert!(
            *block == file,
            "README.md:{line}: the block differs from {path}: copy the file into the README (or the block into the \
             file)\n--- README ---\n{block}--- {path} ---\n{file}"
        );
    }
}

/// The folders a repository path can start with.
const ROOTS: &[&str] = &[
    "src/",
    "tests/",
    "scripts/",
    "benches/",
    "cli/",
    "examples/",
    "fuzz/",
    "benchmarks/",
    "docs/",
];

/// The documents whose paths are checked, relative to the repository.
/// The README is for a user deciding and starting: short, its two set-up commands near the top. Reference
/// material goes to rustdoc and `docs/`.
#[test]
fn the_readme_stays_short_with_its_set_up_near_the_top() {
    let readme = read(&root().join("README.md"));
    let words = readme.split_whitespace().count();
    assert!(
        words <= 1_800,
        "README.md has {words} words (at most 1,800): move reference material to rustdoc or docs/"
    );
    for command in ["scripts/demo", "scripts/test"] {
        let line = readme
            .lines()
            .position(|l| l.contains(&format!("`{command}`")))
            .unwrap_or_else(|| panic!("README.md does not name `{command}`"));
        assert!(
            line < 30,
            "README.md names `{command}` first at line {}: the set-up goes near the top",
            line + 1
        );
    }
}

fn documents() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = ["README.md", "DESIGN.md", "RELIABILITY.md", "BENCHMARKS.md"]
        .iter()
        .map(PathBuf::from)
        .collect();
    let mut guides: Vec<PathBuf> = fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| {
            p.strip_prefix(root())
                .expect("under the root")
                .to_path_buf()
        })
        .collect();
    guides.sort();
    docs.extend(guides);
    docs
}

/// The file part of a path as a document names it: without `::item`, a `:line`, a `#anchor` or trailing
/// punctuation. `None` for what is not a single path (globs, placeholders).
fn file_part(word: &str) -> Option<&str> {
    let word = word.trim_end_matches(['.', ',', ';', ':', ')', '(', '\'', '"']);
    let word = word.split("::").next().unwrap_or(word);
    let word = word.split('#').next().unwrap_or(word);
    let word = match word.rsplit_once(':') {
        Some((path, line)) if line.chars().all(|c| c.is_ascii_digit()) => path,
        _ => word,
    };
    if word.contains(['*', '<', '>', '{', '}', '$', '…']) || word.contains("...") {
        return None;
    }
    Some(word)
}

/// The repository paths named in `text`: words of its inline code spans and code blocks that start with one of
/// [`ROOTS`], and source files named from inside a module folder (`engine/restart/mod.rs`, looked for under `src/`,
/// `src/redlock/` and `src/net/`). With each, its line.
fn named_paths(text: &str) -> Vec<(String, usize)> {
    let mut found = Vec::new();
    let mut in_block = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        let code: Vec<&str> = if in_block {
            // A shell comment's words are prose (`# 3,116 scripts/s`), not paths.
            vec![line.split(" # ").next().unwrap_or(line)]
        } else {
            line.split('`').skip(1).step_by(2).collect()
        };
        for span in code {
            for word in span.split([' ', '=', '(', ',', '[', '"', '\'']) {
                let Some(path) = file_part(word) else {
                    continue;
                };
                let rooted = ROOTS.iter().any(|r| path.starts_with(r));
                let module_file = path.ends_with(".rs") && path.contains('/');
                if (rooted || module_file) && !path.starts_with('/') && !path.contains("://") {
                    found.push((path.to_string(), n + 1));
                }
            }
        }
    }
    found
}

/// Whether `path` names something in the tree: from the root, or (a source file named from inside its module
/// folder) under `src/`, `src/redlock/` or `src/net/`.
fn exists(path: &str) -> bool {
    ["", "src/", "src/redlock/", "src/net/"]
        .iter()
        .any(|base| root().join(format!("{base}{path}")).exists())
}

#[test]
fn every_path_the_documents_name_exists() {
    let mut missing = Vec::new();
    let mut checked = 0;
    for doc in documents() {
        let text = read(&root().join(&doc));
        for (path, line) in named_paths(&text) {
            checked += 1;
            if !exists(&path) {
                missing.push(format!("{}:{line}: {path}", doc.display()));
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} paths found: is the extraction broken?"
    );
    assert!(
        missing.is_empty(),
        "{} path(s) named in the documents do not exist:\n{}",
        missing.len(),
        missing.join("\n")
    );
}

/// Relative links (`[text](path)`) resolve from the document that holds them.
#[test]
fn every_relative_link_of_the_documents_resolves() {
    let mut broken = Vec::new();
    for doc in documents()
        .into_iter()
        .chain([PathBuf::from("cli/README.md")])
    {
        let text = read(&root().join(&doc));
        let dir = root().join(&doc).parent().expect("a folder").to_path_buf();
        for (n, line) in text.lines().enumerate() {
            for part in line.split("](").skip(1) {
                let target = part.split(')').next().unwrap_or_default();
                let file = target.split('#').next().unwrap_or_default();
                if file.is_empty() || file.contains("://") || file.starts_with("mailto:") {
                    continue;
                }
                if !dir.join(file).exists() {
                    broken.push(format!("{}:{}: {target}", doc.display(), n + 1));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "{} relative link(s) do not resolve:\n{}",
        broken.len(),
        broken.join("\n")
    );
}

#[test]
fn the_extraction_reads_paths_as_the_documents_write_them() {
    let text = "see `src/redlock/engine/restart/mod.rs::trusted_at_once` and `tests/mutex.rs::clusters`,\n\
                `engine/fold.rs`, Cancel; `cargo test --test mutex`; `fuzz/fuzz_targets/*.rs`\n\
                ```sh\nscripts/fuzz run 600\n```\n";
    let paths: Vec<String> = named_paths(text).into_iter().map(|(p, _)| p).collect();
    assert_eq!(
        paths,
        [
            "src/redlock/engine/restart/mod.rs",
            "tests/mutex.rs",
            "engine/fold.rs",
            "scripts/fuzz"
        ]
    );
    assert!(exists("engine/restart/mod.rs") && !exists("engine/restart.rs"));
}

#[test]
fn no_document_holds_a_merge_conflict() {
    let mut found = Vec::new();
    for doc in documents() {
        for (i, line) in read(&root().join(&doc)).lines().enumerate() {
            if ["<<<<<<< ", ">>>>>>> "].iter().any(|m| line.starts_with(m)) || line == "=======" {
                found.push(format!("{}:{}: {line}", doc.display(), i + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "merge conflict markers:\n{}",
        found.join("\n")
    );
}
