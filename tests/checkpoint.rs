//! The loader: a good checkpoint opens, and every kind of corruption gets a one-line error naming the
//! file and the tensor.

mod common;
use common::*;
use mk::model::checkpoint::Checkpoint;
use mk::model::numerics::bf16_to_f32;
use std::path::Path;

const NORM: &str = "model.language_model.layers.1.input_layernorm.weight";
const SCALE: &str = "model.language_model.layers.0.mlp.gate_proj.weight_scale_inv";
const FP8: &str = "model.language_model.layers.0.mlp.gate_proj.weight";

fn err(dir: &Path) -> String {
    match Checkpoint::open(dir) {
        Ok(_) => panic!("a corrupt checkpoint in {} was accepted", dir.display()),
        Err(e) => {
            let m = e.to_string();
            assert!(!m.contains('\n'), "errors are one line: {m}");
            m
        }
    }
}

fn edit(dir: &Path, tensor: &str, f: impl FnOnce(&mut Vec<RawTensor>)) -> String {
    let shard = shard_of(dir, tensor);
    let mut t = read_raw(&shard);
    f(&mut t);
    write_raw(&shard, &t);
    shard.file_name().unwrap().to_string_lossy().into_owned()
}

#[test]
fn a_synthetic_checkpoint_opens_and_passes_the_deep_check() {
    let ck = Checkpoint::open(tiny()).unwrap();
    ck.deep_check().unwrap();
    assert!(ck.shard_names().len() >= 3, "sharded like a release");
    assert_eq!(ck.config.hidden, 256);
    // fp8 kept in checkpoint byte order: the loader hands out the file's bytes.
    let raw = read_raw(&shard_of(tiny(), FP8)).into_iter().find(|t| t.name == FP8).unwrap();
    assert_eq!(ck.bytes(FP8), &raw.data[..]);
}

#[test]
fn missing_tensor() {
    let d = copy_of_tiny("missing");
    let file = edit(&d, NORM, |t| t.retain(|x| x.name != NORM));
    reindex(&d);
    let m = err(&d);
    assert!(m.contains("missing tensor") && m.contains(NORM), "{m} ({file})");
}

#[test]
fn extra_tensor() {
    let d = copy_of_tiny("extra");
    let file = edit(&d, NORM, |t| {
        t.push(RawTensor {
            name: "model.language_model.layers.0.mlp.bias".into(),
            dtype: "BF16".into(),
            shape: vec![4],
            data: vec![0; 8],
        })
    });
    reindex(&d);
    let m = err(&d);
    assert!(m.contains("unexpected tensor model.language_model.layers.0.mlp.bias") && m.contains(&file), "{m}");
}

#[test]
fn vision_tensors_are_tolerated() {
    let d = copy_of_tiny("vision");
    edit(&d, NORM, |t| {
        t.push(RawTensor {
            name: "model.visual.blocks.0.norm1.weight".into(),
            dtype: "BF16".into(),
            shape: vec![4],
            data: vec![0; 8],
        })
    });
    reindex(&d);
    Checkpoint::open(&d).unwrap();
}

#[test]
fn wrong_dtype() {
    let d = copy_of_tiny("dtype");
    let file = edit(&d, FP8, |t| t.iter_mut().find(|x| x.name == FP8).unwrap().dtype = "U8".into());
    let m = err(&d);
    assert!(m.contains(FP8) && m.contains("dtype U8") && m.contains(&file), "{m}");
}

#[test]
fn wrong_shape() {
    let d = copy_of_tiny("shape");
    let file = edit(&d, NORM, |t| t.iter_mut().find(|x| x.name == NORM).unwrap().shape = vec![128, 2]);
    let m = err(&d);
    assert!(m.contains(NORM) && m.contains("[128, 2]") && m.contains("[256]") && m.contains(&file), "{m}");
}

#[test]
fn truncated_shard() {
    let d = copy_of_tiny("truncated");
    let shard = shard_of(&d, NORM);
    let len = std::fs::metadata(&shard).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&shard).unwrap().set_len(len - 100).unwrap();
    let m = err(&d);
    assert!(m.contains("truncated shard") && m.contains("tensor "), "{m}");
    // A file shorter than the 8-byte header length.
    std::fs::OpenOptions::new().write(true).open(&shard).unwrap().set_len(3).unwrap();
    assert!(err(&d).contains("truncated"));
}

#[test]
fn corrupt_header() {
    let d = copy_of_tiny("header");
    let shard = shard_of(&d, NORM);
    let mut b = std::fs::read(&shard).unwrap();
    b[8] = b'x';
    std::fs::write(&shard, &b).unwrap();
    let m = err(&d);
    assert!(m.contains("corrupt header") && m.contains(&*shard.file_name().unwrap().to_string_lossy()), "{m}");
    b[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    std::fs::write(&shard, &b).unwrap();
    assert!(err(&d).contains("corrupt header"));
}

#[test]
fn config_that_disagrees_with_the_tensors() {
    let d = copy_of_tiny("config");
    let p = d.join("config.json");
    let mut c: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    c["text_config"]["intermediate_size"] = serde_json::json!(1024);
    std::fs::write(&p, c.to_string()).unwrap();
    let m = err(&d);
    assert!(m.contains("mlp.") && m.contains("config.json implies"), "{m}");
    // The quantization config says down_proj stays bf16, the tensors are fp8.
    c["text_config"]["intermediate_size"] = serde_json::json!(512);
    c["quantization_config"]["modules_to_not_convert"] =
        serde_json::json!(["lm_head", "embed_tokens", "in_proj_a", "in_proj_b", "mtp.fc", "down_proj"]);
    std::fs::write(&p, c.to_string()).unwrap();
    let m = err(&d);
    assert!(m.contains("down_proj") && m.contains("expected Bf16"), "{m}");
    std::fs::write(&p, "{\"text_config\": 3}").unwrap();
    assert!(err(&d).contains("config.json"));
}

#[test]
fn non_finite_scale() {
    let d = copy_of_tiny("scale");
    edit(&d, SCALE, |t| {
        let s = t.iter_mut().find(|x| x.name == SCALE).unwrap();
        s.data[6..8].copy_from_slice(&0x7FC0u16.to_le_bytes());
    });
    let m = err(&d);
    assert!(m.contains(SCALE) && m.contains("non-finite scale at block [1, 1]"), "{m}");
}

#[test]
fn scales_stored_as_f32_are_accepted() {
    let d = copy_of_tiny("f32scale");
    edit(&d, SCALE, |t| {
        let s = t.iter_mut().find(|x| x.name == SCALE).unwrap();
        s.data =
            s.data.chunks_exact(2).flat_map(|c| bf16_to_f32(u16::from_le_bytes([c[0], c[1]])).to_le_bytes()).collect();
        s.dtype = "F32".into();
    });
    let a = Checkpoint::open(&d).unwrap();
    let b = Checkpoint::open(tiny()).unwrap();
    assert_eq!(a.f32_vec(SCALE), b.f32_vec(SCALE));
}

#[test]
fn missing_shard_and_single_shard_without_index() {
    let d = copy_of_tiny("noshard");
    let shard = shard_of(&d, NORM);
    std::fs::remove_file(&shard).unwrap();
    let m = err(&d);
    assert!(m.contains("is missing") && m.contains(&*shard.file_name().unwrap().to_string_lossy()), "{m}");
    // One shard holding everything, no index: a valid layout.
    let d = copy_of_tiny("oneshard");
    let mut all = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    files.sort();
    for f in &files {
        all.extend(read_raw(f));
        std::fs::remove_file(f).unwrap();
    }
    std::fs::remove_file(d.join("model.safetensors.index.json")).unwrap();
    write_raw(&d.join("model.safetensors"), &all);
    let ck = Checkpoint::open(&d).unwrap();
    assert_eq!(ck.shard_names(), ["model.safetensors"]);
    assert_eq!(ck.bytes(FP8), Checkpoint::open(tiny()).unwrap().bytes(FP8));
}

#[test]
fn a_nan_weight_is_found_by_the_deep_check() {
    let d = copy_of_tiny("nanweight");
    edit(&d, FP8, |t| t.iter_mut().find(|x| x.name == FP8).unwrap().data[1000] = 0x7F);
    let ck = Checkpoint::open(&d).unwrap();
    let m = ck.deep_check().unwrap_err().to_string();
    assert!(m.contains(FP8) && m.contains("element 1000"), "{m}");
}
