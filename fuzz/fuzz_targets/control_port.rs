#![no_main]

libfuzzer_sys::fuzz_target!(init: onionmix_fuzzing::warm_up(), |data: &[u8]| {
    onionmix_fuzzing::control_port(data)
});
