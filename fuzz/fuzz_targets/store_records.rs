//! The state store's records from stored bytes: a parked run's host state
//! (and the bridge rebuilt from it), recorded settlements, sealed
//! snapshots, usage records and session values.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    quickcell::testing::fuzz::store_records(data);
});
