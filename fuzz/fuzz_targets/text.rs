//! Fuzz target `text`: see `ptovm_tests::fuzz::text` for the invariant it checks.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(e) = ptovm_tests::fuzz::text(data) {
        panic!("text: {e}");
    }
});
