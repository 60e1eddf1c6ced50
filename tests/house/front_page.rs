//! The crate's front page (the docs of `src/lib.rs`, docs.rs' first page) is a map: the types a user needs first,
//! one line each, before anything else; the long guides on pages of their own; every user feature named, built
//! on docs.rs, and badged where it gates a public item.

use std::fs;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[track_caller]
fn read(path: &str) -> String {
    fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The crate docs of `src/lib.rs`: its `//!` lines, without the marker.
fn front_page() -> Vec<String> {
    read("src/lib.rs")
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l).to_owned())
        .collect()
}

/// The lines of the front page's section `heading` (a `# ` heading), up to the next one.
fn section(page: &[String], heading: &str) -> Vec<String> {
    page.iter()
        .skip_while(|l| l.as_str() != format!("# {heading}"))
        .skip(1)
        .take_while(|l| !l.starts_with("# "))
        .cloned()
        .collect()
}

/// The cargo features of `Cargo.toml`'s `[features]` table, but `default` and `sim` (the simulator's seam, not
/// for users).
fn user_features() -> Vec<String> {
    read("Cargo.toml")
        .lines()
        .skip_while(|l| l.trim() != "[features]")
        .skip(1)
        .take_while(|l| !l.starts_with('['))
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('=').map(|(name, _)| name.trim().to_owned()))
        .filter(|name| !name.is_empty() && name != "default" && name != "sim")
        .collect()
}

#[test]
fn the_front_page_opens_with_the_types_a_user_needs_first() {
    let page = front_page();
    let headings: Vec<&str> = page.iter().filter_map(|l| l.strip_prefix("# ")).collect();
    assert_eq!(
        headings.first(),
        Some(&"Start here"),
        "the first section: {headings:?}"
    );
    let start = section(&page, "Start here");
    for name in ["LockManager", "Request", "Lock", "Guard", "Error", "Config"] {
        assert!(
            start
                .iter()
                .any(|l| l.starts_with(&format!("- [`{name}`]: "))),
            "no line for {name} in: {start:#?}"
        );
    }
}

#[test]
fn the_acl_permissions_have_a_page_of_their_own() {
    let page = front_page().join("\n");
    assert!(
        !page.contains("ACL SETUSER") && !page.contains("+evalsha"),
        "the permissions are back on the front page"
    );
    let lib = read("src/lib.rs");
    assert!(
        lib.contains("#[doc = include_str!(\"../docs/acl.md\")]\npub mod acl {}"),
        "no `acl` module page made of docs/acl.md"
    );
    assert!(read("docs/acl.md").contains("ACL SETUSER"));
    assert!(page.contains("[`acl`]"), "the front page does not link it");
}

#[test]
fn every_user_feature_is_named_on_the_front_page_and_built_on_docs_rs() {
    let features = user_features();
    assert!(
        features.iter().any(|f| f == "tls"),
        "read no features: {features:?}"
    );
    let named = section(&front_page(), "Features");
    for feature in &features {
        assert!(
            named
                .iter()
                .any(|l| l.starts_with(&format!("- `{feature}` "))),
            "feature {feature} not named in: {named:#?}"
        );
    }
    let manifest = read("Cargo.toml");
    let docs_rs: Vec<&str> = manifest
        .lines()
        .skip_while(|l| l.trim() != "[package.metadata.docs.rs]")
        .skip(1)
        .take_while(|l| !l.starts_with('['))
        .collect();
    let built = docs_rs
        .iter()
        .find_map(|l| l.strip_prefix("features = "))
        .unwrap_or_else(|| panic!("no docs.rs features in: {docs_rs:#?}"));
    for feature in &features {
        assert!(
            built.contains(&format!("\"{feature}\"")),
            "docs.rs does not build {feature}: {built}"
        );
    }
    assert!(
        !built.contains("\"sim\""),
        "docs.rs builds the simulator's seam"
    );
    assert!(
        docs_rs
            .iter()
            .any(|l| l.trim() == r#"rustdoc-args = ["--cfg", "docsrs"]"#),
        "{docs_rs:#?}"
    );
    assert!(read("src/lib.rs").contains("#![cfg_attr(docsrs, feature(doc_cfg))]"));
}

/// The `.rs` files under `dir`, recursively.
fn sources(dir: &Path, found: &mut Vec<std::path::PathBuf>) {
    for entry in fs::read_dir(dir).expect("a source folder") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

#[test]
fn public_items_gated_by_a_user_feature_carry_its_badge() {
    let mut files = Vec::new();
    sources(&root().join("src"), &mut files);
    let features = user_features();
    let mut unbadged = Vec::new();
    for file in files {
        let text = fs::read_to_string(&file).expect("a source file");
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(feature) = features
                .iter()
                .find(|f| *line == format!("#[cfg(feature = \"{f}\")]"))
            else {
                continue;
            };
            // The item's attributes and doc comments around the gate, then the item.
            let first = (0..i)
                .rev()
                .take_while(|&j| lines[j].starts_with("#[") || lines[j].starts_with("///"))
                .last()
                .unwrap_or(i);
            let Some(item) = (i..lines.len())
                .find(|&j| !lines[j].starts_with("#[") && !lines[j].starts_with("///"))
            else {
                continue;
            };
            if !lines[item].starts_with("pub ") {
                continue;
            }
            let badge = format!("#[cfg_attr(docsrs, doc(cfg(feature = \"{feature}\")))]");
            if !lines[first..item].contains(&badge.as_str()) {
                unbadged.push(format!("{}:{}", file.display(), item + 1));
            }
        }
    }
    assert!(unbadged.is_empty(), "no doc(cfg) badge: {unbadged:#?}");
}
