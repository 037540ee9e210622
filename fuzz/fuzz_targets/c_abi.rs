//! Turns its input into C ABI calls on two threads: pools of each kind with
//! configs of random fields and struct sizes, then gets, puts, adoptions,
//! timed gets, stats with random struct sizes, pressure, thread exits,
//! drains, resizes and the misuse the API promises to catch (double puts,
//! foreign pointers, wrong pools, wrong kinds, unknown flags) on both
//! threads at once, and last every pool destroyed. A finding is a crash, a
//! sanitizer report, a status outside the documented ones, counts that do
//! not balance, or an object not destroyed exactly once.
//!
//! Misuse the API leaves undefined is not generated: a handle used after
//! its destroy, a buffer or stack put after the pool let it go, any misuse
//! of an unchecked object pool.
#![no_main]

use std::collections::BTreeSet;
use std::ffi::c_void;
use std::sync::Mutex;

use libfuzzer_sys::fuzz_target;
use tidepool_ffi::tidepool_status::{self, *};
use tidepool_ffi::*;

/// Objects made and not yet destroyed, over every pool: a destroy of an
/// address not in it (twice, or never made) is a finding.
static ALIVE: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());

unsafe extern "C" fn create(_: *mut c_void, out: *mut *mut c_void) -> i32 {
    // SAFETY: the pool's out-pointer.
    unsafe { out.write(make()) };
    0
}

unsafe extern "C" fn destroy(_: *mut c_void, obj: *mut c_void) {
    assert!(
        ALIVE.lock().unwrap().remove(&(obj as usize)),
        "{obj:p} destroyed twice, or never made"
    );
    // SAFETY: made by `make`, and (checked above) not destroyed before.
    drop(unsafe { Box::from_raw(obj.cast::<u64>()) });
}

fn make() -> *mut c_void {
    let obj = Box::into_raw(Box::new(0u64)).cast::<c_void>();
    ALIVE.lock().unwrap().insert(obj as usize);
    obj
}

/// `FUZZ_TRACE=1`: print each step (to debug a finding).
fn tracing() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("FUZZ_TRACE").is_some())
}

struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        let (&b, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        b
    }
    fn small(&mut self, max: u8) -> usize {
        usize::from(self.u8() % max.max(1))
    }
    fn done(&self) -> bool {
        self.0.is_empty()
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Obj { checked: bool, foreign: bool },
    Buf,
    Stack,
}

struct Pool {
    handle: usize,
    kind: Kind,
}

fn ok_or(s: tidepool_status, allowed: &[tidepool_status]) {
    assert!(
        s == TIDEPOOL_OK || allowed.contains(&s),
        "unexpected status {s:?}: {:?}",
        // SAFETY: a NUL-terminated string valid until the next failing call.
        unsafe { std::ffi::CStr::from_ptr(tidepool_last_error()) }
    );
}

fn new_pool(b: &mut Bytes<'_>) -> Option<Pool> {
    // SAFETY: all-zero bytes are a valid config.
    let mut c: tidepool_config = unsafe { std::mem::zeroed() };
    c.size = match b.small(8) {
        0 => 0,
        1 => b.small(250),
        _ => std::mem::size_of::<tidepool_config>(),
    };
    c.flags = TIDEPOOL_NO_BACKGROUND;
    let kind = match b.small(4) {
        0 => Kind::Buf,
        1 => Kind::Stack,
        _ => {
            let checked = b.u8() % 4 != 0;
            Kind::Obj {
                checked,
                foreign: b.u8() % 2 == 0,
            }
        }
    };
    c.batch_size = b.small(12);
    c.max_idle = b.small(40);
    c.max_live = if b.u8() % 3 == 0 { b.small(30) } else { 0 };
    c.min_idle = b.small(4);
    c.burst = b.small(4);
    c.reclaim_interval_ms = b.small(5) as u64;
    c.purge_delay_ms = b.small(3) as u64;
    match b.u8() % 16 {
        0 => c.flags |= 16 << b.small(8), // unknown: refused
        // Stack pools take it; any other kind refuses it.
        1..=3 => c.flags |= TIDEPOOL_STACK_GUARD_PROTECT,
        _ => {}
    }
    // A caller's struct of `c.size` bytes: ours, then (a newer caller's)
    // zeros, or a byte the library must refuse.
    let mut caller = [0u8; 256];
    let mut out = std::ptr::null_mut();
    let cfg = |c: &tidepool_config, caller: &mut [u8; 256], b: &mut Bytes<'_>| {
        // SAFETY: a plain struct copied into a buffer big enough for it.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (c as *const tidepool_config).cast::<u8>(),
                caller.as_mut_ptr(),
                std::mem::size_of::<tidepool_config>(),
            )
        };
        if b.u8() % 8 == 0 {
            caller[std::mem::size_of::<tidepool_config>() + b.small(32)] = 1;
        }
        caller.as_ptr().cast::<tidepool_config>()
    };
    let status = match kind {
        Kind::Obj { checked, foreign } => {
            if !checked {
                c.flags |= TIDEPOOL_OBJ_UNCHECKED;
            }
            if foreign {
                c.flags |= TIDEPOOL_OBJ_ACCEPT_FOREIGN;
            }
            c.create = Some(create);
            c.destroy = Some(destroy);
            c.maps_per_object = b.small(3);
            let p = cfg(&c, &mut caller, b);
            // SAFETY: a config of at least `size` readable bytes (or refused).
            unsafe { tidepool_obj_pool_new(p, &mut out) }
        }
        Kind::Buf => {
            c.object_size = 1 + b.small(200);
            c.align = 1 << b.small(8);
            let p = cfg(&c, &mut caller, b);
            // SAFETY: as above.
            unsafe { tidepool_buf_pool_new(p, &mut out) }
        }
        Kind::Stack => {
            c.object_size = 4096 * (1 + b.small(4));
            let p = cfg(&c, &mut caller, b);
            // SAFETY: as above.
            unsafe { tidepool_stack_pool_new(p, &mut out) }
        }
    };
    ok_or(status, &[TIDEPOOL_ERR_CONFIG, TIDEPOOL_ERR_STRUCT_SIZE]);
    if tracing() {
        eprintln!(
            "pool {:?}: {status:?}; max_live {} batch {} max_idle {} burst {}",
            kind == Kind::Buf,
            c.max_live,
            c.batch_size,
            c.max_idle,
            c.burst
        );
        if let Kind::Obj { checked, foreign } = kind {
            eprintln!("  obj checked {checked} foreign {foreign}");
        }
    }
    (status == TIDEPOOL_OK).then_some(Pool {
        handle: out as usize,
        kind,
    })
}

/// What one thread holds.
#[derive(Default)]
struct Held {
    objs: Vec<(usize, usize)>, // (pool index, object)
    bufs: Vec<(usize, usize)>,
    stacks: Vec<(usize, tidepool_stack)>,
    /// This thread's own checked object pool, for misuse.
    private: usize,
}

const LIMITS: &[tidepool_status] = &[
    TIDEPOOL_ERR_EXHAUSTED,
    TIDEPOOL_ERR_TIMEOUT,
    TIDEPOOL_ERR_CREATE,
    TIDEPOOL_ERR_NO_MEMORY,
    TIDEPOOL_ERR_MAP_COUNT,
];

fn step(b: &mut Bytes<'_>, pools: &[Pool], held: &mut Held, shared: &Mutex<Vec<(usize, usize)>>) {
    if pools.is_empty() {
        b.u8(); // every step eats a byte
        return;
    }
    let i = b.small(pools.len() as u8);
    let p = &pools[i];
    let h = p.handle as *mut tidepool_pool;
    // SAFETY (every call below): `h` is a live pool handle, destroyed only
    // after both threads are done; out-pointers are valid locals.
    let op = b.small(14);
    if tracing() {
        eprintln!("{:?} op {op} pool {i}", std::thread::current().id());
    }
    unsafe {
        match (op, p.kind) {
            (0 | 1, Kind::Obj { checked, foreign }) => {
                let flags = if b.u8() % 8 == 0 {
                    1 << b.small(6)
                } else {
                    u32::from(b.u8() % 2)
                };
                let mut o = std::ptr::null_mut();
                let s = if b.u8() % 4 == 0 {
                    tidepool_obj_get_timeout(h, flags, 1000 * b.small(50) as u64, &mut o)
                } else {
                    tidepool_obj_get(h, flags, &mut o)
                };
                ok_or(
                    s,
                    &[
                        TIDEPOOL_EMPTY,
                        TIDEPOOL_ERR_INVALID_ARGUMENT,
                        TIDEPOOL_ERR_EXHAUSTED,
                        TIDEPOOL_ERR_TIMEOUT,
                    ],
                );
                if tracing() {
                    eprintln!("  get flags {flags:#x}: {s:?} {o:p}");
                }
                if s == TIDEPOOL_OK {
                    held.objs.push((i, o as usize));
                } else if s == TIDEPOOL_EMPTY {
                    assert!(o.is_null());
                    // Make one ourselves: adopt it, or (accepting pools) just
                    // keep it to put; an unchecked accepting pool counted it.
                    let mine = make();
                    if foreign {
                        held.objs.push((i, mine as usize));
                    } else {
                        let s = tidepool_obj_adopt(h, mine);
                        if tracing() {
                            eprintln!("  adopt {mine:p}: {s:?}");
                        }
                        ok_or(s, &[TIDEPOOL_ERR_EXHAUSTED]);
                        if s == TIDEPOOL_OK {
                            held.objs.push((i, mine as usize));
                        } else {
                            destroy(std::ptr::null_mut(), mine);
                        }
                    }
                }
                let _ = checked;
            }
            (2 | 3, Kind::Obj { .. }) => {
                if held.objs.iter().any(|&(j, _)| j == i) {
                    let k = held.objs.iter().position(|&(j, _)| j == i).unwrap();
                    let (_, o) = held.objs.swap_remove(k);
                    if b.u8() % 3 == 0 {
                        shared.lock().unwrap().push((i, o)); // the other thread puts it
                    } else {
                        ok_or(tidepool_obj_put(h, o as *mut c_void), &[]);
                    }
                }
            }
            (4, _) => {
                // Misuse a checked pool catches, on this thread's private
                // pool (no other thread can be lent its objects meanwhile):
                // a double put, a pointer no pool knows, an object put to
                // another pool, NULL.
                let mine = held.private as *mut tidepool_pool;
                let mut o = std::ptr::null_mut();
                ok_or(tidepool_obj_get(mine, 0, &mut o), &[]);
                let (s, expect) = match b.small(4) {
                    0 => {
                        ok_or(tidepool_obj_put(mine, o), &[]);
                        (tidepool_obj_put(mine, o), TIDEPOOL_ERR_DOUBLE_PUT)
                    }
                    1 => {
                        let local = 0u64;
                        let foreign = std::ptr::addr_of!(local) as *mut c_void;
                        (tidepool_obj_put(mine, foreign), TIDEPOOL_ERR_FOREIGN)
                    }
                    2 if matches!(p.kind, Kind::Obj { checked: true, .. }) => {
                        (tidepool_obj_put(h, o), TIDEPOOL_ERR_WRONG_POOL)
                    }
                    _ => (
                        tidepool_obj_put(mine, std::ptr::null_mut()),
                        TIDEPOOL_ERR_NULL,
                    ),
                };
                assert_eq!(s, expect);
                if expect != TIDEPOOL_ERR_DOUBLE_PUT {
                    ok_or(tidepool_obj_put(mine, o), &[]);
                }
            }
            (5, Kind::Buf) => {
                let mut buf = std::ptr::null_mut();
                let s = tidepool_buf_get(h, &mut buf);
                ok_or(s, LIMITS);
                if s == TIDEPOOL_OK {
                    held.bufs.push((i, buf as usize));
                }
            }
            (6, Kind::Buf) => {
                if let Some(k) = held.bufs.iter().position(|&(j, _)| j == i) {
                    let (_, buf) = held.bufs.swap_remove(k);
                    ok_or(tidepool_buf_put(h, buf as *mut c_void), &[]);
                } else {
                    // A foreign pointer with readable bytes below it.
                    let local = [0u64; 8];
                    let s = tidepool_buf_put(h, local.as_ptr().add(6) as *mut c_void);
                    ok_or(s, &[TIDEPOOL_ERR_FOREIGN]);
                    assert_ne!(s, TIDEPOOL_OK);
                }
            }
            (7, Kind::Stack) => {
                let mut st: tidepool_stack = std::mem::zeroed();
                let s = tidepool_stack_get(h, &mut st);
                ok_or(s, LIMITS);
                if s == TIDEPOOL_OK {
                    *(st.top as *mut u8).sub(1) = 1;
                    held.stacks.push((i, st));
                }
            }
            (8, Kind::Stack) => {
                if let Some(k) = held.stacks.iter().position(|&(j, _)| j == i) {
                    let (_, st) = held.stacks.swap_remove(k);
                    ok_or(tidepool_stack_put(h, &st), &[]);
                } else {
                    // A forged struct: its check word does not match.
                    let mut st: tidepool_stack = std::mem::zeroed();
                    st.top = 0x7000_0000_0000usize as *mut c_void;
                    st._check = u64::from(b.u8());
                    let s = tidepool_stack_put(h, &st);
                    ok_or(s, &[TIDEPOOL_ERR_FOREIGN]);
                    assert_ne!(s, TIDEPOOL_OK);
                }
            }
            (9, _) => {
                // A caller's stats struct of any size up to 512 bytes.
                #[repr(C, align(8))]
                struct Big([u8; 512]);
                let mut big = Big([0xee; 512]);
                let size = match b.small(4) {
                    0 => b.small(255) * 2,
                    _ => std::mem::size_of::<tidepool_stats>(),
                };
                big.0[..8].copy_from_slice(&size.to_ne_bytes());
                let stats = big.0.as_mut_ptr().cast::<tidepool_stats>();
                ok_or(tidepool_pool_stats(h, stats), &[TIDEPOOL_ERR_STRUCT_SIZE]);
                assert!(
                    big.0[size.max(8)..].iter().all(|&x| x == 0xee),
                    "wrote past size"
                );
            }
            (10, _) => {
                let mut n = 0usize;
                let s = match b.small(7) {
                    0 => tidepool_pool_drain(h, &mut n),
                    1 => tidepool_pool_reclaim_unused(h, &mut n),
                    2 => tidepool_pool_purge(h, &mut n),
                    3 => tidepool_pool_reclaim(h, &mut n),
                    4 => tidepool_pool_pressure(h, b.u8() as i32 % 4, &mut n),
                    5 => tidepool_pool_prefill(h, &mut n),
                    _ => tidepool_pool_thread_exit(h, u32::from(b.u8() % 3), &mut n),
                };
                ok_or(
                    s,
                    &[
                        TIDEPOOL_ERR_INVALID_ARGUMENT,
                        TIDEPOOL_ERR_CREATE,
                        TIDEPOOL_ERR_EXHAUSTED,
                        TIDEPOOL_ERR_NO_MEMORY,
                        TIDEPOOL_ERR_MAP_COUNT,
                    ],
                );
            }
            (11, _) => {
                let delta = (i64::from(b.u8()) - 128) * (1 + b.small(4) as i64);
                let mut now = 0usize;
                ok_or(
                    tidepool_pool_adjust_max_idle(h, delta as isize, &mut now),
                    &[TIDEPOOL_ERR_INVALID_ARGUMENT],
                );
            }
            (12, _) => {
                // Wrong kind: an object call on any pool that is not one.
                let mut o = std::ptr::null_mut();
                let s = tidepool_obj_get(h, 0, &mut o);
                if !matches!(p.kind, Kind::Obj { .. }) {
                    assert_eq!(s, TIDEPOOL_ERR_WRONG_KIND);
                } else if s == TIDEPOOL_OK {
                    held.objs.push((i, o as usize));
                }
            }
            (13, _) => {
                // Objects the other thread left to put.
                let mine: Vec<_> = std::mem::take(&mut *shared.lock().unwrap());
                for (j, o) in mine {
                    ok_or(
                        tidepool_obj_put(pools[j].handle as *mut tidepool_pool, o as *mut c_void),
                        &[],
                    );
                }
            }
            _ => {}
        }
    }
}

fn private_pool() -> usize {
    // SAFETY: all-zero bytes are a valid config; out is a valid local.
    unsafe {
        let mut c: tidepool_config = std::mem::zeroed();
        c.size = std::mem::size_of::<tidepool_config>();
        c.flags = TIDEPOOL_NO_BACKGROUND;
        c.create = Some(create);
        c.destroy = Some(destroy);
        let mut out = std::ptr::null_mut();
        ok_or(tidepool_obj_pool_new(&c, &mut out), &[]);
        out as usize
    }
}

fn give_back(pools: &[Pool], held: Held) {
    if tracing() {
        eprintln!(
            "{:?} give back {:?}",
            std::thread::current().id(),
            held.objs
        );
    }
    // SAFETY: live handles; everything given back was lent by that pool.
    unsafe {
        ok_or(
            tidepool_pool_destroy(held.private as *mut tidepool_pool),
            &[],
        );
        for (i, o) in held.objs {
            ok_or(
                tidepool_obj_put(pools[i].handle as *mut tidepool_pool, o as *mut c_void),
                &[],
            );
        }
        for (i, buf) in held.bufs {
            ok_or(
                tidepool_buf_put(pools[i].handle as *mut tidepool_pool, buf as *mut c_void),
                &[],
            );
        }
        for (i, st) in held.stacks {
            ok_or(
                tidepool_stack_put(pools[i].handle as *mut tidepool_pool, &st),
                &[],
            );
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let mut pools = Vec::new();
    for _ in 0..1 + b.small(4) {
        if let Some(p) = new_pool(&mut b) {
            pools.push(p);
        }
    }
    let split = b.0.len() / 2;
    let (one, two) = b.0.split_at(split);
    let shared = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        let mut threads = Vec::new();
        for ops in [one, two] {
            let pools = &pools;
            let shared = &shared;
            threads.push(s.spawn(move || {
                let mut b = Bytes(ops);
                let mut held = Held {
                    private: private_pool(),
                    ..Held::default()
                };
                while !b.done() {
                    step(&mut b, pools, &mut held, shared);
                }
                give_back(pools, held);
            }));
        }
        // Joined, not just waited for: their thread-locals (a last error
        // message, a thread cache's hand-back) are gone too.
        for t in threads {
            t.join().expect("a fuzz thread panicked");
        }
    });
    // SAFETY: live handles, nothing of theirs out any more; each destroyed
    // once and not used again.
    unsafe {
        for (i, o) in std::mem::take(&mut *shared.lock().unwrap()) {
            ok_or(
                tidepool_obj_put(pools[i].handle as *mut tidepool_pool, o as *mut c_void),
                &[],
            );
        }
        for p in &pools {
            let h = p.handle as *mut tidepool_pool;
            let mut st: tidepool_stats = std::mem::zeroed();
            st.size = std::mem::size_of::<tidepool_stats>();
            ok_or(tidepool_pool_stats(h, &mut st), &[]);
            assert_eq!(st.live, 0, "{:?}", st);
            assert_eq!(
                st.live + st.idle + st.destroying,
                st.created - st.destroyed,
                "{:?}",
                st
            );
            ok_or(tidepool_pool_destroy(h), &[]);
        }
    }
    assert!(
        ALIVE.lock().unwrap().is_empty(),
        "objects made and never destroyed"
    );
});
