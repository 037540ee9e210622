//! The exported C functions, one file per kind plus the calls every pool
//! answers. Each checks its arguments, finds the pool through
//! [`crate::handle`], calls the kind, and turns the result into a
//! `tidepool_status`. Nothing below this layer imports it.

pub(crate) mod buf;
pub(crate) mod obj;
pub(crate) mod pool;
pub(crate) mod stack;
