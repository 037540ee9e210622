//! `export_metrics` (feature `metrics`): every figure reaches the recorder
//! under its name, kind and `pool` label, with the value `stats()` gave.
#![cfg(feature = "metrics")]

use std::collections::HashMap;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::MetricKind;
use tidepool::Pool;

/// What the recorder holds: (name, kind, pool label) → value, as `f64`.
fn record(export: impl FnOnce()) -> HashMap<(String, MetricKind, String), f64> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, export);
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _unit, _help, value)| {
            let label = key
                .key()
                .labels()
                .find(|l| l.key() == "pool")
                .map(|l| l.value().to_owned())
                .unwrap_or_default();
            let value = match value {
                DebugValue::Counter(n) => n as f64,
                DebugValue::Gauge(g) => g.0,
                DebugValue::Histogram(_) => panic!("no histograms are exported"),
            };
            ((key.key().name().to_owned(), key.kind(), label), value)
        })
        .collect()
}

#[test]
fn every_figure_is_exported_with_its_kind_and_pool_label() {
    let pool = Pool::builder(|| vec![0u8; 64])
        .batch_size(1)
        .max_idle(1)
        .background(false)
        .build()
        .unwrap();
    // 5 created; 1 kept out, 2 cached (two batches of one), 1 in the
    // depot, 1 destroyed by the full depot; then a hit from the cache.
    let mut held: Vec<_> = (0..5).map(|_| pool.get().unwrap()).collect();
    let kept = held.pop().unwrap();
    drop(held);
    drop(pool.get().unwrap());
    let stats = pool.stats();
    assert_eq!(
        (
            stats.created,
            stats.destroyed,
            stats.live,
            stats.idle,
            stats.idle_cached()
        ),
        (5, 1, 1, 3, 2)
    );

    let got = record(|| stats.export_metrics("buffers"));
    let g = |name: &str| (name.to_owned(), MetricKind::Gauge, "buffers".to_owned());
    let c = |name: &str| (name.to_owned(), MetricKind::Counter, "buffers".to_owned());
    let want = HashMap::from([
        (g("tidepool_live"), stats.live as f64),
        (g("tidepool_idle"), stats.idle as f64),
        (g("tidepool_idle_cached"), stats.idle_cached() as f64),
        (g("tidepool_destroying"), stats.destroying as f64),
        (c("tidepool_created_total"), stats.created as f64),
        (c("tidepool_destroyed_total"), stats.destroyed as f64),
        (c("tidepool_reclaimed_total"), stats.reclaimed as f64),
        (c("tidepool_hits_total"), stats.hits as f64),
        (c("tidepool_misses_total"), stats.misses as f64),
        (
            c("tidepool_callback_panics_total"),
            stats.callback_panics as f64,
        ),
    ]);
    assert_eq!(got, want);
    drop(kept);
}

#[test]
fn the_destroy_queue_is_exported_as_destroying() {
    let pool = Pool::builder(|| vec![0u8; 64])
        .batch_size(4)
        .teardown_chunk(4)
        .background(false)
        .build()
        .unwrap();
    let held: Vec<_> = (0..20).map(|_| pool.get().unwrap()).collect();
    drop(held);
    // `drain` destroys one chunk here and leaves the rest queued (no
    // reclaimer to finish it).
    assert_eq!(pool.drain(), 20);
    let stats = pool.stats();
    assert_eq!(stats.destroying, 16, "{stats:?}");
    let got = record(|| stats.export_metrics("q"));
    let key = (
        "tidepool_destroying".to_owned(),
        MetricKind::Gauge,
        "q".to_owned(),
    );
    assert_eq!(got[&key], 16.0);
    pool.drain_blocking();
    let got = record(|| pool.stats().export_metrics("q"));
    assert_eq!(got[&key], 0.0);
}

#[test]
fn counters_are_absolute_and_pools_are_told_apart_by_label() {
    let a = Pool::new(|| 0u32);
    let b = Pool::new(|| 0u32);
    drop(a.get().unwrap());
    let both = (b.get().unwrap(), b.get().unwrap());
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        // Exported twice: a counter is set to the figure, not added to.
        a.stats().export_metrics("a");
        a.stats().export_metrics("a");
        b.stats().export_metrics("b");
    });
    let created: HashMap<String, u64> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == "tidepool_created_total")
        .map(|(key, _, _, value)| {
            let pool = key.key().labels().next().unwrap().value().to_owned();
            let DebugValue::Counter(n) = value else {
                panic!("{value:?}")
            };
            (pool, n)
        })
        .collect();
    assert_eq!(created, HashMap::from([("a".into(), 1), ("b".into(), 2)]));
    drop(both);
}

#[cfg(unix)]
#[test]
fn stack_pools_export_their_stacks_too() {
    let stacks = tidepool::stack::StackPool::builder(4096)
        .background(false)
        .build()
        .unwrap();
    let lent = stacks.get().unwrap();
    let stats = stacks.stats();
    let got = record(|| stats.export_metrics("fibers"));
    let key = |name: &str, kind| (name.to_owned(), kind, "fibers".to_owned());
    assert_eq!(got[&key("tidepool_stack_mapped", MetricKind::Gauge)], 1.0);
    assert_eq!(
        got[&key("tidepool_stack_idle_resident_max_bytes", MetricKind::Gauge)],
        stats.idle_resident_max as f64
    );
    assert_eq!(
        got[&key("tidepool_stack_reclaim_retries_total", MetricKind::Counter)],
        0.0
    );
    assert_eq!(got[&key("tidepool_live", MetricKind::Gauge)], 1.0);
    drop(lent);
}

/// A manager whose `destroy` panics: the pool contains it and counts it.
struct PanickyDestroy;

impl tidepool::Manage for PanickyDestroy {
    type Item = u32;
    type Error = std::convert::Infallible;
    fn create(&self) -> Result<u32, Self::Error> {
        Ok(7)
    }
    fn destroy(&self, _item: u32) {
        panic!("injected: destroy");
    }
}

#[test]
fn contained_callback_panics_are_exported() {
    let pool = Pool::builder(PanickyDestroy)
        .background(false)
        .build()
        .unwrap();
    drop(pool.get().unwrap());
    // The idle object is destroyed by drain: its `destroy` panics; the pool
    // counts it (and, on the caller's own thread, passes the panic on).
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| pool.drain()));
    let stats = pool.stats();
    assert_eq!(stats.callback_panics, 1, "{stats:?}");
    let got = record(|| stats.export_metrics("p"));
    let key = (
        "tidepool_callback_panics_total".to_owned(),
        MetricKind::Counter,
        "p".to_owned(),
    );
    assert_eq!(got[&key], 1.0);
}
