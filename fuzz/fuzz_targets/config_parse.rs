//! TOML configuration text through `quickcell::Config::parse`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        quickcell::testing::fuzz::config_parse(text);
    }
});
