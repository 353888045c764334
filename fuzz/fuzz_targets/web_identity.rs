#![no_main]

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| {
    gateway::fuzz::web_identity(bytes);
});
