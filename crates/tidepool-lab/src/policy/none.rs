//! `none`: no pool. Every request maps a fresh guarded stack and unmaps it
//! when it terminates: QEMU built without `CONFIG_COROUTINE_POOL`, and the
//! cost every seed's pool exists to avoid (seed 001: "Creating new
//! coroutines is expensive due to allocating new stacks with mmap(2) and
//! mprotect(2)").

use crate::policy::{Counts, Factory, Local, Policy, PolicyEnv, PolicyKind, StackFailure};
use crate::stack::LabStack;

/// Create and destroy every time.
#[derive(Debug)]
pub struct NoPool {
    factory: Factory,
}

impl NoPool {
    /// The policy for stacks of `env.stack_size` bytes.
    pub fn new(env: &PolicyEnv) -> Self {
        NoPool {
            factory: Factory::new(env.stack_size),
        }
    }
}

impl Policy for NoPool {
    fn kind(&self) -> PolicyKind {
        PolicyKind::None
    }

    fn local(&self) -> Box<dyn Local + '_> {
        Box::new(NoLocal { policy: self })
    }

    fn counts(&self) -> Counts {
        self.factory.counts()
    }
}

struct NoLocal<'a> {
    policy: &'a NoPool,
}

impl Local for NoLocal<'_> {
    fn take(&mut self) -> Result<LabStack, StackFailure> {
        self.policy.factory.create()
    }

    fn put(&mut self, stack: LabStack) {
        self.policy.factory.destroy(stack);
    }
}
