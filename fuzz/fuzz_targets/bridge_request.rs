//! One bridge request: the first line names the method, the rest is its
//! argument text. It settles (or is held, for timers and yields), and
//! never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (method, args) = text.split_once('\n').unwrap_or(("callValue", text));
    quickcell::testing::fuzz::bridge_request(method, args);
});
