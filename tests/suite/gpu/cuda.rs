//! The CUDA backend without a GPU: every kernel of `cuda/` compiled by NVRTC for the
//! architectures the engine targets (NVRTC needs no GPU), and the backend itself on the CPU
//! emulation of CUDA's execution model, which the op and model tests in `gpu.rs` and
//! `gpu/models.rs` then run like any other GPU backend. On a machine with a CUDA device the
//! device joins them.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use minfer::backend::Backend;
use minfer::testing::cuda::source::{self, Image};
use minfer::testing::cuda::{emu, CudaBackend};
use minfer::testing::gpu::all_variants;
use minfer::testing::gpu::Kernel;

use super::Gpu;
use crate::common;

tests![
    nvrtc_compiles_every_kernel,
    mma_step_instructions_are_the_kernels,
    compiled_images_are_cached,
    info_says_why_cuda_is_out,
    profiled_steps_are_timed_per_op_and_compute_the_same,
];

/// The emulator library, built once per test run from `cuda/` (a build failure is a kernel
/// that does not compile for the CPU: a test failure, not a skip). The emulator stands in where
/// no device exists: with a CUDA device the tests run on the device alone (a GPU machine need
/// not have a C++ compiler, and its tests are not ignored for the want of one).
fn emulator(test: &str) -> Option<PathBuf> {
    if real_device() {
        return None;
    }
    static LIB: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let lib = LIB.get_or_init(|| {
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda-emu");
        let cuda = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("cuda");
        emu::build(&cuda, &out)
    });
    match lib {
        Ok(p) => Some(p.clone()),
        Err(e) if e.contains("No such file") => common::skip(test, &format!("no C++ compiler: {e}")),
        Err(e) => panic!("{test}: {e}"),
    }
}

/// Whether CUDA device 0 opens (checked once per run).
fn real_device() -> bool {
    static REAL: OnceLock<bool> = OnceLock::new();
    *REAL.get_or_init(|| CudaBackend::new(0).is_ok())
}

/// The CUDA backend with its prefill matmul in f32 tiles (`with_int8_matmul(false)`), as
/// devices before sm_80 run it, beside the tensor-core tiles `backends_at` takes: on device 0
/// where there is one, else emulated.
pub fn f32_tiles(test: &str) -> Option<Gpu> {
    let (b, emulated) = match real_device() {
        true => (CudaBackend::new(0).unwrap_or_else(|r| panic!("{test}: {r}")), false),
        false => (
            CudaBackend::emulated(&emulator(test)?).unwrap_or_else(|r| panic!("{test}: {r}")),
            true,
        ),
    };
    let b = b.with_int8_matmul(false);
    Some(Gpu {
        label: format!("{} (f32 matmul tiles)", b.describe()),
        backend: Arc::new(b),
        alt: true,
        emulated,
    })
}

/// The CUDA backends to test: device 0 where there is one, else the emulated one.
/// Their decode steps take the split-KV attention from `split_span` positions on.
pub fn backends_at(test: &str, split_span: u32) -> Vec<Gpu> {
    let mut v = Vec::new();
    if let Some(lib) = emulator(test) {
        let b = CudaBackend::emulated(&lib)
            .unwrap_or_else(|r| panic!("{test}: {r}"))
            .with_split_span(split_span);
        v.push(Gpu {
            label: b.describe(),
            backend: Arc::new(b),
            alt: false,
            emulated: true,
        });
    }
    match CudaBackend::new(0).map(|b| b.with_split_span(split_span)) {
        Ok(b) => v.push(Gpu {
            label: b.describe(),
            backend: Arc::new(b),
            alt: false,
            emulated: false,
        }),
        Err(r) => eprintln!("{test}: no CUDA device ({r}); the emulated kernels stand in"),
    }
    v
}

/// Every op file compiles with NVRTC for each target architecture (all of an op file's targets
/// on threads at once), and its PTX holds an entry for every variant the schedule can launch
/// (`Variant::entry`, and the tensor-core `Variant::mma_entry`, which uses mma.sync — int8 for the
/// matmul, f16 for the attention — from sm_80 on), waiting for the kernel before it from sm_90 on (programmatic dependent launch);
/// so does its CUBIN for sm_90.
fn nvrtc_compiles_every_kernel() {
    let t = "nvrtc_compiles_every_kernel";
    let (major, minor) = match source::nvrtc_version() {
        Ok(v) => v,
        Err(e) => {
            common::skip::<()>(t, &e);
            return;
        }
    };
    // Pascal (dp4a), Turing, Ampere, Hopper; NVRTC 13 dropped everything before Turing.
    let archs: &[&str] = if major >= 13 {
        &["compute_75", "compute_80", "compute_90"]
    } else {
        &["compute_61", "compute_75", "compute_80", "compute_90"]
    };
    // Machine code for Hopper where this NVRTC writes it (CUBIN: what a device of that
    // architecture loads without a JIT).
    let cubin: Vec<&str> = match source::cubin_archs() {
        Ok(a) if a.contains(&90) => vec!["sm_90"],
        _ => Vec::new(),
    };
    assert_eq!(
        source::target((9, 0), &source::cubin_archs().unwrap_or_default()).starts_with("sm_"),
        !cubin.is_empty()
    );
    let mut failures = Vec::new();
    for k in Kernel::ALL {
        let entries: Vec<String> = all_variants()
            .into_iter()
            .filter(|v| v.kernel == k && !v.subgroups)
            .flat_map(|v| std::iter::once(v.entry()).chain(v.mma_entries()))
            .collect();
        // The tensor-core entries multiply on the tensor cores from sm_80 on.
        let mma = entries.iter().any(|e| e.contains("_mma"));
        // Every target of an op file compiled at once, one thread each, as a plan's files are
        // (`Device::prepare`): NVRTC is used from several threads.
        let targets: Vec<&str> = archs.iter().chain(&cubin).copied().collect();
        let images: Vec<_> = std::thread::scope(|s| {
            let hs: Vec<_> = targets
                .iter()
                .map(|&arch| s.spawn(move || source::compile(k, arch, false)))
                .collect();
            hs.into_iter()
                .map(|h| h.join().expect("an NVRTC thread panicked"))
                .collect()
        });
        for (arch, image) in targets.iter().zip(images) {
            match image {
                Ok(Image::Ptx(ptx)) if arch.starts_with("compute_") => {
                    // From sm_90 on every kernel waits for the one before it (programmatic
                    // dependent launch); before, none does.
                    let waits = ptx.contains("griddepcontrol.wait");
                    if waits != (*arch >= "compute_90") {
                        failures.push(format!("{}.cu for {arch}: griddepcontrol.wait {waits}", k.name()));
                    }
                    // The matmul's tiles multiply 8-bit integers, the attention's f16.
                    let has_mma = ptx.contains("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32")
                        || ptx.contains("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32");
                    if has_mma != (mma && *arch >= "compute_80") {
                        failures.push(format!("{}.cu for {arch}: mma.sync {has_mma}", k.name()));
                    }
                    for e in &entries {
                        if !ptx.contains(&format!(".entry {e}(")) {
                            failures.push(format!("{}.cu for {arch}: no entry {e}", k.name()));
                        }
                    }
                }
                // An ELF image whose symbol table names every entry.
                Ok(Image::Cubin(elf)) if arch.starts_with("sm_") => {
                    if !elf.starts_with(b"\x7fELF") {
                        failures.push(format!("{}.cu for {arch}: not an ELF image", k.name()));
                    }
                    for e in &entries {
                        let name = format!("\0{e}\0");
                        if !elf.windows(name.len()).any(|w| w == name.as_bytes()) {
                            failures.push(format!("{}.cu for {arch}: no symbol {e}", k.name()));
                        }
                    }
                }
                Ok(other) => failures.push(format!("{}.cu for {arch}: {other:?}", k.name())),
                Err(e) => failures.push(e),
            }
        }
        eprintln!(
            "{}.cu: {} entries, {} {}",
            k.name(),
            entries.len(),
            archs.join(" "),
            cubin.join(" ")
        );
    }
    eprintln!("NVRTC {major}.{minor}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A compiled image is kept on disk by program, target and NVRTC version, and a later compile
/// loads it from there: a marker put in the cache file comes back as the image.
fn compiled_images_are_cached() {
    let t = "compiled_images_are_cached";
    if let Err(e) = source::nvrtc_version() {
        common::skip::<()>(t, &e);
        return;
    }
    for target in ["sm_90", "compute_90"] {
        let Some(path) = source::cache_path(Kernel::Slice, target).unwrap() else {
            common::skip::<()>(t, "no cache directory");
            return;
        };
        let _ = std::fs::remove_file(&path);
        let first = source::compile(Kernel::Slice, target, true).unwrap();
        let on_disk = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        match &first {
            Image::Cubin(b) => assert_eq!(&on_disk, b, "{target}"),
            Image::Ptx(p) => assert_eq!(on_disk, p.as_bytes(), "{target}"),
        }
        std::fs::write(&path, "// cached\n").unwrap();
        let again = source::compile(Kernel::Slice, target, true).unwrap();
        let _ = std::fs::remove_file(&path);
        match again {
            Image::Cubin(b) => assert_eq!(b, b"// cached\n", "{target}"),
            Image::Ptx(p) => assert_eq!(p, "// cached\n", "{target}"),
        }
        assert_eq!(matches!(first, Image::Cubin(_)), target.starts_with("sm_"));
    }
}

/// `info --json` gives CUDA's verdict with its reason: here `MINFER_DISABLE_CUDA`, and on a
/// machine without a driver "no driver"; never a panic.
fn info_says_why_cuda_is_out() {
    let t = "info_says_why_cuda_is_out";
    let Some(root) = common::ref_dir(t) else {
        return;
    };
    let model = root.join("random/gguf/llama-Q4_0.gguf");
    let info = |disable: bool| {
        let mut c = std::process::Command::new(crate::common::exe());
        c.args(["info", "--json"]).arg(&model);
        if disable {
            c.env("MINFER_DISABLE_CUDA", "1");
        } else {
            c.env_remove("MINFER_DISABLE_CUDA");
        }
        let o = c.output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(o.status.success() && !err.contains("panicked"), "{err}");
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        j["backends"]["cuda"].clone()
    };
    let v = info(true);
    assert_eq!(v["ok"], false);
    assert_eq!(v["reason"], "disabled by MINFER_DISABLE_CUDA");
    let v = info(false);
    match CudaBackend::new(0) {
        Ok(_) => assert_eq!(v["ok"], true, "{v}"),
        Err(r) => {
            assert_eq!(v["ok"], false);
            assert_eq!(v["reason"].as_str(), Some(r.0.as_str()));
            eprintln!("cuda: {r}");
        }
    }
}

/// With profiling on, the CUDA backend (the device, else the emulation) times each node's
/// launches: the decode profile of two one-token steps (after a reset that drops the
/// prefill's) has two forwards, one row per op kind with its launches and a positive time, and the logits are those of the unprofiled
/// backend's steps (graphs replayed there) bit for bit.
fn profiled_steps_are_timed_per_op_and_compute_the_same() {
    let t = "profiled_steps_are_timed_per_op_and_compute_the_same";
    let Some(root) = common::ref_dir(t) else {
        return;
    };
    // The device where there is one, else the emulator.
    let lib = match real_device() {
        true => None,
        false => match emulator(t) {
            Some(lib) => Some(lib),
            None => return,
        },
    };
    let model = Arc::new(minfer::load::open_model(root.join("random/gguf/llama-Q4_1.gguf")).unwrap());
    let n_layer = model.hparams.n_layer as u64;
    let run = |profile: bool| {
        let b = match &lib {
            Some(lib) => CudaBackend::emulated(lib).unwrap(),
            None => CudaBackend::new(0).unwrap(),
        };
        let b = b.with_profile(profile);
        let mut ctx = b.new_context(&model, 32, minfer::backend::KvType::F16).unwrap();
        let g = |n| model.graph(minfer::model::GraphKey::new(n, 1));
        let mut out = Vec::new();
        ctx.forward(&g(3), &minfer::backend::Step::contiguous(&[1, 2, 3], 0), &mut out)
            .unwrap();
        ctx.reset_profile();
        let mut logits = Vec::new();
        for (i, tok) in [4u32, 5].into_iter().enumerate() {
            ctx.forward(&g(1), &minfer::backend::Step::contiguous(&[tok], 3 + i), &mut out)
                .unwrap();
            logits.extend_from_slice(&out);
        }
        (logits, ctx.decode_profile())
    };
    let (plain, none) = run(false);
    assert!(none.is_none(), "no profile unless asked");
    let (timed, p) = run(true);
    assert_eq!(timed, plain, "profiling changes no value");
    let p = p.expect("a profile");
    assert_eq!(p.forwards, 2);
    assert!(p.ops.iter().all(|o| o.calls > 0 && o.ns > 0.0), "{p:?}");
    let launches: u64 = p.ops.iter().map(|o| o.calls).sum();
    assert!(launches >= 2 * 7 * n_layer, "every launch of both steps: {p:?}");
    let attn = p
        .ops
        .iter()
        .find(|o| o.op.starts_with("attention"))
        .expect("attention timed");
    assert_eq!(
        attn.calls,
        2 * 2 * n_layer,
        "store and attention per layer and step: {p:?}"
    );
}

/// The instructions a warp of each tensor-core matmul entry issues a step, as `plan` counts them
/// (`cost::mma_step_instructions`, its issue bound), are the kernel's within 10 %: the entry's
/// sm_90 CUBIN disassembled (`$MINFER_NVDISASM`, else `nvdisasm` on the PATH;
/// `scripts/fetch-nvdisasm` fetches one), the step loop found as the innermost backward branch
/// around the entry's first IMMA. Entries without an integer form have neither.
fn mma_step_instructions_are_the_kernels() {
    use minfer::testing::gpu::mma_step_instructions;
    let t = "mma_step_instructions_are_the_kernels";
    if let Err(e) = source::nvrtc_version() {
        common::skip::<()>(t, &e);
        return;
    }
    if !source::cubin_archs().is_ok_and(|a| a.contains(&90)) {
        common::skip::<()>(t, "this NVRTC writes no sm_90 CUBIN");
        return;
    }
    let tool = std::env::var_os("MINFER_NVDISASM").map_or_else(|| PathBuf::from("nvdisasm"), PathBuf::from);
    let cubin = match source::compile(Kernel::Matmul, "sm_90", false) {
        Ok(Image::Cubin(b)) => b,
        Ok(Image::Ptx(_)) => panic!("matmul.cu for sm_90: PTX, not a CUBIN"),
        Err(e) => panic!("matmul.cu for sm_90: {e}"),
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("nvdisasm");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("matmul-sm_90.cubin");
    std::fs::write(&file, &cubin).unwrap();
    let out = match std::process::Command::new(&tool).arg("-c").arg(&file).output() {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        Ok(o) => panic!("{}: {}", tool.display(), String::from_utf8_lossy(&o.stderr)),
        Err(e) => {
            let why = format!("{} ({e}): set MINFER_NVDISASM (scripts/fetch-nvdisasm)", tool.display());
            common::skip::<()>(t, &why);
            return;
        }
    };
    let mut checked = 0;
    let mut failures = Vec::new();
    for v in all_variants()
        .into_iter()
        .filter(|v| v.kernel == Kernel::Matmul && !v.subgroups)
    {
        let Some(q) = v.qtype else { continue };
        for &cols in v.mma_sizes() {
            let entry = v.mma_entry(cols).unwrap();
            let got = step_loop_instructions(&out, &entry);
            let want = mma_step_instructions(q, cols as u64);
            match (got, want) {
                (Some(g), Some(w)) if g.abs_diff(w) * 10 <= w => checked += 1,
                (None, None) => {}
                _ => failures.push(format!(
                    "{entry}: {got:?} a step in the kernel, {want:?} in plan's table"
                )),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(checked >= 30, "only {checked} entries checked");
}

/// The instructions of `entry`'s step loop in `nvdisasm -c` output: from the label of the
/// innermost backward branch that encloses the entry's first IMMA to that branch; `None` where
/// the entry has no IMMA.
fn step_loop_instructions(sass: &str, entry: &str) -> Option<u64> {
    let head = format!(".text.{entry}:");
    let body: Vec<&str> = sass
        .lines()
        .skip_while(|l| l.trim() != head)
        .skip(1)
        .take_while(|l| !l.starts_with(".text."))
        .collect();
    // `/*01f0*/  IMAD ...`: an address, then the instruction.
    let is_instruction = |l: &str| {
        let l = l.trim_start();
        l.strip_prefix("/*")
            .and_then(|r| r.split_once("*/"))
            .is_some_and(|(a, _)| a.len() >= 4 && a.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    let label_at = |name: &str| body.iter().position(|l| l.trim() == format!("{name}:"));
    let first_imma = body.iter().position(|l| is_instruction(l) && l.contains("IMMA"))?;
    let mut best: Option<(usize, usize)> = None;
    for (i, l) in body.iter().enumerate().skip(first_imma) {
        let Some(target) = l.split("BRA `(").nth(1).and_then(|r| r.split(')').next()) else {
            continue;
        };
        if let Some(start) = label_at(target).filter(|&s| s < first_imma) {
            if best.is_none_or(|(s, e)| i - start < e - s) {
                best = Some((start, i));
            }
        }
    }
    let (start, end) = best?;
    Some(body[start..=end].iter().filter(|l| is_instruction(l)).count() as u64)
}
