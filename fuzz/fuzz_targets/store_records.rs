#![no_main]

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| {
    store::fuzz::records(bytes);
});
