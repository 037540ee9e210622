//! The subjects of tidepool's benchmarks (in `benches/pools.rs`) and of the
//! instruction counts in `src/bin/roundtrip.rs`, behind one small trait.
//!
//! Every subject pools the same object, a `Vec<u8>` with capacity
//! [`BUF_CAP`] (the peers' own benchmarks use 4–16 KiB vectors), and every
//! round trip does the same thing: take one object, [`touch`] it (clear it
//! and write one byte, through [`black_box`] so nothing is optimised away),
//! give it back.
//!
//! | name                  | what                                                   |
//! |-----------------------|--------------------------------------------------------|
//! | `tidepool`            | [`tidepool::Pool::get`], default settings              |
//! | `tidepool_owned`      | [`tidepool::Pool::get_owned`] (round trip only)        |
//! | `tls_vec`             | bare `thread_local!` `RefCell<Vec<Vec<u8>>>` pop/push: the floor |
//! | `raw_tls`             | [`RawTls`]: a thread-local array and a length, nothing else (round trip only) |
//! | `mutex_vec`           | `parking_lot::Mutex<Vec<Vec<u8>>>` pop/push            |
//! | `no_pool`             | `Vec::with_capacity` + drop (malloc's own caches)      |
//! | `object_pool`         | `object-pool` 0.6 `pull` / `pull_owned`                |
//! | `lockfree_linear`     | `lockfree-object-pool` 0.1 `LinearObjectPool`          |
//! | `sharded_slab`        | `sharded-slab` 0.1 `Pool::create` + `clear(key)`       |
//! | `opool`               | `opool` 0.2 concurrent `Pool::get` / `get_rc`          |
//!
//! The [`GetDrop`] subjects take an object and drop the guard at once, with
//! no touch: `core` ([`Tidepool`], `Pool::get`), `core_owned`
//! ([`TidepoolOwned`], `Pool::get_owned`) and `stack` ([`Stacks`],
//! `StackPool::get` of a 1 MiB guarded stack). The core's guards hold a
//! pool pointer and a 24-byte object, the stack handle two words (the
//! stack and its slab set, through which it finds its pool), so the three
//! compare what each kind of guard costs. `stack_get_drop_apart`
//! ([`StacksApart`], instruction count only) is `stack` with each half
//! behind a call that is not inlined.
//! `stack_get_put` ([`StacksPut`]) and `stack_get_put_apart`
//! ([`StacksPutApart`]) give the stack back with `StackPool::put` instead
//! of dropping it (instruction counts only).

use std::cell::{Cell, RefCell};
use std::hint::black_box;
use std::ops::{Deref, DerefMut};
use std::sync::mpsc::sync_channel;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

/// Maps a private anonymous region of `len` bytes, writes its first byte
/// if `touch`, and unmaps it: what another thread of a process does when it
/// maps memory of its own (the teardown probes). Both calls take the
/// address-space lock for write.
// The probe stands for the rest of the process: a plain `mmap` + `munmap`
// of its own, not tidepool's.
#[allow(clippy::disallowed_methods)]
pub fn map_unmap(len: usize, touch: bool) {
    // SAFETY: a fresh anonymous private mapping at an address the kernel
    // picks, unmapped whole right after; nothing points into it.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return;
        }
        if touch {
            p.cast::<u8>().write(1);
        }
        libc::munmap(std::hint::black_box(p), len);
    }
}

/// A `kB` figure of this process's `/proc/self/status` (`"VmRSS:"`,
/// `"VmHWM:"`, ...); 0 where it cannot be read.
pub fn status_kib(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Capacity of every pooled buffer.
pub const BUF_CAP: usize = 4096;

/// Bounded channel depth in the cross-thread forward benchmark.
pub const CHANNEL_CAP: usize = 256;

/// Round trips each thread does before the timed region, so thread
/// registration and first-use allocation are not timed.
pub const WARM_UP_OPS: usize = 1024;

/// A fresh buffer.
#[inline]
pub fn new_buf() -> Vec<u8> {
    Vec::with_capacity(BUF_CAP)
}

/// [`new_buf`] kept out of the baselines' hot loops, as the pools keep
/// their creation paths: only the first round trip of a thread takes it.
#[cold]
#[inline(never)]
fn new_buf_cold() -> Vec<u8> {
    new_buf()
}

/// What every round trip does with its object: clear it and write one byte.
/// `black_box` keeps the compiler from seeing through the object (and from
/// eliding the allocation in the no-pool case).
#[inline(always)]
pub fn touch(v: &mut Vec<u8>) {
    let v = black_box(v);
    v.clear();
    v.push(1);
}

/// One pool under test.
///
/// `round_trip` must be callable from many threads at once on one shared
/// subject. `take`/`give_back` are the two halves used by the forward
/// benchmark: `take` runs on the producer, `give_back` on the consumer.
pub trait Subject: Send + Sync + 'static {
    /// An object on loan that may cross threads.
    type Owned: DerefMut<Target = Vec<u8>> + Send + 'static;

    /// Take one object, touch it, give it back.
    fn round_trip(&self);

    /// Take one object for another thread to give back.
    fn take(&self) -> Self::Owned;

    /// Give back an object taken (maybe on another thread) with `take`.
    #[inline]
    fn give_back(&self, owned: Self::Owned) {
        drop(owned);
    }
}

// === tidepool ===

/// The manager of every tidepool subject.
pub type BufFn = fn() -> Vec<u8>;

/// `tidepool::Pool` with default settings.
pub struct Tidepool(pub Arc<tidepool::Pool<BufFn>>);

impl Tidepool {
    /// A pool with default settings.
    pub fn new() -> Self {
        Self(Arc::new(tidepool::Pool::new(new_buf as BufFn)))
    }
}

impl Default for Tidepool {
    fn default() -> Self {
        Self::new()
    }
}

impl Subject for Tidepool {
    type Owned = tidepool::OwnedPooled<BufFn>;

    #[inline]
    fn round_trip(&self) {
        let mut g = self.0.get().expect("infallible manager");
        touch(&mut g);
    }

    #[inline]
    fn take(&self) -> Self::Owned {
        self.0.get_owned().expect("infallible manager")
    }
}

/// Like [`Tidepool`], but the round trip goes through the `'static` guard
/// of `get_owned` (no `Arc` clone: the guard copies the handle's pointer,
/// and its drop looks for parked pools after its count; see tidepool's
/// `lifetime` module).
pub struct TidepoolOwned(pub Tidepool);

impl Subject for TidepoolOwned {
    type Owned = tidepool::OwnedPooled<BufFn>;

    #[inline]
    fn round_trip(&self) {
        let mut g = self.0.take();
        touch(&mut g);
    }

    #[inline]
    fn take(&self) -> Self::Owned {
        self.0.take()
    }
}

// === get + drop ===

/// Take an object and drop its guard at once, nothing in between: the shape
/// in which `StackPool::get` is used and compared (`get_drop` benchmark
/// group, instruction budget). The guard goes through [`black_box`], so
/// neither half is optimised away.
pub trait GetDrop: Send + Sync + 'static {
    /// One get and one drop.
    fn get_drop(&self);
}

/// Makes one boxed 256-byte object (a pointer: what the depot keeps
/// beside its lock for a thread with no cache).
pub type BoxFn = fn() -> Box<[u8; 256]>;

fn new_box() -> Box<[u8; 256]> {
    Box::new([0; 256])
}

/// Get + drop in pools where this thread keeps no cache (the slot-less
/// path: through the depot, one lock): the thread takes a cache in each
/// of the first [`Slotless::CACHED`] pools (a thread's most), then gets
/// and drops in the [`Slotless::PAST`] pools after them in turn. Built on
/// the thread that measures (instruction budget `slotless_get_drop`;
/// `many_pools` times the same path among thousands of pools).
pub struct Slotless {
    pools: Vec<tidepool::Pool<BoxFn>>,
    next: std::sync::atomic::AtomicUsize,
}

impl Slotless {
    /// The caches one thread keeps (`tidepool`'s `MAX_CACHES`).
    pub const CACHED: usize = 1024;
    /// The pools past them that the operations cycle through.
    pub const PAST: usize = 64;

    /// The pools, each used once by this thread, with a reclaim interval
    /// long enough that no cache is taken back while it measures.
    ///
    /// # Panics
    ///
    /// If a pool past the first [`CACHED`](Self::CACHED) keeps a cache
    /// for this thread (the limit changed: the path measured would not be
    /// the slot-less one).
    pub fn new() -> Self {
        let pools: Vec<_> = (0..Self::CACHED + Self::PAST)
            .map(|_| {
                tidepool::Pool::builder(new_box as BoxFn)
                    .reclaim_interval(std::time::Duration::from_secs(3600))
                    .build()
                    .expect("valid settings")
            })
            .collect();
        for pool in &pools {
            drop(pool.get().expect("infallible manager"));
        }
        for pool in &pools[Self::CACHED..] {
            let s = pool.stats();
            assert_eq!(s.idle_cached(), 0, "a cache past the thread's fill");
        }
        Self {
            pools,
            next: std::sync::atomic::AtomicUsize::new(0),
        }
    }
}

impl Default for Slotless {
    fn default() -> Self {
        Self::new()
    }
}

impl GetDrop for Slotless {
    #[inline]
    fn get_drop(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        let i = self.next.load(Relaxed);
        self.next.store((i + 1) % Self::PAST, Relaxed);
        let pool = &self.pools[Self::CACHED + i];
        drop(black_box(pool.get().expect("infallible manager")));
    }
}

impl GetDrop for Tidepool {
    #[inline]
    fn get_drop(&self) {
        drop(black_box(self.0.get().expect("infallible manager")));
    }
}

impl GetDrop for TidepoolOwned {
    #[inline]
    fn get_drop(&self) {
        drop(black_box(self.0.take()));
    }
}

/// Usable size of the pooled stacks: corosensei's default.
pub const STACK_SIZE: usize = 1024 * 1024;

/// `tidepool::stack::StackPool` of [`STACK_SIZE`] stacks, default settings.
#[cfg(target_os = "linux")]
pub struct Stacks(pub tidepool::stack::StackPool);

#[cfg(target_os = "linux")]
impl Stacks {
    /// A pool holding one stack already, so no measurement pays for the
    /// `mmap`.
    pub fn new() -> Self {
        let pool = tidepool::stack::StackPool::new(STACK_SIZE).expect("valid settings");
        drop(pool.get().expect("a stack"));
        Self(pool)
    }
}

#[cfg(target_os = "linux")]
impl Default for Stacks {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(target_os = "linux")]
impl GetDrop for Stacks {
    #[inline]
    fn get_drop(&self) {
        drop(black_box(self.0.get().expect("a stack")));
    }
}

/// [`Stacks`] with the get and the drop each in a function of its own that
/// is not inlined: the shape of a caller that reaches the pool through a
/// trait object or its own non-inlined functions, as the lab's policies
/// and most coroutine runtimes do. Whatever of `StackPool::get` the
/// compiler leaves out of line is paid here and not in [`Stacks`]'s
/// figure (instruction budget `stack_get_drop_apart`).
#[cfg(target_os = "linux")]
#[derive(Default)]
pub struct StacksApart(pub Stacks);

#[cfg(target_os = "linux")]
impl GetDrop for StacksApart {
    #[inline]
    fn get_drop(&self) {
        let stack = take_stack(&self.0 .0);
        give_stack(black_box(stack));
    }
}

#[cfg(target_os = "linux")]
#[inline(never)]
fn take_stack(pool: &tidepool::stack::StackPool) -> tidepool::stack::PooledStack {
    pool.get().expect("a stack")
}

#[cfg(target_os = "linux")]
#[inline(never)]
fn give_stack(stack: tidepool::stack::PooledStack) {
    drop(stack);
}

/// [`Stacks`] giving the stack back with [`StackPool::put`] instead of
/// dropping it: the pool handle keeps the pool alive, so the stack's end
/// skips the owned guard's lifetime marker (instruction budget
/// `stack_get_put`).
///
/// [`StackPool::put`]: tidepool::stack::StackPool::put
#[cfg(target_os = "linux")]
#[derive(Default)]
pub struct StacksPut(pub Stacks);

#[cfg(target_os = "linux")]
impl GetDrop for StacksPut {
    #[inline]
    fn get_drop(&self) {
        let pool = &self.0 .0;
        pool.put(black_box(pool.get().expect("a stack")));
    }
}

/// [`StacksPut`] with each half behind a call that is not inlined, as
/// [`StacksApart`] (instruction budget `stack_get_put_apart`: the shape of
/// the lab's tidepool policy).
#[cfg(target_os = "linux")]
#[derive(Default)]
pub struct StacksPutApart(pub Stacks);

#[cfg(target_os = "linux")]
impl GetDrop for StacksPutApart {
    #[inline]
    fn get_drop(&self) {
        let stack = take_stack(&self.0 .0);
        put_stack(&self.0 .0, black_box(stack));
    }
}

#[cfg(target_os = "linux")]
#[inline(never)]
fn put_stack(pool: &tidepool::stack::StackPool, stack: tidepool::stack::PooledStack) {
    pool.put(stack);
}

// === baselines ===

/// A plain `Vec<u8>` standing in as its own "guard" for the baselines.
pub struct Plain(pub Vec<u8>);

impl Deref for Plain {
    type Target = Vec<u8>;
    #[inline]
    fn deref(&self) -> &Vec<u8> {
        &self.0
    }
}

impl DerefMut for Plain {
    #[inline]
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        &mut self.0
    }
}

thread_local! {
    static TLS_FREE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// Bare thread-local free list: pop, touch, push. No guard, no counts, no
/// bound, no cross-thread story: the floor a pool's fast path can approach.
///
/// Measured the way a pool works: one thread-local access; the object is
/// popped off the list, used while the list is not borrowed (user code runs
/// there in a pool), and pushed back onto it, `pop` and `push` inlined. An earlier version took two
/// thread-local accesses, moved the whole list state through the closure's
/// return value and called `push` out of line: it measured 103 instructions
/// and more wall time than pools built on top of such a list.
///
/// It has no meaningful forward: objects would pile up on the consumer and
/// the producer would allocate every time, so `take`/`give_back` are the
/// no-pool ones and the forward benchmark leaves this subject out.
pub struct TlsVec;

impl Subject for TlsVec {
    type Owned = Plain;

    #[inline]
    fn round_trip(&self) {
        let done = TLS_FREE.try_with(|free| {
            // The list is not borrowed while the object is in use, as in a
            // pool, where user code runs between get and put.
            let mut v = free.borrow_mut().pop().unwrap_or_else(new_buf_cold);
            touch(&mut v);
            free.borrow_mut().push(v);
        });
        done.expect("thread-local free list used after its thread exited");
    }

    #[inline]
    fn take(&self) -> Plain {
        Plain(new_buf())
    }
}

/// Slots of the [`RawTls`] free list.
const RAW_SLOTS: usize = 64;

/// The [`RawTls`] free list: `len` objects in `items[..len]`, each stored
/// as the three words of its `Vec<u8>` in the `Vec`'s own (unspecified)
/// order, moved in and out one word at a time.
struct RawList {
    len: Cell<usize>,
    items: [[Cell<usize>; 3]; RAW_SLOTS],
}

impl Drop for RawList {
    fn drop(&mut self) {
        for slot in &self.items[..self.len.get()] {
            // SAFETY: slots below `len` hold words that `vec_to_words` took,
            // each owned by the list alone; each is rebuilt (and freed) once.
            drop(unsafe { words_to_vec(slot.each_ref().map(Cell::get)) });
        }
        self.len.set(0);
    }
}

thread_local! {
    static RAW_FREE: RawList = const {
        RawList {
            len: Cell::new(0),
            items: [const { [const { Cell::new(0) }; 3] }; RAW_SLOTS],
        }
    };
}

/// Moves `v` into three words without dropping it.
#[inline(always)]
fn vec_to_words(v: Vec<u8>) -> [usize; 3] {
    let v = std::mem::ManuallyDrop::new(v);
    let p = std::ptr::from_ref::<Vec<u8>>(&v).cast::<usize>();
    // SAFETY: a `Vec<u8>` is three `usize`-sized, `usize`-aligned words
    // (its pointer, capacity and length; asserted below), all initialised; reading
    // them one at a time (volatile, so that they stay 8-byte loads) copies
    // it, and `v` is never dropped, so the copy is the only owner.
    unsafe {
        [
            std::ptr::read_volatile(p),
            std::ptr::read_volatile(p.add(1)),
            std::ptr::read_volatile(p.add(2)),
        ]
    }
}

/// The `Vec<u8>` whose words [`vec_to_words`] took.
///
/// # Safety
///
/// `w` came from [`vec_to_words`], and no other `Vec` owns its buffer.
#[inline(always)]
unsafe fn words_to_vec(w: [usize; 3]) -> Vec<u8> {
    let mut out = std::mem::MaybeUninit::<Vec<u8>>::uninit();
    let p = out.as_mut_ptr().cast::<usize>();
    // SAFETY: `out` has room for the three words (asserted below); writing
    // them one at a time (volatile, so that they stay 8-byte stores)
    // rebuilds the `Vec` our caller's `w` was taken from, which it owns.
    unsafe {
        std::ptr::write_volatile(p, w[0]);
        std::ptr::write_volatile(p.add(1), w[1]);
        std::ptr::write_volatile(p.add(2), w[2]);
        out.assume_init()
    }
}

const _: () = assert!(std::mem::size_of::<Vec<u8>>() == 3 * std::mem::size_of::<usize>());
const _: () = assert!(std::mem::align_of::<Vec<u8>>() == std::mem::align_of::<usize>());

/// A thread-local array of objects and a length, nothing else: no guard,
/// no counts, no revocation, no panic check, no pool to find, objects
/// moved a word at a time (as tidepool moves them, so neither pays a
/// store-forwarding stall). What is left is the floor of any thread-local
/// LIFO cache: the object and the length go through memory from the put
/// to the next get. Not a usable pool (it holds at most 64 objects and
/// drops the rest); a measure of how close the pools come to it.
pub struct RawTls;

impl Subject for RawTls {
    type Owned = Plain;

    #[inline]
    fn round_trip(&self) {
        let done = RAW_FREE.try_with(|free| {
            let len = free.len.get();
            let mut v = if len == 0 {
                new_buf_cold()
            } else {
                free.len.set(len - 1);
                let w = free.items[len - 1].each_ref().map(Cell::get);
                // SAFETY: slots below `len` hold words that `vec_to_words`
                // took, and the shortened length hands them to us alone.
                unsafe { words_to_vec(w) }
            };
            touch(&mut v);
            let len = free.len.get();
            if len < RAW_SLOTS {
                for (slot, w) in free.items[len].iter().zip(vec_to_words(v)) {
                    slot.set(w);
                }
                free.len.set(len + 1);
            }
        });
        done.expect("thread-local free list used after its thread exited");
    }

    #[inline]
    fn take(&self) -> Plain {
        Plain(new_buf())
    }
}

/// One `parking_lot::Mutex<Vec<Vec<u8>>>` shared by every thread.
#[derive(Default)]
pub struct MutexVec(pub parking_lot::Mutex<Vec<Vec<u8>>>);

impl Subject for MutexVec {
    type Owned = Plain;

    #[inline]
    fn round_trip(&self) {
        let mut v = self.0.lock().pop().unwrap_or_else(new_buf);
        touch(&mut v);
        self.0.lock().push(v);
    }

    #[inline]
    fn take(&self) -> Plain {
        Plain(self.0.lock().pop().unwrap_or_else(new_buf))
    }

    #[inline]
    fn give_back(&self, owned: Plain) {
        self.0.lock().push(owned.0);
    }
}

/// No pool: allocate, touch, free.
///
/// glibc malloc serves a 4 KiB block from its per-thread cache (tcache) in
/// a few dozen instructions when the same size is freed and re-allocated
/// right away, so this is cheap in the single-thread round trip; it is no
/// measure of what a pool saves for objects that are expensive to create
/// (stacks, mapped buffers, connections), only a reference point.
pub struct NoPool;

impl Subject for NoPool {
    type Owned = Plain;

    #[inline]
    fn round_trip(&self) {
        let mut v = new_buf();
        touch(&mut v);
    }

    #[inline]
    fn take(&self) -> Plain {
        Plain(new_buf())
    }
}

// === peers ===

/// `object_pool::Pool` (a `parking_lot::Mutex<Vec<T>>` inside).
pub struct ObjectPool(pub Arc<object_pool::Pool<Vec<u8>>>);

impl ObjectPool {
    /// An empty pool; `pull` creates on a miss.
    pub fn new() -> Self {
        Self(Arc::new(object_pool::Pool::new(0, new_buf)))
    }
}

impl Default for ObjectPool {
    fn default() -> Self {
        Self::new()
    }
}

impl Subject for ObjectPool {
    type Owned = object_pool::ReusableOwned<Vec<u8>>;

    #[inline]
    fn round_trip(&self) {
        let mut g = self.0.pull(new_buf);
        touch(&mut g);
    }

    #[inline]
    fn take(&self) -> Self::Owned {
        self.0.pull_owned(new_buf)
    }
}

/// `lockfree_object_pool::LinearObjectPool` with a no-op reset (every
/// subject clears in [`touch`]).
pub struct LockfreeLinear(pub Arc<lockfree_object_pool::LinearObjectPool<Vec<u8>>>);

impl LockfreeLinear {
    /// An empty pool.
    pub fn new() -> Self {
        Self(Arc::new(lockfree_object_pool::LinearObjectPool::new(
            new_buf,
            |_: &mut Vec<u8>| {},
        )))
    }
}

impl Default for LockfreeLinear {
    fn default() -> Self {
        Self::new()
    }
}

impl Subject for LockfreeLinear {
    type Owned = lockfree_object_pool::LinearOwnedReusable<Vec<u8>>;

    #[inline]
    fn round_trip(&self) {
        let mut g = self.0.pull();
        touch(&mut g);
    }

    #[inline]
    fn take(&self) -> Self::Owned {
        self.0.pull_owned()
    }
}

/// The object for `sharded_slab::Pool`, which makes objects with `Default`
/// and resets them with `Clear`: a buffer of [`BUF_CAP`] cleared in place.
pub struct SlabBuf(pub Vec<u8>);

impl Default for SlabBuf {
    fn default() -> Self {
        Self(new_buf())
    }
}

impl sharded_slab::Clear for SlabBuf {
    fn clear(&mut self) {
        self.0.clear();
    }
}

impl Deref for SlabBuf {
    type Target = Vec<u8>;
    #[inline]
    fn deref(&self) -> &Vec<u8> {
        &self.0
    }
}

impl DerefMut for SlabBuf {
    #[inline]
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        &mut self.0
    }
}

/// An owned `sharded_slab` entry on its way to the consumer, which must
/// `clear` it by key to give it back (dropping the guard does not).
pub struct SlabOwned(pub sharded_slab::pool::OwnedRefMut<SlabBuf>);

impl Deref for SlabOwned {
    type Target = Vec<u8>;
    #[inline]
    fn deref(&self) -> &Vec<u8> {
        &self.0
    }
}

impl DerefMut for SlabOwned {
    #[inline]
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        &mut self.0
    }
}

/// `sharded_slab::Pool`: `create` + `clear(key)` is its round trip.
pub struct ShardedSlab(pub Arc<sharded_slab::Pool<SlabBuf>>);

impl ShardedSlab {
    /// An empty pool.
    pub fn new() -> Self {
        Self(Arc::new(sharded_slab::Pool::new()))
    }
}

impl Default for ShardedSlab {
    fn default() -> Self {
        Self::new()
    }
}

impl Subject for ShardedSlab {
    type Owned = SlabOwned;

    #[inline]
    fn round_trip(&self) {
        let mut g = self.0.create().expect("shard full");
        touch(&mut g);
        let key = g.key();
        drop(g);
        self.0.clear(key);
    }

    #[inline]
    fn take(&self) -> SlabOwned {
        SlabOwned(Arc::clone(&self.0).create_owned().expect("shard full"))
    }

    #[inline]
    fn give_back(&self, owned: SlabOwned) {
        let key = owned.0.key();
        drop(owned);
        self.0.clear(key);
    }
}

/// `opool`'s allocator for buffers (no reset: every subject clears in
/// [`touch`]).
pub struct OpoolBufs;

impl opool::PoolAllocator<Vec<u8>> for OpoolBufs {
    #[inline]
    fn allocate(&self) -> Vec<u8> {
        new_buf()
    }
}

/// `opool::Pool` (concurrent, a `crossbeam` `ArrayQueue` inside) holding up
/// to 1024 idle objects, tidepool's default `max_idle`.
pub struct Opool(pub Arc<opool::Pool<OpoolBufs, Vec<u8>>>);

impl Opool {
    /// An empty pool.
    pub fn new() -> Self {
        Self(Arc::new(opool::Pool::new(1024, OpoolBufs)))
    }
}

impl Default for Opool {
    fn default() -> Self {
        Self::new()
    }
}

impl Subject for Opool {
    type Owned = opool::RcGuard<OpoolBufs, Vec<u8>>;

    #[inline]
    fn round_trip(&self) {
        let mut g = self.0.get();
        touch(&mut g);
    }

    #[inline]
    fn take(&self) -> Self::Owned {
        Arc::clone(&self.0).get_rc()
    }
}

// === drivers ===

/// `threads` threads each do `iters` round trips on `subject` at once.
/// Returns the longest time any thread took between the common start (a
/// [`Barrier`]) and its last round trip: the wall time of the timed region.
/// Each thread warms up first, outside the timed region.
pub fn run_threads<S: Subject>(subject: &S, threads: usize, iters: u64) -> Duration {
    let start = Barrier::new(threads);
    thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    for _ in 0..WARM_UP_OPS {
                        subject.round_trip();
                    }
                    start.wait();
                    let t0 = Instant::now();
                    for _ in 0..iters {
                        subject.round_trip();
                    }
                    t0.elapsed()
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("worker panicked"))
            .max()
            .unwrap_or_default()
    })
}

/// A producer (the calling thread) takes `iters` objects, touches each and
/// sends it through a bounded channel of [`CHANNEL_CAP`]; a consumer thread
/// gives each back. Returns the time from the first take to the consumer's
/// last give-back. [`WARM_UP_OPS`] objects go through first, untimed.
pub fn run_forward<S: Subject>(subject: &S, iters: u64) -> Duration {
    let (tx, rx) = sync_channel::<Option<S::Owned>>(CHANNEL_CAP);
    let (ack_tx, ack_rx) = sync_channel::<()>(1);
    thread::scope(|scope| {
        let consumer = scope.spawn(move || {
            while let Ok(msg) = rx.recv() {
                match msg {
                    Some(owned) => subject.give_back(owned),
                    None => ack_tx.send(()).expect("producer gone"),
                }
            }
        });
        let send = |n: u64| {
            for _ in 0..n {
                let mut owned = subject.take();
                touch(&mut owned);
                tx.send(Some(owned)).expect("consumer gone");
            }
        };
        send(WARM_UP_OPS as u64);
        tx.send(None).expect("consumer gone");
        ack_rx.recv().expect("consumer gone");
        let t0 = Instant::now();
        send(iters);
        drop(tx);
        consumer.join().expect("consumer panicked");
        t0.elapsed()
    })
}

/// The C ABI's object pool, driven through its `extern "C"` functions as a
/// C caller would: `tidepool_obj_get` + `tidepool_obj_put` of an object in
/// this thread's cache (instruction budgets `c_obj_get_put`, unchecked,
/// and `c_obj_get_put_checked`, the default).
pub struct CObjects(*mut tidepool_ffi::tidepool_pool);

impl CObjects {
    /// A pool of 64-byte heap objects; `checked` is the default mode,
    /// otherwise `TIDEPOOL_OBJ_UNCHECKED`.
    pub fn new(checked: bool) -> Self {
        unsafe extern "C" fn create(
            _: *mut std::ffi::c_void,
            out: *mut *mut std::ffi::c_void,
        ) -> i32 {
            // SAFETY: `out` is the pool's valid out-pointer.
            unsafe { out.write(Box::into_raw(Box::new([0u8; 64])).cast()) };
            0
        }
        unsafe extern "C" fn destroy(_: *mut std::ffi::c_void, obj: *mut std::ffi::c_void) {
            // SAFETY: made by `create` above, destroyed once.
            drop(unsafe { Box::from_raw(obj.cast::<[u8; 64]>()) });
        }
        let mut config: tidepool_ffi::tidepool_config =
            // SAFETY: all-zero bytes are a valid config (every field is an
            // integer, a pointer or an optional function pointer).
            unsafe { std::mem::zeroed() };
        config.size = std::mem::size_of_val(&config);
        config.flags = tidepool_ffi::TIDEPOOL_NO_BACKGROUND
            | if checked {
                0
            } else {
                tidepool_ffi::TIDEPOOL_OBJ_UNCHECKED
            };
        config.create = Some(create);
        config.destroy = Some(destroy);
        let mut pool = std::ptr::null_mut();
        // SAFETY: a valid config and out-pointer.
        let status = unsafe { tidepool_ffi::tidepool_obj_pool_new(&config, &mut pool) };
        assert_eq!(status, tidepool_ffi::tidepool_status::TIDEPOOL_OK);
        Self(pool)
    }
}

// SAFETY: a C pool handle is safe to share between threads (the header's
// promise); this one is destroyed only by `Drop`.
unsafe impl Send for CObjects {}
// SAFETY: as above.
unsafe impl Sync for CObjects {}

impl GetDrop for CObjects {
    #[inline]
    fn get_drop(&self) {
        let mut obj = std::ptr::null_mut();
        // SAFETY: a live pool; `obj` is written by the get and put back once.
        unsafe {
            tidepool_ffi::tidepool_obj_get(self.0, 0, &mut obj);
            tidepool_ffi::tidepool_obj_put(self.0, black_box(obj));
        }
    }
}

impl Drop for CObjects {
    fn drop(&mut self) {
        // SAFETY: the pool is ours and nothing of it is out.
        unsafe { tidepool_ffi::tidepool_pool_destroy(self.0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exercise<S: Subject>(s: &S) {
        for _ in 0..100 {
            s.round_trip();
        }
        let owned = s.take();
        assert!(owned.capacity() >= BUF_CAP);
        s.give_back(owned);
        assert!(run_threads(s, 2, 1000) > Duration::ZERO);
        assert!(run_forward(s, 1000) > Duration::ZERO);
    }

    #[test]
    fn every_subject_round_trips_and_forwards() {
        exercise(&Tidepool::new());
        exercise(&TidepoolOwned(Tidepool::new()));
        exercise(&TlsVec);
        exercise(&RawTls);
        exercise(&MutexVec::default());
        exercise(&NoPool);
        exercise(&ObjectPool::new());
        exercise(&LockfreeLinear::new());
        exercise(&ShardedSlab::new());
        exercise(&Opool::new());
    }

    #[test]
    fn get_drop_subjects_reuse_one_object() {
        let core = Tidepool::new();
        let owned = TidepoolOwned(Tidepool::new());
        for _ in 0..1000 {
            core.get_drop();
            owned.get_drop();
        }
        for s in [core.0.stats(), owned.0 .0.stats()] {
            assert_eq!((s.created, s.live, s.hits), (1, 0, 999), "{s:?}");
        }
        #[cfg(target_os = "linux")]
        {
            let stacks = Stacks::new();
            for _ in 0..1000 {
                stacks.get_drop();
            }
            let s = stacks.0.stats();
            assert_eq!((s.mapped, s.pool.live, s.pool.hits), (1, 0, 1000), "{s:?}");
            let apart = StacksApart::default();
            let put = StacksPut::default();
            let put_apart = StacksPutApart::default();
            for _ in 0..1000 {
                apart.get_drop();
                put.get_drop();
                put_apart.get_drop();
            }
            for s in [apart.0 .0.stats(), put.0 .0.stats(), put_apart.0 .0.stats()] {
                assert_eq!((s.mapped, s.pool.live, s.pool.hits), (1, 0, 1000), "{s:?}");
            }
        }
    }

    #[test]
    fn raw_tls_reuses_one_buffer() {
        std::thread::spawn(|| {
            let top = || {
                RAW_FREE.with(|free| {
                    let len = free.len.get();
                    (len, (len > 0).then(|| free.items[len - 1][0].get()))
                })
            };
            RawTls.round_trip();
            let (len, first) = top();
            assert_eq!(len, 1);
            for _ in 0..100 {
                RawTls.round_trip();
            }
            // The same buffer every time: the list holds one object, at
            // the same address.
            assert_eq!(top(), (1, first));
            let v = RAW_FREE.with(|free| {
                free.len.set(0);
                // SAFETY: slot 0 held the only object, which `len = 0`
                // just handed to us.
                unsafe { words_to_vec(free.items[0].each_ref().map(Cell::get)) }
            });
            assert!(v.capacity() >= BUF_CAP && v == [1]);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn tidepool_reuses_in_a_round_trip_and_counts_stay_exact() {
        let t = Tidepool::new();
        for _ in 0..10_000 {
            t.round_trip();
        }
        let stats = t.0.stats();
        assert_eq!(stats.created, 1);
        assert_eq!(stats.live, 0);

        run_forward(&t, 10_000);
        let stats = t.0.stats();
        assert_eq!(stats.live, 0);
        // In flight at most: the channel, plus one object at each end, plus
        // the two thread caches (2 batches each) and the depot's slack.
        assert!(stats.created <= 2048, "{stats:?}");
    }
}
