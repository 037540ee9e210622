//! The live set of object pools: every C object any object pool knows,
//! keyed by its address, with the pool it belongs to and whether it is out.
//!
//! C objects carry no header of ours, so this set is how `tidepool_obj_put`
//! tells a foreign pointer (absent), a wrong pool (another pool's id), a
//! double put (present but idle) and a good put (live) apart, without reading
//! the object. It also holds the core guard of each lent object, which a put
//! hands back to the core pool.
//!
//! It is one process-wide set, so that "wrong pool" can be told from
//! "foreign", split into [`SHARDS`] shards by address so that threads
//! putting different objects rarely meet on a lock. A shard's lock is held
//! only to look up, insert or remove; never while a callback runs and never
//! while a guard is dropped (dropping one may destroy an object, which
//! removes it from the set).

use std::collections::HashMap;
use std::ffi::c_void;
use std::hash::{BuildHasher, Hasher};
use std::ptr::NonNull;

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;

use crate::obj::ObjGuard;

/// Shards of the set: a power of two.
const SHARDS: usize = 64;

/// Where an object is.
pub(crate) enum State {
    /// In its pool: a thread cache, the depot, or the adoption inbox.
    Idle,
    /// Handed out by `get` (with the core guard), or adopted and not yet put
    /// back (`None`: it has no core guard until it enters the pool).
    Live(Option<ObjGuard>),
}

pub(crate) struct Entry {
    pub(crate) pool: u64,
    pub(crate) state: State,
}

/// Hashes an address: pointers are aligned, so their low bits carry
/// nothing; a multiply by an odd constant spreads the rest (Fibonacci
/// hashing), and the high half is folded into the low one for the table.
#[derive(Clone, Copy, Default)]
struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 32)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(FIB);
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.0 = (n as u64).wrapping_mul(FIB);
    }
}

const FIB: u64 = 0x9E37_79B9_7F4A_7C15;

#[derive(Clone, Copy, Default)]
struct BuildAddrHasher;

impl BuildHasher for BuildAddrHasher {
    type Hasher = AddrHasher;

    fn build_hasher(&self) -> AddrHasher {
        AddrHasher(0)
    }
}

type Shard = Mutex<HashMap<usize, Entry, BuildAddrHasher>>;

static SET: [CachePadded<Shard>; SHARDS] =
    [const { CachePadded::new(Mutex::new(HashMap::with_hasher(BuildAddrHasher))) }; SHARDS];

fn shard(obj: NonNull<c_void>) -> &'static Shard {
    let addr = obj.as_ptr() as usize as u64;
    let h = addr.wrapping_mul(FIB);
    &SET[(h >> (64 - SHARDS.trailing_zeros())) as usize]
}

fn key(obj: NonNull<c_void>) -> usize {
    obj.as_ptr() as usize
}

/// Records a new object of `pool`, idle. `Err` with the current owner if the
/// address is already known.
pub(crate) fn insert(obj: NonNull<c_void>, pool: u64, state: State) -> Result<(), (u64, bool)> {
    use std::collections::hash_map::Entry as E;
    let mut shard = shard(obj).lock();
    match shard.entry(key(obj)) {
        E::Occupied(e) => Err((e.get().pool, matches!(e.get().state, State::Live(_)))),
        E::Vacant(v) => {
            v.insert(Entry { pool, state });
            Ok(())
        }
    }
}

/// Marks an idle object of `pool` as handed out, keeping its guard. Gives
/// the guard back if the object is not an idle one of `pool` (a bug: the
/// caller drops it after this returns, outside the lock).
pub(crate) fn lend(obj: NonNull<c_void>, pool: u64, guard: ObjGuard) -> Result<(), ObjGuard> {
    let mut shard = shard(obj).lock();
    match shard.get_mut(&key(obj)) {
        Some(e) if e.pool == pool && matches!(e.state, State::Idle) => {
            e.state = State::Live(Some(guard));
            Ok(())
        }
        _ => Err(guard),
    }
}

/// Why a put was refused.
pub(crate) enum PutError {
    Foreign,
    WrongPool(u64),
    DoublePut,
}

/// Marks a live object of `pool` idle and returns its guard (`None` for an
/// adopted object), for the caller to drop outside the lock.
pub(crate) fn take_back(obj: NonNull<c_void>, pool: u64) -> Result<Option<ObjGuard>, PutError> {
    let mut shard = shard(obj).lock();
    let Some(e) = shard.get_mut(&key(obj)) else {
        return Err(PutError::Foreign);
    };
    if e.pool != pool {
        return Err(PutError::WrongPool(e.pool));
    }
    match std::mem::replace(&mut e.state, State::Idle) {
        State::Live(guard) => Ok(guard),
        State::Idle => Err(PutError::DoublePut),
    }
}

/// Forgets an object that is being destroyed. Returns its entry, so that a
/// guard in it (there is none for an idle object) is dropped by the caller,
/// outside the lock.
pub(crate) fn remove(obj: NonNull<c_void>) -> Option<Entry> {
    shard(obj).lock().remove(&key(obj))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_spread_over_the_shards() {
        let mut hits = [0usize; SHARDS];
        for i in 1..=SHARDS * 64 {
            // 64-byte objects, as an allocator would lay them out.
            let p = NonNull::new((0x5555_0000_0000 + i * 64) as *mut c_void).unwrap();
            let s = shard(p) as *const Shard;
            let at = SET.iter().position(|x| std::ptr::eq(&**x, s)).unwrap();
            hits[at] += 1;
        }
        let (min, max) = (hits.iter().min().unwrap(), hits.iter().max().unwrap());
        assert!(*min >= 32 && *max <= 96, "uneven: {min}..{max}");
    }

    #[test]
    fn states_move_as_documented() {
        let obj = NonNull::new(0x7777_0000_1000usize as *mut c_void).unwrap();
        insert(obj, 9, State::Idle).unwrap();
        assert_eq!(insert(obj, 3, State::Idle).unwrap_err(), (9, false));
        assert!(matches!(take_back(obj, 9), Err(PutError::DoublePut)));
        assert!(matches!(take_back(obj, 4), Err(PutError::WrongPool(9))));
        assert!(remove(obj).is_some());
        assert!(matches!(take_back(obj, 9), Err(PutError::Foreign)));
        insert(obj, 9, State::Live(None)).unwrap();
        assert!(matches!(take_back(obj, 9), Ok(None)));
        assert!(matches!(take_back(obj, 9), Err(PutError::DoublePut)));
        remove(obj);
    }
}
