//! How tidepool works.
//!
//! This module holds no code; it is a page of design notes next to the code
//! they describe. The source folders follow the same layers, and imports go
//! one way along them (each layer uses only the ones below it; a file may
//! also use its parent module, as `shared/pass.rs` uses `shared/mod.rs`).
//! Every file of the crate is named here, and the test
//! `tests/import_graph.rs` fails on any import circle:
//!
//! ```text
//!  lib.rs                           crate docs, the glossary, re-exports
//!  implementation.rs performance.rs docs-only pages: design, measurements
//!  pool.rs, guard.rs                the front door: Pool, its guards
//!  config.rs, error.rs, stats.rs    settings (one builder for every pool,
//!  manage.rs                        validated once), errors, figures; the
//!                                   Manage trait (make, reset, unmake)
//!  export.rs                        figures through `metrics` (feature)
//!  stack/                           StackPool: guarded stacks in slabs
//!    pool.rs builder.rs             its front door and its settings (on
//!                                   config.rs's builder)
//!    manager.rs slab.rs mapping.rs  carving stacks from slab mappings
//!    guard_mode.rs budget.rs        guard pages; the map-count budget
//!    registry.rs stats.rs error.rs  every stack pool; figures; errors
//!    corosensei.rs                  corosensei's Stack trait (feature)
//!  region/ (mod.rs, manager.rs)     reservations that grow in place
//!    │ (stack/ and region/ are managers: they plug into the layers below
//!    │  through Manage and use os/ for their mappings)
//!    ▼
//!  shared/                          one pool's shared state:
//!    mod.rs                         the get and put paths (a map at its top)
//!    at_limit.rs waiters.rs         what a get does at max_live; who waits
//!    places.rs                      max_live, counted in chunks
//!    destroy.rs teardown.rs         the one destroy path; the destroy queue
//!    pass.rs                        everything reclaim does to a pool
//!    lifetime.rs                    owned guards outliving the handle
//!    ├─► cache/                     thread caches:
//!    │     local.rs slot.rs         owner-only state; the slot protocol
//!    │     table.rs thread.rs       caches by thread id; ids, thread exit
//!    │     credit.rs words.rs       max_live credit; moving objects by word
//!    ├─► depot/ (mod.rs)            the shared, bounded store of batches
//!    ├─► reclaim/                   process-wide: clock.rs, the registry of
//!    │     ▲                        pools (registry.rs), the reclaimer thread
//!    │     │ feeds                  (scheduler.rs), fork.rs; never reaches
//!    │     │                        into a pool's depot or caches
//!    │   pressure/                  psi.rs, cgroup_v1.rs: sources that
//!    │                              feed reclaim
//!    ├─► callbacks.rs               every call into user code
//!    └─► signal.rs                  what pressure is (Level, Source)
//!  fence.rs                         the asymmetric fence pair (light on the
//!                                   owner's side, membarrier on the remote)
//!  os/                              the kernel: mod.rs (mmap, mprotect,
//!                                   madvise, mincore), event.rs (wake-up fd,
//!                                   poll), fork.rs (pthread_atfork),
//!                                   membarrier.rs, map_count.rs, thread.rs
//!                                   (spawning), file.rs (pressure files),
//!                                   fault.rs (fault injection),
//!                                   miri_shim.rs; imports only `sync`
//!  sync.rs                          atomics, cells, locks (loom under
//!                                   cfg(loom)); imports nothing
//!  probe.rs, tests/                 test-only: probe points, and the
//!                                   internal suites: loom_cache.rs
//!                                   loom_lifetime.rs loom_places.rs
//!                                   loom_teardown.rs loom_waiters.rs
//!                                   close.rs limit_races.rs bracket_alloc.rs
//!                                   scale.rs tick_close.rs
//! ```
//!
//! # Layers
//!
//! ```text
//!   thread A                 thread B                 thread C (exited)
//!  ┌──────────────────┐     ┌──────────────────┐
//!  │ loaded  [o o o ] │     │ loaded  [o     ] │     its batches went back
//!  │ spare   [o o o o]│     │ spare   [      ] │     to the depot at exit
//!  └───────┬──────────┘     └───────┬──────────┘
//!          │ whole batches, once per batch_size ops
//!          ▼                        ▼
//!  ┌──────────────────────────────────────────────┐
//!  │ depot (one lock)   [oooo][oooo][oo][oooo]    │  objects <= max_idle
//!  └──────────────────────┬───────────────────────┘
//!                         │ create when empty / destroy past max_idle,
//!                         ▼ always outside the lock
//!                  manager (mmap, connect, ...)
//! ```
//!
//! ## Thread cache (`cache/`)
//!
//! Each thread that uses a pool owns one *slot* in it: a pair of batches,
//! `loaded` and `spare` (Bonwick & Adams' magazines, 2001; FreeBSD UMA's
//! alloc and free buckets). A get pops from `loaded`, a put pushes onto it,
//! and the two swap when `loaded` runs empty or full. The thread visits the
//! depot only when both are empty (get) or both full (put), so it can always
//! do a whole batch of either between visits: there is no thrashing at a
//! batch boundary, which a single batch would suffer.
//!
//! Finding the slot: every thread gets a small id (recycled smallest first),
//! kept in a constant-initialised thread-local; a pool keeps pointers to its
//! slots in buckets of doubling size indexed by id (`SlotTable`; the first
//! 15 ids' pointers in the table itself), one pointer load away (two,
//! and a leading-zeros count, for higher ids), and allocates a slot when
//! its thread first takes a cache there. The same thread-local remembers the
//! slot it last found, with the id of its table (a process-wide counter,
//! never reused, so a match can only be that very table, whose slots never
//! move); the thread's exit forgets it with the id:
//!
//! ```text
//! HOT (thread-local) = { tid, table id, &slot }
//! local(table):  HOT.table == table.id  ?  HOT.slot          (2 loads, 1 compare)
//!                                       :  table.get(tid), then remember it
//! ```
//!
//! A hit is: two thread-local loads and a compare to find the slot, a plain
//! store of the owner's operation count into `entered` (the start of the
//! access bracket), a compiler fence, one load to check the slot is still
//! ours, a pop or push on `loaded`, and a single-writer bump of `gets` or
//! `returns` (the end of the bracket). No lock, no atomic
//! read-modify-write, no allocation.
//!
//! The put fast path is inlined into the guard's drop and works on the
//! guard's own field: `recycle` runs on the object in place, and the push
//! moves it from the guard straight into the batch. Every other case (a
//! panicking thread, a slot other than the remembered one or none yet,
//! waiters at `max_live`, `loaded` full, `recycle` refusing or panicking) is
//! a `#[cold]` function that takes the object from the guard itself, so the
//! inlined code never copies the object to the stack or builds a frame to
//! call out. The one call that returns, `std::thread::panicking()`'s out of
//! line half (taken only while some thread panics), is placed by where the
//! put ends up. A dropped owned guard's drop is too big to be inlined into
//! most callers, so it checks first, before `put_fast`, when nothing but
//! the guard is in registers: its frame then saves one register, not five
//! (`get_owned` + drop: 116 to 108 instructions). A scoped guard's put
//! (`Shared::put`) checks first too. A stack handle's drop, inlined into
//! its caller, leaves the check inside `put_fast` (after the remembered
//! slot is found), which is faster there: `put_fast::<PANICKING_CHECKED>`.
//!
//! The fast paths are kept small enough for the compiler to inline the
//! scoped guard's drop into its caller (LLVM's threshold is 250 at
//! `opt-level = 3`; the drop's cost was 420):
//!
//! * a get pops from `loaded` only and a put pushes onto `loaded` only; the
//!   swap with `spare`, once a batch, is in the cold path (`get_slow`,
//!   `push_local_or_slow`), which tries it before anything else;
//! * every case but the common one leaves the put through one cold call
//!   (`put_other_from`, told whether `recycle` already ran), not one
//!   each; `shared/put.rs` has the map of the whole path;
//! * the remembered slot is never null (a dangling placeholder), so
//!   finding it is one compare;
//! * the object goes into the batch through one `asm!` block of word moves
//!   on x86-64 (`words::move_to`), which the inliner counts as one
//!   statement where the volatile word moves were six.
//!
//! Inlined, the drop needs no frame, no call and no reload of the guard:
//! a get + put round trip with a touch of the object is 105 instructions,
//! harness included, and 3.7–4.1 ns against 4.3–4.9 out of line (2-vCPU
//! EPYC, criterion `round_trip/tidepool`; a bare thread-local `Vec`
//! pop/push, 68 instructions). `bin/budget.sh` fails if the drop stops
//! being inlined.
//!
//! Both moves of the object, batch → guard on a get and guard → batch on a
//! put, go a machine word at a time for objects of up to four words
//! (`cache/words.rs`). Left to LLVM, a 24-byte `Vec` was stored as 16 + 8
//! bytes and loaded back as 8 + 16 right after: a load that spans two
//! stores still in the store buffer waits for both to reach the cache.
//! That stall, twice per round trip, was most of its time (20.5 ns → 7.4 ns
//! on the 2-vCPU EPYC, `core_roundtrip time`, for about the same
//! instruction count).
//!
//! The rule behind both: a load must not be wider than the stores it
//! reads. Loads inside tidepool are a word at a time, so they forward from
//! any store; a value handed to the caller is copied by the caller's code,
//! 16 bytes at a time from its start once it is bigger than two words. A
//! lent stack's handle (`PooledStack`) is therefore two words, the stack's
//! start and its slab set, which the compiler moves as a pair of
//! registers; the pool it came from is found through the slab set
//! (`Slabs::pool`, recorded by the builder before any stack is lent, and
//! valid while the stack is counted out: see owned guards below). With the
//! pool in the handle, three words went through memory at every move:
//! stored a word at a time, the caller's first 16-byte copy waited for
//! them (about 20 % of the lab's `fio` adapter loop with 256-byte frames;
//! 9.0 ns per `StackPool::get` + drop); laid down as 16 + 8 bytes (one
//! SSE2 store), the stack's words went through vector registers and back
//! on every get and drop (5.1–5.2 ns, criterion `get_drop/stack`, against
//! 3.3 for the core's get + drop). Two words: 3.8 ns, level with the
//! core's in the same run, and 115 instructions per get and give back
//! with each half out of line, against 127 (budget `stack_get_put_apart`).
//! `StackPool::get` is always inlined: a caller that is itself out of
//! line (a trait object, as the lab's policies are) otherwise called it
//! and took the `Result` back through memory, 11 instructions more per
//! get + drop (budget `stack_get_drop_apart`).
//!
//! Nothing allocates, frees, takes a lock or calls user code inside an
//! access bracket: every batch that enters a cache gets its room for
//! `batch_size` objects beforehand, outside (a claim allocates both halves;
//! a refill reserves the depot's batch; a donation reserves the spare's
//! replacement), and batches replaced inside are unallocated. A test
//! allocator checks it (`src/tests/bracket_alloc.rs`).
//!
//! Memory reserved up front is bounded in bytes: each thread's cache
//! reserves `2 * batch_size * size_of::<Item>()` bytes per pool, at most
//! `MAX_CACHE_BYTES` (4 MiB). The default batch size shrinks for big items
//! to fit (a pool of 1 MiB values gets batches of 2), and a larger explicit
//! batch is refused at build (`batch_size`), except a batch of 1.
//!
//! Owner-only state (`LocalCache`) is its own type behind a `LocalSlot`
//! handle, which is `!Send` and made only after checking that the slot is
//! claimed by the calling thread. That check is sound because ids are unique
//! among live threads and a slot's previous owner stores `UNCLAIMED` (with
//! `Release`) before its id is freed.
//!
//! ## Depot (`depot/`)
//!
//! One list of batches behind one lock, oldest first, and one loose object
//! (the newest; see "Many pools per thread"). Refills take the newest
//! batch (hot objects, LIFO); trimming takes the oldest. The depot is the only
//! place where idle objects are bounded globally:
//!
//! ```text
//! depot objects <= max_idle
//! idle          <= max_idle + threads * 2 * batch_size
//! ```
//!
//! A donation that would pass `max_idle` is refused whole and the donor
//! destroys that batch after unlocking (QEMU 2024's global pool does the same,
//! with 128-object batches and a cap derived from `vm.max_map_count`;
//! `Builder::maps_per_object` derives tidepool's from it the same way,
//! through `os/map_count.rs`). `max_idle` is the depot's own atomic, changed
//! at run time under the depot lock (`Pool::set_max_idle`,
//! `adjust_max_idle`): a lowered cap hands the oldest batches above it to
//! the caller to destroy, and the adaptive batch keeps two batches within
//! it.
//!
//! ## Taking back a live thread's cache (`cache/slot.rs`)
//!
//! A thread that stops using a pool but lives on would keep its two batches
//! forever, and critical memory pressure wants every idle object now. So
//! another thread (the reclaimer, a pressure response, `drain`) may take a
//! cache from its live owner. A slot is in one of five states:
//!
//! ```text
//! UNCLAIMED ──claim──► ACTIVE ──revoke──► REVOKING ──owner idle──► REVOKED
//!                        ▲                    │ owner busy             │
//!                        │                    ▼                        │
//!                        └──── claim ───── FLUSH ◄─── (re-)claim ──────┘
//! ```
//!
//! The owner brackets each cache access: on entry it stores its operation
//! count (`gets + returns`) into `entered`, runs a compiler fence and checks
//! the state; the access ends with the counter bump. So the owner is inside
//! an access exactly when `entered == gets + returns`:
//!
//! ```text
//! inside(owner)  ⇔  entered == gets + returns     (entered = OUTSIDE otherwise)
//! ```
//!
//! The revoker stores `REVOKING`, runs one `membarrier(2)` for all the slots
//! it revokes, then reads `entered` and the counters. The barrier forces, on
//! every running thread, the full fence the owner skipped, so either the
//! owner sees `REVOKING` and keeps off, or the revoker sees the owner inside
//! and leaves a `FLUSH` request for the owner's next access instead of
//! touching the cache (folly's asymmetric fences; the loom models replace
//! the pair with two `SeqCst` fences and fail if the owner's is dropped).
//! Without `membarrier` (non-Linux, seccomp), revokers only leave flush
//! requests. One revoker waits instead: a `get` at `max_live` (below), which
//! spins (yielding) until the owner's access ends and then takes the cache
//! (`IfBusy::WaitOut`). An access is straight-line code with no lock,
//! call-out or allocation, and any access the owner starts after the
//! barrier backs out, so the wait ends when the owner next runs.
//!
//! ## Reclaim and pressure (`reclaim/`, `pressure/`)
//!
//! The depot keeps the low-water marks of its idle count over the current
//! reclaim interval and the fifteen before it. At each boundary (run lazily
//! by the first thread to visit the depot after it, or by the process-wide
//! reclaimer thread for pools nobody touches) it purges what sat unused
//! through the last interval and destroys what sat unused through the last
//! `window` (two, kmem's), never below `min_idle`; thread caches untouched
//! for a whole interval are taken back, as the depot's oldest objects and
//! counted in the last two marks (their objects sat unused through that
//! interval in the cache), so that a two-interval window destroys at the
//! next boundary what still nobody needs:
//!
//! ```text
//! lw[1] += n, lw_cur += n          a quiet cache's n objects enter the depot
//! destroy at a boundary:  min(lw_cur, lw[1], …, lw[window − 1]) oldest
//!                         objects (≥ min_idle kept)
//! ```
//!
//! A burst handed back into four threads' caches is so gone three passes
//! after its last use; counted from their arrival in the depot instead, it
//! would take four to five.
//!
//! The window lengthens when reclaim is undone: a pass that finds objects
//! created `d` intervals after a boundary that destroyed objects under a
//! window of `w` intervals learns that those objects were needed again
//! `w + d` intervals after their last use, and makes the window that long
//! (at most 16; Linux's workingset code measures the same refault distance
//! for pages), and at least doubles it: a load of several flows, each
//! with its own period, cycles longer than one distance shows. Each
//! reclaim teaches the window once: creates after that (a pool still
//! growing) do not lengthen it further. A load whose need recurs every third interval then loses
//! its peak once and keeps it from then on (at the cost of one reclaim
//! and create each time the window shrinks to test whether it still must), and so does the depot's level
//! when objects flow from one thread to another slower than a batch an
//! interval (it swings by a batch every few intervals). After 64 intervals
//! in which no reclaim was undone the window shrinks by one, back towards
//! two (`shared/pass.rs`, `adapt_window`):
//!
//! ```text
//! created in the intervals just ended, d ≤ 16 after a destroying boundary
//!   with window w:   window = min(max(w + d, 2 · window), 16)   (once per boundary)
//! 64 intervals without:  window = max(window − 1, 2)
//! ```
//!
//! A lengthened window keeps objects for a load's next need; a pool that
//! nobody uses any more has none. So a pass also notes whether anything
//! used the pool since the last one (a cache's gets or returns, the
//! depot's lone counts, the slot-less creates and adoptions, the objects
//! handed to and from waiters: any of them moved), and the longest pause,
//! shorter than 16 intervals, that the pool came back from. A pool quiet
//! through more whole intervals than that pause, and through at least
//! two, ticks with the window of two whatever its window grew to: its
//! idle objects go down to `min_idle` two quiet intervals after its last
//! use, as a fresh pool's do (thousands of pools whose windows the depot's
//! swings lengthened, left by threads that exited, would otherwise keep
//! their objects up to 16 intervals). A pool that comes back after such a
//! pause learns it, and the objects it makes again lengthen its window
//! with the whole pause as their distance; a pause of 16 intervals or more
//! is not learnt (no window keeps objects that long), and the pause learnt
//! shortens by one every 64 intervals of use, as the window does
//! (`tick_window`):
//!
//! ```text
//! used in the intervals just ended:  pause = quiet + intervals − 1;  quiet = 0
//!                                     longest = pause if longest < pause < 16
//!                                     (64 intervals of use without:  longest −= 1)
//! quiet otherwise:  quiet += intervals;  window of the tick = 2 if quiet > longest and quiet ≥ 2
//! ```
//!
//! A busy cache can hold objects its thread does not need: a refill brings
//! a whole batch for a thread a few objects short, and with room for two
//! batches the thread keeps the rest while another creates its own (the
//! lab's `fio`, once its batch grew, held stacks beyond those in flight
//! that no pass looked at). So the owner counts, per period (from one
//! pass's request to the next pass's read), the objects at the bottom of
//! its cache that nothing touched: gets take from the top and lower the
//! count to what is left; donations and trims take from the bottom, and
//! lower it by what they took (`cache/slot.rs` states it as an equation).
//! A get costs a load and a compare (a store only at a new low); a put
//! costs nothing. The pass asks a busy cache to trim what sat untouched
//! through this period and the last:
//!
//! ```text
//! unused(period) = max(0, min over the period (len + removed) − removed)
//! trim(cache)    = min(unused(last) − trimmed(last) − removed(this), unused(this))
//! ```
//!
//! The owner clamps a request as it serves it, to its unused count then
//! and less what it removed since the pass read its counts: a race makes
//! a trim smaller, never larger.
//!
//! So a cache that turns over (a consumer that only gives back, donating
//! batches as its puts fill them) reads as holding nothing unused, however
//! full it is. A cache that only gave back through the whole interval is
//! taken back by the pass instead, as a quiet one is, but its objects go
//! into the depot as new ones, not idle: they were moving from the threads
//! that give back to those that take, and the depot is where the takers
//! find them at once.
//!
//! The request is a state (`ACTIVE → TRIM`), never a touch of the cache: the
//! owner's next access fails its state check, and its slow path begins a
//! new period and gives its `trim` oldest objects (the bottoms of its
//! batches) to the depot, where they are idle objects like any other,
//! counted from their arrival. A cache that empties in one of every two
//! intervals is never trimmed; a trim request overtaken by a take-back (the
//! owner went quiet) goes with the cache. The reclaim of trimmed objects
//! does not halve the batch (as idle objects unused through the window
//! otherwise do): that would bring back the depot traffic that had grown
//! it, the growth the hoard, and the trim the next reclaim, a cycle of
//! creates and destroys.
//!
//! Memory pressure (PSI triggers, cgroup v1 notifications,
//! `pressure::notify`) reaches pools through the reclaimer thread: `Medium`
//! reclaims to the working set now and purges what the depot keeps (thread
//! caches untouched), `Critical` drains to `min_idle`, caches included, and
//! holds the depot's cap at `min_idle` for `pressure_hold` when one is set,
//! or by default only when the pressure persists:
//!
//! ```text
//! hold(signal at t) = pressure_hold                      if set explicitly
//!                   = interval · 2/15                    if t − last_critical < interval
//!                   = 0                                  otherwise (a single signal)
//! ```
//!
//! Why: a hold frees no memory the drain did not already free, and makes
//! every batch beyond `min_idle` a destroy and every refill a create (the
//! lab's `fio-pressure`: 5x the creates for a one-off signal). The caches'
//! batches a drain takes are destroyed without passing through the depot
//! (their owners would refill from it meanwhile), and a cache busy at the
//! signal (asked to flush) is destroyed when its owner serves the request
//! within the interval, while the depot holds `min_idle`:
//!
//! ```text
//! after Critical at t:  idle ≤ min_idle + objects returned since t
//! ```
//!
//! See the
//! [`pressure`](crate::pressure) module docs for the measurements. See the
//! [`reclaim`](crate::reclaim) and [`pressure`](crate::pressure) module
//! docs.
//!
//! The reclaimer sleeps until the earliest deadline of all its pools:
//!
//! ```text
//! sleep until  min { next_pass(p), hold_until(p) : p registered, armed(p) }
//! armed(p)     ⇔  p holds more than min_idle objects, or a hold is on
//! ```
//!
//! A pool that becomes armed (registers, creates an object, is put under a
//! hold) wakes it for a new round, so a short interval is never stuck behind
//! a long one. The `armed` flag and the pool's object count are written and
//! read across a `SeqCst` fence on each side (`shared/pass.rs`), so a new
//! object is either seen by the reclaimer's round or wakes it.
//!
//! The reclaimer is supervised: nothing a pool does can kill it (see
//! *Panics*), and every registration, `notify`, object creation and
//! operation on a background pool other than a cache hit starts a new one if
//! it is missing ([`reclaim::status`](crate::reclaim::status) tells).
//!
//! ### Purge ticks (`purge_delay`)
//!
//! A pool with a purge delay also ticks at that cadence between boundaries
//! (`shared/pass.rs`, `purge_tick`; the same lazy visits and reclaimer
//! thread run it). The depot keeps one more low-water mark, `lw_purge`,
//! since the last tick; a tick purges the oldest `lw_purge − purged`
//! unpurged objects and resets it, and first takes back every thread cache
//! untouched since the last tick, as idle objects (counted in `lw_purge`),
//! so pages held anywhere go back between one and two delays after their
//! last use. A tick destroys nothing: which objects go is still the
//! boundary's working-set decision.
//!
//! ```text
//! purge at a tick:  oldest unpurged of the oldest min(lw_purge, objects)
//! lw_purge = objects + in_purge after it; lowered by every take
//! ```
//!
//! ## Batched teardown: the destroy queue (`shared/teardown.rs`)
//!
//! Teardowns the pool decides (reclaim and pressure on the reclaimer
//! thread or in a lazy pass, a donation past the depot's cap, `drain`, a
//! thread's exit, the pool's drop) are queued per pool, as whole batches,
//! and run in chunks (`teardown_chunk` objects) outside every lock by at
//! most `min(ncpus, teardown_threads)` threads, each chunk in one
//! `destroy_batch` call, all its batches together (one `munmap` per slab
//! of stacks, also for a slab whose stacks were queued in two batches:
//! a thread cache's batches need not line up with slabs). A thread that
//! finds every permit taken leaves its work queued and goes on (DragonFly
//! 2017: at most `ncpus` tear down at once). `drain` and the pool's drop
//! run at most one chunk; a thread's exit runs chunks as long as it holds
//! a permit, never waiting for one, so a mass exit tears down on `ncpus`
//! threads, not on the reclaimer alone; work left behind wakes the
//! reclaimer, which finishes it (a dropped pool's rest goes to it with the
//! manager, dropped after its last destroy), and every `get`/`put` slow
//! path runs a chunk too. `drain_blocking` (its own objects under a permit,
//! then the queue) and a `get` at `max_live` run the queue to empty first:
//! the only threads that wait for a permit. They wait in a FIFO line, each
//! asleep on its own condition variable; a permit given back goes to the
//! first in line, waking that thread only (no spinning, no wake-up storm,
//! served in order). A `get` at `max_live` that finds the queue empty while
//! other runners still destroy the objects holding its places sleeps until
//! a chunk is done. A `destroy_batch` that reaches its own pool's teardown
//! again (its thread holds a permit) never waits for a permit or for
//! progress: it destroys what it took on the permit it holds and leaves the
//! queue to the run it is inside of. Operations that return how many objects they destroyed
//! (`reclaim_unused`, `reclaim`, `pressure` called by the user) destroy on the
//! caller's thread. Refills with a `burst` make a batch with one
//! `create_batch`.
//!
//! ```text
//! queued     == objects in the queue's batches
//! destroying == queued + objects taken by runners, not yet destroyed
//! running    <= min(ncpus, teardown_threads)
//! waiters    == threads in the line;  served in ticket order
//! pusher: queued += n, then try a permit   (either it runs its own work
//! runner: give the permit back, then        or the runner sees it)
//!         read queued (an RMW)
//! waiter: waiters += 1, then try a permit  (either it gets the permit
//! runner: give the permit back, then        or the runner hands it on)
//!         read waiters (an RMW)             loom_teardown.rs checks all
//! ```
//!
//! ## Regions (`region/`)
//!
//! A [`Region`](crate::region::Region) is one `PROT_NONE` reservation whose
//! read-write prefix grows and shrinks in place (`mprotect`; shrinking
//! releases the pages first): the mapping behind a wasm linear memory. Its
//! manager's `recycle` resets it for the next owner without unmapping:
//! the prefix's resident pages, found with `mincore`, are cleared in place
//! up to `keep_resident`, the rest released and closed, so a reused
//! memory's first touches fault nothing in. Linux and Android only, where
//! released private pages read back as zeros.
//!
//! `mincore` is a system call that also takes and frees a kernel page, so
//! it costs more than clearing a few pages. So the manager asks
//! in one reset in 32 (`ZeroDepth`, as stacks do, counted from the
//! region's bottom) and records how deep the resident pages reach; the
//! other resets clear that many pages with `memset` and release the rest
//! of the kept part in one `madvise` (`Region::reset_planned`). Where the
//! last exact reset found the pages in RAM filling less than half of the
//! recorded depth, clearing that deep would write more than asking costs,
//! and every reset asks until they fill it again. (`Region::reset`, for a
//! region outside a pool, asks, or clears a kept part of at most 16 pages
//! whole.)
//!
//! ```text
//! after a reset:  accessible <= keep_resident, every accessible byte 0,
//!                 resident <= pages the last owner touched below keep_resident
//!                            (an exact reset), or
//!                 resident == min(depth, kept) pages from the bottom
//!                            (a planned one; the sparse check aims at
//!                            depth <= 2 × pages found in RAM, a heuristic)
//! ```
//!
//! A region's drop releases its accessible part `DEFAULT_RELEASE_STEP`
//! bytes at a time before its `munmap`, for the same reason as a slab's.
//!
//! ## Stacks in slabs (`stack/slab.rs`)
//!
//! A stack pool's manager carves its stacks from slabs: one `mmap`
//! reserves `k` slots (`k <= 32`, `k * slot <= 8 MiB`, `k <=` what
//! `max_live` leaves); a slot is opened with one call the first time it is
//! used; the slab is unmapped with one `munmap` when its last stack is
//! destroyed. How a slot is opened is the [`GuardMode`](crate::stack::GuardMode),
//! per slab:
//!
//! * markers (Linux 6.13+, the default there): the slab is mapped
//!   writable (`MAP_NORESERVE`) and opening a slot turns its guard page
//!   into a page-table marker (`madvise(MADV_GUARD_INSTALL)`). The slab
//!   stays one VMA: nothing splits it, its `munmap` removes one area. A
//!   refused marker (`EINVAL`: an older kernel, `mlockall`) is made
//!   `PROT_NONE` instead (`split`), and the set's later slabs are mapped
//!   the other way.
//! * `PROT_NONE` guards: the slab is mapped `PROT_NONE` and a slot's
//!   stack is opened with `mprotect`, top slot first.
//!
//! ```text
//!  base                                                        base + k * stride
//!  │ guard │ stack │ guard │ stack │ ... │ guard │ stack │ guard │ stack │
//!  markers:   one VMA, rw; each opened slot's guard a marker in the page tables
//!  PROT_NONE: └─── raw (one VMA) ────────┘└── open: 2 VMAs per slot ─────┘
//!      slot i: [base + i * stride, base + (i + 1) * stride), guard first
//! ```
//!
//! Per slab, under the manager's lock, one bit per slot in each mask:
//!
//! ```text
//! raw    free, never opened          ready  free, opened, pages released
//! opened usable part writable
//! used   == all & !raw & !ready      (held by exactly one GuardedStack)
//! raw & ready == 0,  raw & opened == 0,  ready ⊆ opened
//! used != 0 for every slab in the set; a slab is removed from the set,
//! then unmapped, by the one thread that saw `used` become 0
//! split ⊆ opened                     (markers slabs only)
//! VMAs(slab) == runs of equal protection over guard 0, stack 0, ...:
//!   PROT_NONE slab: 1 + 2 * |opened| - [top slot opened]
//!   markers slab:   1, plus the splits of `split` guards
//! ```
//!
//! The map-count budget counts what is real per mode: `max_live` defaults
//! to `(vm.max_map_count - 5000) / v`, `v` = 2 VMAs per stack with
//! `PROT_NONE` guards, 1 with markers (a slab is one VMA and holds at least
//! one stack: the worst case). `MADV_DONTNEED` (purges, freed slots) keeps
//! markers, and `fork` copies them with the page tables (tested in
//! `tests/stack_guard.rs`, both modes).
//!
//! Claims and frees change the masks under the lock; the system calls run
//! outside it while the slots concerned are `used`, so nobody else can hand
//! them out or unmap their slab meanwhile (the slab's `mmap` alone runs
//! under the lock, so two threads cannot both pass the budget). A freed
//! slot's pages are released (`madvise`, one call per run of adjacent
//! stacks) before it becomes `ready`, so a destroy gives memory back even
//! while the slab lives on, and reuse of a `ready` slot costs no syscall.
//! A slab that loses its last stacks has their pages released the same
//! way before its `munmap`, so that the `munmap`, which holds the
//! address-space lock for write, frees no page (the stack module's
//! "Teardown and the rest of the process"):
//!
//! ```text
//! every release call covers <= release_step bytes      (release_step > 0)
//! a slab is unmapped only after every slot that was `used` when it left
//!   the set had its usable part released                (release_step > 0)
//! release_step == 0: one munmap per slab, pages and all
//! ```
//! Every stack holds an `Arc` of its slab set, so the set outlives the pool
//! while detached stacks live.
//!
//! Zeroing a stack for its next user (`GuardedStack::zero`, wasmtime's
//! `async_stack_zeroing`) keeps the pages its users touch in the top
//! `keep_resident` bytes and releases the rest. Which pages were touched
//! is asked of the kernel once in `EXACT_EVERY` (32) zeroings of the set's
//! stacks (`stack/zero_depth.rs`); those record the deepest touched page,
//! and the others clear that many pages from the top with `memset` and
//! release everything below in one `madvise`, no `mincore`:
//!
//! ```text
//! after a zeroing:  every usable byte 0
//! depth d:          0 before the first exact zeroing; then the most pages
//!                   from the top any exact one found in RAM (only grows)
//! exact (n % 32 == 0):  resident pages of the kept top cleared, others released
//! otherwise:            top min(d, keep) pages cleared, the rest released, 1 call
//! ```
//!
//! # Limits (`shared/at_limit.rs`)
//!
//! `max_live` bounds the objects in existence (live or idle). A `get` that
//! finds both its batches and the depot empty creates; if that would pass
//! `max_live`, it recycles before it fails:
//!
//! ```text
//!  1. depot         donated since we looked?                 take a batch
//!  2. other caches  revoke one owned slot at a time (after    its batches go
//!                   our own id, wrapping), stop at the first  to the depot,
//!                   with objects                              then take one
//!  3. destroys      `flush_pending_destroys` (destroy.rs)     create again
//!  4. Exhausted     at most ROUNDS (4) rounds per get
//! ```
//!
//! Zero false `Exhausted`: a `get` fails only when no idle object is left
//! anywhere it can reach (`tests/limits.rs`). Stealing uses the revocation
//! protocol above and waits out an owner inside an access (it may be
//! caching the very object wanted); where the OS has no process-wide
//! barrier the owner is only asked to flush and the `get` may still fail.
//!
//! Waiting (`shared/waiters.rs`): `get_timeout` threads and `get_async`
//! tasks queue in one FIFO, each with its way to be woken (a condvar, a
//! `Waker`). While anyone waits, a put hands its object to the oldest
//! waiter, and a destroy or detach hands it the freed place; one hand-off,
//! one wake (a task's waker is called after the queue lock is dropped).
//!
//! ```text
//! waiting == queued, not yet served   (Stats::waiting)
//! every hand-off is in exactly one of: served-and-unclaimed (picked up
//!   by its waiter's wake or poll) | passed on by a waiter that left
//!   (timed out, future dropped): to the next waiter, else the depot
//! ```
//!
//! A waiter looks for an idle object (or a free place) once, as it
//! queues (first in line; behind others every put serves the line first).
//! Every object that becomes idle, and every place freed, after a waiter's
//! look must therefore meet a look at the queue after it is placed, or be
//! found by the look:
//!
//! ```text
//! put, fast or slow    waiters? after recycle, and again in put_slow after
//!                      (re-)claiming the cache (a look may have revoked it)
//! cached during look   the look waits the owner's access out and takes it
//! refill in hand       the look takes the owner's cache, empty as it is:
//!   (depot batch, burst)  the install is refused and the refill goes to
//!                      the depot, which serves the waiters
//! shelved in depot     waiters served from the depot after the object lands
//!   (passed on, prefill: Shared::shelve; slot-less put: shelve_lone)
//! back from a purge    waiters served from the depot after restore_purged
//! a place freed        released to the count, then taken back for a waiter
//!                      that queued since the releaser's look (release_place)
//! credits recalled     the same, after they are back in the count
//!                      (Shared::places_freed)
//! ```
//!
//! Where the object or place is made available by atomics alone (no lock
//! shared with the waiter's look), the second look follows a `SeqCst`
//! fence (`Head::waiters_after_freeing`) that pairs with one the waiter
//! runs between queueing and looking: either the look finds it or the
//! freer sees the waiter. Only `max_live` makes a get wait (`Exhausted`
//! comes from the limit alone), so a pool without it skips the fence and
//! the look (`Head::limited`: `!limited ⇒ no waiter ever`). A revoker
//! waits out only owners that claimed
//! their slot since the last fork (`cache::thread::fork_generation`).
//!
//! `src/tests/limit_races.rs` forces each of these interleavings (a test
//! hook holds a thread at the point) and fails without its rule. The model
//! `src/tests/loom_waiters.rs` races a future's cancel against a hand-off;
//! `tests/get_async.rs` stresses it with threads.
//!
//! # Batch size
//!
//! The batch size is per pool and adapts (`Head::batch`, changed only under
//! the reclaim lock in `shared/pass.rs`, `adapt_batch`), as the kmem magazine
//! layer resizes its magazines. It looks at traffic windows: each ends at a
//! reclaim pass, or early, after `WINDOW_EXCHANGES` (64) depot exchanges by
//! `get` and `put`, so heavy traffic grows the batch within milliseconds
//! rather than one interval per doubling:
//!
//! ```text
//! share = objects get and put moved through the depot / cache ops  (over the window)
//! two_way = sum over caches of min(gets, returns) * 4 >= cache ops
//! fast = the window saw >= 32 exchanges, and
//!        4 * batch <= objects the flow moved in ONE_WAY_HOLD (10 ms)
//!        (a one-way flow: moved through the depot / 2, over the window's time)
//! most = min(max_batch, max_live / (4 * threads using the pool))  (max_live set,
//!                                                     batch not fixed)
//! batch > most  ->  batch = max(most, burst)
//! share > 1/8 and (two_way or fast)  ->  batch = min(2 * batch, most)
//!                             (not in the window right after a doubling)
//! idle objects unused through the window  ->  batch = max(batch / 2, batch_size)
//! a get at max_live took another thread's cache  ->  batch = max(batch / 2, burst)
//! burst <= batch <= max_batch
//! ```
//!
//! Under `max_live` the caches must leave room for the threads that take:
//! a consumer that only gives back holds up to two batches, and if those
//! could hold every object the limit allows, every refill of its producer
//! would have to take the consumer's cache (a process-wide barrier each).
//! So a default batch starts at no more than an eighth of `max_live` (but
//! holds a `burst`),
//! never grows past what keeps all caches within half of it, and halves
//! whenever a `get` at the limit still has to take a cache: stealing is
//! the rare fallback. A batch set with `Builder::batch_size` is fixed.
//!
//! A one-way flow (gets on some threads, puts on others: requests completed
//! on an I/O thread) sends every batch through the depot whatever its size,
//! and every object a consumer's cache holds is one a producer must create,
//! so it grows the batch only while a cache of two doubled batches is what
//! the flow moves in 10 ms or less. At such rates bigger batches halve the
//! depot visits and let an object rest longer before it is handed out on
//! another core; a trickle keeps its batch. The rate is on the pool's
//! `Clock` (the monotonic clock unless a test injects one; read before the
//! reclaim lock is taken, at the end of the `get` or `put` that ends the
//! window), not in reclaim intervals: traffic is a matter of rate.
//!
//! A cache fills a batch up to `min(batch, capacity)`, so a grown size never
//! makes `push` allocate: batches get room for the new size at their next
//! depot visit, outside the access bracket.
//!
//! # Accounting
//!
//! Counts that change on every operation (`gets`, `returns`) and on every
//! create or destroy (`created`, `destroyed`) are per slot, written only by
//! the slot's owner with a plain load and store, and summed by `stats()`;
//! threads without a slot in the pool (exiting ones, the reclaimer) count in
//! shared atomics. The rare counts (`detached`, `discarded`, waiters' gets)
//! are shared atomics on their own cache lines (FreeBSD's lesson: a hot
//! shared counter written on every allocation costs more than the
//! allocation). Every create is a miss, and so is every `try_get` that found
//! nothing (`empty_gets`): `misses == created - adopted + empty_gets` with
//! bursts of one. An adopted object (`Pool::adopt`, made outside the pool)
//! counts as a create and a get, but no miss. The invariants, exact when no
//! thread is inside the pool:
//!
//! ```text
//! existing == created - destroyed - detached
//! live     == gets - returns - discarded - detached
//! live + idle + destroying == existing       (destroying: in the destroy queue
//!                                             or being destroyed)
//! ```
//!
//! ## `max_live`: places lent in chunks (`shared/places.rs`)
//!
//! The limit is a budget of places, exact at every instant:
//!
//! ```text
//! reserved == existing + sum(slot credits) + places in flight  <= max_live
//! ```
//!
//! `reserved` grows only by a compare-and-swap that keeps it within the
//! limit, so the limit is never passed, not even transiently. A thread takes
//! a chunk of places (`max_live / 64`, at most a batch) and keeps the unused
//! ones as credits in its slot (`cache/credit.rs`); its creates spend them
//! and its destroys give them back (up to two chunks), so steady churn
//! touches only the slot's own cache line. Within `4 * chunk` places of the
//! limit places move one at a time; a reservation that finds `reserved` full
//! recalls every slot's credits (three rounds, yielding between) before it
//! says no; `reclaim_unused`, `drain` and thread exit give credits back too. The loom
//! model `src/tests/loom_places.rs` checks the hand-off.
//!
//! ```text
//! limit_folds == read-modify-writes of reserved  (Stats::limit_folds)
//!             <= creates / (chunk - 1) + destroys past two chunks + recalls
//!                + places moved one at a time near the limit
//! ```
//!
//! The count sits on `reserved`'s own padded line and is bumped right after
//! it, while the line is held: counting adds no cross-thread traffic. A get
//! or put served by the thread's cache writes no shared line at all (the
//! lab's `limit-churn` counts 0.00004 shared writes per get for tidepool,
//! 4.25 for FreeBSD's 2023 vnode code, 6.25 before it).

//! Accounting is by pool, never by thread: an object taken on one thread and
//! dropped on another is counted once out and once back, whichever threads
//! those are. (QEMU's 2021 resizing pool kept per-thread counts of live
//! coroutines; coroutines created on one thread and freed on another drove
//! them out of sync, and the patch was dropped.)
//!
//! # Lifetimes: thread exit and pool drop
//!
//! A pool is an `Arc` of its shared state. The first time a thread uses a
//! pool it registers a `Weak` reference to it in a thread-local guard. When
//! the thread exits, the guard:
//!
//! 1. clears the thread's id, so later calls from other TLS destructors take
//!    the slot-less path (single objects straight to or from the depot);
//! 2. for each pool still alive (`Weak::upgrade`), moves the thread's batches
//!    to the depot (destroying what passes `max_idle`) and marks the slot
//!    `UNCLAIMED`;
//! 3. frees the id.
//!
//! When the pool drops, it destroys the depot and *every* slot's batches,
//! including those of threads that are still alive. Both never happen at
//! once for the same slot: while an exiting thread flushes, it holds a strong
//! reference, so the drop waits for it (and then runs on that thread); once
//! the pool is gone, the exiting thread's `upgrade` fails and it touches
//! nothing. `Pool::close` (what the C API's destroy uses) drains the pool,
//! then waits for such a reference to go before dropping its own, so the
//! drop and every destroy run on the caller and are over when it returns. The reclaimer thread reaches a pool through the registry
//! (`reclaim/registry.rs`): it upgrades the pool's `Weak` and marks it busy
//! under the registry lock, then runs the pool's tick without the lock. The
//! pool's drop forgets the `Weak` under the lock and waits for a busy mark
//! of another thread to clear, so the reclaimer never holds the last
//! reference of a pool dropped elsewhere. The drop counts itself as
//! waiting (`Registry::closing`) and a tick's end wakes waiters only when
//! there are some: a wake-up is a system call, and a round ends a tick per
//! pool due. A tick's own callback may drop its
//! pool (the drop does not wait for its own thread; the pool then finishes
//! dropping on the reclaimer thread, right after the tick) or build a new
//! one (registration takes the registry lock, which the tick does not
//! hold). No other thread can be in the
//! middle of a `get` or `put` when the shared state drops: a borrowed guard
//! borrows the pool handle, and owned guards keep the state alive past the
//! handle (next section). So every object is destroyed exactly once, and by
//! the time the last of {`drop(pool)`, the owned guards} returns (unless a
//! thread is exiting at that very moment).
//!
//! ## Many pools per thread
//!
//! A process may hold thousands of pools, and a thread may move among them.
//! Three costs would otherwise grow with the number of pools:
//!
//! * **The thread's list of pools** (the `Weak`s its exit visits,
//!   `cache/thread.rs`). A slot remembers that its thread already listed its
//!   pool (`watched`), so a cache re-claimed after the reclaimer took it back
//!   never touches the list. Dropped pools are swept from the list when it has
//!   doubled since the last sweep: O(1) amortized per cache, and at most
//!   `2 × live + 16` entries however many pools come and go.
//! * **Per-thread caches the thread never comes back to in time.** A thread
//!   keeps at most `MAX_CACHES` caches across all pools; in the others it
//!   gets and puts through the depot (one lock, the slot-less path, which
//!   allocates no slot). Once it has been refused `64 × MAX_CACHES` caches
//!   (`REFUSALS_PER_SWEEP`; `8 × MAX_CACHES` after the list first fills,
//!   `REFUSALS_AT_FILL`, as it may hold pools dropped while it grew), it
//!   asks each listed pool whether its cache is still claimed and gives up
//!   those the reclaimer took back for sitting idle (and forgets dropped
//!   pools), so the caches go to the pools it keeps using. The refusals in
//!   between never reach the list: the thread counts them down in its hot
//!   thread-local (`refuse_cheaply`, armed when the list fills and after
//!   each sweep that leaves it full), and remembers the table in which it
//!   last found no slot of its own (`absent`; only a thread allocates its
//!   own slots, and it forgets this when it does), so the put after a
//!   slot-less get looks nothing up again. The get does not look either:
//!   the head's first line holds `slotted`, one bit per thread id below 64,
//!   set by that thread when it allocates its slot and never cleared, so a
//!   thread whose bit is clear knows it has no cache there from the line
//!   it reads anyway (`thread::surely_slotless`). The get and put that
//!   know it go straight to the depot (`get_slow`'s first test,
//!   `put_absent`), in frames that hold nothing of the refill or the
//!   claim:
//!
//!   ```text
//!   cached(thread) = |list(thread)| <= MAX_CACHES
//!   sweep work <= MAX_CACHES per 64 × MAX_CACHES refusals
//!   refusals_left(thread) > 0  ⇒  |list(thread)| == MAX_CACHES
//!   absent(thread) == table.id ⇒  table has no slot for thread
//!   tid < 64 ∧ slotted & (1 << tid) == 0  ⇒  table has no slot for tid
//!   ```
//! * **Cache and TLB misses on the slot-less path.** With thousands of pools
//!   few of a pool's lines stay in the caches, so a get and a put there cost
//!   about one miss per line they touch. They touch two lines of the pool,
//!   one 128-byte pair, and the object: the pool's *head*
//!   (`shared/head.rs`), which is not in the pool's shared state but in a
//!   cell of a dense store of heads (`shared/arena.rs`: cells of `CELL`
//!   bytes carved from larger chunks, reused once their pool is dropped,
//!   never given back). The handle holds the head's pointer beside its `Arc`;
//!   the get paths take the head as an argument, and the put paths take
//!   the pointer (a reference into the pool must not outlive the count
//!   that may let another thread free it: `shared/put.rs`), so the
//!   slot-less ones never read the shared state. The lines they touch sit
//!   ten or so heads to a page instead of a page or two apart, so the TLB
//!   covers many more pools. The slot-less get also prefetches the
//!   depot's line on the branch it takes once line 0 says the thread has
//!   no cache there: run while line 0's miss is still resolving, the two
//!   misses overlap (the lock's locked instruction would otherwise wait
//!   for line 0 first). `Head` and `Depot`
//!   are `repr(C)`, hot first, the depot on a line of its own; tests in
//!   `shared/mod.rs` and `depot/mod.rs` check it:
//!
//!   ```text
//!   Pool { shared, head } ──► Head (a cell in the arena; Shared owns it)
//!   line 0   waiters' count, batch size, table id, slotted,     read: every get, put
//!            background
//!            lone gets and returns (depot/lone.rs)               written: slot-less ones
//!   line 1   the depot's lock, loose object, objects, cap, marks written: every depot op
//!   lines 2+ the rest of the depot (batches, marks, sizes)       depot ops on batches
//!   ```
//!
//!   A cached get and put read line 0 only (with their slot). The table's
//!   id sits there as a copy (`table_id == slots.id()`, set once), so no
//!   hot path reaches the table's own line, and the waiters' queue is
//!   boxed so that only its count takes room there. Line 0 is written only
//!   by slot-less gets and puts, by waiters coming and going and once per
//!   thread that allocates its slot (`slotted`), never by
//!   the depot operations of cached threads (their refills and trims write
//!   line 1).
//!
//!   The depot counts the slot-less gets and returns under the lock they
//!   take anyway (`Depot::take_lone`, `put_lone`), in `Lone` on line 0:
//!   each count is a plain load and store, no locked instruction, written
//!   and read only under the lock. `live_bound` reads the returns among
//!   the ends and the gets after its fence, each under the lock, which
//!   orders them as the fence orders the atomics.
//!
//!   A lone object put by a thread with no cache stays in the depot's
//!   `loose` place, beside the lock, not in a batch's buffer (two more
//!   allocations, two more misses), when an `Option` of it fits in a word
//!   (`depot/loose.rs`: a `Box`, an `Arc`; a big object by value is not
//!   carried inline); every other depot operation first moves it onto the
//!   newest batch, so the depot's order and marks are as if it were there.
//! * **Memory per (pool, thread).** A slot is allocated when its own thread
//!   first takes a cache in the pool (the table's buckets hold pointers), so
//!   a thread refused a cache costs the pool nothing, and it is freed at
//!   the thread's exit (`Shared::retire_local`), in every pool it lists and
//!   every pool a sweep dropped from its list (kept apart, `given_up`,
//!   pruned of dropped pools and duplicates as it doubles). Not at the
//!   sweep: that runs inside some pool's get (its claim), maybe under a
//!   user callback that another pool's get or put called while holding its
//!   own slot, which the sweep could be the one to give up. So a thread
//!   that has gone leaves no slot anywhere, but one whose free met a walk. Only the owner frees its slot,
//!   and only while no other thread walks the table: every walk (the passes,
//!   `stats`, `live_bound`, the places' recall) holds the table's
//!   `walkers` lock for reading, and the free takes it with `try_write`,
//!   leaving the slot in place (for the next thread with that id, or the
//!   pool's drop) if a walk is in progress, so it never waits. Before the
//!   slot goes, its counts move into the pool's (`created`, `destroyed`,
//!   `misses`, `retired_gets`, `retired_returns`) under that write lock, and
//!   every reader sums the pool's and the slots' within one walk:
//!
//!   ```text
//!   slots(pool) ⊆ { t alive : pool ∈ list(t) ∪ given_up(t) }  (but a free a walk refused)
//!   gets(pool) = retired_gets + Σ slots' gets + slot-less + waiters'
//!   ```
//!
//!   The passes see the use a thread made before it exited, not the exit:
//!   a slot remembers the operations the last pass saw (`pass_seen`), and
//!   the free adds only those since to `retired_unseen`, which the passes
//!   count among the pool's other uses.
//!
//!   What else a pool keeps per thread follows: the passes' per-id records
//!   are about one slot each (its `serial`; another slot for the id starts
//!   afresh), cut back to the highest id with a slot once they are more
//!   than twice that (`PassState::fit_ids`), and the depot frees the emptied
//!   batches that no exchange took through a whole interval, as it
//!   reclaims idle objects (`lw_empty`), and its lists' buffers when it
//!   holds nothing.
//! * **The reclaimer's rounds.** The registry keeps each pool's next
//!   deadline in a FIFO when it comes in order (each tick asks for now
//!   plus its interval: O(1) to add and take) and in a heap otherwise
//!   (O(log P)); a round ticks only the pools that are due. A pass over a
//!   pool in use touches little more than its own state: its depot's
//!   tick moves the loose object onto a batch only when it reclaims or
//!   purges it, and the objects created are summed in the pass's one walk
//!   of the slots. A pool that arms itself sets its deadline to its next pass and wakes
//!   the reclaimer only if it sleeps past that, so building a pool and its
//!   first get make no system call. The CPU count a pool sizes its teardown
//!   by is read once and re-read by the reclaimer at most once a second
//!   (`os/thread.rs`), not on every build.
//!
//! `tests/scale.rs` counts the list work and the caches kept;
//! `tidepool-bench`'s `many_pools` measures all of it against a
//! `Mutex<Vec>` per pool ([`performance`](crate::performance) has the figures).
//!
//! # Owned guards
//!
//! An owned guard ([`OwnedPooled`](crate::OwnedPooled)) holds an uncounted
//! copy of the handle's two pointers (the shared state's and its head's),
//! not an `Arc`: taking and dropping one touch no shared reference count.
//! A `PooledStack` stands for one without the pointers: its stack's slab
//! set records both, side by side on one line (`Slabs::pool`), and the
//! stack rebuilds the guard from them to end it (`Pool::alias_of`), reading
//! nothing of the shared state on the way to the head. The shared state
//! lives until the last of {the handle, the owned guards} is
//! gone (`src/shared/lifetime.rs`, after Linux's `percpu_ref` and liburcu's
//! `membarrier` RCU). Pool handles themselves are counted (`Life::handles`:
//! the build's, and one per `PooledStack::pool`); the last one closes:
//!
//! ```text
//! end of an owned guard:   marker[this thread] = pool    (plain store)
//!                          put / discard / detach        (counts the end)
//!                          marker[this thread] = 0       (plain store)
//!   (its common case, unmarked: put_fast, then a look at `pending`; below)
//! handle drop:             closed = true
//!                          free now if  live == 0  and no marker == pool,
//!                          else park it; the last end out frees it
//! live = gets - returns - discarded - detached  (the pool's own counts,
//!        ends read before starts, so never below the truth)
//! ```
//!
//! Invariant: the state is freed only when `live == 0`, no counted end is in
//! flight and no marker names the pool, read in that order; an end that
//! has been counted stored its marker first, and clears it only once it no
//! longer touches the pool. Closers that must wait ask the markers in their
//! way to wake (two `membarrier(2)` calls, only then), so whoever is last
//! frees the pool, and destroys its objects, before its own call returns.
//!
//! An end through a handle ([`Pool::put`](crate::Pool::put),
//! `StackPool::put`) needs no marker: the caller's borrow of a handle keeps
//! the pool alive for the whole call (or, for a guard's alias, that other
//! guard being out does: `live >= 1`), which is the invariant the marker
//! stands in for; a pool closed before that handle was taken from a guard
//! is freed by the handle's own close (`StackPool::get` + `put`: 103
//! instructions, against 110 for get + drop).
//!
//! A dropped owned guard whose object goes into this thread's loaded batch
//! needs no marker either: that put's last touch of the pool is the count
//! of its return (`Shared::put_fast`), so the invariant holds without one.
//! What the marker also provides, being woken to free a pool parked
//! meanwhile, the end does itself:
//!
//! ```text
//! unmarked end:   (not panicking, this thread has a marker, pending == 0)
//!                 put_fast: ... returns += 1             (the last touch)
//!                 compiler fence
//!                 if pending != 0: process(pool)         (pairs with the
//!                                  closer's pending += 1; membarrier)
//! ```
//!
//! Every other end (no cache, a full batch, `recycle` refusing or
//! panicking, waiters) takes the marker, late if need be: its object is
//! still out. 15 instructions fewer per `get_owned` + drop.
//!
//! # Panics: the callback contract
//!
//! Every call into user code goes through one file, `callbacks.rs`, whose
//! docs state the contract; in short:
//!
//! * **No callback runs under a lock of tidepool's** (depot, reclaim state,
//!   registry, thread ids) or inside an access bracket: the work is
//!   collected under the lock, the lock released, then the callbacks run.
//!   So a manager may re-enter its own pool, drop it, or build others.
//! * `recycle`, `purge` and `destroy` run under `catch_unwind`, and the
//!   operation carries on to its end: every object it took out is destroyed
//!   or back in the depot, every count exact. Then the first panic is
//!   **resumed** on the caller's own path (`get`, a guard's drop, `reclaim_unused`,
//!   `drain`, `purge`, `reclaim`, `pressure`, `prefill`; not while that
//!   thread is unwinding already), and **contained** everywhere else: on the
//!   reclaimer thread, in a reclaim pass run lazily on a `get` or `put`, at
//!   thread exit and in the pool's drop. Contained means counted in
//!   `Stats::callback_panics`, reported once per pool with `log::warn!`,
//!   never resumed: destructors never unwind.
//! * The object whose callback panicked is treated as destroyed: counted,
//!   never handed out again.
//! * Accounting is panic-safe: a `max_live` place taken before `create` is
//!   given back by a guard if `create` unwinds; an object's `destroyed`
//!   count and place are given back after its `destroy` returns or unwinds;
//!   so after any panic
//!
//! ```text
//! live + idle + destroying == created - destroyed - detached
//! ```
//!
//! * Anything else that panics on the reclaimer thread (a user `Clock`, a
//!   pressure `Source`) ends only that step: a source is dropped and
//!   reported, other panics are counted in `reclaim::status().panics`.
//!
//! A guard dropped while its thread panics destroys its object rather than
//! recycling something a panic may have left half-updated.
//!
//! # fork
//!
//! A process may fork at any moment, from any thread. `pthread_atfork`
//! handlers hold the registry lock, the thread-id lock, the stack
//! registry's lock and the heads' arena lock across the fork: `std` locks
//! (`sync::fork_safe`), whose unlock in the child frees them even when
//! threads of the parent were waiting for them. A *fork gate* keeps the
//! reclaimer thread from holding any pool lock (depot, reclaim state,
//! destroy queue) at that instant, and an exiting thread from holding a
//! slot table's walk lock for writing. The child starts a new fork
//! generation: the reclaimer is marked missing, its wake-up descriptor
//! (shared with the parent) closed. The child's first call that needs the
//! reclaimer starts a fresh one with a fresh descriptor, which looks after the
//! inherited pools and the new ones. The parent is never woken by the child.
//! See `reclaim/fork.rs` for the whole contract and its two limits (a pool
//! lock held by an application thread at the instant of the fork; a child
//! forked while another thread starts or exits, which Rust's standard
//! library may leave unable to start threads).
//!
//! # Prior art
//!
//! * Bonwick & Adams, *Magazines and Vmem* (USENIX 2001), and illumos
//!   `kmem.c`: the two-magazine cache, the depot, the low-water working-set
//!   filter and its 15 s period.
//! * Linux `membarrier(2)`, folly's asymmetric fences: taking a cache from a
//!   live thread without slowing the thread down.
//! * Xen blkback (2019): shrink hard, for a short window, under pressure.
//! * QEMU `util/qemu-coroutine.c` (2024): batches, a global pool capped from
//!   `vm.max_map_count`, at most two batches per thread.
//! * FreeBSD UMA and `vfs_subr.c`: per-CPU buckets; counters kept off the hot
//!   path.
//! * `thread_local` and sharded-slab: recycled thread ids and doubling
//!   buckets of per-thread state.
