#![no_main]

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| {
    messenger::fuzz::crc_frames(bytes);
});
