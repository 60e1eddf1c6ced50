//! What `cargo package` ships, for the library and for the command: the sources that build, the README, both
//! license files, and nothing of the repository's tests, benches, scripts or fuzz crate.
//!
//! Reads `cargo package --list` (no network, nothing built). That the package also builds is checked by hand with
//! `cargo package --allow-dirty --offline` (it compiles every dependency again, too slow for a test).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's root (the workspace).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cli/ has a parent")
        .to_path_buf()
}

/// The files `cargo package` would ship for `package`, and what cargo said on stderr.
#[track_caller]
fn listed(package: &str) -> (BTreeSet<String>, String) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "package",
            "--list",
            "--allow-dirty",
            "--offline",
            "-p",
            package,
        ])
        .current_dir(root())
        .output()
        .expect("cargo runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "cargo package --list failed: {stderr}"
    );
    let files = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    (files, stderr)
}

/// Files cargo adds to every package on its own.
const CARGO_ADDS: [&str; 4] = [
    "Cargo.toml",
    "Cargo.toml.orig",
    "Cargo.lock",
    ".cargo_vcs_info.json",
];

#[track_caller]
fn ships_licenses_and_no_repository_only_files(files: &BTreeSet<String>) {
    for license in ["LICENSE-MIT", "LICENSE-APACHE", "README.md"] {
        assert!(files.contains(license), "{license} not shipped: {files:#?}");
    }
    for file in files {
        for dir in [
            "tests/",
            "benches/",
            "scripts/",
            "fuzz/",
            "benchmarks/",
            ".ci/",
        ] {
            assert!(!file.starts_with(dir), "{file} shipped: {files:#?}");
        }
    }
}

#[test]
fn the_library_package_ships_its_sources_docs_examples_and_licenses_only() {
    let (files, stderr) = listed("muxlock");
    ships_licenses_and_no_repository_only_files(&files);
    for file in &files {
        let allowed = CARGO_ADDS.contains(&file.as_str())
            || ["README.md", "LICENSE-MIT", "LICENSE-APACHE"].contains(&file.as_str())
            || file.starts_with("src/") && file.ends_with(".rs")
            || file.starts_with("docs/") && file.ends_with(".md")
            || file.starts_with("examples/") && file.ends_with(".rs");
        assert!(allowed, "{file} shipped: {files:#?}");
    }
    assert!(files.contains("src/lib.rs"), "{files:#?}");
    // Every file the sources include (`include_str!`, `#[path]`) ships with them.
    for file in files.iter().filter(|f| f.ends_with(".rs")) {
        let text = std::fs::read_to_string(root().join(file)).expect("a listed file exists");
        let dir = Path::new(file).parent().expect("in a folder");
        for needed in included_paths(&text) {
            let path = normalize(&dir.join(&needed));
            assert!(
                files.contains(&path),
                "{file} includes {needed} ({path}), which is not shipped: {files:#?}"
            );
        }
    }
    // No warning: the metadata is complete.
    assert!(!stderr.contains("warning"), "{stderr}");
}

#[test]
fn the_packaged_library_manifest_declares_only_targets_it_ships() {
    let (files, _) = listed("muxlock");
    let target = TempDir::new("muxlock-package");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "package",
            "--allow-dirty",
            "--offline",
            "--no-verify",
            "-p",
            "muxlock",
        ])
        .arg("--target-dir")
        .arg(&target.0)
        .current_dir(root())
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // `muxlock-VERSION.crate`, a .tar.gz of `muxlock-VERSION/...`.
    let krate = std::fs::read_dir(target.0.join("package"))
        .expect("cargo wrote target/package")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "crate"))
        .expect("a .crate file");
    let stem = krate.file_stem().and_then(|s| s.to_str()).expect("a name");
    let out = Command::new("tar")
        .arg("-xzOf")
        .arg(&krate)
        .arg(format!("{stem}/Cargo.toml"))
        .output()
        .expect("tar runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let manifest = String::from_utf8_lossy(&out.stdout);
    // cargo drops the tests and benches whose files are not shipped; a target left in would not build.
    for section in ["[[test]]", "[[bench]]"] {
        assert!(!manifest.contains(section), "{section} in {manifest}");
    }
    let paths: Vec<&str> = manifest
        .lines()
        .filter_map(|l| l.strip_prefix("path = \""))
        .filter_map(|l| l.strip_suffix('"'))
        .collect();
    assert!(paths.contains(&"src/lib.rs"), "{manifest}");
    for path in paths {
        assert!(
            files.contains(path),
            "{path} declared, not shipped: {manifest}"
        );
    }
}

/// A directory under the system's temporary one, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn the_command_package_ships_its_sources_readme_and_licenses_only() {
    let (files, _) = listed("muxlock-cli");
    ships_licenses_and_no_repository_only_files(&files);
    for file in &files {
        let allowed = CARGO_ADDS.contains(&file.as_str())
            || ["README.md", "LICENSE-MIT", "LICENSE-APACHE"].contains(&file.as_str())
            || file.starts_with("src/") && file.ends_with(".rs");
        assert!(allowed, "{file} shipped: {files:#?}");
    }
    assert!(files.contains("src/main.rs"), "{files:#?}");
    // (cargo warns that the manifest has no documentation, homepage or repository: the command has no public
    // address yet and is not published.)
}

/// The paths in `include_str!("...")`, `include_bytes!("...")` and `#[path = "..."]` of a source file.
fn included_paths(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for opener in ["include_str!(\"", "include_bytes!(\"", "#[path = \""] {
        for (at, _) in text.match_indices(opener) {
            let rest = &text[at + opener.len()..];
            if let Some(end) = rest.find('"') {
                found.push(rest[..end].to_owned());
            }
        }
    }
    found
}

/// `a/b/../c` as `a/c`, with `/` separators.
fn normalize(path: &Path) -> String {
    let mut parts: Vec<String> = Vec::new();
    for part in path.components() {
        match part.as_os_str().to_str().unwrap_or_default() {
            ".." => {
                parts.pop();
            }
            "." => {}
            other => parts.push(other.to_owned()),
        }
    }
    parts.join("/")
}

#[test]
fn included_paths_are_found_and_resolved() {
    let text = "#[doc = include_str!(\"../README.md\")]\n#[path = \"t/mod.rs\"]\nmod t;";
    assert_eq!(included_paths(text), ["../README.md", "t/mod.rs"]);
    assert_eq!(normalize(Path::new("src/../README.md")), "README.md");
    assert_eq!(normalize(Path::new("src/net/./x.rs")), "src/net/x.rs");
}
