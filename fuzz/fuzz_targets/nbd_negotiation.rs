#![no_main]

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| {
    block::nbd::fuzz::negotiation(bytes);
});
