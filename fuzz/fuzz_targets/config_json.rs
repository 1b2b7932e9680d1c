//! `vram_model::hf::parse_config` on arbitrary text, then what the CLI asks of
//! the model it returns (parameter count and split). Errors are fine; panics,
//! overflows and hangs are not.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vram_model::arch::Model;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(model) = vram_model::hf::parse_config(text, "fuzz") {
        let _ = model.param_count();
        if let Model::Transformer(t) = &model {
            let _ = t.param_split();
        }
    }
});
