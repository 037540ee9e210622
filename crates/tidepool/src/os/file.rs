//! The kernel's files that pressure sources read and write: `/proc/self/cgroup`,
//! PSI trigger files, and cgroup v1's `memory.pressure_level` and
//! `cgroup.event_control`. Thin wrappers over `std::fs`, here so that
//! fault injection reaches them like every other kernel call.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::fault::{check, Call};

/// The whole file as text.
pub(crate) fn read_to_string(path: impl AsRef<Path>) -> io::Result<String> {
    check(Call::PressureFile)?;
    std::fs::read_to_string(path)
}

/// Opens `path` for reading.
pub(crate) fn open(path: impl AsRef<Path>) -> io::Result<File> {
    check(Call::PressureFile)?;
    File::open(path)
}

/// Opens `path` for reading and writing, non-blocking, close-on-exec (a
/// PSI trigger file, polled for `POLLPRI`).
pub(crate) fn open_nonblocking(path: impl AsRef<Path>) -> io::Result<File> {
    check(Call::PressureFile)?;
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
}

/// Writes `bytes` to `file` in one go.
pub(crate) fn write_all(mut file: &File, bytes: &[u8]) -> io::Result<()> {
    check(Call::PressureFile)?;
    file.write_all(bytes)
}

/// Writes `bytes` to the file at `path`.
pub(crate) fn write(path: impl AsRef<Path>, bytes: impl AsRef<[u8]>) -> io::Result<()> {
    check(Call::PressureFile)?;
    std::fs::write(path, bytes)
}
