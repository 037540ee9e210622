//! Many pools per thread: the work a thread does to keep its list of pools
//! (handed their caches back at exit) stays O(1) per claim, and the list
//! does not grow as pools come and go.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::cache::thread::watch_work;
use crate::{Manage, Pool};

/// A manager that counts what it makes and destroys.
#[derive(Default)]
struct Counting {
    made: AtomicUsize,
    destroyed: AtomicUsize,
}

impl Manage for &'static Counting {
    type Item = u64;
    type Error = std::convert::Infallible;
    fn create(&self) -> Result<u64, Self::Error> {
        self.made.fetch_add(1, Ordering::Relaxed);
        Ok(0)
    }
    fn destroy(&self, _: u64) {
        self.destroyed.fetch_add(1, Ordering::Relaxed);
    }
}

fn counting() -> &'static Counting {
    Box::leak(Box::default())
}

/// `MAX_CACHES + extra` pools with no reclaimer, each got from and given
/// back to once by the calling thread: it caches in the first
/// `MAX_CACHES` and is refused a cache in the rest.
fn filled_past_the_fill(manager: &'static Counting, extra: usize) -> Vec<Pool<&'static Counting>> {
    let pools: Vec<_> = (0..crate::cache::thread::MAX_CACHES + extra)
        .map(|_| Pool::builder(manager).background(false).build().unwrap())
        .collect();
    for pool in &pools {
        drop(pool.get().unwrap());
    }
    pools
}

/// Runs `test` on a thread of its own (a fresh list of pools) with a
/// counting manager, then checks every object made was destroyed once.
fn on_a_thread_of_its_own(test: impl FnOnce(&'static Counting) + Send + 'static) {
    let manager = counting();
    std::thread::spawn(move || test(manager)).join().unwrap();
    let made = manager.made.load(Ordering::Relaxed);
    assert_eq!(manager.destroyed.load(Ordering::Relaxed), made);
}

/// `rounds` gets and puts on each of `pools`, one pool after another.
fn round_trips(pools: &[Pool<&'static Counting>], rounds: usize) {
    for _ in 0..rounds {
        for pool in pools {
            drop(pool.get().unwrap());
        }
    }
}

/// Each of `pools`, where the thread has no cache, after `rounds` round
/// trips past the one that filled: its object in the depot, every get
/// counted, one object made.
fn assert_slotless_rounds(pools: &[Pool<&'static Counting>], rounds: usize) {
    for pool in pools {
        let s = pool.stats();
        assert_eq!((s.idle_cached(), s.idle_depot, s.live), (0, 1, 0), "{s:?}");
        assert_eq!(s.hits + s.misses, rounds as u64 + 1, "every get counted");
        assert_eq!(s.created, 1);
    }
}

/// One thread claims its cache in each of 1,000 pools, has every cache
/// taken back (`drain`, as the reclaimer does to an idle cache), and
/// claims again, five times over. Each re-claim must not scan the list of
/// pools: the entries visited stay a small multiple of the pools watched.
#[test]
fn a_reclaim_visits_no_list_of_pools() {
    // Miri interprets every step: fewer there, enough to see a scan.
    // Within the thread's fill of caches (see the next tests for beyond).
    const POOLS: usize = if cfg!(miri) { 40 } else { 1_000 };
    const _: () = assert!(POOLS <= crate::cache::thread::MAX_CACHES);
    const ROUNDS: usize = if cfg!(miri) { 2 } else { 5 };
    let manager = counting();
    std::thread::spawn(move || {
        let pools: Vec<_> = (0..POOLS)
            .map(|_| Pool::builder(manager).background(false).build().unwrap())
            .collect();
        let (pushes0, visited0, _) = watch_work();
        let mut claims = 0u64;
        for _ in 0..ROUNDS {
            for pool in &pools {
                drop(pool.get().unwrap());
                claims += 1;
                assert!(pool.drain() >= 1, "the cache was taken back");
            }
        }
        let (pushes, visited, len) = watch_work();
        let (pushes, visited) = (pushes - pushes0, visited - visited0);
        assert!(
            visited <= 2 * claims,
            "{visited} list entries visited for {claims} claims"
        );
        assert_eq!(pushes, POOLS as u64, "each pool is watched once");
        assert_eq!(len, POOLS);
        drop(pools);
    })
    .join()
    .unwrap();
    let made = manager.made.load(Ordering::Relaxed);
    assert!(made >= POOLS * ROUNDS, "every round created anew: {made}");
    assert_eq!(manager.destroyed.load(Ordering::Relaxed), made);
}

/// 8 threads each make and drop 12,500 pools (100,000 in all), using each
/// once, and keep one in a thousand: a thread's list of pools never holds
/// more than a sweep's worth of dropped ones, and the heads' arena reuses
/// the cells of dropped pools instead of growing.
#[test]
fn dropped_pools_leave_nothing_in_thread_lists() {
    const THREADS: usize = if cfg!(miri) { 2 } else { 8 };
    const PER_THREAD: usize = if cfg!(miri) { 60 } else { 12_500 };
    let manager = counting();
    let chunks_before = crate::shared::arena::chunks();
    let longest: Vec<usize> = (0..THREADS)
        .map(|_| {
            std::thread::spawn(move || {
                let mut longest = 0;
                let mut kept = Vec::new();
                for i in 0..PER_THREAD {
                    let pool = Pool::builder(manager).build().unwrap();
                    drop(pool.get().unwrap());
                    // A few stay alive throughout: the list keeps them.
                    if i % 1_000 == 0 {
                        kept.push(pool);
                    }
                    longest = longest.max(watch_work().2);
                }
                let (pushes, _, len) = watch_work();
                assert_eq!(pushes, PER_THREAD as u64);
                assert!(len >= kept.len());
                drop(kept);
                longest
            })
        })
        .map(|t| t.join().unwrap())
        .collect();
    for l in longest {
        assert!(l <= 2 * 13 + 16, "a thread's list grew to {l} entries");
    }
    // Without reuse, every pool made would take a cell of its own; the
    // other tests' pools, built meanwhile, take far fewer than a fifth.
    let carved = crate::shared::arena::chunks() - chunks_before;
    let without_reuse = THREADS * PER_THREAD / crate::shared::arena::CELLS_PER_CHUNK;
    assert!(
        carved <= 1 + without_reuse / 5,
        "{carved} chunks carved for {} pools",
        THREADS * PER_THREAD
    );
    let made = manager.made.load(Ordering::Relaxed);
    assert!(made >= THREADS * PER_THREAD);
    assert_eq!(manager.destroyed.load(Ordering::Relaxed), made);
}

/// A thread keeps at most `MAX_CACHES` caches: in the pools past them it
/// gets and puts through the depot. Caches the reclaimer takes back make
/// room, found by the sweep that refusals bring on, for the pools the
/// thread keeps using.
#[test]
#[cfg_attr(miri, ignore = "builds over a thousand pools")]
fn a_thread_keeps_at_most_max_caches() {
    use crate::cache::thread::MAX_CACHES;
    const EXTRA: usize = 64;
    let manager = counting();
    let pools = std::thread::spawn(move || {
        let pools = filled_past_the_fill(manager, EXTRA);
        let cached = |p: &Pool<&'static Counting>| p.stats().idle_cached() == 1;
        assert!(pools[..MAX_CACHES].iter().all(cached));
        for pool in &pools[MAX_CACHES..] {
            let s = pool.stats();
            assert_eq!((s.idle_cached(), s.idle_depot), (0, 1), "{s:?}");
        }
        // The reclaimer takes the first caches back (`drain` does as it
        // does, then destroys what it took).
        for pool in &pools[..EXTRA] {
            assert_eq!(pool.drain(), 1);
        }
        // Refused long enough, the thread sweeps its list and takes caches
        // in the pools it uses now.
        let (_, visited0, _) = watch_work();
        let mut refusals = 0;
        while !pools[MAX_CACHES..].iter().all(cached) {
            for pool in &pools[MAX_CACHES..] {
                drop(pool.get().unwrap());
            }
            // A get and a put each: two refusals per pool.
            refusals += 2 * EXTRA;
            assert!(
                refusals <= crate::cache::thread::REFUSALS_AT_FILL + 2 * EXTRA,
                "no room after {refusals} refusals"
            );
        }
        let (_, visited, len) = watch_work();
        assert!(visited - visited0 <= MAX_CACHES as u64, "one sweep");
        assert_eq!(len, MAX_CACHES);
        // The sweep dropped the drained pools from the list; their slots
        // wait for the thread's exit (the sweep may run inside one of
        // those pools' own gets).
        assert!(pools.iter().all(|p| p.shared.slots.allocated() == 1));
        pools
    })
    .join()
    .unwrap();
    // The exit freed every slot, listed or given up by the sweep, and the
    // counts stayed exact.
    for pool in &pools {
        assert_eq!(pool.shared.slots.allocated(), 0);
        let s = pool.stats();
        assert_eq!(s.live, 0);
        assert_eq!(s.idle + s.destroying, s.created - s.destroyed, "{s:?}");
    }
    drop(pools);
    let made = manager.made.load(Ordering::Relaxed);
    assert_eq!(manager.destroyed.load(Ordering::Relaxed), made);
}

/// A thread at its fill of caches gets and puts in the pools past them
/// without asking its list each time: the refusals are counted down in a
/// thread-local, and the list is asked (and swept) once per
/// `REFUSALS_AT_FILL` of them at most. Every object still comes back exactly
/// once, through the depot, counted as a get and a return.
#[test]
#[cfg_attr(miri, ignore = "builds over a thousand pools")]
fn a_thread_at_its_fill_refuses_without_asking_its_list() {
    use crate::cache::thread::{watch_calls, MAX_CACHES, REFUSALS_AT_FILL};
    const EXTRA: usize = 64;
    const ROUNDS: usize = 100;
    on_a_thread_of_its_own(|manager| {
        let pools = filled_past_the_fill(manager, EXTRA);
        let calls0 = watch_calls();
        round_trips(&pools[MAX_CACHES..], ROUNDS);
        // Each round trip is a refused get and a refused put.
        let refusals = (2 * ROUNDS * EXTRA) as u64;
        let calls = watch_calls() - calls0;
        assert!(
            calls <= refusals / REFUSALS_AT_FILL as u64 + 1,
            "{calls} calls for {refusals} refusals"
        );
        assert_slotless_rounds(&pools[MAX_CACHES..], ROUNDS);
        drop(pools);
    });
}

/// A slot-less get and put (a thread at its fill of caches, in a pool
/// where it has none) look in no slot table: the pool's `slotted` word
/// says the thread has no slot there, so the round trip touches the first
/// line of the pool's head and the depot's, not the table's lines. The thread first
/// looks in each pool once (the gets that fill its caches), then cycles
/// over the pools past its fill, each visit to another pool than the last,
/// as a thread moving among thousands of pools does.
#[test]
#[cfg_attr(miri, ignore = "builds over a thousand pools")]
fn a_slotless_round_trip_looks_in_no_slot_table() {
    use crate::cache::table::lookups;
    use crate::cache::thread::{current_tid, MAX_CACHES, SLOT_BITS};
    const EXTRA: usize = 64;
    const ROUNDS: usize = 50;
    on_a_thread_of_its_own(|manager| {
        let pools = filled_past_the_fill(manager, EXTRA);
        let tid = current_tid().expect("registered by its gets");
        assert!(tid < SLOT_BITS, "the word covers this thread's id {tid}");
        let before = lookups();
        round_trips(&pools[MAX_CACHES..], ROUNDS);
        let looked = lookups() - before;
        // Every one of these gets and puts is refused a cache (fewer
        // refusals than `REFUSALS_AT_FILL`: no sweep either).
        assert_eq!(
            looked,
            0,
            "{looked} lookups for {} round trips",
            ROUNDS * EXTRA
        );
        assert_slotless_rounds(&pools[MAX_CACHES..], ROUNDS);
        // The pools where it has a cache still find it, and their bit.
        let hits0: u64 = pools[..MAX_CACHES].iter().map(|p| p.stats().hits).sum();
        for pool in &pools[..MAX_CACHES] {
            drop(pool.get().unwrap());
        }
        let hits: u64 = pools[..MAX_CACHES].iter().map(|p| p.stats().hits).sum();
        assert_eq!(hits - hits0, MAX_CACHES as u64, "each from its cache");
        for pool in &pools[..MAX_CACHES] {
            assert_eq!(pool.stats().idle_cached(), 1);
        }
        drop(pools);
    });
}

/// Pools dropped while a thread's list filled leave entries that hold
/// places: the first sweep after the list fills (`REFUSALS_AT_FILL`
/// refusals) forgets them, and the thread takes caches in the pools it
/// uses now.
#[test]
#[cfg_attr(miri, ignore = "builds over a thousand pools")]
fn a_full_list_of_dropped_pools_makes_room_at_its_first_sweep() {
    use crate::cache::thread::{MAX_CACHES, REFUSALS_AT_FILL};
    const EXTRA: usize = 64;
    let manager = counting();
    std::thread::spawn(move || {
        let mut pools: Vec<_> = (0..MAX_CACHES)
            .map(|_| Pool::builder(manager).background(false).build().unwrap())
            .collect();
        for pool in &pools {
            drop(pool.get().unwrap());
        }
        // The list is full; the first EXTRA pools go away, their entries
        // stay until a sweep.
        drop(pools.drain(..EXTRA));
        let newer: Vec<_> = (0..EXTRA)
            .map(|_| Pool::builder(manager).background(false).build().unwrap())
            .collect();
        let cached = |p: &Pool<&'static Counting>| p.stats().idle_cached() == 1;
        let mut refusals = 0;
        while !newer.iter().all(cached) {
            for pool in &newer {
                drop(pool.get().unwrap());
            }
            refusals += 2 * EXTRA;
            assert!(
                refusals <= REFUSALS_AT_FILL + 2 * EXTRA,
                "no room after {refusals} refusals"
            );
        }
        drop((pools, newer));
    })
    .join()
    .unwrap();
    let made = manager.made.load(Ordering::Relaxed);
    assert_eq!(manager.destroyed.load(Ordering::Relaxed), made);
}

/// A thread that used many pools leaves no slot in any of them once it has
/// exited, and every count stays exact: the slots' counts live on in the
/// pools'. Without that, each (pool, thread) pair ever used kept its slot
/// until the pool dropped.
#[test]
#[cfg_attr(miri, ignore = "builds a hundred pools")]
fn an_exited_thread_leaves_no_slot_behind() {
    const POOLS: usize = 100;
    const ROUNDS: usize = 3;
    let manager = counting();
    let pools: std::sync::Arc<Vec<Pool<&'static Counting>>> = std::sync::Arc::new(
        (0..POOLS)
            .map(|_| Pool::builder(manager).background(false).build().unwrap())
            .collect(),
    );
    let slots = |p: &Pool<&'static Counting>| p.shared.slots.allocated();
    for _ in 0..2 {
        let used = std::sync::Arc::clone(&pools);
        std::thread::spawn(move || {
            round_trips(&used, ROUNDS);
            assert!(used.iter().all(|p| slots(p) == 1), "one slot each");
        })
        .join()
        .unwrap();
        assert!(pools.iter().all(|p| slots(p) == 0), "none after the exit");
    }
    for pool in pools.iter() {
        let s = pool.stats();
        assert_eq!(s.hits + s.misses, 2 * ROUNDS as u64, "{s:?}");
        assert_eq!((s.live, s.created, s.idle), (0, 1, 1), "{s:?}");
        assert_eq!(s.idle + s.destroying, s.created - s.destroyed, "{s:?}");
    }
    drop(pools);
    let made = manager.made.load(Ordering::Relaxed);
    assert_eq!(manager.destroyed.load(Ordering::Relaxed), made);
}
