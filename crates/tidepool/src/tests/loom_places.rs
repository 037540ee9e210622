//! Loom model of the `max_live` credit hand-off (`shared/places.rs`,
//! `cache/credit.rs`): threads take chunks of places from the global count,
//! spend and refill their own credits, while another thread recalls them.
//! Checks that the limit is never passed, not even for an instant, that no
//! reservation fails while places are free, and that every place is
//! accounted for at the end. (The recall runs on a spawned thread: the
//! model's own thread is not preempted where it would need to be, and a
//! recall made of a load and a store instead of a swap went unnoticed
//! there; on a spawned thread loom finds it at once.)

use std::sync::Arc;

use loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use loom::thread;

use crate::cache::credit::Credit;
use crate::shared::places::Places;

const LIMIT: usize = 4;

struct World {
    places: Places,
    credits: [Credit; 2],
    /// Objects "created": bumped after a reservation, dropped before a
    /// release.
    live: AtomicUsize,
}

impl World {
    fn create(&self, me: usize) {
        self.places
            .reserve(Some(&self.credits[me]), |visit| {
                self.credits.iter().for_each(visit);
            })
            .expect("a place is free: at most 3 objects at once, limit 4");
        let now = self.live.fetch_add(1, SeqCst) + 1;
        assert!(now <= LIMIT, "max_live passed: {now}");
    }

    fn destroy(&self, me: usize) {
        self.live.fetch_sub(1, SeqCst);
        self.places.release(Some(&self.credits[me]));
    }
}

#[test]
fn credits_never_pass_the_limit_and_balance() {
    loom::model(|| {
        // Chunks of 2 while 4 places are free (production waits for 4
        // chunks' worth): so thread 0's first create parks a credit that
        // thread 1's second create may have to recall.
        let world = Arc::new(World {
            places: Places::with_near(LIMIT, 2, 4),
            credits: [Credit::default(), Credit::default()],
            live: AtomicUsize::new(0),
        });
        let w = Arc::clone(&world);
        let one = thread::spawn(move || {
            w.create(0);
            w.destroy(0);
            w.create(0);
            w.destroy(0);
        });
        let w = Arc::clone(&world);
        let two = thread::spawn(move || {
            w.create(1);
            w.create(1);
            w.destroy(1);
            w.destroy(1);
        });
        // A third thread recalls (a reclaim_unused, a get at the limit elsewhere).
        let w = Arc::clone(&world);
        let three = thread::spawn(move || {
            w.places.recall(|visit| w.credits.iter().for_each(visit));
        });
        one.join().unwrap();
        two.join().unwrap();
        three.join().unwrap();
        let held: usize = world.credits.iter().map(Credit::held).sum();
        assert_eq!(world.live.load(SeqCst), 0);
        assert_eq!(world.places.reserved(), held, "reserved == credits + live");
    });
}
