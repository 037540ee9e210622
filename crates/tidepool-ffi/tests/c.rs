//! The C side: compiles `tests/c/*.c` and `examples/c/coroutines.c` with
//! `-Wall -Wextra -Werror` against `include/tidepool.h` and the static
//! library cargo built for this test run, then runs each C test case in a
//! child process with a timeout (a hang fails the test instead of stalling
//! the suite, and a crash is a failed case, not a dead test runner).
//!
//! The compiler is `$CC`, else `cc`. The library is found next to this test
//! binary (`<target>/<profile>/deps/libtidepool_ffi.a`), wherever the
//! target directory is.
#![cfg(target_os = "linux")]

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(90);

/// `libtidepool_ffi.a` of this build. The test binary lives in
/// `<target>/<profile>/deps/`; `cargo test` writes the library there too
/// (`cargo build` also copies it up to `<target>/<profile>/`, where an older
/// copy may linger), so the newest candidate wins.
fn static_lib() -> PathBuf {
    let exe = std::env::current_exe().expect("path of the test binary");
    let deps = exe.parent().expect("deps directory");
    let mut candidates: Vec<PathBuf> = std::fs::read_dir(deps)
        .expect("read the deps directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.starts_with("libtidepool_ffi") && name.ends_with(".a")
        })
        .collect();
    candidates.extend(deps.parent().map(|p| p.join("libtidepool_ffi.a")));
    candidates
        .into_iter()
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max()
        .map(|(_, p)| p)
        .unwrap_or_else(|| {
            panic!(
                "libtidepool_ffi.a not found next to {}; cargo builds it with this test \
                 (crate-type staticlib)",
                exe.display()
            )
        })
}

/// Compiles one C file into an executable in this test's scratch directory.
fn compile(source: &str, name: &str) -> PathBuf {
    compile_path(&Path::new(env!("CARGO_MANIFEST_DIR")).join(source), name)
}

fn compile_path(source: &Path, name: &str) -> PathBuf {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let output = Command::new(&cc)
        .args([
            "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-g", "-pthread",
        ])
        .arg("-I")
        .arg(crate_dir.join("include"))
        .arg(source)
        .arg("-o")
        .arg(&out)
        .arg(static_lib())
        .args(["-lpthread", "-ldl", "-lm", "-lrt"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler `{cc}`: {e}"));
    assert!(
        output.status.success(),
        "compiling {} failed:\n{}",
        source.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    out
}

fn api_test() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| compile("tests/c/api_test.c", "api_test"))
}

fn threads_test() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| compile("tests/c/threads_test.c", "threads_test"))
}

fn qemu_coroutine_pool() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| compile("examples/c/qemu_coroutine_pool.c", "qemu_coroutine_pool"))
}

/// Runs the QEMU-shaped seam example with `args`; it must print `ok NAME`.
fn qemu_case(args: &[&str]) -> String {
    let r = run(qemu_coroutine_pool(), args);
    assert!(
        r.status.success() && r.stdout.contains(&format!("ok {}", args[0])),
        "qemu_coroutine_pool {args:?} failed ({:?}, signal {:?})\nstdout:\n{}\nstderr:\n{}",
        r.status.code(),
        r.status.signal(),
        r.stdout,
        r.stderr
    );
    r.stdout
}

/// The lifecycle (get or make, enter, terminate, put) over tidepool's seam
/// and over the QEMU-style pool: one coroutine serves every request.
#[test]
fn qemu_seam_lifecycle() {
    qemu_case(&["lifecycle", "tidepool", "20000"]);
    qemu_case(&["lifecycle", "qemu", "20000"]);
}

/// Depth-1000 nesting at tidepool's defaults: each of the 1001 coroutines
/// in the working set is made (two VMAs mapped) once over 200 rounds, where
/// the QEMU-style pool at QEMU's default size makes them again and again.
#[test]
fn qemu_seam_nesting_maps_each_stack_once() {
    let ours = qemu_case(&["nesting", "tidepool", "1000", "200"]);
    assert!(ours.contains("1001 coroutines made"), "{ours}");
    let theirs = qemu_case(&["nesting", "qemu", "1000", "20"]);
    let made: u64 = theirs
        .split(", ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {theirs}"));
    assert!(made > 2 * 1001, "{theirs}");
}

/// Coroutines made on one thread end (and are put) on another, which then
/// runs the thread-exit notifier: counts balance, each is deleted once.
#[test]
fn qemu_seam_cross_thread_termination() {
    qemu_case(&["cross_thread"]);
}

/// The pool is made in a constructor (so tidepool's reclaimer starts before
/// `main`); a process-directed SIGALRM that the application blocks still
/// reaches its signalfd.
#[test]
fn qemu_seam_signalfd() {
    qemu_case(&["signalfd"]);
}

/// `qemu_coroutine_inc/dec_pool_size` move `max_idle`; a change below a
/// batch is refused with a status that names it.
#[test]
fn qemu_seam_resize() {
    qemu_case(&["resize"]);
}

/// The thread-exit notifier deletes the thread's cached coroutines.
#[test]
fn qemu_seam_thread_exit() {
    qemu_case(&["thread_exit"]);
}

fn coroutines() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| compile("examples/c/coroutines.c", "coroutines"))
}

struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// Runs `exe args` in a child process; kills it and fails after `TIMEOUT`.
fn run(exe: &Path, args: &[&str]) -> Run {
    let mut child = Command::new(exe)
        .args(args)
        // The C cases check PROT_NONE guard pages (two VMAs per stack, the
        // map-count limit); guard markers are tested in the Rust suites.
        .env(tidepool::stack::GUARD_MODE_ENV, "protect")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()));
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait for the child").is_some() {
            break;
        }
        if start.elapsed() > TIMEOUT {
            let _ = child.kill();
            let out = child.wait_with_output().expect("collect the child");
            panic!(
                "{} {args:?} hung (killed after {TIMEOUT:?}); stdout:\n{}\nstderr:\n{}",
                exe.display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("collect the child");
    Run {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs one case of a C test binary and requires it to pass.
fn case(exe: &Path, name: &str) {
    let r = run(exe, &[name]);
    assert!(
        r.status.success() && r.stdout.contains(&format!("ok {name}")),
        "C case `{name}` failed ({:?}, signal {:?})\nstdout:\n{}\nstderr:\n{}",
        r.status.code(),
        r.status.signal(),
        r.stdout,
        r.stderr
    );
}

#[test]
fn c_cases_are_all_run() {
    // Every case the C file knows is one of the #[test]s below.
    let listed = run(api_test(), &["--list"]).stdout;
    let mut names: Vec<&str> = listed.lines().collect();
    names.sort_unstable();
    let mut ours = API_CASES.to_vec();
    ours.sort_unstable();
    assert_eq!(names, ours, "tests/c/api_test.c and tests/c.rs disagree");
}

const API_CASES: &[&str] = &[
    "buf_roundtrip",
    "stack_roundtrip",
    "obj_roundtrip",
    "obj_adopt",
    "adopted_objects_are_reclaimed",
    "unchecked_pools_reserve_at_empty",
    "pool_thread_exit",
    "adjust_max_idle",
    "maintenance",
    "config_versions",
    "stats_versions",
    "teardown_counts",
    "errors_null_and_handles",
    "errors_config",
    "errors_put",
    "errors_create",
    "errors_exhausted_and_busy",
    "get_timeout",
    "error_no_memory",
    "error_map_count",
    "last_error",
    "reentrant_callbacks",
    "thread_exit",
    "signals_stay_with_the_application",
];

macro_rules! api_cases {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                case(api_test(), stringify!($name));
            }
        )*
    };
}

api_cases!(
    buf_roundtrip,
    stack_roundtrip,
    obj_roundtrip,
    obj_adopt,
    adopted_objects_are_reclaimed,
    unchecked_pools_reserve_at_empty,
    pool_thread_exit,
    adjust_max_idle,
    maintenance,
    config_versions,
    stats_versions,
    teardown_counts,
    errors_null_and_handles,
    errors_config,
    errors_put,
    errors_create,
    errors_exhausted_and_busy,
    get_timeout,
    error_no_memory,
    error_map_count,
    last_error,
    reentrant_callbacks,
    thread_exit,
    signals_stay_with_the_application,
);

#[test]
fn threads_get_and_put_across_pthreads() {
    case(threads_test(), "cross_thread");
}

#[test]
fn threads_adopt_concurrently() {
    case(threads_test(), "adopt_race");
}

#[test]
fn threads_double_put_race_has_one_winner() {
    case(threads_test(), "double_put_race");
}

#[test]
fn coroutines_reuse_pooled_stacks() {
    let r = run(coroutines(), &["run", "20000"]);
    assert!(
        r.status.success(),
        "coroutines run failed ({:?}, signal {:?})\nstdout:\n{}\nstderr:\n{}",
        r.status.code(),
        r.status.signal(),
        r.stdout,
        r.stderr
    );
    assert!(r.stdout.contains("ok run"), "{}", r.stdout);
}

#[test]
fn coroutine_stack_overflow_hits_the_guard_page() {
    let r = run(coroutines(), &["overflow"]);
    assert_eq!(
        r.status.signal(),
        Some(libc_sigsegv()),
        "expected death by SIGSEGV; got {:?} / signal {:?}\nstdout:\n{}\nstderr:\n{}",
        r.status.code(),
        r.status.signal(),
        r.stdout,
        r.stderr
    );
    // It got onto the pooled stack and was recursing when the guard stopped it.
    assert!(
        r.stdout.contains("recursing on a pooled stack"),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains("survived"), "{}", r.stdout);
}

/// `SIGSEGV` on Linux (every architecture Rust supports there).
fn libc_sigsegv() -> i32 {
    11
}

/// The README's C quick start compiles with the warnings on and runs.
#[test]
fn readme_c_snippet_compiles_and_runs() {
    let readme_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let readme = std::fs::read_to_string(&readme_path).expect("read README.md");
    let section = readme
        .split("### C\n")
        .nth(1)
        .expect("README has a `### C` section");
    let snippet = section
        .split("```c\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the C section has a ```c block");
    let program = format!(
        "#include <stdio.h>\n#include \"tidepool.h\"\n\nint main(void) {{\n{snippet}\
         \n    return tidepool_pool_destroy(stacks) == TIDEPOOL_OK ? 0 : 1;\n}}\n"
    );
    // In a directory of its own: `#include "tidepool.h"` looks beside the
    // source first, and the header test leaves a fresh (maybe broken) copy
    // in CARGO_TARGET_TMPDIR when it fails.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("readme_source");
    std::fs::create_dir_all(&dir).expect("create the snippet's directory");
    let source = dir.join("readme_snippet.c");
    std::fs::write(&source, program).expect("write the snippet");
    let exe = compile_path(&source, "readme_snippet");
    let r = run(&exe, &[]);
    assert!(r.status.success(), "{}{}", r.stdout, r.stderr);
}
