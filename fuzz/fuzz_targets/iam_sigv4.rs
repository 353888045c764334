#![no_main]

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| {
    gateway::fuzz::iam_sigv4(bytes);
});
