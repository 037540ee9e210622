//! The repository README shows this crate's snippet without compiling it
//! (the core crate, which compiles that README, does not depend on
//! wasmtime); this crate's README compiles it. Keep the two the same.

const ROOT_README: &str = include_str!("../../../../README.md");
const CRATE_README: &str = include_str!("../../README.md");

/// The lines of the first fenced block opening with `fence` after `from`.
fn block<'a>(text: &'a str, from: &str, fence: &str) -> Vec<&'a str> {
    let start = text
        .find(from)
        .unwrap_or_else(|| panic!("`{from}` in the README"));
    let text = &text[start..];
    let open = text.find(fence).expect("the block") + fence.len();
    let body = &text[open..];
    let close = body.find("\n```").expect("the block ends");
    body[..close].lines().skip(1).collect()
}

#[test]
fn root_readme_snippet_is_the_compiled_one() {
    let shown = block(
        ROOT_README,
        "### wasmtime stacks and memories",
        "```rust,ignore",
    );
    let compiled = block(CRATE_README, "## Usage", "```rust");
    assert!(shown.len() > 3, "{shown:?}");
    assert_eq!(
        shown,
        compiled[..shown.len().min(compiled.len())],
        "README.md's wasmtime snippet must be the start of crates/tidepool-wasmtime/README.md's first example"
    );
}
