//! Many async instances at once, round after round: every call runs on a
//! pooled stack, and the pool stops mapping once it holds a round's worth.

use std::sync::mpsc;
use std::thread;

use tidepool::stack::StackPool;
use wasmtime::{InstancePre, Store};

use crate::executor::{run_all, Task};
use crate::modules::{self, request, yielding_result};

/// Instances alive at once, and rounds of them.
const CONCURRENT: usize = 24;
const ROUNDS: usize = 10;

/// One round: `CONCURRENT` requests, all suspended in the host at once
/// (checked after the first pass), then all finished. Returns how many
/// stacks were lent out in the middle of the round.
fn round(pool: &StackPool, pre: &InstancePre<()>, round: usize) -> u64 {
    let tasks: Vec<Task<'_, (i32, wasmtime::Result<i32>)>> = (0..CONCURRENT)
        .map(|i| {
            let x = (round * CONCURRENT + i) as i32;
            let pre = pre.clone();
            Box::pin(async move { (x, request(pre, x).await) }) as Task<'_, _>
        })
        .collect();
    let mut live_mid_round = 0;
    let results = run_all(tasks, || live_mid_round = pool.stats().pool.live);
    for (x, result) in results {
        assert_eq!(result.expect("the call succeeds"), yielding_result(x));
    }
    live_mid_round
}

#[test]
fn concurrent_instances_reuse_pooled_stacks() {
    let pool = modules::pool();
    let engine = modules::engine(&pool);
    let pre = modules::yielding(&engine);

    for r in 0..ROUNDS {
        let live = round(&pool, &pre, r);
        assert_eq!(
            live, CONCURRENT as u64,
            "round {r}: every suspended call holds a pooled stack"
        );
        let stats = pool.stats().pool;
        assert_eq!(stats.live, 0, "round {r}: every store gave its stack back");
        assert_eq!(
            stats.created, CONCURRENT as u64,
            "round {r}: stacks are mapped in the first round only"
        );
    }
    let stats = pool.stats();
    let calls = (CONCURRENT * ROUNDS) as u64;
    assert_eq!(
        stats.pool.hits + stats.pool.misses,
        calls,
        "one get per store"
    );
    assert_eq!(stats.pool.misses, CONCURRENT as u64);
    assert_eq!(stats.mapped, CONCURRENT as u64);
    assert_eq!(stats.pool.idle, CONCURRENT as u64);
    assert_eq!(
        stats.pool.live + stats.pool.idle,
        stats.pool.created - stats.pool.destroyed
    );
}

/// Calls run on one thread, their stores are dropped on another: stacks go
/// back to the pool on the dropping thread, and the pool still stops
/// growing. The dropping thread caches at most two batches; the rest reach
/// the depot, where the calling thread finds them.
#[test]
fn stores_dropped_on_another_thread() {
    const BATCH: usize = 4;
    let pool = StackPool::builder(modules::STACK_SIZE)
        .batch_size(BATCH)
        .background(false)
        .build()
        .expect("valid settings");
    let engine = modules::engine(&pool);
    let pre = modules::yielding(&engine);

    let (to_dropper, stores) = mpsc::channel::<Vec<Store<()>>>();
    let (ack, dropped) = mpsc::channel::<()>();
    let dropper = thread::spawn(move || {
        for batch in stores {
            drop(batch);
            ack.send(()).expect("the caller waits");
        }
    });

    let mut created_after_round = Vec::new();
    for r in 0..ROUNDS {
        let tasks: Vec<Task<'_, Store<()>>> = (0..CONCURRENT)
            .map(|i| {
                let pre = pre.clone();
                let x = (r * CONCURRENT + i) as i32;
                Box::pin(async move {
                    let mut store = Store::new(pre.module().engine(), ());
                    let instance = pre.instantiate_async(&mut store).await.expect("instance");
                    let run = instance
                        .get_typed_func::<i32, i32>(&mut store, "run")
                        .expect("exported");
                    let y = run.call_async(&mut store, x).await.expect("the call");
                    assert_eq!(y, yielding_result(x));
                    store
                }) as Task<'_, _>
            })
            .collect();
        let stores = run_all(tasks, || {});
        assert_eq!(
            pool.stats().pool.live,
            CONCURRENT as u64,
            "stores hold them"
        );
        to_dropper.send(stores).expect("the dropper runs");
        dropped.recv().expect("the dropper acknowledges");
        let stats = pool.stats().pool;
        assert_eq!(stats.live, 0, "round {r}: all back, from the other thread");
        created_after_round.push(stats.created);
    }
    drop(to_dropper);
    dropper.join().expect("the dropper does not panic");

    let created = *created_after_round.last().expect("rounds ran");
    // The calling thread maps a stack only when neither its cache nor the
    // depot has one, that is when every idle stack sits in the dropping
    // thread's cache (at most two batches).
    assert!(
        created <= (CONCURRENT + 2 * BATCH) as u64,
        "created {created}: bounded by a round plus the other thread's cache"
    );
    assert_eq!(
        created_after_round[ROUNDS / 2],
        created,
        "no stack mapped in the second half: {created_after_round:?}"
    );
    let stats = pool.stats().pool;
    assert_eq!(stats.hits + stats.misses, (CONCURRENT * ROUNDS) as u64);
    assert_eq!(stats.live + stats.idle, stats.created - stats.destroyed);
}

/// Two threads with their own stores, one engine and one pool.
#[test]
fn two_threads_share_one_pool() {
    let pool = modules::pool();
    let engine = modules::engine(&pool);
    let pre = modules::yielding(&engine);

    thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for r in 0..ROUNDS {
                    round(&pool, &pre, r);
                }
            });
        }
    });
    let stats = pool.stats().pool;
    assert_eq!(stats.live, 0);
    assert_eq!(stats.hits + stats.misses, (2 * CONCURRENT * ROUNDS) as u64);
    // Each thread maps a round's worth once and then reuses it: a round
    // (24 stacks) fits in one thread cache (two batches of 32), so neither
    // thread ever finds the other's stacks stranded out of its reach.
    assert!(
        stats.created <= (2 * CONCURRENT) as u64,
        "created {}: at most the stacks both threads hold at once",
        stats.created
    );
    assert_eq!(stats.live + stats.idle, stats.created - stats.destroyed);
}
