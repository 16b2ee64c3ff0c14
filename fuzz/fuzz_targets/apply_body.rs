//! An apply request's body, as the API socket takes it, and everything the daemon computes from
//! a spec it accepts (see `steward::fuzz`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    steward::fuzz::apply_body(data);
});
