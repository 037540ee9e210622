//! wasmtime engines running on pooled fiber stacks: one test binary (one
//! link of wasmtime and Cranelift), one module per concern.

#![cfg(target_os = "linux")]

mod child;
mod concurrent;
mod creator;
mod executor;
mod memories;
mod modules;
mod overflow;
mod readme;
