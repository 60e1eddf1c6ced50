//! The rooms of the source tree stand on each other by what they import, however many steps away: no file of
//! the library or of the command reaches itself through the files it takes names from (no circle, through two
//! files or eight), and no room reaches one above it: `resp` reaches neither `net` nor `redlock`, `net` not
//! `redlock`; in `src/redlock/` the engine reaches no kind, guard, waiting or manager, the kinds no guard, waiting
//! or manager, the guards no waiting or manager (`src/redlock/mod.rs`, `# Layout`). An import is followed through
//! the re-exports it goes by (`crate::redlock::Lock` is `redlock/kind/mod.rs`'s), and through `use` groups over
//! several lines. A file taking names from its own ancestors (a child module from its parent's `mod.rs`) is at
//! home there: that is no step.

use std::fs;
use std::path::{Path, PathBuf};

/// The import graph of a crate's source tree: its files with their module paths, and per file the files it
/// takes names from.
struct Graph {
    mods: Vec<(Vec<String>, PathBuf)>,
    edges: Vec<Vec<usize>>,
}

/// Every `.rs` file of a crate's source tree `root` (`src`, `cli/src`), with its module path (`redlock::guard`
/// for `src/redlock/guard/mod.rs`), but unit-test modules (`tests.rs`, `*_tests/`): they import their parent.
fn modules(root: &Path) -> Vec<(Vec<String>, PathBuf)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).expect("read a source dir") {
            let path = entry.expect("dir entry").path();
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            if path.is_dir() {
                if !name.ends_with("_tests") && name != "tests" {
                    stack.push(path);
                }
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") || name == "tests.rs" {
                continue;
            }
            let rel = path
                .strip_prefix(root)
                .expect("under root")
                .with_extension("");
            let mut segs: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                segs.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                segs.pop();
            }
            out.push((segs, path));
        }
    }
    out.sort();
    out
}

/// A file's code, statement by statement where it matters: comments and its `#[cfg(test)]` module left out,
/// and each `use` joined onto one line however many lines rustfmt gave it.
fn statements(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut open: Option<String> = None;
    for line in text.lines() {
        if line.starts_with("#[cfg(test)]") {
            break;
        }
        let t = line.trim();
        if t.starts_with("//") {
            continue;
        }
        let t = t.split(" //").next().unwrap_or(t);
        match open.as_mut() {
            Some(s) => s.push_str(t),
            None if t.starts_with("use ") || t.contains(" use ") => open = Some(t.to_owned()),
            None => {
                out.push(t.to_owned());
                continue;
            }
        }
        if t.ends_with(';') {
            out.extend(open.take());
        }
    }
    out.extend(open);
    out
}

/// The identifier at the start of `s`, if any.
fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The paths a `use` tree names, each from `prefix`: `a::{b, c::{D, E}}` names `a::b`, `a::c::D`, `a::c::E`.
/// Returns them with what of `s` the tree took.
fn use_tree(s: &str, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix.to_vec();
    let mut i = 0;
    loop {
        let rest = s[i..].trim_start();
        i = s.len() - rest.len();
        if rest.starts_with('{') {
            i += 1;
            loop {
                let rest = s[i..].trim_start();
                i = s.len() - rest.len();
                if rest.starts_with('}') {
                    return i + 1;
                }
                if rest.is_empty() {
                    return i;
                }
                if rest.starts_with(',') {
                    i += 1;
                    continue;
                }
                i += use_tree(&s[i..], &path, out);
            }
        }
        let id = ident(rest);
        if id.is_empty() {
            // `*`, or the end: the path so far is what is named.
            out.push(path);
            return i + usize::from(rest.starts_with('*'));
        }
        i += id.len();
        if id != "self" {
            path.push(id.to_owned());
        }
        if s[i..].starts_with("::") {
            i += 2;
            continue;
        }
        // `as alias`: the alias names nothing of this tree.
        if let Some(alias) = s[i..].trim_start().strip_prefix("as ") {
            let alias = alias.trim_start();
            i = s.len() - alias.len() + ident(alias).len();
        }
        out.push(path);
        return i;
    }
}

/// The paths (absolute, from the crate root) that a statement names with `crate::`, `super::` or `self::`, the
/// items at their ends included (`crate::a::B` names `a::B`), each of a `use` group whole.
fn named_paths(line: &str, here: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < line.len() {
        let rest = &line[i..];
        let glued = i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        let (path, skip) = if rest.starts_with("crate::") && !glued {
            (Vec::new(), "crate::".len())
        } else if rest.starts_with("super::") && !glued {
            let mut p = here.to_vec();
            let mut j = 0;
            while line[i + j..].starts_with("super::") {
                p.pop();
                j += "super::".len();
            }
            (p, j)
        } else if rest.starts_with("self::") && !glued {
            (here.to_vec(), "self::".len())
        } else {
            i += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        };
        i += skip;
        i += use_tree(&line[i..], &path, &mut out);
    }
    out
}

/// What a file re-exports (`pub use` and `pub(crate) use`): per name, the path it stands for, absolute.
fn reexports(text: &str, here: &[String]) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for s in statements(text) {
        let Some(tree) = s
            .strip_prefix("pub use ")
            .or_else(|| s.strip_prefix("pub(crate) use "))
        else {
            continue;
        };
        let tree = tree.trim_end_matches(';');
        let mut paths = Vec::new();
        // A re-export names its path from this module, or from the crate root.
        let (tree, from) = match tree.strip_prefix("crate::") {
            Some(t) => (t, Vec::new()),
            None => (tree, here.to_vec()),
        };
        use_tree(tree, &from, &mut paths);
        for p in paths {
            if let Some(name) = p.last() {
                out.push((name.clone(), p.clone()));
            }
        }
    }
    out
}

impl Graph {
    /// The graph of the crate at `root`.
    fn of(root: &Path) -> Graph {
        let mods = modules(root);
        let texts: Vec<String> = mods
            .iter()
            .map(|(_, path)| fs::read_to_string(path).expect("read a source file"))
            .collect();
        let exports: Vec<Vec<(String, Vec<String>)>> = mods
            .iter()
            .zip(&texts)
            .map(|((here, _), text)| reexports(text, here))
            .collect();
        let mut graph = Graph {
            edges: vec![Vec::new(); mods.len()],
            mods,
        };
        for (from, text) in texts.iter().enumerate() {
            let here = graph.mods[from].0.clone();
            for s in statements(text) {
                for named in named_paths(&s, &here) {
                    let Some(to) = graph.resolve(&named, &exports, 0) else {
                        continue;
                    };
                    // A module's own ancestors are its home (an `impl Engine` in `engine/batch.rs` is the
                    // engine's), not a room it stands on.
                    if here.starts_with(&graph.mods[to].0) || graph.edges[from].contains(&to) {
                        continue;
                    }
                    graph.edges[from].push(to);
                }
            }
        }
        graph
    }

    /// The file a path names: the longest module prefix that is a file of its own, or, where that file only
    /// re-exports the next name, the file that name stands for.
    fn resolve(
        &self,
        path: &[String],
        exports: &[Vec<(String, Vec<String>)>],
        depth: usize,
    ) -> Option<usize> {
        let (k, file) = (0..=path.len())
            .rev()
            .find_map(|k| Some((k, self.mods.iter().position(|(m, _)| m[..] == path[..k])?)))?;
        let Some(next) = path.get(k) else {
            return Some(file);
        };
        match exports[file].iter().find(|(name, _)| name == next) {
            Some((_, target)) if depth < 8 => {
                let whole: Vec<String> = target.iter().chain(&path[k + 1..]).cloned().collect();
                self.resolve(&whole, exports, depth + 1).or(Some(file))
            }
            _ => Some(file),
        }
    }

    /// The files of the room `room` (a module path prefix: `redlock/engine/` for a folder, `redlock/sim` for a
    /// file, `redlock/wait` for both `wait.rs` and `wait/`).
    fn room(&self, room: &str) -> Vec<usize> {
        (0..self.mods.len())
            .filter(|&i| {
                let m = self.mods[i].0.join("/");
                match room.strip_suffix('/') {
                    Some(dir) => m == dir || m.starts_with(room),
                    None => m == room || m.starts_with(&format!("{room}/")),
                }
            })
            .collect()
    }

    /// How `from` reaches `to` through the files it takes names from, shortest first: the files on the way.
    fn way(&self, from: usize, to: usize) -> Option<Vec<usize>> {
        let mut came = vec![None; self.mods.len()];
        let mut queue = std::collections::VecDeque::from([from]);
        while let Some(n) = queue.pop_front() {
            for &m in &self.edges[n] {
                if came[m].is_none() && m != from {
                    came[m] = Some(n);
                    if m == to {
                        let mut way = vec![to];
                        let mut at = to;
                        while let Some(p) = came[at] {
                            way.push(p);
                            if p == from {
                                break;
                            }
                            at = p;
                        }
                        way.reverse();
                        return Some(way);
                    }
                    queue.push_back(m);
                }
            }
        }
        None
    }

    /// A way as the files it goes through.
    fn show(&self, way: &[usize]) -> String {
        way.iter()
            .map(|&i| self.mods[i].1.display().to_string())
            .collect::<Vec<_>>()
            .join(" -> ")
    }

    /// Which files `from` reaches, in any number of steps.
    fn reach(&self, from: usize) -> Vec<bool> {
        let mut seen = vec![false; self.mods.len()];
        let mut stack = vec![from];
        while let Some(n) = stack.pop() {
            for &m in &self.edges[n] {
                if !seen[m] {
                    seen[m] = true;
                    stack.push(m);
                }
            }
        }
        seen
    }

    /// The circles: each set of files that reach one another, once, as one way round it.
    fn circles(&self) -> Vec<String> {
        let reaches: Vec<Vec<bool>> = (0..self.mods.len()).map(|a| self.reach(a)).collect();
        let mut done = vec![false; self.mods.len()];
        let mut found = Vec::new();
        for a in 0..self.mods.len() {
            if done[a] || !reaches[a][a] {
                continue;
            }
            for b in 0..self.mods.len() {
                done[b] |= reaches[a][b] && reaches[b][a];
            }
            let way = self.edges[a]
                .iter()
                .find_map(|&b| self.way(b, a).map(|w| [vec![a], w].concat()));
            found.extend(way.map(|w| self.show(&w)));
        }
        found
    }

    /// Every way from a file of `room` to a file of one of `above`.
    fn reaching(&self, room: &str, above: &[&str]) -> Vec<String> {
        let mut found = Vec::new();
        for from in self.room(room) {
            for up in above {
                for to in self.room(up) {
                    if let Some(way) = self.way(from, to) {
                        found.push(self.show(&way));
                    }
                }
            }
        }
        found
    }
}

/// Each room and the rooms above it that it must not reach, in `src/`.
const LOOKS_DOWN: &[(&str, &[&str])] = &[
    ("resp/", &["net/", "redlock/"]),
    ("net/", &["redlock/"]),
    (
        "redlock/engine/",
        &[
            "redlock/kind/",
            "redlock/guard/",
            "redlock/waiters",
            "redlock/wait",
            "redlock/manager/",
            "redlock/sim",
        ],
    ),
    (
        "redlock/kind/",
        &[
            "redlock/guard/",
            "redlock/waiters",
            "redlock/wait",
            "redlock/manager/",
            "redlock/sim",
        ],
    ),
    (
        "redlock/guard/",
        &["redlock/wait", "redlock/manager/", "redlock/sim"],
    ),
    ("redlock/wait", &["redlock/manager/", "redlock/sim"]),
];

#[test]
fn no_file_reaches_itself_through_its_imports() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for tree in ["src", "cli/src"] {
        let found = Graph::of(&root.join(tree)).circles();
        assert!(
            found.is_empty(),
            "circles in {tree}/:\n{}",
            found.join("\n")
        );
    }
}

#[test]
fn no_room_reaches_one_above_it() {
    let graph = Graph::of(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let mut found = Vec::new();
    for (room, above) in LOOKS_DOWN {
        assert!(!graph.room(room).is_empty(), "no file in src/{room}");
        found.extend(graph.reaching(room, above));
    }
    assert!(found.is_empty(), "rooms reaching up:\n{}", found.join("\n"));
}

/// A crate of its own under the temp dir, its files written from `(path, text)`, for the checks' own tests.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str, files: &[(&str, &str)]) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("muxlock-imports-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        for (path, text) in files {
            let path = dir.join(path);
            fs::create_dir_all(path.parent().expect("a parent")).expect("temp dir");
            fs::write(path, text).expect("write");
        }
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[test]
fn use_trees_name_every_path_of_their_groups() {
    let here = vec!["redlock".to_owned(), "guard".to_owned()];
    let named = named_paths(
        "use crate::redlock::{lost::Lost, kind::{owned::{self, Owner}, Kind}};",
        &here,
    );
    let path = |p: &str| p.split("::").map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(
        named,
        vec![
            path("redlock::lost::Lost"),
            path("redlock::kind::owned"),
            path("redlock::kind::owned::Owner"),
            path("redlock::kind::Kind"),
        ]
    );
    assert_eq!(
        named_paths("use super::watchdog::Watchdog as Dog;", &here),
        vec![path("redlock::watchdog::Watchdog")]
    );
    let joined = statements("use crate::a::{\n    b::C,\n    // d\n    e,\n};\nfn f() {}\n");
    assert_eq!(joined[0], "use crate::a::{b::C,e,};");
}

/// The checks see a circle through several files, through a `use` group over several lines and through a
/// re-export, and none in a chain; a room reaching up through a file of another room is found with its way.
#[test]
fn the_checks_follow_imports_through_groups_reexports_and_steps() {
    let chain = [
        ("lib.rs", "mod a;\nmod c;\npub use c::Y;\n"),
        ("a/mod.rs", "use crate::a::b::X;\n"),
        ("a/b.rs", "use crate::{\n    Y,\n};\n"),
        ("c.rs", "// use crate::a::Z;\npub struct Y;\n"),
    ];
    let scratch = Scratch::new("chain", &chain);
    let graph = Graph::of(&scratch.0);
    assert!(graph.circles().is_empty(), "a chain is no circle");
    // `a/b.rs` reaches `c.rs` through the crate root's re-export, and `a/mod.rs` through `a/b.rs`: a room `c`
    // above `a` is reached from both.
    let up = graph.reaching("a/", &["c"]);
    assert_eq!(up.len(), 2, "{up:?}");
    for way in &up {
        assert!(way.ends_with("c.rs"), "{way}");
        let from_b = way.contains("a/b.rs -> ") && way.matches(" -> ").count() == 1;
        let from_mod = way.contains("a/mod.rs -> ") && way.matches(" -> ").count() == 2;
        assert!(from_b || from_mod, "{way}");
    }
    drop(scratch);

    let mut circle = chain;
    circle[3] = ("c.rs", "use crate::a::Z;\npub struct Y;\n");
    let scratch = Scratch::new("circle", &circle);
    let found = Graph::of(&scratch.0).circles();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].matches(" -> ").count(), 3, "{found:?}");
}
