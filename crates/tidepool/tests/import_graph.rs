//! No crate of the workspace has an import circle.
//!
//! Every `crate::`, `super::` and `self::` path in a crate's `src/` (in `use`
//! items, brace groups expanded, and inline) is resolved to the file module
//! it names. An edge between two files that are not nested in each other
//! counts between the two children of their closest common module that hold
//! them: `scenario/fio.rs → report/summary.rs` is `scenario → report`. A
//! child using its parent (or the reverse) is how a Rust module is built and
//! is not an edge. The test fails on any cycle among siblings and prints the
//! file edges that make it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

/// Every `.rs` file under `src`, keyed by its module path (`mod.rs`,
/// `lib.rs` and `main.rs` name their directory).
fn modules(src: &Path) -> BTreeMap<Module, PathBuf> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path
                    .strip_prefix(src)
                    .expect("under src")
                    .with_extension("");
                let mut module: Module = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                if matches!(
                    module.last().map(String::as_str),
                    Some("mod" | "lib" | "main")
                ) {
                    module.pop();
                }
                out.insert(module, path);
            }
        }
    }
    out
}

/// The source without comments and string contents.
fn code_only(src: &str) -> String {
    let bytes = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < bytes.len() {
        if src[i..].starts_with("//") {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
        } else if src[i..].starts_with("/*") {
            let end = src[i + 2..]
                .find("*/")
                .map_or(bytes.len(), |e| i + 2 + e + 2);
            i = end;
        } else if bytes[i] == b'"' && (i == 0 || bytes[i - 1] != b'\'') {
            i += 1;
            while i < bytes.len() && bytes[i] != b'"' {
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else {
            let c = src[i..].chars().next().expect("a char");
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The paths a `use` tree names, brace groups expanded.
fn expand_use(prefix: &[String], tree: &str, out: &mut Vec<Module>) {
    let tree = tree.trim();
    if let Some(inner) = tree.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
        let (mut depth, mut start) = (0, 0);
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand_use(prefix, &inner[start..i], out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        if !inner[start..].trim().is_empty() {
            expand_use(prefix, &inner[start..], out);
        }
        return;
    }
    let name: String = tree.chars().take_while(|&c| is_ident(c)).collect();
    if name.is_empty() {
        out.push(prefix.to_vec());
        return;
    }
    let mut path = prefix.to_vec();
    path.push(name.clone());
    match tree[name.len()..].trim_start().strip_prefix("::") {
        Some(rest) => expand_use(&path, rest, out),
        None => out.push(path),
    }
}

/// Every path starting at `crate`, `super` or `self` in `code`.
fn paths(code: &str) -> Vec<Module> {
    let mut out = Vec::new();
    for (at, _) in code.match_indices("use ") {
        if at > 0 && is_ident(code[..at].chars().next_back().expect("a char")) {
            continue;
        }
        let rest = &code[at + 4..];
        let Some(end) = rest.find(';') else { continue };
        let tree = rest[..end].trim();
        if ["crate", "super", "self"]
            .iter()
            .any(|r| tree.starts_with(r))
        {
            expand_use(&[], tree, &mut out);
        }
    }
    for root in ["crate", "super", "self"] {
        for (at, _) in code.match_indices(root) {
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| is_ident(c) || c == ':') {
                continue;
            }
            let mut path = vec![root.to_string()];
            let mut rest = &code[at + root.len()..];
            while let Some(next) = rest.trim_start().strip_prefix("::") {
                let next = next.trim_start();
                let name: String = next.chars().take_while(|&c| is_ident(c)).collect();
                if name.is_empty() {
                    break;
                }
                rest = &next[name.len()..];
                path.push(name);
            }
            if path.len() > 1 {
                out.push(path);
            }
        }
    }
    out
}

/// The file module `path` (as written in `from`) names.
fn resolve(
    mods: &BTreeMap<Module, PathBuf>,
    from: &Module,
    is_dir: bool,
    path: &Module,
) -> Option<Module> {
    let mut full: Module = match path[0].as_str() {
        "crate" => Vec::new(),
        "self" => from.clone(),
        _ => {
            let mut base = from.clone();
            if !is_dir {
                base.pop();
            }
            base.pop();
            base
        }
    };
    let mut rest = &path[1..];
    while rest.first().is_some_and(|s| s == "super") {
        full.pop();
        rest = &rest[1..];
    }
    full.extend(rest.iter().cloned());
    (0..=full.len())
        .rev()
        .map(|n| full[..n].to_vec())
        .find(|m| mods.contains_key(m))
}

/// The sibling-level edges of one crate, each with the file edges behind it.
fn sibling_edges(src: &Path) -> BTreeMap<(Module, Module), BTreeSet<(Module, Module)>> {
    let mods = modules(src);
    let mut edges: BTreeMap<(Module, Module), BTreeSet<(Module, Module)>> = BTreeMap::new();
    for (module, file) in &mods {
        let is_dir = file
            .file_stem()
            .is_some_and(|s| s == "mod" || s == "lib" || s == "main");
        let code = code_only(&std::fs::read_to_string(file).expect("read source"));
        for path in paths(&code) {
            let Some(to) = resolve(&mods, module, is_dir, &path) else {
                continue;
            };
            let common = module.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common == module.len() || common == to.len() {
                continue; // the same file, or a parent and its child
            }
            let key = (module[..=common].to_vec(), to[..=common].to_vec());
            edges
                .entry(key)
                .or_default()
                .insert((module.clone(), to.clone()));
        }
    }
    edges
}

/// The cycles of a directed graph: its strongly connected components with
/// more than one node.
fn cycles(edges: &BTreeSet<(Module, Module)>) -> Vec<BTreeSet<Module>> {
    let nodes: BTreeSet<&Module> = edges.iter().flat_map(|(a, b)| [a, b]).collect();
    let reaches = |from: &Module| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(n) = todo.pop() {
            for (a, b) in edges {
                if *a == n && seen.insert(b.clone()) {
                    todo.push(b.clone());
                }
            }
        }
        seen
    };
    let reach: BTreeMap<&Module, BTreeSet<Module>> =
        nodes.iter().map(|n| (*n, reaches(n))).collect();
    let mut out: Vec<BTreeSet<Module>> = Vec::new();
    for n in &nodes {
        let component: BTreeSet<Module> = nodes
            .iter()
            .filter(|m| reach[*n].contains(**m) && reach[**m].contains(*n))
            .map(|m| (*m).clone())
            .collect();
        if component.len() > 1 && !out.contains(&component) {
            out.push(component);
        }
    }
    out
}

fn name(m: &Module) -> String {
    if m.is_empty() {
        "crate".to_string()
    } else {
        m.join("/")
    }
}

#[test]
fn no_crate_has_an_import_circle() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    let mut checked = 0;
    for entry in std::fs::read_dir(&crates).expect("read crates/") {
        let src = entry.expect("dir entry").path().join("src");
        if !src.is_dir() {
            continue;
        }
        checked += 1;
        let edges = sibling_edges(&src);
        let graph: BTreeSet<(Module, Module)> = edges.keys().cloned().collect();
        for cycle in cycles(&graph) {
            let mut text = format!(
                "{}: {}\n",
                src.display(),
                cycle.iter().map(name).collect::<Vec<_>>().join(" <-> ")
            );
            for ((a, b), files) in &edges {
                if cycle.contains(a) && cycle.contains(b) {
                    for (from, to) in files {
                        text += &format!("    {} -> {}\n", name(from), name(to));
                    }
                }
            }
            found.push(text);
        }
    }
    assert!(
        checked >= 4,
        "found only {checked} crates under {}",
        crates.display()
    );
    assert!(found.is_empty(), "import circles:\n{}", found.concat());
}

/// The checker sees a circle when there is one.
#[test]
fn a_circle_is_found() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("import-circle/src");
    std::fs::create_dir_all(dir.join("b")).expect("mkdir");
    std::fs::write(dir.join("lib.rs"), "mod a;\nmod b;\n").expect("write");
    std::fs::write(dir.join("a.rs"), "use crate::b::{c::X, Y};\n").expect("write");
    std::fs::write(dir.join("b/mod.rs"), "mod c;\npub struct Y;\n").expect("write");
    std::fs::write(
        dir.join("b/c.rs"),
        "pub struct X;\nfn f() { super::super::a::g() }\n",
    )
    .expect("write");
    let edges = sibling_edges(&dir);
    let graph: BTreeSet<(Module, Module)> = edges.keys().cloned().collect();
    let found = cycles(&graph);
    assert_eq!(found.len(), 1, "{edges:?}");
    let expected: BTreeSet<Module> = [vec!["a".to_string()], vec!["b".to_string()]].into();
    assert_eq!(found[0], expected);
    // A parent and its child are not a circle.
    std::fs::write(dir.join("a.rs"), "pub fn g() {}\n").expect("write");
    let graph: BTreeSet<(Module, Module)> = sibling_edges(&dir).keys().cloned().collect();
    assert!(cycles(&graph).is_empty(), "{graph:?}");
}
