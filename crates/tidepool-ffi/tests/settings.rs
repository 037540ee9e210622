//! Every setting of the core `Builder` (and of a stack pool's, which is the
//! core builder with a few settings of its own) has a C field or flag in
//! `tidepool_config` (or is listed here as Rust-only, with the reason): a
//! new setting added for Rust alone fails this test until the C side has it
//! too.

const BUILDER: &str = include_str!("../../tidepool/src/config.rs");
const STACK_BUILDER: &str = include_str!("../../tidepool/src/stack/builder.rs");
const C_CONFIG: &str = include_str!("../src/config.rs");

/// Builder settings and the C field (or flag) that carries each, where the
/// names differ.
const RENAMED: &[(&str, &str)] = &[
    ("reclaim_interval", "reclaim_interval_ms"),
    ("pressure_hold", "pressure_hold_ms"),
    ("purge_delay", "purge_delay_ms"),
    ("background", "flags"),   // TIDEPOOL_NO_BACKGROUND
    ("guard_mode", "flags"),   // TIDEPOOL_STACK_GUARD_PROTECT
    ("unbounded", "max_live"), // SIZE_MAX
];

/// Settings C cannot have.
const RUST_ONLY: &[(&str, &str)] = &[
    (
        "clock",
        "an `Arc<dyn Clock>`: a Rust trait object, for tests",
    ),
    (
        "map_budget",
        "a `MapBudget` value; C gives a stack pool its share of the map count \
         with `max_live` and `max_idle`",
    ),
];

/// The names of `pub fn NAME(mut self, ...)` in the core builder and the
/// stack pool's.
fn builder_settings() -> Vec<&'static str> {
    BUILDER
        .lines()
        .chain(STACK_BUILDER.lines())
        .filter_map(|l| l.trim().strip_prefix("pub fn "))
        .filter(|l| l.contains("(mut self"))
        .map(|l| &l[..l.find('(').unwrap()])
        .collect()
}

/// The fields of `pub struct tidepool_config`.
fn c_fields() -> Vec<&'static str> {
    let start = C_CONFIG
        .find("pub struct tidepool_config {")
        .expect("the struct");
    let body = &C_CONFIG[start..];
    let body = &body[..body.find("\n}").expect("its end")];
    body.lines()
        .filter_map(|l| l.trim().strip_prefix("pub "))
        .filter_map(|l| l.split(':').next())
        .collect()
}

#[test]
fn every_builder_setting_has_a_c_field() {
    let settings = builder_settings();
    assert!(
        settings.len() >= 10 && settings.contains(&"purge_delay"),
        "parsed {settings:?}"
    );
    let fields = c_fields();
    assert!(fields.contains(&"max_idle"), "parsed {fields:?}");
    let missing: Vec<&str> = settings
        .iter()
        .copied()
        .filter(|s| !RUST_ONLY.iter().any(|(r, _)| r == s))
        .filter(|s| {
            let c = RENAMED.iter().find(|(r, _)| r == s).map_or(*s, |(_, c)| *c);
            !fields.contains(&c)
        })
        .collect();
    assert!(
        missing.is_empty(),
        "Builder settings with no tidepool_config field: {missing:?} (add the field, \
         or list the setting in RUST_ONLY with the reason)"
    );
}
