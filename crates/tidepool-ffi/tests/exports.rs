//! The shared library exports the C API and nothing else, and its version
//! is the header's.
//!
//! The library is `libtidepool_ffi.so` next to this test binary, which
//! cargo builds with it (crate-type `cdylib`); `bin/c-install.sh`'s
//! `libtidepool.so` is the same code under cargo-c's name, and
//! `bin/c-install-check.sh` checks the installed one the same way.
#![cfg(target_os = "linux")]

use std::collections::BTreeSet;
use std::ffi::CStr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The newest `libtidepool_ffi*.so` in `<target>/<profile>/deps`.
fn shared_lib() -> PathBuf {
    let exe = std::env::current_exe().expect("path of the test binary");
    let deps = exe.parent().expect("deps directory");
    std::fs::read_dir(deps)
        .expect("read the deps directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.starts_with("libtidepool_ffi") && name.ends_with(".so")
        })
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max()
        .map(|(_, p)| p)
        .expect("libtidepool_ffi.so next to the test binary (crate-type cdylib)")
}

/// The functions `include/tidepool.h` declares.
fn header_functions() -> BTreeSet<String> {
    let header =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("include/tidepool.h"))
            .expect("read include/tidepool.h");
    let mut names = BTreeSet::new();
    for line in header.lines() {
        // Declarations start at column 0 with a return type and hold
        // `tidepool_name(`; comments and macros do not.
        if line.starts_with(' ') || line.starts_with('#') || line.starts_with('/') {
            continue;
        }
        if let Some(open) = line.find('(') {
            let name = line[..open].rsplit([' ', '*']).next().unwrap_or("");
            if name.starts_with("tidepool_") {
                names.insert(name.to_owned());
            }
        }
    }
    names
}

#[test]
fn the_shared_library_exports_only_the_c_api() {
    let lib = shared_lib();
    let out = Command::new("nm")
        .args(["-D", "--defined-only", "--format=posix"])
        .arg(&lib)
        .output()
        .expect("run nm (binutils)");
    assert!(out.status.success(), "nm failed on {}", lib.display());
    let exported: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    let foreign: Vec<&String> = exported
        .iter()
        .filter(|s| !s.starts_with("tidepool_"))
        .collect();
    assert!(
        foreign.is_empty(),
        "{} exports symbols outside the C API: {foreign:?}",
        lib.display()
    );
    let declared = header_functions();
    assert!(declared.len() > 20, "the header parse found {declared:?}");
    assert_eq!(
        exported, declared,
        "the exports and the header's functions differ"
    );
}

#[test]
fn the_version_is_the_headers() {
    // SAFETY: a static NUL-terminated string.
    let version = unsafe { CStr::from_ptr(tidepool_ffi::tidepool_version()) };
    let header = format!(
        "{}.{}.{}",
        tidepool_ffi::TIDEPOOL_VERSION_MAJOR,
        tidepool_ffi::TIDEPOOL_VERSION_MINOR,
        tidepool_ffi::TIDEPOOL_VERSION_PATCH
    );
    assert_eq!(version.to_str().unwrap(), header);
    assert_eq!(header, env!("CARGO_PKG_VERSION"));
}
