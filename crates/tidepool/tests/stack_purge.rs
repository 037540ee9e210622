//! Purging really releases memory (by `mincore` per stack and by the
//! process's resident anonymous memory), keeps the top `keep_resident` bytes,
//! and leaves the stack usable.
//!
//! The tests of this binary take turns (`SERIAL`): the RSS test measures the
//! whole process, and another test freeing memory meanwhile would make it
//! pass for the wrong reason.
#![cfg(target_os = "linux")]

use std::sync::{Mutex, MutexGuard, PoisonError};

use tidepool::stack::{GuardedStack, StackPool};

const PAGE: usize = 4096;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

fn fill(stack: &GuardedStack, byte: u8) {
    // SAFETY: the usable part is readable and writable, and nothing else
    // uses this stack while we hold it.
    unsafe {
        stack
            .bottom()
            .as_ptr()
            .write_bytes(byte, stack.usable_size())
    }
}

/// The byte at `offset` from the bottom of the usable part.
fn byte_at(stack: &GuardedStack, offset: usize) -> u8 {
    assert!(offset < stack.usable_size());
    // SAFETY: in bounds of the usable part, which is readable.
    unsafe { stack.bottom().as_ptr().add(offset).read_volatile() }
}

/// `RssAnon` of this process, in bytes.
fn rss_anon() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("RssAnon:"))
        .expect("RssAnon in /proc/self/status");
    let kib: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

#[test]
fn purge_releases_all_but_the_kept_top_and_the_stack_is_reusable() {
    let _turn = serial();
    let usable = 64 * PAGE;
    let keep = 4 * PAGE;
    let pool = StackPool::builder(usable)
        .keep_resident(keep)
        .batch_size(4)
        .max_idle(64)
        // Exact residency: no process-wide reclaimer purging or
        // draining on its own (a real pressure signal would).
        .background(false)
        .build()
        .unwrap();
    let stacks: Vec<_> = (0..16).map(|_| pool.get().unwrap()).collect();
    for s in &stacks {
        fill(s, 0xab);
        assert_eq!(s.resident_bytes().unwrap(), usable);
    }
    drop(stacks);
    // Two batches of 4 stay in this thread's cache; two reach the depot.
    let s = pool.stats();
    assert_eq!((s.pool.idle, s.pool.idle_depot), (16, 8));

    assert_eq!(pool.purge(), 8);
    assert_eq!(pool.stats().purged, 8);
    assert_eq!(pool.purge(), 0, "purged stacks are not purged again");

    let again: Vec<_> = (0..16).map(|_| pool.get().unwrap()).collect();
    assert_eq!(pool.stats().pool.created, 16, "no new mappings");
    let (hot, purged) = again.split_at(8);
    for s in hot {
        assert_eq!(s.resident_bytes().unwrap(), usable, "cached: untouched");
        assert_eq!(byte_at(s, 0), 0xab);
    }
    for s in purged {
        assert_eq!(s.resident_bytes().unwrap(), keep, "only the top stays");
        assert_eq!(byte_at(s, usable - 1), 0xab, "the kept top is intact");
        assert_eq!(byte_at(s, usable - keep), 0xab);
        assert_eq!(byte_at(s, usable - keep - 1), 0, "released pages read 0");
        assert_eq!(byte_at(s, 0), 0);
        // Usable as before: every page writable again.
        fill(s, 0x17);
        assert_eq!(s.resident_bytes().unwrap(), usable);
        assert_eq!(byte_at(s, 0), 0x17);
    }
    assert_eq!(pool.stats().purge_failures, 0);
}

#[test]
fn keep_resident_zero_releases_every_page() {
    let _turn = serial();
    let pool = StackPool::builder(8 * PAGE)
        .batch_size(1)
        .max_idle(4)
        // Exact residency: no process-wide reclaimer purging or
        // draining on its own (a real pressure signal would).
        .background(false)
        .build()
        .unwrap();
    let stacks: Vec<_> = (0..3).map(|_| pool.get().unwrap()).collect();
    stacks.iter().for_each(|s| fill(s, 1));
    drop(stacks); // 2 cached, 1 in the depot
    assert_eq!(pool.purge(), 1);
    let stacks: Vec<_> = (0..3).map(|_| pool.get().unwrap()).collect();
    assert_eq!(stacks[2].resident_bytes().unwrap(), 0);
    assert_eq!(pool.stats().idle_resident_max, 0, "nothing idle");
}

#[test]
fn purge_lowers_the_process_rss() {
    let _turn = serial();
    let usable = 128 * PAGE; // 512 KiB
    let pool = StackPool::builder(usable)
        .batch_size(8)
        .max_idle(64)
        // Exact residency: no process-wide reclaimer purging or
        // draining on its own (a real pressure signal would).
        .background(false)
        .build()
        .unwrap();
    let stacks: Vec<_> = (0..64).map(|_| pool.get().unwrap()).collect();
    stacks.iter().for_each(|s| fill(s, 0xcd));
    drop(stacks); // 16 cached, 48 (24 MiB) in the depot
    assert_eq!(pool.stats().pool.idle_depot, 48);

    let before = rss_anon();
    assert_eq!(pool.purge(), 48);
    let after = rss_anon();
    let released = before.saturating_sub(after);
    assert!(
        released >= 20 << 20,
        "RssAnon {before} -> {after}: released {released} bytes, expected about 24 MiB"
    );
    assert_eq!(pool.stats().pool.destroyed, 0, "purged, not unmapped");
}
