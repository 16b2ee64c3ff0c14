//! A hook answer's body and a jsonPath (the first line), as a measurement turns them into an
//! outcome (see `steward::fuzz::hook_response`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    steward::fuzz::hook_response(data);
});
