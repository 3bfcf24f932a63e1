//! Fuzz target `device`: see `ptovm_tests::fuzz::device` for the invariant it checks.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(e) = ptovm_tests::fuzz::device(data) {
        panic!("device: {e}");
    }
});
