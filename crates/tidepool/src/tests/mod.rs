//! Crate-internal test suites, chosen by cfg.

#[cfg(not(loom))]
mod bracket_alloc;
#[cfg(not(loom))]
mod close;
#[cfg(not(loom))]
mod limit_races;
#[cfg(loom)]
mod loom_cache;
#[cfg(loom)]
mod loom_lifetime;
#[cfg(loom)]
mod loom_places;
#[cfg(loom)]
mod loom_teardown;
#[cfg(loom)]
mod loom_waiters;
#[cfg(not(loom))]
mod scale;
#[cfg(not(loom))]
mod tick_close;
