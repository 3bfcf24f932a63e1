//! What a panic does on the device: every `no_std` build has this handler. A panic would be a
//! bug in ptovm (bad input returns an error code instead); it is recorded, the AICPU kernel's
//! hook is told, and the thread spins instead of unwinding.

use super::*;

/// Set by the panic handler (a bug in ptovm: inputs never panic).
static PANICKED: AtomicI32 = AtomicI32::new(0);
/// A function the AICPU kernel registers to learn of a panic (`extern "C" fn(i32)`), or 0.
static PANIC_HOOK: AtomicUsize = AtomicUsize::new(0);

/// Registers `hook`, called with [`PTOVM_E_STATE`] if ptovm ever panics (which would be a bug;
/// the panicking thread then spins forever instead of unwinding). Null removes it.
#[no_mangle]
pub extern "C" fn ptovm_set_panic_hook(hook: Option<extern "C" fn(i32)>) {
    PANIC_HOOK.store(hook.map_or(0, |f| f as usize), Ordering::Release);
}

/// Whether ptovm has panicked (1) or not (0).
#[no_mangle]
pub extern "C" fn ptovm_panicked() -> i32 {
    PANICKED.load(Ordering::Acquire)
}

/// The panic handler of every `no_std` build (the static library, the AICPU shared object): a
/// panic would be a bug; it is recorded ([`ptovm_panicked`]), the hook of
/// [`ptovm_set_panic_hook`] is called, and the thread spins forever instead of unwinding.
#[cfg(any(target_os = "none", target_arch = "aarch64"))]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    PANICKED.store(1, Ordering::Release);
    let hook = PANIC_HOOK.load(Ordering::Acquire);
    if hook != 0 {
        // SAFETY: only `ptovm_set_panic_hook` stores here, from an `extern "C" fn(i32)`.
        let f: extern "C" fn(i32) = unsafe { core::mem::transmute(hook) };
        f(PTOVM_E_STATE);
    }
    loop {
        core::hint::spin_loop();
    }
}
