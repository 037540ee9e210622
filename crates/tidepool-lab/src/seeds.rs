//! The five seeds: what each found, its published numbers, and every
//! quotation the lab prints, each with where it really stands. The report's
//! summary, the scenarios' descriptions and the policies' docs take their
//! words and numbers from here, so that a quotation is checked once.

use serde::{Deserialize, Serialize};

/// One seed: a patch that fixed one face of the pooling problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seed {
    /// `"000"` .. `"004"`.
    pub id: &'static str,
    /// A short name, e.g. `"QEMU 2024"`.
    pub short: &'static str,
    /// The patch's subject line.
    pub subject: &'static str,
    /// Who, where, when.
    pub origin: &'static str,
    /// The lab scenario(s) that replay it, built or planned.
    pub scenarios: &'static [&'static str],
}

/// Every seed, in order.
pub const SEEDS: [Seed; 5] = [
    Seed {
        id: "000",
        short: "QEMU 2024",
        subject: "coroutine: cap per-thread local pool size",
        origin: "QEMU, Stefan Hajnoczi, March 2024 (RHEL-28947)",
        scenarios: &["map-count", "fio"],
    },
    Seed {
        id: "001",
        short: "QEMU 2021",
        subject: "coroutine: resize pool periodically instead of limiting size",
        origin: "QEMU patch, Stefan Hajnoczi, September 2021; merged into a pull request, \
                 then dropped",
        scenarios: &["fio", "spike-then-idle", "fio-cross-thread"],
    },
    Seed {
        id: "002",
        short: "FreeBSD vnodes",
        subject: "vfs: further speed up continuous free vnode recycle",
        origin: "FreeBSD, Mateusz Guzik, October 2023 (stable/14 cc2d62daa339)",
        scenarios: &["limit-churn"],
    },
    Seed {
        id: "003",
        short: "Xen blkback",
        subject: "xen/blkback: Aggressively shrink page pools if a memory pressure is detected",
        origin: "Linux patch v2, SeongJae Park, December 2019",
        scenarios: &["pressure", "fio-pressure"],
    },
    Seed {
        id: "004",
        short: "DragonFly pipes",
        subject: "kernel - Remove bottlenecks related to mass pipe closures",
        origin: "DragonFly BSD, Matthew Dillon, August 2017 (5eab490e)",
        scenarios: &["mass-teardown", "mass-teardown-full"],
    },
];

/// The seed with this id.
pub fn seed(id: &str) -> Option<&'static Seed> {
    SEEDS.iter().find(|s| s.id == id)
}

/// A quotation and where it stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quote {
    /// The words, verbatim.
    pub text: String,
    /// Where they stand.
    pub source: String,
}

/// A quotation known at compile time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaticQuote {
    /// The words, verbatim.
    pub text: &'static str,
    /// Where they stand.
    pub source: &'static str,
}

impl StaticQuote {
    /// As report data.
    pub fn to_quote(self) -> Quote {
        Quote {
            text: self.text.to_owned(),
            source: self.source.to_owned(),
        }
    }
}

/// Quotations, verbatim.
pub mod quote {
    use super::StaticQuote;

    /// Seed 000, the problem.
    pub const QEMU_2024_MAP_COUNT: StaticQuote = StaticQuote {
        text: "per-thread pools can grow to tens of thousands of coroutines. Each coroutine \
               causes 2 virtual memory areas to be created. Eventually vm.max_map_count is \
               reached and memory-related syscalls fail.",
        source: "seed 000, commit message",
    };
    /// Seed 000, the goal.
    pub const QEMU_2024_GOAL: StaticQuote = StaticQuote {
        text: "The goal of this change is to reduce the excessive number of pooled coroutines \
               that cause QEMU to abort when vm.max_map_count is reached without losing the \
               performance of an adequately sized coroutine pool.",
        source: "seed 000, commit message",
    };
    /// Seed 001, the problem.
    pub const QEMU_2021_BOTTLENECK: StaticQuote = StaticQuote {
        text: "This fio workload exhausts the coroutine pool and coroutine creation becomes a \
               bottleneck.",
        source: "seed 001, patch description",
    };
    /// Seed 001, the old limits.
    pub const QEMU_2021_LIMITS: StaticQuote = StaticQuote {
        text: "the hardcoded size limit of 64 for thread-local pools and 128 for the global \
               pool is insufficient for the fio benchmark shown above.",
        source: "seed 001, patch description",
    };
    /// Seed 001, the cost of creation.
    pub const QEMU_2021_CREATION: StaticQuote = StaticQuote {
        text: "Creating new coroutines is expensive due to allocating new stacks with mmap(2) \
               and mprotect(2).",
        source: "seed 001, patch description",
    };
    /// Seed 001, the memory table's conclusion.
    pub const QEMU_2021_FREED: StaticQuote = StaticQuote {
        text: "This confirms that coroutines are indeed being freed when no longer needed.",
        source: "seed 001, patch description, after its VSZ/RSS table",
    };
    /// Why seed 001 was dropped. Not in seed 001's text.
    pub const QEMU_2021_DROPPED: StaticQuote = StaticQuote {
        text: "Coroutines are created in one thread and then destroyed in another, so the \
               thread-local book keeping that assumed coroutines live in a single thread was \
               getting out of sync.",
        source: "Stefan Hajnoczi on qemu-devel, on why seed 001's patch was dropped from his \
                 pull request of 21 October 2021 after Richard Henderson saw boot tests time \
                 out (not in seed 001's text; recorded in the project's systems notes on QEMU)",
    };
    /// Seed 004, the problem.
    pub const DRAGONFLY_PROBLEM: StaticQuote = StaticQuote {
        text: "Testing with 900,000 processes chaining 900,000 pipe()s, the system could become \
               unusable for upwards of an hour when the test is killed with ^C prior to these \
               changes.",
        source: "seed 004, commit message",
    };
    /// Seed 004, the fix.
    pub const DRAGONFLY_FIX: StaticQuote = StaticQuote {
        text: "The pcpu mutex allows good concurrency while also limiting the number of \
               processes which can be tearing down pipe KVM at the same time.",
        source: "seed 004, commit message",
    };
    /// Seed 003, the cost.
    pub const XEN_NO_COST: StaticQuote = StaticQuote {
        text: "In short, even worst case aggressive shrinking makes no visible performance \
               degradation.",
        source: "seed 003, patch description",
    };
    /// Seed 003, the mechanism.
    pub const XEN_MECHANISM: StaticQuote = StaticQuote {
        text: "This commit avoids such problematic situations by shrinking the pools \
               aggressively (further the limit) for a while (users can set this duration via \
               a module parameter) if a memory pressure is detected.",
        source: "seed 003, patch description",
    };
}

/// Published numbers, as the seeds print them.
pub mod published {
    /// Seed 000's virtio-blk fio table: `(rw, block size, iodepth, OLD IOPS,
    /// NEW IOPS)`; OLD is the pool the patch replaced.
    pub const QEMU_2024_FIO: [(&str, &str, u32, u32, u32); 10] = [
        ("randread", "4k", 1, 113_725, 117_451),
        ("randread", "4k", 8, 192_968, 198_510),
        ("randread", "4k", 16, 207_138, 209_429),
        ("randread", "4k", 32, 212_399, 215_145),
        ("randread", "4k", 64, 218_319, 221_277),
        ("randread", "128k", 1, 17_587, 17_535),
        ("randread", "128k", 8, 17_614, 17_616),
        ("randread", "128k", 16, 17_608, 17_609),
        ("randread", "128k", 32, 17_552, 17_553),
        ("randread", "128k", 64, 17_484, 17_484),
    ];

    /// The smallest and largest NEW/OLD ratio of [`QEMU_2024_FIO`].
    pub fn qemu_2024_fio_ratio_range() -> (f64, f64) {
        QEMU_2024_FIO
            .iter()
            .map(|&(_, _, _, old, new)| f64::from(new) / f64::from(old))
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), r| {
                (lo.min(r), hi.max(r))
            })
    }

    /// Seed 001's fio IOPS before and after.
    pub const QEMU_2021_IOPS: (u32, u32) = (60_000, 97_000);

    /// Seed 001's VSZ, KB: before, during and after fio.
    pub const QEMU_2021_VSZ_KB: (u64, u64, u64) = (4_705_248, 5_747_668, 4_694_996);

    /// The share of the burst's VSZ growth given back after it:
    /// `(during - after) / (during - before)`.
    pub fn qemu_2021_vsz_given_back() -> f64 {
        let (before, during, after) = QEMU_2021_VSZ_KB;
        (during - after) as f64 / (during - before) as f64
    }

    /// Seed 002's total run time in seconds, before and after, per vnode
    /// limit: `(limit, before, after)` ("~20", "~8", ...).
    pub const FREEBSD_RUN_S: [(u64, u32, u32); 2] = [(8_388_608, 20, 8), (400_000, 35, 15)];

    /// Seed 003's swap traffic under pressure, pages: `(pswpin before,
    /// after), (pswpout before, after)`.
    pub const XEN_SWAP: ((u64, u64), (u64, u64)) = ((76_672, 212), (185_799, 3_325));

    /// Seed 003's `dd` throughput, MB/s, default pool size and worst case
    /// (always shrinking); runs 2-5 of each (run 1 was 45.8 in both).
    pub const XEN_DD_MBPS: (f64, f64) = (38.7, 38.7);

    /// Seed 004: pipes torn down at once, and how long the system was
    /// unusable before ("upwards of an hour") and after ("less than 30
    /// seconds"), in seconds.
    pub const DRAGONFLY: (u64, u64, u64) = (900_000, 3600, 30);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_seeds_in_order_each_with_a_scenario() {
        let ids: Vec<&str> = SEEDS.iter().map(|s| s.id).collect();
        assert_eq!(ids, ["000", "001", "002", "003", "004"]);
        assert!(SEEDS.iter().all(|s| !s.scenarios.is_empty()));
    }

    #[test]
    fn published_ratios() {
        let (lo, hi) = published::qemu_2024_fio_ratio_range();
        assert!((lo - 17_535.0 / 17_587.0).abs() < 1e-12, "{lo}");
        assert!((hi - 117_451.0 / 113_725.0).abs() < 1e-12, "{hi}");
        let back = published::qemu_2021_vsz_given_back();
        assert!((1.0..1.02).contains(&back), "{back}");
    }

    #[test]
    fn the_dropped_reason_is_not_attributed_to_seed_001s_text() {
        let q = quote::QEMU_2021_DROPPED;
        assert!(!q.source.starts_with("seed 001"), "{}", q.source);
        assert!(q.source.contains("not in seed 001's text"));
    }
}
