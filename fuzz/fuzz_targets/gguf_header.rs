//! Fuzzes the GGUF header parser, the in-memory loader and the model's architecture dispatch /
//! hyperparameter reading. Any panic, hang or runaway allocation is a bug: a hostile file must
//! only ever produce an `Err`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = minfer::gguf::parse_header(data, "fuzz");

    let Ok(file) = minfer::gguf::GgufFile::from_bytes(data.to_vec(), "fuzz") else {
        return;
    };
    let mut total = 0usize;
    for t in &file.tensors {
        total = total.wrapping_add(t.bytes().len());
    }
    std::hint::black_box(total);
    let _ = file.architecture();
    let _ = file.n_params();
    let _ = minfer::model::Model::from_gguf(file, "fuzz".into());
});
