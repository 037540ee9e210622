//! Crate-internal test suites, chosen by cfg.

#[cfg(loom)]
mod loom_cache;
#[cfg(loom)]
mod loom_lifetime;
