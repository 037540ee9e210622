//! The default batch callbacks of `Manage`: `create_batch` returns 1 to `n`
//! objects or an error with nothing made, and leaves nothing behind when a
//! `create` panics; `destroy_batch` destroys every object even when some
//! `destroy` panics, and never turns a second panic into an abort;
//! `purge_batch` purges each.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};

use common::{panic_text, Counting, CreateFailed, INJECTED};
use tidepool::Manage;

#[test]
fn create_batch_makes_n_and_zero_makes_nothing() {
    let (m, ledger) = Counting::new();
    assert!(m.create_batch(0).unwrap().is_empty());
    assert_eq!(ledger.counts().create_calls, 0);
    let batch = m.create_batch(5).unwrap();
    assert_eq!(batch.len(), 5);
    assert_eq!(ledger.counts().created, 5);
    m.destroy_batch(batch);
    assert_eq!(ledger.counts().destroyed, 5);
    ledger.assert_all_accounted();
}

#[test]
fn a_failure_part_way_returns_what_was_made_and_a_first_failure_is_the_error() {
    let (m, ledger) = Counting::new();
    ledger.fail_create.arm_after(2, 1);
    let batch = m.create_batch(5).unwrap();
    assert_eq!(batch.len(), 2, "stops at the failure, keeps the two");
    assert_eq!(ledger.counts().create_calls, 3);
    ledger.fail_create.arm(1);
    assert_eq!(m.create_batch(5).unwrap_err(), CreateFailed { call: 4 });
    assert_eq!(
        ledger.counts().created,
        2,
        "nothing made by the failed call"
    );
    m.destroy_batch(batch);
    ledger.assert_all_accounted();
}

#[test]
fn a_panicking_create_leaves_nothing_behind() {
    let (m, ledger) = Counting::new();
    ledger.panic_create.arm_after(3, 1);
    let panic = catch_unwind(AssertUnwindSafe(|| m.create_batch(8))).unwrap_err();
    assert!(panic_text(&*panic).contains(INJECTED));
    let c = ledger.counts();
    assert_eq!(
        (c.created, c.destroyed),
        (3, 3),
        "the three made are destroyed"
    );
    ledger.assert_all_accounted();
}

#[test]
fn a_panicking_destroy_still_destroys_the_rest_then_resumes() {
    let (m, ledger) = Counting::new();
    let batch = m.create_batch(6).unwrap();
    ledger.panic_destroy.arm_after(1, 2);
    let panic = catch_unwind(AssertUnwindSafe(|| m.destroy_batch(batch))).unwrap_err();
    assert!(panic_text(&*panic).contains(INJECTED));
    assert_eq!(ledger.counts().destroyed, 6, "every object, once");
    ledger.assert_all_accounted();
    m.destroy_batch(Vec::new());
    assert_eq!(ledger.counts().destroyed, 6);
}

/// Dropped while its thread unwinds: a panicking `destroy` inside must not
/// become a panic out of a destructor during unwinding (an abort).
struct TearDownOnDrop<'a>(&'a Counting, Vec<common::Obj>);

impl Drop for TearDownOnDrop<'_> {
    fn drop(&mut self) {
        self.0.destroy_batch(std::mem::take(&mut self.1));
    }
}

/// Would abort the process if it failed, so it runs in a child process
/// (this binary, re-run with the test's name).
#[test]
#[cfg_attr(miri, ignore = "runs in a child process, which miri cannot spawn")]
fn destroy_batch_while_unwinding_does_not_abort() {
    const NAME: &str = "destroy_batch_while_unwinding_does_not_abort";
    const CHILD: &str = "TIDEPOOL_MANAGE_BATCH_CHILD";
    if std::env::var(CHILD).as_deref() == Ok(NAME) {
        let (m, ledger) = Counting::new();
        let batch = m.create_batch(4).unwrap();
        ledger.panic_destroy.always();
        let panic = catch_unwind(AssertUnwindSafe(|| {
            let _guard = TearDownOnDrop(&m, batch);
            panic!("{INJECTED}: the outer panic");
        }))
        .unwrap_err();
        assert!(panic_text(&*panic).contains("the outer panic"));
        ledger.panic_destroy.disarm();
        assert_eq!(ledger.counts().destroyed, 4);
        ledger.assert_all_accounted();
        eprintln!("CHILD: survived");
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
        .env(CHILD, NAME)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}\n{stderr}", out.status);
    assert!(stderr.contains("CHILD: survived"), "{stderr}");
}

#[test]
fn purge_batch_purges_each() {
    let (m, ledger) = Counting::new();
    let mut batch = m.create_batch(3).unwrap();
    m.purge_batch(&mut batch);
    m.purge_batch(&mut []);
    assert_eq!(ledger.counts().purged, 3);
    for o in &batch {
        assert_eq!(ledger.purges_of(o.id()), 1);
    }
    m.destroy_batch(batch);
    ledger.assert_all_accounted();
}
