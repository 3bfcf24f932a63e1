//! Fuzz target `partition`: see `ptovm_tests::fuzz::partition` for the invariant it checks.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(e) = ptovm_tests::fuzz::partition(data) {
        panic!("partition: {e}");
    }
});
