//! How a pool makes, resets and unmakes its objects.

use std::convert::Infallible;

/// Creates, recycles and destroys the objects of a [`Pool`](crate::Pool).
///
/// The pool calls these methods outside of every lock it owns and never while
/// it holds a thread cache borrowed, so a manager may itself use the pool (or
/// other pools) freely.
///
/// # Panics
///
/// A panic in any method leaves the pool consistent and its counts right:
///
/// * `create` panicking creates nothing and counts nothing; the panic reaches
///   the caller of [`Pool::get`](crate::Pool::get).
/// * `recycle` panicking destroys the object (through [`Manage::destroy`]) and
///   the panic continues from the guard's `drop`.
/// * `purge` panicking destroys that object; the others are purged and the
///   first panic is resumed from [`Pool::purge`](crate::Pool::purge).
/// * `destroy` panicking still counts the object as destroyed (it was handed
///   over); when the pool destroys a whole batch, the rest of the batch is
///   destroyed before the first panic is resumed.
///
/// # Examples
///
/// A manager for byte buffers that are cleared before reuse and refused when
/// they have grown too big:
///
/// ```
/// use std::convert::Infallible;
/// use tidepool::{Manage, Pool};
///
/// struct Buffers;
///
/// impl Manage for Buffers {
///     type Item = Vec<u8>;
///     type Error = Infallible;
///
///     fn create(&self) -> Result<Vec<u8>, Infallible> {
///         Ok(Vec::with_capacity(4096))
///     }
///
///     fn recycle(&self, buf: &mut Vec<u8>) -> bool {
///         buf.clear();
///         buf.capacity() <= 64 * 1024
///     }
/// }
///
/// let pool = Pool::new(Buffers);
/// let mut buf = pool.get().unwrap();
/// buf.extend_from_slice(b"hello");
/// drop(buf); // cleared and cached for the next `get`
/// assert_eq!(pool.get().unwrap().len(), 0);
/// ```
pub trait Manage: Send + Sync + 'static {
    /// The pooled object.
    type Item: Send + 'static;
    /// Why [`create`](Manage::create) failed: anything that can be printed
    /// and sent, e.g. a `String`, an `anyhow::Error`, a `std::io::Error`, or
    /// an error enum of your own. [`Pool::get`](crate::Pool::get) returns it
    /// inside [`Error::Create`](crate::Error::Create).
    type Error: std::fmt::Debug + std::fmt::Display + Send + Sync + 'static;

    /// Makes a new object. Called only when no idle object is at hand.
    fn create(&self) -> Result<Self::Item, Self::Error>;

    /// Resets `item` before it is reused. Returning `false` destroys it
    /// instead. Runs on the thread that drops the guard.
    fn recycle(&self, item: &mut Self::Item) -> bool {
        let _ = item;
        true
    }

    /// Releases what an idle object holds without unmaking it, e.g. gives
    /// its memory pages back to the OS while keeping the mapping
    /// (`madvise(MADV_DONTNEED)`). The object must stay usable: the next
    /// `get` may hand it out. Called at most once per idle period, on objects
    /// that sat in the depot, by [`Pool::purge`](crate::Pool::purge). The
    /// default does nothing.
    fn purge(&self, item: &mut Self::Item) {
        let _ = item;
    }

    /// Unmakes an object the pool no longer keeps. The default drops it.
    fn destroy(&self, item: Self::Item) {
        drop(item)
    }
}

/// Any `Fn() -> T` is an infallible manager whose objects are reused as they
/// are returned.
///
/// ```
/// let pool = tidepool::Pool::new(|| vec![0u8; 1024]);
/// assert_eq!(pool.get().unwrap().len(), 1024);
/// ```
impl<T, F> Manage for F
where
    T: Send + 'static,
    F: Fn() -> T + Send + Sync + 'static,
{
    type Item = T;
    type Error = Infallible;

    #[inline]
    fn create(&self) -> Result<T, Infallible> {
        Ok(self())
    }
}
