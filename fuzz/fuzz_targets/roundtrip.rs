//! Fuzz target `roundtrip`: see `ptovm_tests::fuzz::roundtrip` for the invariant it checks.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(e) = ptovm_tests::fuzz::roundtrip(data) {
        panic!("roundtrip: {e}");
    }
});
