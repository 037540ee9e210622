//! `include/tidepool.h` is what cbindgen makes of this crate today.
//!
//! On a mismatch the fresh header is written next to the test binary and the
//! failure says how to regenerate the checked-in one:
//! `TIDEPOOL_BLESS=1 cargo test -p tidepool-ffi --test header`.

use std::path::Path;

fn generate() -> String {
    let crate_dir = env!("CARGO_MANIFEST_DIR");
    let config = cbindgen::Config::from_file(Path::new(crate_dir).join("cbindgen.toml"))
        .expect("cbindgen.toml parses");
    let bindings = cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header");
    let mut out = Vec::new();
    bindings.write(&mut out);
    String::from_utf8(out).expect("the header is UTF-8")
}

#[test]
fn checked_in_header_is_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("include/tidepool.h");
    let fresh = generate();
    if std::env::var_os("TIDEPOOL_BLESS").is_some() {
        std::fs::write(&path, &fresh).expect("write include/tidepool.h");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    if checked_in != fresh {
        let fresh_path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tidepool.h");
        std::fs::write(&fresh_path, &fresh).expect("write the fresh header");
        panic!(
            "include/tidepool.h is out of date with the Rust sources.\n\
             fresh copy: {}\n\
             compare:    diff -u {} {}\n\
             regenerate: TIDEPOOL_BLESS=1 cargo test -p tidepool-ffi --test header",
            fresh_path.display(),
            path.display(),
            fresh_path.display()
        );
    }
}

#[test]
fn header_declares_every_exported_function() {
    let header = generate();
    for name in [
        "tidepool_stack_pool_new",
        "tidepool_buf_pool_new",
        "tidepool_obj_pool_new",
        "tidepool_pool_destroy",
        "tidepool_stack_get",
        "tidepool_stack_put",
        "tidepool_buf_get",
        "tidepool_buf_put",
        "tidepool_obj_get",
        "tidepool_obj_adopt",
        "tidepool_obj_put",
        "tidepool_pool_stats",
        "tidepool_pool_reclaim_unused",
        "tidepool_pool_reclaim",
        "tidepool_pool_purge",
        "tidepool_pool_drain",
        "tidepool_pool_pressure",
        "tidepool_pool_prefill",
        "tidepool_pressure_notify",
        "tidepool_thread_exit",
        "tidepool_last_error",
        "tidepool_last_error_copy",
        "tidepool_status_name",
        "tidepool_version",
    ] {
        assert!(header.contains(&format!("{name}(")), "{name} missing");
    }
}
