//! Linear memories from a `PooledMemoryCreator`: reused across instances,
//! zero for every new instance, guarded past their size, and unpooled when
//! the engine's reservation is not the creator's.

use std::sync::Arc;

use tidepool::region::RegionManager;
use tidepool::Pool;
use tidepool_wasmtime::{ConfigExt, PooledMemoryCreator};
use wasmtime::{Config, Engine, Instance, Module, Store, Trap};

/// Two pages of memory with 16 bytes of data at 1024; `peek`/`poke` any
/// byte, `grow` by pages.
const MEMORY: &str = r#"
(module
  (memory (export "memory") 2 8)
  (data (i32.const 1024) "tidepool memory!")
  (func (export "peek") (param i32) (result i32) (i32.load8_u (local.get 0)))
  (func (export "poke") (param i32 i32) (i32.store8 (local.get 0) (local.get 1)))
  (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0))))
"#;

const PAGE: i32 = 64 * 1024;

fn creator(reservation: usize, guard: usize) -> Arc<PooledMemoryCreator> {
    let pool = Pool::builder(RegionManager::new(reservation + guard).keep_resident(64 * 1024))
        .background(false)
        .maps_per_object(2)
        .build()
        .unwrap();
    Arc::new(PooledMemoryCreator::with_pool(pool, reservation, guard).unwrap())
}

fn engine(creator: &Arc<PooledMemoryCreator>) -> (Engine, Module) {
    let mut config = Config::new();
    config.pooled_memories(creator.clone());
    let engine = Engine::new(&config).unwrap();
    let module = Module::new(&engine, MEMORY).unwrap();
    (engine, module)
}

struct Run {
    store: Store<()>,
    instance: Instance,
}

impl Run {
    fn new(engine: &Engine, module: &Module) -> Self {
        let mut store = Store::new(engine, ());
        let instance = Instance::new(&mut store, module, &[]).unwrap();
        Self { store, instance }
    }

    fn peek(&mut self, addr: i32) -> wasmtime::Result<i32> {
        let f = self
            .instance
            .get_typed_func::<i32, i32>(&mut self.store, "peek")?;
        f.call(&mut self.store, addr)
    }

    fn poke(&mut self, addr: i32, value: i32) {
        let f = self
            .instance
            .get_typed_func::<(i32, i32), ()>(&mut self.store, "poke")
            .unwrap();
        f.call(&mut self.store, (addr, value)).unwrap();
    }

    fn grow(&mut self, pages: i32) -> i32 {
        let f = self
            .instance
            .get_typed_func::<i32, i32>(&mut self.store, "grow")
            .unwrap();
        f.call(&mut self.store, pages).unwrap()
    }
}

#[test]
fn every_instance_gets_zeroed_memory_from_one_reused_region() {
    let creator = creator(64 << 20, 1 << 20);
    let (engine, module) = engine(&creator);
    for round in 0..5 {
        let mut run = Run::new(&engine, &module);
        // The data segment is there, and everything the last instance wrote
        // (near the start, past the kept-resident bound, in grown pages) is
        // gone.
        assert_eq!(run.peek(1024).unwrap(), i32::from(b't'));
        for addr in [0, 4096, 2 * PAGE - 1] {
            assert_eq!(run.peek(addr).unwrap(), 0, "round {round}, byte {addr}");
        }
        assert_eq!(run.grow(2), 2);
        assert_eq!(run.peek(3 * PAGE).unwrap(), 0, "round {round}, grown page");
        for addr in [0, 4096, 2 * PAGE - 1, 3 * PAGE] {
            run.poke(addr, 0x5a);
        }
    }
    let s = creator.pool().stats();
    assert_eq!((s.created, s.hits, s.live), (1, 4, 0), "{s:?}");
    assert_eq!(creator.unpooled(), 0);
    // Idle now: of the kept 64 KiB, the pages the pool's instances reach
    // (the first reset's `mincore` found those of bytes 0 and 4096 touched:
    // the data segment and the pokes there) cleared and in RAM, the rest
    // released; purged, none.
    let page = tidepool::region::page_size();
    assert_eq!(
        creator.pool().manager().idle_resident(),
        (4096 / page + 1) * page
    );
    creator.pool().trim_local(); // purge reaches the depot only
    creator.pool().purge();
    assert_eq!(creator.pool().manager().idle_resident(), 0);
    assert_eq!(creator.pool().manager().reset_failures(), 0);
}

#[test]
fn accesses_past_the_size_trap_even_after_a_bigger_instance() {
    let creator = creator(64 << 20, 1 << 20);
    let (engine, module) = engine(&creator);
    let mut big = Run::new(&engine, &module);
    assert_eq!(big.grow(4), 2);
    big.poke(5 * PAGE, 1);
    drop(big);
    // The same region, two pages again: page 2 onwards must fault.
    let mut small = Run::new(&engine, &module);
    let err = small.peek(2 * PAGE).unwrap_err();
    assert_eq!(
        err.downcast_ref::<Trap>(),
        Some(&Trap::MemoryOutOfBounds),
        "{err:?}"
    );
    let err = small.peek(5 * PAGE).unwrap_err();
    assert_eq!(
        err.downcast_ref::<Trap>(),
        Some(&Trap::MemoryOutOfBounds),
        "{err:?}"
    );
    assert_eq!(creator.pool().stats().created, 1);
}

#[test]
fn growth_stops_at_the_maximum_and_memories_of_another_reservation_are_unpooled() {
    let creator = creator(64 << 20, 1 << 20);
    let (engine, module) = engine(&creator);
    let mut run = Run::new(&engine, &module);
    assert_eq!(run.grow(6), 2);
    assert_eq!(run.grow(1), -1, "the type's maximum is 8 pages");
    drop(run);
    // An engine whose reservation differs: served, but outside the pool.
    let mut config = Config::new();
    config
        .memory_reservation(32 << 20)
        .memory_guard_size(1 << 20)
        .memory_init_cow(false)
        .with_host_memory(creator.clone());
    let other = Engine::new(&config).unwrap();
    let module = Module::new(&other, MEMORY).unwrap();
    let mut run = Run::new(&other, &module);
    assert_eq!(run.peek(1024).unwrap(), i32::from(b't'));
    drop(run);
    assert_eq!(creator.unpooled(), 1);
    assert_eq!(creator.pool().stats().created, 1);
}

#[test]
fn bad_creator_settings_are_refused_by_name() {
    let pool = Pool::builder(RegionManager::new(8 << 20))
        .background(false)
        .build()
        .unwrap();
    let err = PooledMemoryCreator::with_pool(pool, 4 << 20, 1 << 20).unwrap_err();
    assert_eq!(err.field(), "reservation", "{err}");
    let pool = Pool::builder(RegionManager::new(8 << 20))
        .background(false)
        .build()
        .unwrap();
    let err = PooledMemoryCreator::with_pool(pool, (8 << 20) - 100, 100).unwrap_err();
    assert_eq!(err.field(), "reservation", "{err}");
}
