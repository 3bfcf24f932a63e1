//! Fuzz target `schedule`: see `ptovm_tests::fuzz::schedule` for the invariant it checks.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(e) = ptovm_tests::fuzz::schedule(data) {
        panic!("schedule: {e}");
    }
});
