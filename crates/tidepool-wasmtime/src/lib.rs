//! Pooled fiber stacks for wasmtime's async support, from tidepool's
//! [`StackPool`](tidepool::stack::StackPool), and pooled linear memories,
//! from a pool of [`Region`](tidepool::region::Region)s
//! ([`PooledMemoryCreator`], [`ConfigExt::pooled_memories`]): guard-paged,
//! reused from a per-thread cache, bounded by the process's map count, and
//! purged and reclaimed by the pools' own working-set measure.
//!
//! wasmtime runs every async call (`call_async`, `instantiate_async`) on a
//! fiber with a stack of its own. Its default on-demand allocator maps that
//! stack per store (`mmap` + `mprotect`, page faults on first touch, `munmap`
//! when the store drops), which a store-per-request server pays on every
//! request. One line of config hands that job to a pool:
//!
//! ```
//! use tidepool::stack::StackPool;
//! use tidepool_wasmtime::ConfigExt;
//! use wasmtime::{Config, Engine, Instance, Module, Store};
//!
//! let stacks = StackPool::new(1 << 20)?; // 1 MiB fibers above a guard page
//! let mut config = Config::new();
//! config.pooled_stacks(stacks.clone()); // ← the one line
//! let engine = Engine::new(&config)?;
//!
//! let module = Module::new(&engine, r#"(module (func (export "add") (param i32 i32) (result i32)
//!     local.get 0 local.get 1 i32.add))"#)?;
//! for i in 0..10 {
//!     // A store per request: its fiber stack comes from the pool and goes
//!     // back to it when the store drops.
//!     let mut store = Store::new(&engine, ());
//!     let sum = block_on(async {
//!         let instance = Instance::new_async(&mut store, &module, &[]).await?;
//!         let add = instance.get_typed_func::<(i32, i32), i32>(&mut store, "add")?;
//!         add.call_async(&mut store, (i, 1)).await
//!     })?;
//!     assert_eq!(sum, i + 1);
//! }
//! let stats = stacks.stats();
//! assert_eq!(stats.mapped, 1, "one stack, reused by all ten stores");
//! assert_eq!(stats.pool.hits, 9);
//! # fn block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     // Any executor does (tokio, smol, ...); these calls never wait.
//! #     let mut f = std::pin::pin!(f);
//! #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
//! #     loop {
//! #         if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
//! #             return v;
//! #         }
//! #     }
//! # }
//! # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
//! ```
//!
//! * [`ConfigExt::pooled_stacks`] sets `async_stack_size` to the pool's
//!   stack size and installs a [`PooledStackCreator`]
//!   ([`Config::with_host_stack`](wasmtime::Config::with_host_stack)).
//! * Each stack wasmtime gets is a [`PooledFiberStack`], wasmtime's
//!   [`StackMemory`](wasmtime::StackMemory): `range()` is the usable part,
//!   `guard_range()` the guard page below it, so wasmtime's signal handler
//!   reports a host function overflowing a fiber ("execution on async fiber
//!   has overflowed its stack") instead of the process silently
//!   scribbling over its neighbour. Wasm's own recursion is cut off earlier,
//!   at `max_wasm_stack`, with a [`Trap::StackOverflow`](wasmtime::Trap).
//! * With [`async_stack_zeroing`](wasmtime::Config::async_stack_zeroing),
//!   a pooled stack is zeroed before it is lent, where its last fiber
//!   touched it; a request larger than the pool's stacks gets a fresh
//!   mapping of its own. See [`PooledStackCreator`].
//! * wasmtime's *pooling* instance allocator keeps its own stack slots and
//!   never calls a stack creator; this crate is for the default on-demand
//!   allocator.
//!
//! Linux only for now, where it is tested (wasmtime's signal handling and
//! the overflow test are platform-specific); elsewhere the crate is empty.
//! [`tidepool::stack`] itself builds on every Unix.
//!
//! wasmtime's traits can change with any major version; this release
//! implements those of wasmtime 48, 49 and 50, which are the same in the
//! three (as are the `Config` methods it calls). wasmtime 48 needs Rust
//! 1.95, 49 Rust 1.96 and 50 Rust 1.97. The workspace's `Cargo.lock` holds
//! 48; `bin/wasmtime-versions.sh` tests the crate against 48, and against
//! 49 and 50 on Rust 1.97.0.

#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(clippy::undocumented_unsafe_blocks)]

#[cfg(target_os = "linux")]
mod creator;
#[cfg(target_os = "linux")]
mod linear_memory;
#[cfg(target_os = "linux")]
mod memory;
#[cfg(target_os = "linux")]
mod memory_creator;

#[cfg(target_os = "linux")]
pub use creator::{ConfigExt, PooledStackCreator};
#[cfg(target_os = "linux")]
pub use linear_memory::PooledLinearMemory;
#[cfg(target_os = "linux")]
pub use memory::PooledFiberStack;
#[cfg(target_os = "linux")]
pub use memory_creator::{PooledMemoryCreator, DEFAULT_GUARD, DEFAULT_RESERVATION};

// The README's snippets, compiled and run as doctests.
#[cfg(all(doctest, target_os = "linux"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
