//! The pool policies under test, behind one trait.
//!
//! Each seed policy is the seed's algorithm with the seed's constants,
//! transcribed from the C; QEMU's `__thread` variables become a
//! [`Local`] that each worker thread owns (so that several policies can be
//! measured one after another in one process), and a thread's exit is the
//! `Local`'s drop. Stacks are created and destroyed for real (`mmap`,
//! `mprotect`, `munmap`).

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use corosensei::stack::DefaultStack;

use crate::stack::LabStack;

pub mod none;
pub mod qemu_2021;
pub mod qemu_2024;
pub mod qemu_fixed;
pub mod tidepool;

/// Which policy.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
pub enum PolicyKind {
    /// Create and destroy a stack for every request.
    #[serde(rename = "none")]
    #[value(name = "none")]
    None,
    /// QEMU before 2021: 64 per thread, 128 global, then destroy.
    #[serde(rename = "qemu-fixed")]
    #[value(name = "qemu-fixed")]
    QemuFixed,
    /// QEMU's 2021 patch: unbounded per-thread pools resized every 15 s.
    #[serde(rename = "qemu-2021")]
    #[value(name = "qemu-2021")]
    Qemu2021,
    /// QEMU since 2024: capped global list of batches, 2 batches per thread.
    #[serde(rename = "qemu-2024")]
    #[value(name = "qemu-2024")]
    Qemu2024,
    /// tidepool's `StackPool` (in `limit-churn`, a `Pool` with `max_live`).
    #[serde(rename = "tidepool")]
    #[value(name = "tidepool")]
    Tidepool,
    /// Seed 002 before: FreeBSD's vnode allocation accounting before the
    /// patch (`limit-churn` only).
    #[serde(rename = "fbsd-before")]
    #[value(name = "fbsd-before")]
    FbsdBefore,
    /// Seed 002 after: the patch's slop counter (`limit-churn` only).
    #[serde(rename = "fbsd-2023")]
    #[value(name = "fbsd-2023")]
    Fbsd2023,
    /// A `Mutex<Vec>` free list with a count of what exists, as a user
    /// writes by hand (`handoff` only).
    #[serde(rename = "locked-list")]
    #[value(name = "locked-list")]
    LockedList,
    /// Seed 004 before the fix: every releasing thread unmaps its own
    /// stacks at once, one `munmap` each, no bound (mass-teardown only).
    #[serde(rename = "dfly-before")]
    #[value(name = "dfly-before")]
    DflyBefore,
    /// Seed 004's fix: teardown through `ncpus` queued permits, one
    /// `munmap` per slab (mass-teardown only).
    #[serde(rename = "dfly-2017")]
    #[value(name = "dfly-2017")]
    Dfly2017,
}

impl PolicyKind {
    /// Every policy, in the order the report lists them.
    pub const ALL: [PolicyKind; 5] = [
        PolicyKind::None,
        PolicyKind::QemuFixed,
        PolicyKind::Qemu2021,
        PolicyKind::Qemu2024,
        PolicyKind::Tidepool,
    ];

    /// The policies of the `limit-churn` scenario, in the order the report
    /// lists them (not stack pools: [`build`](PolicyKind::build) refuses
    /// the FreeBSD ones).
    pub const LIMIT_CHURN: [PolicyKind; 3] = [
        PolicyKind::FbsdBefore,
        PolicyKind::Fbsd2023,
        PolicyKind::Tidepool,
    ];

    /// The policies of the `handoff` scenario, in the order the report
    /// lists them.
    pub const HANDOFF: [PolicyKind; 4] = [
        PolicyKind::FbsdBefore,
        PolicyKind::Fbsd2023,
        PolicyKind::LockedList,
        PolicyKind::Tidepool,
    ];

    /// seed 004's teardown policies and tidepool: the mass-teardown
    /// scenario's policies, in the order the report lists them.
    pub const TEARDOWN: [PolicyKind; 3] = [
        PolicyKind::DflyBefore,
        PolicyKind::Dfly2017,
        PolicyKind::Tidepool,
    ];

    /// Every policy of every scenario: [`PolicyKind::ALL`], then the
    /// teardown-only ones, then the live-limit ones.
    pub const EVERY: [PolicyKind; 10] = [
        PolicyKind::None,
        PolicyKind::QemuFixed,
        PolicyKind::Qemu2021,
        PolicyKind::Qemu2024,
        PolicyKind::Tidepool,
        PolicyKind::DflyBefore,
        PolicyKind::Dfly2017,
        PolicyKind::FbsdBefore,
        PolicyKind::Fbsd2023,
        PolicyKind::LockedList,
    ];

    /// Whether this is a stack pool (a [`Policy`] the harness runs), as
    /// opposed to a teardown policy of the mass-teardown scenario or a
    /// live-limit policy of limit-churn.
    pub fn is_pool(self) -> bool {
        !matches!(
            self,
            PolicyKind::DflyBefore
                | PolicyKind::Dfly2017
                | PolicyKind::FbsdBefore
                | PolicyKind::Fbsd2023
                | PolicyKind::LockedList
        )
    }

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::None => "none",
            PolicyKind::QemuFixed => "qemu-fixed",
            PolicyKind::Qemu2021 => "qemu-2021",
            PolicyKind::Qemu2024 => "qemu-2024",
            PolicyKind::Tidepool => "tidepool",
            PolicyKind::FbsdBefore => "fbsd-before",
            PolicyKind::Fbsd2023 => "fbsd-2023",
            PolicyKind::LockedList => "locked-list",
            PolicyKind::DflyBefore => "dfly-before",
            PolicyKind::Dfly2017 => "dfly-2017",
        }
    }

    /// Where the policy comes from.
    pub fn source(self) -> &'static str {
        match self {
            PolicyKind::None => "baseline: no pool",
            PolicyKind::QemuFixed => {
                "QEMU util/qemu-coroutine.c before seed 001 (64 local, 128 global)"
            }
            PolicyKind::Qemu2021 => {
                "seed 001: QEMU 2021 'resize pool periodically instead of limiting size'"
            }
            PolicyKind::Qemu2024 => "seed 000: QEMU 2024 'cap per-thread local pool size'",
            PolicyKind::Tidepool => {
                "tidepool::stack::StackPool: library defaults; reclaim interval scaled like QEMU \
                 2021's period (the default pressure hold follows it)"
            }
            PolicyKind::FbsdBefore => {
                "seed 002 before: FreeBSD vn_alloc (stable/14 before cc2d62daa339): a global \
                 counter read under the list lock, inc/dec/inc over the limit, a shared cycle \
                 counter written every time"
            }
            PolicyKind::Fbsd2023 => {
                "seed 002: FreeBSD 2023 'further speed up continuous free vnode recycle' \
                 (VNLRU_COUNT_SLOP = 100)"
            }
            PolicyKind::LockedList => {
                "baseline: a Mutex<Vec> free list with a count of what exists, as a user writes \
                 by hand (handoff only)"
            }
            PolicyKind::DflyBefore => {
                "seed 004, before: every releasing thread unmaps its own stacks at once, one \
                 munmap each, no bound (mass-teardown only)"
            }
            PolicyKind::Dfly2017 => {
                "seed 004: DragonFly 2017 'remove bottlenecks related to mass pipe closures': \
                 at most ncpus teardowns at once (queued permits), one munmap per slab of 32 \
                 (mass-teardown only)"
            }
        }
    }

    /// Builds the policy for one run.
    ///
    /// # Errors
    ///
    /// If tidepool refuses the settings (it should not for any stack size
    /// the lab uses), or for a teardown policy, which is not a pool: the
    /// mass-teardown scenario runs those itself.
    pub fn build(self, env: &PolicyEnv) -> Result<Box<dyn Policy>, String> {
        Ok(match self {
            PolicyKind::None => Box::new(none::NoPool::new(env)),
            PolicyKind::QemuFixed => Box::new(qemu_fixed::QemuFixed::new(env)),
            PolicyKind::Qemu2021 => Box::new(qemu_2021::Qemu2021::new(env)),
            PolicyKind::Qemu2024 => Box::new(qemu_2024::Qemu2024::new(env)),
            PolicyKind::Tidepool => Box::new(tidepool::Tidepool::new(env)?),
            PolicyKind::FbsdBefore | PolicyKind::Fbsd2023 | PolicyKind::LockedList => {
                return Err(format!(
                    "{self} is a live-limit policy of limit-churn and handoff, not a stack pool"
                ))
            }
            PolicyKind::DflyBefore | PolicyKind::Dfly2017 => {
                return Err(format!(
                    "{self} is a teardown policy, not a stack pool: it runs in mass-teardown only"
                ))
            }
        })
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a policy is built for: the same for every policy in a scenario.
#[derive(Clone, Copy, Debug)]
pub struct PolicyEnv {
    /// Usable bytes per stack (a guard page is added below).
    pub stack_size: usize,
    /// The period of periodic policies (QEMU 2021's resize timer,
    /// tidepool's reclaim interval), after time scaling.
    pub reclaim_interval: Duration,
    /// The hold tidepool's default gives persisting critical pressure at
    /// this period (for the reports: the lab does not set it).
    pub pressure_hold: Duration,
    /// `vm.max_map_count`, for QEMU 2024's global cap.
    pub max_map_count: u64,
    /// Measure the resident memory of idle stacks at every sample, for
    /// requests that touch this much of their stack (`fio-pressure`); `None`
    /// elsewhere (a `mincore` per slab per sample is not free).
    pub resident_touch: Option<crate::stack::Touch>,
    /// tidepool's idle-page decay (`purge_delay`, scaled with the period)
    /// is on; `fio-pressure` turns it off, so that what the signal frees is
    /// measured alone (`spike-then-idle` measures the decay).
    pub idle_decay: bool,
}

/// Why a policy had no stack to give: the kernel refused a mapping, or the
/// pool would not pass a cap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackFailure {
    /// What was said, e.g. "mmap: Cannot allocate memory (os error 12)".
    pub message: String,
}

impl StackFailure {
    pub(crate) fn from_io(e: &io::Error) -> Self {
        StackFailure {
            message: format!("mmap/mprotect of a guarded stack failed: {e}"),
        }
    }
}

impl fmt::Display for StackFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Stacks a policy has made and unmade so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Stacks mapped.
    pub created: u64,
    /// Stacks unmapped.
    pub destroyed: u64,
}

impl Counts {
    /// Stacks in existence: live (in a request) or idle (pooled).
    pub fn existing(&self) -> u64 {
        self.created.saturating_sub(self.destroyed)
    }
}

/// A pool policy, shared by the worker threads of a run.
pub trait Policy: Send + Sync {
    /// Which one.
    fn kind(&self) -> PolicyKind;

    /// The calling thread's view of the pool, for this thread only; dropped
    /// when the thread exits (QEMU's thread-exit notifier).
    fn local(&self) -> Box<dyn Local + '_>;

    /// Stacks created and destroyed so far (may lag by an operation per
    /// thread while threads run).
    fn counts(&self) -> Counts;

    /// Memory-pressure signals the policy has received: 0 for a policy
    /// without a pressure response (every seed policy).
    fn pressure_signals(&self) -> u64 {
        0
    }

    /// Bytes of the policy's idle stacks that are in RAM now, when `live`
    /// stacks are in use by requests; `None` when the policy cannot tell or
    /// was not asked to ([`PolicyEnv::resident_touch`]).
    fn idle_resident_bytes(&self, live: u64) -> Option<u64> {
        let _ = live;
        None
    }
}

/// One thread's handle on a policy: its thread-local pool, if any.
pub trait Local {
    /// A stack for a new request (`qemu_coroutine_create`): the policy's
    /// own work. Scenarios call [`get`](Self::get).
    ///
    /// # Errors
    ///
    /// When no stack could be made.
    fn take(&mut self) -> Result<LabStack, StackFailure>;

    /// [`take`](Self::take)'s stack, laid down as the caller will copy it
    /// ([`LabStack::lent`]): the same for every policy, so that no policy
    /// pays a store-forwarding stall for the way the harness calls it.
    ///
    /// # Errors
    ///
    /// As for `take`.
    fn get(&mut self) -> Result<LabStack, StackFailure> {
        self.take().map(LabStack::lent)
    }

    /// A request on `stack` terminated on this thread (`coroutine_delete`).
    fn put(&mut self, stack: LabStack);

    /// When this thread's periodic work is next due, if it has any.
    fn deadline(&self) -> Option<Instant> {
        None
    }

    /// Runs the periodic work that is due at `now`.
    fn on_timer(&mut self, now: Instant) {
        let _ = now;
    }
}

/// Maps and unmaps guarded stacks as QEMU does (`qemu_alloc_stack`:
/// `mmap` + a `PROT_NONE` guard page; `qemu_free_stack`: `munmap`), and
/// counts them. Used by every seed policy.
#[derive(Debug)]
pub(crate) struct Factory {
    stack_size: usize,
    created: AtomicU64,
    destroyed: AtomicU64,
}

impl Factory {
    pub(crate) fn new(stack_size: usize) -> Self {
        Factory {
            stack_size,
            created: AtomicU64::new(0),
            destroyed: AtomicU64::new(0),
        }
    }

    /// `qemu_coroutine_new`: a fresh stack, or the kernel's refusal.
    pub(crate) fn create(&self) -> Result<LabStack, StackFailure> {
        match DefaultStack::new(self.stack_size) {
            Ok(stack) => {
                self.created.fetch_add(1, Ordering::Relaxed);
                Ok(LabStack::Fresh(stack))
            }
            Err(e) => Err(StackFailure::from_io(&e)),
        }
    }

    /// `qemu_coroutine_delete`: unmaps the stack.
    pub(crate) fn destroy(&self, stack: LabStack) {
        drop(stack);
        self.destroyed.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn destroy_all(&self, stacks: impl IntoIterator<Item = LabStack>) {
        for stack in stacks {
            self.destroy(stack);
        }
    }

    pub(crate) fn counts(&self) -> Counts {
        // Destroyed first: a concurrent create/destroy pair cannot make
        // `existing` negative.
        let destroyed = self.destroyed.load(Ordering::Relaxed);
        let created = self.created.load(Ordering::Relaxed);
        Counts { created, destroyed }
    }
}
