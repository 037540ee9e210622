//! `handoff`: objects made on one thread and freed on another, at a live
//! limit and without one.
//!
//! The flow seed 001's resizing pool could not take (coroutines created on
//! one thread and freed on another broke its per-thread counts), at seed
//! 002's live limit: a producer thread gets objects one at a time and sends
//! them [`MESSAGE`] at a time over a channel of [`CHANNEL`] messages to a
//! consumer thread, which keeps the last [`KEPT`] and gives back the older
//! ones on its own thread (the channel's ends spin rather than sleep, so
//! that its cost stays below the pools'). At most about 40 objects are in
//! use at once;
//! the tight limit is [`TIGHT`]. Policies: seed 002's FreeBSD vnode
//! accounting before and after the patch (their release batches and free
//! list take cross-thread frees as they come; at the limit they recycle
//! off the free list, and pass the limit by a few where it is empty, as
//! FreeBSD does after its wait), a `Mutex<Vec>` free list of the kind a user
//! writes by hand (at the limit the producer yields until the consumer
//! gives one back), and a `tidepool::Pool` with default settings, its
//! producer retrying a `get_owned` the limit refused.
//!
//! Measured: ns per object (wall time of the whole flow over the objects
//! handed off), objects created, and tidepool's thread caches taken (the
//! cross-thread steals a `get` at the limit falls back on). Every round
//! runs each policy once, in rotating order; every round is kept.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use crossbeam_utils::Backoff;

use crate::policy::PolicyKind;
use crate::report::category_plot;
use crate::report::summary::Ratio;
use crate::report::{Claim, Column, Figure, Format, ScenarioReport, Verdict};
use crate::scenario::limit_churn::{fbsd, Obj};
use crate::scenario::{param, summarize_counts, Progress, Settings};

/// The scenario's id.
pub const ID: &str = "handoff";

/// Objects per message from the producer to the consumer.
pub const MESSAGE: usize = 8;

/// Messages the channel holds before the producer blocks.
pub const CHANNEL: usize = 2;

/// Objects the consumer keeps: it gives back the older ones.
pub const KEPT: usize = 16;

/// The tight live limit: well above the ~40 objects in use at once, well
/// below what two threads' caches of a fixed batch of 32 could hold.
pub const TIGHT: u64 = 64;

/// The limits, as named in the report: `(tag, limit)`.
pub const LIMITS: [(&str, Option<u64>); 2] = [("lo", Some(TIGHT)), ("none", None)];

/// Rounds at least, whatever `--repeats` says: the claims compare medians
/// of paired rounds, and fewer than 9 on 2 cores are noise.
pub const MIN_ROUNDS: usize = 9;

/// Objects handed off per round.
fn objects(quick: bool) -> u64 {
    if quick {
        50_000
    } else {
        1_000_000
    }
}

/// The metric key of ns per object at limit `tag`.
pub fn key(tag: &str) -> String {
    format!("ns_{tag}")
}

/// The metric key of count `what` (`created`, `taken`) at limit `tag`.
pub fn count_key(what: &str, tag: &str) -> String {
    format!("{what}_{tag}")
}

/// `"limit 64"` or `"no limit"`.
pub fn limit_name(tag: &str) -> String {
    match LIMITS.iter().find(|(t, _)| *t == tag) {
        Some((_, Some(n))) => format!("limit {n}"),
        _ => "no limit".to_owned(),
    }
}

/// The report's plot: ns per object at each limit.
fn figure() -> Figure {
    Figure::ByCategory(category_plot::Spec {
        title: "ns per object, by limit (lower is better)".to_owned(),
        y_label: "time per object handed off (ns)".to_owned(),
        x_label: "live limit (objects)".to_owned(),
        categories: LIMITS
            .iter()
            .map(|&(tag, _)| (key(tag), limit_name(tag)))
            .collect(),
    })
}

/// What one round of one policy counted.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    created: u64,
    /// tidepool only: thread caches taken.
    taken: Option<u64>,
}

/// A bounded channel of [`CHANNEL`] messages whose ends spin (then yield)
/// rather than sleep: a sleeping channel's wake-ups cost tens of times what
/// any policy does per object, and would hide the pools' differences. The
/// same for every policy.
struct Channel<T> {
    queue: Mutex<VecDeque<Vec<T>>>,
    closed: AtomicBool,
}

impl<T> Channel<T> {
    fn new() -> Self {
        Channel {
            queue: Mutex::new(VecDeque::with_capacity(CHANNEL)),
            closed: AtomicBool::new(false),
        }
    }

    fn send(&self, message: Vec<T>) {
        let backoff = Backoff::new();
        loop {
            let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            if q.len() < CHANNEL {
                q.push_back(message);
                return;
            }
            drop(q);
            backoff.snooze();
        }
    }

    /// The next message; `None` once the sender closed and all were read.
    fn recv(&self) -> Option<Vec<T>> {
        let backoff = Backoff::new();
        loop {
            let closed = self.closed.load(Ordering::Acquire);
            let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(message) = q.pop_front() {
                return Some(message);
            }
            if closed {
                return None;
            }
            drop(q);
            backoff.snooze();
        }
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }
}

/// Runs the flow: `get` on this thread, `put` on a consumer thread (each
/// with its own per-thread state, made by `local`). Returns ns per object.
fn flow<L, T: Send>(
    n: u64,
    local: impl Fn() -> L + Sync,
    get: impl Fn(&mut L, u64) -> T,
    put: impl Fn(&mut L, T) + Sync,
) -> f64 {
    let (local, put) = (&local, &put);
    let channel = Channel::<T>::new();
    let rx = &channel;
    let t0 = Instant::now();
    std::thread::scope(|s| {
        s.spawn(move || {
            let mut mine = local();
            let mut kept = VecDeque::with_capacity(KEPT + MESSAGE);
            while let Some(message) = rx.recv() {
                kept.extend(message);
                while kept.len() > KEPT {
                    if let Some(old) = kept.pop_front() {
                        put(&mut mine, old);
                    }
                }
            }
            for old in kept {
                put(&mut mine, old);
            }
        });
        let mut mine = local();
        let mut message = Vec::with_capacity(MESSAGE);
        for k in 0..n {
            message.push(get(&mut mine, k));
            if message.len() == MESSAGE {
                channel.send(std::mem::replace(&mut message, Vec::with_capacity(MESSAGE)));
            }
        }
        if !message.is_empty() {
            channel.send(message);
        }
        channel.close();
    });
    t0.elapsed().as_secs_f64() * 1e9 / n as f64
}

/// A free list under one lock, with a count of what exists: what a user
/// writes by hand. At the limit, a get yields until a put gives one back.
#[derive(Debug, Default)]
struct LockedList {
    // Boxed on purpose: each object is its own allocation, as in the other
    // policies.
    #[allow(clippy::vec_box)]
    free: Mutex<Vec<Box<Obj>>>,
    created: AtomicU64,
}

impl LockedList {
    fn get(&self, limit: u64, key: u64) -> Box<Obj> {
        loop {
            let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(mut obj) = free.pop() {
                drop(free);
                obj.reset(key);
                return obj;
            }
            if self.created.load(Ordering::Relaxed) < limit {
                self.created.fetch_add(1, Ordering::Relaxed);
                drop(free);
                return Obj::boxed(key);
            }
            drop(free);
            std::thread::yield_now();
        }
    }

    fn put(&self, obj: Box<Obj>) {
        self.free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(obj);
    }
}

/// One round of `kind` at `limit`: ns per object, and what it counted.
fn round(kind: PolicyKind, limit: Option<u64>, n: u64) -> Result<(f64, Counts), String> {
    match kind {
        PolicyKind::FbsdBefore | PolicyKind::Fbsd2023 => {
            let version = if kind == PolicyKind::FbsdBefore {
                fbsd::Version::Before
            } else {
                fbsd::Version::Slop2023
            };
            let v = fbsd::Vnodes::new(version, limit.unwrap_or(u64::MAX / 2));
            let created = AtomicU64::new(0);
            // Each thread's handle counts what it made; both are dropped
            // (flushed) inside the flow.
            let ns = flow(
                n,
                || Counted(v.local(), &created),
                |l: &mut Counted<'_, '_>, k| {
                    let o = l.0.alloc(k);
                    std::hint::black_box(&o);
                    o
                },
                |l: &mut Counted<'_, '_>, o| l.0.release(o),
            );
            Ok((
                ns,
                Counts {
                    created: created.into_inner(),
                    taken: None,
                },
            ))
        }
        PolicyKind::LockedList => {
            let list = LockedList::default();
            let limit = limit.unwrap_or(u64::MAX);
            let ns = flow(
                n,
                || (),
                |(), k| {
                    let o = list.get(limit, k);
                    std::hint::black_box(&o);
                    o
                },
                |(), o| list.put(o),
            );
            Ok((
                ns,
                Counts {
                    created: list.created.into_inner(),
                    taken: None,
                },
            ))
        }
        PolicyKind::Tidepool => {
            let mut builder = tidepool::Pool::builder(Objects);
            if let Some(limit) = limit {
                builder = builder.max_live(limit as usize);
            }
            let pool = std::sync::Arc::new(builder.build().map_err(|e| e.to_string())?);
            let ns = flow(
                n,
                || (),
                |(), k| loop {
                    match pool.get_owned() {
                        Ok(mut o) => {
                            o.reset(k);
                            std::hint::black_box(&*o);
                            break o;
                        }
                        Err(tidepool::Error::Exhausted { .. }) => std::thread::yield_now(),
                        Err(e) => panic!("tidepool get failed: {e}"),
                    }
                },
                |(), o| drop(o),
            );
            let st = pool.stats();
            Ok((
                ns,
                Counts {
                    created: st.created,
                    taken: Some(st.caches_taken),
                },
            ))
        }
        other => Err(format!("{other} is not a handoff policy")),
    }
}

/// tidepool's manager: boxed objects. A named type: a closure or `fn`
/// manager here trips a compiler bug in debug builds (rustc 1.95).
#[derive(Debug)]
struct Objects;

impl tidepool::Manage for Objects {
    type Item = Box<Obj>;
    type Error = std::convert::Infallible;

    fn create(&self) -> Result<Box<Obj>, Self::Error> {
        Ok(Obj::boxed(0))
    }
}

/// A FreeBSD thread handle that adds what it created to a shared count
/// when the thread is done with it.
struct Counted<'a, 'b>(fbsd::Local<'a>, &'b AtomicU64);

impl Drop for Counted<'_, '_> {
    fn drop(&mut self) {
        self.0.flush();
        self.1.fetch_add(self.0.created, Ordering::Relaxed);
    }
}

/// The policies run: those of [`PolicyKind::HANDOFF`] `settings` selects.
pub fn policies(settings: &Settings) -> Vec<PolicyKind> {
    PolicyKind::HANDOFF
        .into_iter()
        .filter(|p| settings.policies.contains(p))
        .collect()
}

/// Runs the scenario.
pub(crate) fn run(settings: &Settings, progress: &dyn Progress) -> ScenarioReport {
    let policies = policies(settings);
    let n = objects(settings.quick);
    let rounds = if settings.quick {
        settings.repeats
    } else {
        settings.repeats.max(MIN_ROUNDS)
    };
    progress.scenario(ID, (policies.len() * rounds * LIMITS.len()) as u64);
    // Warm-up, untimed: the allocator's arenas and the first page faults
    // are paid here, not by whichever policy happens to run first.
    for &kind in &policies {
        let _ = round(kind, Some(TIGHT), n / 10);
    }
    let mut records: BTreeMap<PolicyKind, Vec<BTreeMap<String, f64>>> = BTreeMap::new();
    let mut errors = Vec::new();
    for r in 0..rounds {
        let mut this: BTreeMap<PolicyKind, BTreeMap<String, f64>> = BTreeMap::new();
        for &(tag, limit) in &LIMITS {
            // Rotate the order so that no policy always runs first.
            for i in 0..policies.len() {
                let kind = policies[(i + r) % policies.len()];
                progress.run(
                    kind,
                    &format!("round {}/{rounds}, {}", r + 1, limit_name(tag)),
                );
                match round(kind, limit, n) {
                    Ok((ns, counts)) => {
                        let m = this.entry(kind).or_default();
                        m.insert(key(tag), ns);
                        m.insert(count_key("created", tag), counts.created as f64);
                        if let Some(taken) = counts.taken {
                            m.insert(count_key("taken", tag), taken as f64 * 10_000.0 / n as f64);
                        }
                    }
                    Err(e) => errors.push(format!("{kind}, {}: {e}", limit_name(tag))),
                }
                progress.run_done();
            }
        }
        for (kind, m) in this {
            records.entry(kind).or_default().push(m);
        }
    }
    progress.scenario_done();
    let headline = key(LIMITS[0].0);
    let results = summarize_counts(&policies, records, &headline);
    let mut columns = Vec::new();
    for &(tag, _) in &LIMITS {
        let name = limit_name(tag);
        columns.push(
            Column::new(&key(tag), &format!("ns per object, {name}"), Format::Ratio)
                .terminal(&format!("ns {tag}")),
        );
        columns.push(Column::new(
            &count_key("created", tag),
            &format!("objects created, {name}"),
            Format::Count,
        ));
    }
    columns.push(Column::new(
        &count_key("taken", LIMITS[0].0),
        &format!(
            "tidepool caches taken per 10,000 objects, {}",
            limit_name(LIMITS[0].0)
        ),
        Format::Ratio,
    ));
    let mut params = BTreeMap::new();
    param(&mut params, "objects per round", n);
    param(&mut params, "rounds (each policy once, rotating)", rounds);
    param(&mut params, "objects per message", MESSAGE);
    param(&mut params, "channel (messages)", CHANNEL);
    param(&mut params, "kept by the consumer", KEPT);
    param(&mut params, "tight limit", TIGHT);
    param(&mut params, "object", "64-byte struct, boxed");
    let mut notes = vec![
        "a producer thread gets objects one at a time and sends them 8 at a time over a \
         channel of 2 messages to a consumer thread, which keeps the last 16 and gives back \
         the older ones: every object is made (or recycled) on one thread and freed on \
         another, and at most about 40 are in use at once"
            .to_owned(),
        "fbsd-before and fbsd-2023 keep every released object as a cache of its key until \
         the limit (without one, every get makes a new object); at the limit they recycle \
         off the free list and pass the limit by a few when it is empty, as FreeBSD does \
         after its wait. locked-list is a Mutex<Vec> free list with a count of what exists; \
         at the limit its producer yields until the consumer gives one back. tidepool is a \
         Pool with default settings; a get the limit refuses is retried after a yield"
            .to_owned(),
        "ns per object: wall time of the whole flow (both threads) over the objects handed \
         off; the plot shows every round as a dot, the median as the line"
            .to_owned(),
    ];
    notes.extend(errors.into_iter().map(|e| format!("run failed: {e}")));
    ScenarioReport {
        id: ID.to_owned(),
        title: "handoff: made on one thread, freed on another, at a live limit and without"
            .to_owned(),
        seeds: vec!["002".to_owned()],
        finding: "Seed 001's resizing pool was dropped because coroutines created on one \
                  thread and freed on another broke its per-thread bookkeeping; seed 002 \
                  recycles at a live limit. Here both at once: a one-way flow between two \
                  threads, at a limit of 64 and without one, against seed 002's policies and \
                  a locked free list."
            .to_owned(),
        quotes: Vec::new(),
        workload: format!(
            "{n} objects per round: a producer gets them one at a time and sends them {MESSAGE} \
             at a time over a channel of {CHANNEL} messages to a consumer, which keeps the \
             last {KEPT} and gives back the rest. Limit {TIGHT}, and none. The table shows ns \
             per object and objects created at both, and tidepool's caches taken per 10,000 \
             objects at the limit."
        ),
        params,
        reclaim_interval_ms: settings.interval().as_secs_f64() * 1e3,
        columns,
        phases: Vec::new(),
        results,
        claims: Vec::new(),
        plots: vec![figure()],
        notes,
    }
}

fn claim(s: &ScenarioReport, claim: String, rule: &str) -> Claim {
    Claim {
        seed: "002".to_owned(),
        scenario: s.id.clone(),
        claim,
        published: "–".to_owned(),
        published_detail: "the locked free list a user would write is the baseline to match"
            .to_owned(),
        measured: "–".to_owned(),
        measured_detail: "a policy was not run, or its runs failed".to_owned(),
        rule: rule.to_owned(),
        verdict: Verdict::Unmeasured,
    }
}

/// What the run says: tidepool at least as fast as the locked list at the
/// limit and without one, and stealing at the limit rare.
pub(crate) fn claims(s: &ScenarioReport) -> Vec<Claim> {
    let mut out = Vec::new();
    let mut c = claim(
        s,
        "handoff, tidepool vs locked-list, limit 64 and none".to_owned(),
        "≥ 1.00× at both",
    );
    if let (Some(locked), Some(tp)) = (
        s.result(PolicyKind::LockedList),
        s.result(PolicyKind::Tidepool),
    ) {
        let both: Vec<(&str, Ratio)> = LIMITS
            .iter()
            .filter_map(|&(tag, _)| Some((tag, Ratio::of(locked, tp, &key(tag))?)))
            .collect();
        if both.len() == LIMITS.len() {
            let worst = both
                .iter()
                .map(|(_, r)| r.median)
                .fold(f64::INFINITY, f64::min);
            c.measured = crate::report::summary::times(worst);
            c.measured_detail = both
                .iter()
                .map(|(tag, r)| {
                    format!(
                        "{}: locked-list ns per object / tidepool's {} (medians {:.0} / {:.0} ns)",
                        limit_name(tag),
                        r.detail(),
                        locked.metric(&key(tag)),
                        tp.metric(&key(tag))
                    )
                })
                .collect::<Vec<_>>()
                .join("; ");
            c.verdict = Verdict::of(worst >= 1.0);
        }
    }
    out.push(c);
    let tag = LIMITS[0].0;
    let mut c = claim(
        s,
        format!("handoff, tidepool caches taken, {}", limit_name(tag)),
        "≤ 1 per 10,000 objects, every round",
    );
    if let Some(tp) = s.result(PolicyKind::Tidepool) {
        let per = tp.per_run(&count_key("taken", tag));
        if !per.is_empty() {
            let worst = per.iter().copied().fold(0.0_f64, f64::max);
            c.measured = format!("{worst:.2}");
            c.measured_detail = format!(
                "caches taken per 10,000 objects: worst round {worst:.2}, median {:.2}",
                tp.metric(&count_key("taken", tag)),
            );
            c.verdict = Verdict::of(worst <= 1.0);
        }
    }
    out.push(c);
    out
}
