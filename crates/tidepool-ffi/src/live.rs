//! The live set of object pools: every C object any object pool knows,
//! keyed by its address, with the pool it belongs to and whether it is out.
//!
//! C objects carry no header of ours, so this set is how `tidepool_obj_put`
//! tells a foreign pointer (absent), a wrong pool (another pool's id), a
//! double put (present but idle) and a good put (live) apart, without reading
//! the object. Only checked pools (the default) use it; a pool built with
//! `TIDEPOOL_OBJ_UNCHECKED` skips it, and its puts are trusted.
//!
//! It is one process-wide set, so that "wrong pool" can be told from
//! "foreign", split into [`SHARDS`] shards by address so that threads
//! putting different objects rarely meet on a lock. A shard's lock is held
//! only to look up, insert or remove; never while a callback runs.

use std::collections::HashMap;
use std::ffi::c_void;
use std::hash::{BuildHasher, Hasher};
use std::ptr::NonNull;

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;

/// Shards of the set: a power of two.
const SHARDS: usize = 64;

/// An object's entry: its pool's id, shifted left once, with the low bit
/// set while it is out (handed out by `get`, or adopted and not put back).
type Entry = u64;

const OUT: u64 = 1;

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

/// Records an object of `pool`, out (`out`) or idle. `Err` with the pool
/// that holds it and whether it is out there, if the address is known.
pub(crate) fn insert(obj: NonNull<c_void>, pool: u64, out: bool) -> Result<(), (u64, bool)> {
    use std::collections::hash_map::Entry as E;
    let mut shard = shard(obj).lock();
    match shard.entry(key(obj)) {
        E::Occupied(e) => Err((e.get() >> 1, e.get() & OUT != 0)),
        E::Vacant(v) => {
            v.insert(pool << 1 | u64::from(out));
            Ok(())
        }
    }
}

/// Marks an idle object of `pool` as handed out; `false` if it is not an
/// idle one of `pool` (a bug).
#[inline]
pub(crate) fn lend(obj: NonNull<c_void>, pool: u64) -> bool {
    let mut shard = shard(obj).lock();
    match shard.get_mut(&key(obj)) {
        Some(e) if *e == pool << 1 => {
            *e |= OUT;
            true
        }
        _ => false,
    }
}

/// Why a put was refused.
pub(crate) enum PutError {
    Foreign,
    WrongPool(u64),
    DoublePut,
}

/// Marks an object of `pool` that is out as idle again.
#[inline]
pub(crate) fn take_back(obj: NonNull<c_void>, pool: u64) -> Result<(), PutError> {
    let mut shard = shard(obj).lock();
    let Some(e) = shard.get_mut(&key(obj)) else {
        return Err(PutError::Foreign);
    };
    if *e >> 1 != pool {
        return Err(PutError::WrongPool(*e >> 1));
    }
    if *e & OUT == 0 {
        return Err(PutError::DoublePut);
    }
    *e &= !OUT;
    Ok(())
}

/// Forgets an object that is being destroyed; `false` if it was unknown.
pub(crate) fn remove(obj: NonNull<c_void>) -> bool {
    shard(obj).lock().remove(&key(obj)).is_some()
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
        insert(obj, 9, false).unwrap();
        assert_eq!(insert(obj, 3, false).unwrap_err(), (9, false));
        assert!(matches!(take_back(obj, 9), Err(PutError::DoublePut)));
        assert!(matches!(take_back(obj, 4), Err(PutError::WrongPool(9))));
        assert!(!lend(obj, 4));
        assert!(lend(obj, 9));
        assert!(!lend(obj, 9), "already out");
        assert_eq!(insert(obj, 3, false).unwrap_err(), (9, true));
        assert!(take_back(obj, 9).is_ok());
        assert!(remove(obj));
        assert!(matches!(take_back(obj, 9), Err(PutError::Foreign)));
        insert(obj, 9, true).unwrap();
        assert!(take_back(obj, 9).is_ok());
        assert!(matches!(take_back(obj, 9), Err(PutError::DoublePut)));
        assert!(remove(obj));
        assert!(!remove(obj));
    }
}
