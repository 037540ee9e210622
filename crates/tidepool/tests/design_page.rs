//! The design page (`src/implementation.rs`) names every file of the crate,
//! so its module map cannot silently fall behind the source tree.

use std::path::Path;

/// Every `.rs` file under `dir`, as a path relative to `src` (`cache/slot.rs`).
fn files(src: &Path, dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).expect("read src dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            files(src, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(src).expect("under src");
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

#[test]
fn design_page_names_every_file() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let page = std::fs::read_to_string(src.join("implementation.rs")).expect("read the page");
    let mut all = Vec::new();
    files(&src, &src, &mut all);
    assert!(all.len() > 40, "found only {} files", all.len());
    // A file is named by its path, or in the map by its bare name on a line
    // under its folder (`cache/` then `local.rs slot.rs`), or as
    // `folder/ (mod.rs, ...)`.
    let words: Vec<&str> = page
        .split(|c: char| c.is_whitespace() || "(),`:;".contains(c))
        .collect();
    let missing: Vec<&String> = all
        .iter()
        .filter(|file| {
            if page.contains(file.as_str()) || file.as_str() == "implementation.rs" {
                return false;
            }
            let (folder, name) = file.rsplit_once('/').unwrap_or(("", file));
            let named = words.contains(&name);
            let folder_named = folder.is_empty() || page.contains(&format!("{folder}/"));
            !(named && folder_named)
        })
        .collect();
    assert!(
        missing.is_empty(),
        "src/implementation.rs does not name {missing:?}"
    );
}
