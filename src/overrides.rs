//! Every `MINFER_*` override, read in one pass ([`Overrides::from_env`]) and parsed strictly
//! into the types of the modules it sets: the KV type, the CPU ISA, the backends' switches. The
//! values then travel as fields ([`crate::SessionOptions`], [`BackendOptions`]), so nothing
//! below the top level looks at the environment and an embedding program can set the same
//! fields without touching it. Reading and the rule every variable follows are [`crate::env`]'s.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::backend::cpu::dot::Isa;
use crate::backend::{BackendOptions, KvType};
use crate::env::{bad, var_os, Vars};
use crate::error::Result;

/// The variables [`Overrides`] reads, in the README's order.
pub const VARS: [&str; 15] = [
    "MINFER_CACHE_TYPE",
    "MINFER_CPU_ISA",
    "MINFER_DISABLE_WGPU",
    "MINFER_WGPU_ALLOW_CPU",
    "MINFER_CHECKED_SHADERS",
    "MINFER_INT8_MATMUL",
    "MINFER_COOP_MATMUL",
    "MINFER_PROFILE",
    "MINFER_DISABLE_CUDA",
    "MINFER_CUDA_EMULATOR",
    "MINFER_CUDA_GRAPHS",
    "MINFER_CUDA_PDL",
    "MINFER_SPLIT_ATTENTION",
    "MINFER_MODEL",
    "MINFER_MODELS_DIR",
];

/// Every `MINFER_*` override, parsed. `Default` is "nothing set": the built-in behaviour.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `MINFER_CACHE_TYPE`: the KV cache type (`f32`, `f16`, `q8_0`) instead of the auto policy.
    pub kv_type: Option<KvType>,
    /// `MINFER_CPU_ISA`: the CPU kernels by ISA name (`scalar`, `avx2`, `avx512`, `neon`).
    pub cpu_isa: Option<String>,
    /// `MINFER_DISABLE_WGPU`: leave the wgpu backend out.
    pub disable_wgpu: bool,
    /// `MINFER_WGPU_ALLOW_CPU`: `auto` may pick a software wgpu adapter (llvmpipe, WARP).
    pub wgpu_allow_software: bool,
    /// `MINFER_CHECKED_SHADERS`: wgpu shaders keep wgpu's runtime bounds checks.
    pub checked_shaders: bool,
    /// `MINFER_INT8_MATMUL`: `Some(false)` runs the matmuls over quantized weights in f32
    /// instead of 8-bit integers (wgpu's matvec rows and prefill tiles, CUDA's tensor-core
    /// prefill tiles).
    pub int8_matmul: Option<bool>,
    /// `MINFER_COOP_MATMUL`: `Some(false)` keeps wgpu's prefill matmul and attention off
    /// cooperative matrices where the device has them.
    pub coop_matmul: Option<bool>,
    /// `MINFER_PROFILE`: per-op GPU time from wgpu timestamp queries.
    pub profile: bool,
    /// `MINFER_DISABLE_CUDA`: leave the CUDA backend out.
    pub disable_cuda: bool,
    /// `MINFER_CUDA_EMULATOR`: the CPU emulation library that stands in for a CUDA device.
    pub cuda_emulator: Option<PathBuf>,
    /// `MINFER_CUDA_GRAPHS`: `Some(false)` replays no CUDA graphs (each launch goes alone).
    pub cuda_graphs: Option<bool>,
    /// `MINFER_CUDA_PDL`: `Some(false)` launches no kernel with programmatic dependent launch.
    pub cuda_pdl: Option<bool>,
    /// `MINFER_SPLIT_ATTENTION`: the context (positions) from which GPU steps take the
    /// split-KV attention; `Some(0)` never.
    pub split_span: Option<u32>,
    /// `MINFER_MODEL`: the CLI's default model file.
    pub model: Option<PathBuf>,
    /// `MINFER_MODELS_DIR`: where the CLI looks for its default model first.
    pub models_dir: Option<PathBuf>,
}

impl Overrides {
    /// Reads the process environment, once per call, every variable of [`VARS`].
    pub fn from_env() -> Result<Overrides> {
        Overrides::from_lookup(var_os)
    }

    /// [`Overrides::from_env`] over any lookup (tests, or a program's own configuration).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<OsString>) -> Result<Overrides> {
        let vars = Vars::new(lookup);
        let kv_type = vars
            .get("MINFER_CACHE_TYPE")?
            .map(|v| KvType::parse(&v).map_err(|e| bad("MINFER_CACHE_TYPE", &v, &e.to_string())))
            .transpose()?;
        let split_span = vars
            .get("MINFER_SPLIT_ATTENTION")?
            .map(|v| {
                v.trim().parse::<u32>().map_err(|_| {
                    bad(
                        "MINFER_SPLIT_ATTENTION",
                        &v,
                        "expected a number of positions (0: never)",
                    )
                })
            })
            .transpose()?;
        let cpu_isa = vars.get("MINFER_CPU_ISA")?;
        if let Some(v) = &cpu_isa {
            Isa::for_isa(v).map_err(|e| bad("MINFER_CPU_ISA", v, &e.to_string()))?;
        }
        Ok(Overrides {
            kv_type,
            cpu_isa,
            disable_wgpu: vars.flag("MINFER_DISABLE_WGPU")?.unwrap_or(false),
            wgpu_allow_software: vars.flag("MINFER_WGPU_ALLOW_CPU")?.unwrap_or(false),
            checked_shaders: vars.flag("MINFER_CHECKED_SHADERS")?.unwrap_or(false),
            int8_matmul: vars.flag("MINFER_INT8_MATMUL")?,
            coop_matmul: vars.flag("MINFER_COOP_MATMUL")?,
            profile: vars.flag("MINFER_PROFILE")?.unwrap_or(false),
            disable_cuda: vars.flag("MINFER_DISABLE_CUDA")?.unwrap_or(false),
            cuda_emulator: vars.path("MINFER_CUDA_EMULATOR")?,
            cuda_graphs: vars.flag("MINFER_CUDA_GRAPHS")?,
            cuda_pdl: vars.flag("MINFER_CUDA_PDL")?,
            split_span,
            model: vars.path("MINFER_MODEL")?,
            models_dir: vars.path("MINFER_MODELS_DIR")?,
        })
    }

    /// The backend switches among them, over [`BackendOptions`]' defaults.
    pub fn backend_options(&self) -> BackendOptions {
        BackendOptions {
            cpu_isa: self.cpu_isa.clone(),
            disable_wgpu: self.disable_wgpu,
            wgpu_allow_software: self.wgpu_allow_software,
            checked_shaders: self.checked_shaders,
            int8_matmul: self.int8_matmul.unwrap_or(true),
            coop_matmul: self.coop_matmul.unwrap_or(true),
            profile: self.profile,
            disable_cuda: self.disable_cuda,
            cuda_emulator: self.cuda_emulator.clone(),
            cuda_graphs: self.cuda_graphs.unwrap_or(true),
            cuda_pdl: self.cuda_pdl.unwrap_or(true),
            split_span: self.split_span,
            progress: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::parse_flag;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let pairs: Vec<(String, OsString)> = pairs.iter().map(|(k, v)| (k.to_string(), v.into())).collect();
        move |k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    #[test]
    fn nothing_set_is_the_default() {
        assert_eq!(Overrides::from_lookup(lookup(&[])).unwrap(), Overrides::default());
        let empty: Vec<(&str, &str)> = VARS.iter().map(|&v| (v, "")).collect();
        assert_eq!(Overrides::from_lookup(lookup(&empty)).unwrap(), Overrides::default());
    }

    #[test]
    fn flags_follow_one_rule() {
        for on in ["1", "true", "TRUE", "yes", "On", " on "] {
            assert!(parse_flag("X", on).unwrap(), "{on:?}");
        }
        for off in ["0", "false", "False", "no", "OFF"] {
            assert!(!parse_flag("X", off).unwrap(), "{off:?}");
        }
        let o = Overrides::from_lookup(lookup(&[
            ("MINFER_DISABLE_WGPU", "yes"),
            ("MINFER_WGPU_ALLOW_CPU", "true"),
            ("MINFER_PROFILE", "1"),
            ("MINFER_DISABLE_CUDA", "off"),
            ("MINFER_CUDA_GRAPHS", "0"),
        ]))
        .unwrap();
        assert!(o.disable_wgpu && o.wgpu_allow_software && o.profile && !o.disable_cuda);
        assert_eq!(o.cuda_graphs, Some(false));
    }

    #[test]
    fn a_bad_value_names_the_variable_and_the_value() {
        let e = Overrides::from_lookup(lookup(&[("MINFER_DISABLE_CUDA", "maybe")]))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "invalid argument: MINFER_DISABLE_CUDA=\"maybe\": expected 1, true, yes, on or 0, false, no, off"
        );
        let e = Overrides::from_lookup(lookup(&[("MINFER_CACHE_TYPE", "q4_0")]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("MINFER_CACHE_TYPE=\"q4_0\"") && e.contains("expected f32, f16 or q8_0"),
            "{e}"
        );
        let e = Overrides::from_lookup(lookup(&[("MINFER_CPU_ISA", "sse9")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("MINFER_CPU_ISA=\"sse9\""), "{e}");
    }

    #[test]
    fn values_are_parsed() {
        let o = Overrides::from_lookup(lookup(&[
            ("MINFER_CACHE_TYPE", "Q8_0"),
            ("MINFER_CPU_ISA", "scalar"),
            ("MINFER_CUDA_EMULATOR", "/x/libemu.so"),
            ("MINFER_MODEL", "m.gguf"),
            ("MINFER_MODELS_DIR", "/models"),
        ]))
        .unwrap();
        assert_eq!(o.kv_type, Some(KvType::Q8_0));
        assert_eq!(o.cpu_isa.as_deref(), Some("scalar"));
        assert_eq!(o.cuda_emulator, Some(PathBuf::from("/x/libemu.so")));
        assert_eq!(o.model, Some(PathBuf::from("m.gguf")));
        assert_eq!(o.models_dir, Some(PathBuf::from("/models")));
        assert_eq!(o.cuda_graphs, None);
    }

    #[cfg(unix)]
    #[test]
    fn non_utf8_is_an_error() {
        use std::os::unix::ffi::OsStringExt;
        let bad = OsString::from_vec(vec![0x66, 0xff]);
        let e = Overrides::from_lookup(move |k| (k == "MINFER_CPU_ISA").then(|| bad.clone()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("MINFER_CPU_ISA") && e.contains("UTF-8"), "{e}");
    }
}
