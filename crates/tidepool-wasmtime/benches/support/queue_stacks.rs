//! The fiber-stack pool wasmtime users hand-write, as a baseline: a
//! `StackCreator` over a locked queue of at most `bound` guarded stacks,
//! each given back on drop (or unmapped when the queue is full). Shared by
//! the `calls` bench and the `burst_residency` example.

use std::ops::Range;
use std::sync::{Arc, Mutex};

use tidepool::stack::GuardedStack;
use wasmtime::{StackCreator, StackMemory};

pub struct QueueStacks {
    queue: Arc<Mutex<Vec<GuardedStack>>>,
    bound: usize,
}

impl QueueStacks {
    pub fn new(bound: usize) -> Self {
        Self {
            queue: Arc::default(),
            bound,
        }
    }
}

struct QueuedStack {
    stack: Option<GuardedStack>,
    queue: Arc<Mutex<Vec<GuardedStack>>>,
    bound: usize,
}

impl QueuedStack {
    fn stack(&self) -> &GuardedStack {
        self.stack.as_ref().expect("held until drop")
    }
}

impl Drop for QueuedStack {
    fn drop(&mut self) {
        let stack = self.stack.take().expect("held until drop");
        let mut queue = self.queue.lock().unwrap();
        if queue.len() < self.bound {
            queue.push(stack);
        }
    }
}

// SAFETY: a `GuardedStack` is page-aligned, whole pages, above a PROT_NONE
// guard page, owned by this value until it drops.
unsafe impl StackMemory for QueuedStack {
    fn top(&self) -> *mut u8 {
        self.stack().top().as_ptr()
    }

    fn range(&self) -> Range<usize> {
        self.stack().usable()
    }

    fn guard_range(&self) -> Range<*mut u8> {
        self.stack().limit().as_ptr()..self.stack().bottom().as_ptr()
    }
}

// SAFETY: every stack is a `QueuedStack` of at least `size` bytes; zeroed
// requests get a fresh mapping (zeros).
unsafe impl StackCreator for QueueStacks {
    fn new_stack(&self, size: usize, zeroed: bool) -> wasmtime::Result<Box<dyn StackMemory>> {
        let reused = if zeroed {
            None
        } else {
            self.queue.lock().unwrap().pop()
        };
        let stack = match reused {
            Some(stack) if stack.usable_size() >= size => stack,
            _ => GuardedStack::new(size).map_err(wasmtime::Error::new)?,
        };
        Ok(Box::new(QueuedStack {
            stack: Some(stack),
            queue: self.queue.clone(),
            bound: self.bound,
        }))
    }
}
