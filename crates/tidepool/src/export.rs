//! A pool's figures through the `metrics` facade (feature `metrics`).
//!
//! The library records; the application chooses where figures go by
//! installing a recorder (an exporter: Prometheus, StatsD, ...). tidepool
//! depends on the `metrics` facade only, and records nothing on the
//! `get`/`put` path: a snapshot of [`Stats`] is exported when the
//! application asks, from its own timer or its exporter's scrape hook.

use metrics::{counter, describe_counter, describe_gauge, gauge, Label, Unit};

use crate::Stats;

fn labels(pool: &str) -> Vec<Label> {
    vec![Label::new("pool", pool.to_owned())]
}

impl Stats {
    /// Records these figures with the [`metrics`] facade, each labelled
    /// `pool = <pool>`: gauges for what the pool holds now and counters,
    /// set to their absolute values, for what it has done.
    ///
    /// | metric | kind | figure |
    /// |---|---|---|
    /// | `tidepool_live` | gauge | [`live`](Stats::live) |
    /// | `tidepool_idle` | gauge | [`idle`](Stats::idle) |
    /// | `tidepool_idle_cached` | gauge | [`idle_cached`](Stats::idle_cached), the part of `idle` in thread caches |
    /// | `tidepool_destroying` | gauge | [`destroying`](Stats::destroying), objects in the destroy queue or being destroyed |
    /// | `tidepool_created_total` | counter | [`created`](Stats::created) |
    /// | `tidepool_destroyed_total` | counter | [`destroyed`](Stats::destroyed) |
    /// | `tidepool_reclaimed_total` | counter | [`reclaimed`](Stats::reclaimed) |
    /// | `tidepool_hits_total` | counter | [`hits`](Stats::hits) |
    /// | `tidepool_misses_total` | counter | [`misses`](Stats::misses) |
    /// | `tidepool_callback_panics_total` | counter | [`callback_panics`](Stats::callback_panics), panics tidepool contained |
    ///
    /// Nothing is recorded until the application installs a recorder; in
    /// one line, with the exporter of your choice, e.g.
    /// `metrics_exporter_prometheus::PrometheusBuilder::new().install()?`.
    /// Then call this periodically (it costs one [`Pool::stats`] and a few
    /// recorder updates):
    ///
    /// ```
    /// use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    ///
    /// let pool = tidepool::Pool::new(|| vec![0u8; 4096]);
    /// drop(pool.get()?);
    ///
    /// // Any recorder; here the one `metrics-util` has for tests.
    /// let recorder = DebuggingRecorder::new();
    /// let snapshot = recorder.snapshotter();
    /// metrics::with_local_recorder(&recorder, || pool.stats().export_metrics("buffers"));
    ///
    /// let created = snapshot.snapshot().into_vec().into_iter().find_map(|(key, _, _, value)| {
    ///     (key.key().name() == "tidepool_created_total").then_some(value)
    /// });
    /// assert_eq!(created, Some(DebugValue::Counter(1)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// [`Pool::stats`]: crate::Pool::stats
    pub fn export_metrics(&self, pool: &str) {
        describe();
        let l = || labels(pool);
        gauge!("tidepool_live", l()).set(self.live as f64);
        gauge!("tidepool_idle", l()).set(self.idle as f64);
        gauge!("tidepool_idle_cached", l()).set(self.idle_cached() as f64);
        gauge!("tidepool_destroying", l()).set(self.destroying as f64);
        counter!("tidepool_created_total", l()).absolute(self.created);
        counter!("tidepool_destroyed_total", l()).absolute(self.destroyed);
        counter!("tidepool_reclaimed_total", l()).absolute(self.reclaimed);
        counter!("tidepool_hits_total", l()).absolute(self.hits);
        counter!("tidepool_misses_total", l()).absolute(self.misses);
        counter!("tidepool_callback_panics_total", l()).absolute(self.callback_panics);
    }
}

/// Units and help texts, given to the recorder with every export (a
/// recorder may be installed, or swapped, at any time).
fn describe() {
    let objects = Unit::Count;
    describe_gauge!(
        "tidepool_live",
        objects,
        "objects handed out and not yet given back"
    );
    describe_gauge!(
        "tidepool_idle",
        objects,
        "objects waiting for reuse, depot and thread caches"
    );
    describe_gauge!(
        "tidepool_idle_cached",
        objects,
        "idle objects held in thread caches"
    );
    describe_gauge!(
        "tidepool_destroying",
        objects,
        "objects the pool decided to destroy, queued or being destroyed (neither live nor idle)"
    );
    describe_counter!(
        "tidepool_created_total",
        objects,
        "objects the manager created"
    );
    describe_counter!(
        "tidepool_destroyed_total",
        objects,
        "objects the manager destroyed"
    );
    describe_counter!(
        "tidepool_reclaimed_total",
        objects,
        "idle objects destroyed to fit the working set (reclaim passes, reclaim_unused, pressure)"
    );
    describe_counter!(
        "tidepool_hits_total",
        objects,
        "gets served with an existing object"
    );
    describe_counter!(
        "tidepool_misses_total",
        objects,
        "gets that had to create an object"
    );
    describe_counter!(
        "tidepool_callback_panics_total",
        Unit::Count,
        "panics of manager callbacks that tidepool contained (the object counts as destroyed)"
    );
}

#[cfg(unix)]
impl crate::stack::StackStats {
    /// Records the pool's figures ([`Stats::export_metrics`]) and the
    /// stacks' own, labelled `pool = <pool>`: gauges `tidepool_stack_mapped`
    /// ([`mapped`](crate::stack::StackStats::mapped), stacks) and
    /// `tidepool_stack_idle_resident_max_bytes`
    /// ([`idle_resident_max`](crate::stack::StackStats::idle_resident_max)),
    /// and counter `tidepool_stack_reclaim_retries_total`
    /// ([`reclaim_retries`](crate::stack::StackStats::reclaim_retries)).
    pub fn export_metrics(&self, pool: &str) {
        self.pool.export_metrics(pool);
        describe_gauge!(
            "tidepool_stack_mapped",
            Unit::Count,
            "stacks mapped, live or idle"
        );
        describe_gauge!(
            "tidepool_stack_idle_resident_max_bytes",
            Unit::Bytes,
            "an upper bound on the RAM idle stacks hold"
        );
        describe_counter!(
            "tidepool_stack_reclaim_retries_total",
            Unit::Count,
            "gets that hit a kernel limit, reclaimed idle stacks and tried again"
        );
        let l = || labels(pool);
        gauge!("tidepool_stack_mapped", l()).set(self.mapped as f64);
        gauge!("tidepool_stack_idle_resident_max_bytes", l()).set(self.idle_resident_max as f64);
        counter!("tidepool_stack_reclaim_retries_total", l()).absolute(self.reclaim_retries);
    }
}
