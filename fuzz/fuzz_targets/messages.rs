#![no_main]

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| {
    coffer_fuzz::messages(bytes);
});
