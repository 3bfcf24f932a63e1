//! # ptovm-aicpu
//!
//! `libptovm_aicpu.so`: the AICPU library as the shared object an AICPU kernel launcher loads
//! (the AICPU runs aarch64 Linux). It is `ptovm-device` — the interpreter, the scheduler and the
//! C ABI of `include/ptovm.h` — built for `aarch64-unknown-linux-gnu` as a `cdylib`, `no_std`
//! and heap-free: it imports nothing from the C library but `memcpy`-like routines (checked by
//! `scripts/aicpu-so.sh`). A CANN launch resolves its kernel entry points by name,
//! `ptovm_aicpu_init` once and `ptovm_aicpu_exec` on every AICPU thread, each with a
//! `ptovm_kernel_args` (README, "Running on the AICPU").
//!
//! Build: `scripts/aicpu-so.sh` (`cargo build -p ptovm-aicpu --target aarch64-unknown-linux-gnu
//! --profile aicpu`; the profile aborts on panic, as a `no_std` library must). On the host the
//! crate builds as an ordinary shared library of the same functions.
#![cfg_attr(target_arch = "aarch64", no_std)]

// Every `#[no_mangle] extern "C"` function of `ptovm-device` is an exported symbol of the shared
// object; the re-export names the ABI in this crate's documentation. The panic handler is
// `ptovm-device`'s (it reports, then spins: a `no_std` library cannot unwind).
pub use ptovm_device::*;

// The C library, for the few routines `core` calls (`memcpy`, `memmove`, `memset`) and
// `getauxval` (AArch64 atomics choose LSE instructions by it): the AICPU's Linux has it, and
// naming it records it as a dependency of the shared object (no allocator is imported).
#[cfg(target_arch = "aarch64")]
#[link(name = "c")]
extern "C" {}

/// The unwinding personality routine that the prebuilt `core` of `aarch64-unknown-linux-gnu`
/// refers to from its unwind tables. Nothing unwinds here — the profile aborts on panic and
/// the panic handler never returns — so it is never called; it exists so that the shared
/// object has no undefined symbol a loader must find elsewhere.
#[cfg(target_arch = "aarch64")]
#[no_mangle]
pub extern "C" fn rust_eh_personality() {}
