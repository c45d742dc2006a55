//! The source check (`prepare_source`) on any text: a verdict, never a
//! panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(source) = std::str::from_utf8(data) {
        quickcell::testing::fuzz::source_check(source);
    }
});
