//! A deterministic executor: polls every future in turn, in order, with a
//! waker that does nothing, until all are done. No threads, no timers, so
//! the interleaving of fibers is the same on every run.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

pub type Task<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Passes after which a run counts as hung: every future here finishes
/// within a handful of polls.
const MAX_PASSES: usize = 1000;

/// Runs `tasks` to completion, polling each once per pass; calls
/// `after_first_pass` once every task has been polled once (when each is
/// suspended at its first await point).
pub fn run_all<T>(tasks: Vec<Task<'_, T>>, mut after_first_pass: impl FnMut()) -> Vec<T> {
    let mut cx = Context::from_waker(Waker::noop());
    let mut tasks: Vec<Option<Task<'_, T>>> = tasks.into_iter().map(Some).collect();
    let mut results: Vec<Option<T>> = tasks.iter().map(|_| None).collect();
    for pass in 0..MAX_PASSES {
        let mut pending = 0;
        for (task, result) in tasks.iter_mut().zip(&mut results) {
            let Some(future) = task else { continue };
            match future.as_mut().poll(&mut cx) {
                Poll::Ready(value) => {
                    *result = Some(value);
                    *task = None; // drops the future, and with it its store
                }
                Poll::Pending => pending += 1,
            }
        }
        if pass == 0 {
            after_first_pass();
        }
        if pending == 0 {
            return results.into_iter().map(|r| r.expect("done")).collect();
        }
    }
    panic!("tasks still pending after {MAX_PASSES} passes");
}

/// Runs one future to completion.
pub fn block_on<T>(future: impl Future<Output = T> + Send) -> T {
    run_all(vec![Box::pin(future)], || {})
        .pop()
        .expect("one result")
}

/// Returns `Pending` once (waking itself), then `Ready`: an await point at
/// which a wasm call's fiber suspends and the executor moves on.
pub struct YieldOnce(bool);

impl YieldOnce {
    pub fn new() -> Self {
        Self(false)
    }
}

impl Future for YieldOnce {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
