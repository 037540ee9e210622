//! `tidepool_stats` counts the objects a pool is destroying: while a
//! `destroy` callback runs, the object is neither live nor idle, and
//! `live + idle + destroying == created - destroyed` still holds.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

use tidepool_ffi::tidepool_status::*;
use tidepool_ffi::*;

static ENTERED: AtomicBool = AtomicBool::new(false);
static RELEASE: AtomicBool = AtomicBool::new(false);

unsafe extern "C" fn create(_: *mut c_void, out: *mut *mut c_void) -> i32 {
    // SAFETY: the pool's out-pointer.
    unsafe { out.write(Box::into_raw(Box::new(0u64)).cast()) };
    0
}

unsafe extern "C" fn destroy(_: *mut c_void, obj: *mut c_void) {
    ENTERED.store(true, Ordering::SeqCst);
    while !RELEASE.load(Ordering::SeqCst) {
        std::thread::yield_now();
    }
    // SAFETY: made by `create`, destroyed once.
    drop(unsafe { Box::from_raw(obj.cast::<u64>()) });
}

fn stats(pool: usize) -> tidepool_stats {
    // SAFETY: all-zero bytes are valid stats; a live handle.
    unsafe {
        let mut s: tidepool_stats = std::mem::zeroed();
        s.size = std::mem::size_of::<tidepool_stats>();
        assert_eq!(
            tidepool_pool_stats(pool as *mut tidepool_pool, &mut s),
            TIDEPOOL_OK
        );
        s
    }
}

#[test]
fn an_object_being_destroyed_is_counted() {
    // SAFETY: a valid config and out-pointers; the handle is used until
    // its destroy only.
    unsafe {
        let mut c: tidepool_config = std::mem::zeroed();
        c.size = std::mem::size_of::<tidepool_config>();
        c.flags = TIDEPOOL_NO_BACKGROUND;
        c.create = Some(create);
        c.destroy = Some(destroy);
        let mut pool = std::ptr::null_mut();
        assert_eq!(tidepool_obj_pool_new(&c, &mut pool), TIDEPOOL_OK);
        let mut obj = std::ptr::null_mut();
        assert_eq!(tidepool_obj_get(pool, 0, &mut obj), TIDEPOOL_OK);
        assert_eq!(tidepool_obj_put(pool, obj), TIDEPOOL_OK);

        let handle = pool as usize;
        let reader = std::thread::spawn(move || {
            while !ENTERED.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            let during = stats(handle);
            RELEASE.store(true, Ordering::SeqCst);
            during
        });
        let mut n = 0;
        assert_eq!(tidepool_pool_drain(pool, &mut n), TIDEPOOL_OK);
        let during = reader.join().unwrap();
        assert_eq!((during.created, during.destroyed), (1, 0), "{during:?}");
        assert_eq!((during.live, during.idle), (0, 0), "{during:?}");
        assert_eq!(during.destroying, 1, "{during:?}");
        assert_eq!(
            during.live + during.idle + during.destroying,
            during.created - during.destroyed
        );

        let after = stats(handle);
        assert_eq!((after.destroyed, after.destroying), (1, 0), "{after:?}");
        assert_eq!(tidepool_pool_destroy(pool), TIDEPOOL_OK);
    }
}
