//! An event body as the journal bounds it (see `steward::fuzz::event_body`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    steward::fuzz::event_body(data);
});
