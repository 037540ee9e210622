//! `max_live` costs (issue 12): the same operation with and without a limit,
//! in one run, so their ratio is the cost of the limit.
//!
//! * `at_limit/round_trip/{unlimited,at_limit}`: get + touch + put; the
//!   limited pool has `max_live = 1` and its one object, so every get is at
//!   the limit and recycles it (target: at most 1.5x the unlimited one).
//! * `at_limit/churn/{unlimited,limited}`: get + touch + discard, so every
//!   round trip creates and destroys: the limited pool (`max_live = 4096`)
//!   reserves and releases a place each time, from its thread's credits.
//!
//! `TIDEPOOL_BENCH_QUICK=1` shortens every measurement.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use tidepool::Pool;
use tidepool_bench::{new_buf, touch, BufFn};

fn pool(max_live: Option<usize>) -> Pool<BufFn> {
    let mut b = Pool::builder(new_buf as BufFn).background(false);
    if let Some(n) = max_live {
        b = b.max_live(n).batch_size(n.min(32));
    }
    b.build().expect("valid settings")
}

fn at_limit(c: &mut Criterion) {
    let mut g = c.benchmark_group("at_limit");
    for (name, p) in [("unlimited", pool(None)), ("at_limit", pool(Some(1)))] {
        drop(p.get().expect("first object"));
        g.bench_function(format!("round_trip/{name}"), |b| {
            b.iter(|| {
                let mut o = p.get().expect("the idle object");
                touch(&mut o);
            })
        });
    }
    for (name, p) in [("unlimited", pool(None)), ("limited", pool(Some(4096)))] {
        g.bench_function(format!("churn/{name}"), |b| {
            b.iter(|| {
                let mut o = p.get().expect("below the limit");
                touch(&mut o);
                o.discard();
            })
        });
    }
    g.finish();
}

fn config() -> Criterion {
    let quick = std::env::var_os("TIDEPOOL_BENCH_QUICK").is_some_and(|v| !v.is_empty() && v != "0");
    let (warm_up, measure, samples) = if quick {
        (Duration::from_millis(300), Duration::from_millis(700), 10)
    } else {
        (Duration::from_secs(1), Duration::from_millis(2500), 40)
    };
    Criterion::default()
        .warm_up_time(warm_up)
        .measurement_time(measure)
        .sample_size(samples)
        .configure_from_args()
}

criterion_group! {
    name = benches;
    config = config();
    targets = at_limit
}
criterion_main!(benches);
