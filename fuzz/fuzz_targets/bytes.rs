//! Fuzz target `bytes`: see `ptovm_tests::fuzz::bytes` for the invariant it checks.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(e) = ptovm_tests::fuzz::bytes(data) {
        panic!("bytes: {e}");
    }
});
