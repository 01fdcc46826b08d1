//! The WGSL sources (`shaders/`) and how a kernel variant is assembled from them: a reduction
//! prelude (workgroup memory or subgroups), `common.wgsl`, then for weight-reading ops the byte
//! readers and one quant file, for the attention ops one KV file, and last the op body. Plain
//! concatenation; workgroup sizes are WGSL `override`s set at pipeline creation.

use crate::backend::KvType;
use crate::quant::QType;

macro_rules! shader {
    ($path:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/shaders/", $path))
    };
}

const REDUCE_SHARED: &str = shader!("reduce_shared.wgsl");
const REDUCE_SUBGROUP: &str = shader!("reduce_subgroup.wgsl");
const COMMON: &str = shader!("common.wgsl");
const BYTES: &str = shader!("bytes.wgsl");
/// The body of the element-wise binary ops; their own files hold only `fn op`.
const BINARY: &str = shader!("binary.wgsl");

/// The quant file for a weight type, or `None` where there is no kernel (the gate refuses it).
pub fn quant_source(q: QType) -> Option<&'static str> {
    Some(match q {
        QType::F32 => shader!("quant/f32.wgsl"),
        QType::F16 => shader!("quant/f16.wgsl"),
        QType::BF16 => shader!("quant/bf16.wgsl"),
        QType::Q4_0 => shader!("quant/q4_0.wgsl"),
        QType::Q4_1 => shader!("quant/q4_1.wgsl"),
        QType::Q5_0 => shader!("quant/q5_0.wgsl"),
        QType::Q5_1 => shader!("quant/q5_1.wgsl"),
        QType::Q8_0 => shader!("quant/q8_0.wgsl"),
        QType::Q2K => shader!("quant/q2_k.wgsl"),
        QType::Q3K => shader!("quant/q3_k.wgsl"),
        QType::Q4K => shader!("quant/q4_k.wgsl"),
        QType::Q5K => shader!("quant/q5_k.wgsl"),
        QType::Q6K => shader!("quant/q6_k.wgsl"),
        QType::IQ4NL => shader!("quant/iq4_nl.wgsl"),
        QType::MXFP4 => shader!("quant/mxfp4.wgsl"),
        // Activation-only formats: no weight kernel.
        QType::Q8_1 | QType::Q8K => return None,
    })
}

/// The KV file for a cache type.
pub fn kv_source(kv: KvType) -> Option<&'static str> {
    Some(match kv {
        KvType::F32 => shader!("kv/f32.wgsl"),
        KvType::F16 => shader!("kv/f16.wgsl"),
        KvType::Q8_0 => shader!("kv/q8_0.wgsl"),
    })
}

/// The qtypes with a weight kernel, in table order.
pub fn weight_qtypes() -> Vec<QType> {
    QType::ALL.into_iter().filter(|&q| quant_source(q).is_some()).collect()
}

/// One shader file per op; the name is the op's (and the file's) name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    MatmulVec,
    Matmul,
    GetRows,
    RmsNorm,
    HeadNorm,
    AddBias,
    Rope,
    KvStore,
    Attention,
    Add,
    Mul,
    Scale,
    Swiglu,
    Geglu,
    Softcap,
    Argmax,
}

/// How a kernel binds a buffer (binding i of group 0 is entry i).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bind {
    Uniform,
    Read,
    ReadWrite,
}

use Bind::{Read as R, ReadWrite as RW, Uniform as U};

impl Kernel {
    pub const ALL: [Kernel; 16] = [
        Kernel::MatmulVec,
        Kernel::Matmul,
        Kernel::GetRows,
        Kernel::RmsNorm,
        Kernel::HeadNorm,
        Kernel::AddBias,
        Kernel::Rope,
        Kernel::KvStore,
        Kernel::Attention,
        Kernel::Add,
        Kernel::Mul,
        Kernel::Scale,
        Kernel::Swiglu,
        Kernel::Geglu,
        Kernel::Softcap,
        Kernel::Argmax,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kernel::MatmulVec => "matmul_vec",
            Kernel::Matmul => "matmul",
            Kernel::GetRows => "get_rows",
            Kernel::RmsNorm => "rms_norm",
            Kernel::HeadNorm => "head_norm",
            Kernel::AddBias => "add_bias",
            Kernel::Rope => "rope",
            Kernel::KvStore => "kv_store",
            Kernel::Attention => "attention",
            Kernel::Add => "add",
            Kernel::Mul => "mul",
            Kernel::Scale => "scale",
            Kernel::Swiglu => "swiglu",
            Kernel::Geglu => "geglu",
            Kernel::Softcap => "softcap",
            Kernel::Argmax => "argmax",
        }
    }

    fn body(self, kv: Option<KvType>) -> &'static str {
        match self {
            // q8_0 blocks are quantized whole, two per invocation: a store of its own.
            Kernel::KvStore if kv == Some(KvType::Q8_0) => shader!("kv_store_q8_0.wgsl"),
            Kernel::MatmulVec => shader!("matmul_vec.wgsl"),
            Kernel::Matmul => shader!("matmul.wgsl"),
            Kernel::GetRows => shader!("get_rows.wgsl"),
            Kernel::RmsNorm => shader!("rms_norm.wgsl"),
            Kernel::HeadNorm => shader!("head_norm.wgsl"),
            Kernel::AddBias => shader!("add_bias.wgsl"),
            Kernel::Rope => shader!("rope.wgsl"),
            Kernel::KvStore => shader!("kv_store.wgsl"),
            Kernel::Attention => shader!("attention.wgsl"),
            Kernel::Add => shader!("add.wgsl"),
            Kernel::Mul => shader!("mul.wgsl"),
            Kernel::Scale => shader!("scale.wgsl"),
            Kernel::Swiglu => shader!("swiglu.wgsl"),
            Kernel::Geglu => shader!("geglu.wgsl"),
            Kernel::Softcap => shader!("softcap.wgsl"),
            Kernel::Argmax => shader!("argmax.wgsl"),
        }
    }

    pub fn bindings(self) -> &'static [Bind] {
        match self {
            Kernel::KvStore => &[U, U, R, R, RW, RW],
            Kernel::Attention => &[U, U, R, R, R, RW],
            Kernel::Scale | Kernel::Softcap | Kernel::Argmax => &[U, R, RW],
            _ => &[U, R, R, RW],
        }
    }

    /// An element-wise binary op: its file's `fn op` plus the shared `binary.wgsl` body.
    fn is_binary(self) -> bool {
        matches!(self, Kernel::Add | Kernel::Mul | Kernel::Swiglu | Kernel::Geglu)
    }

    /// Reads a weight through a quant file (any weight qtype).
    pub fn reads_matrix(self) -> bool {
        matches!(self, Kernel::MatmulVec | Kernel::Matmul | Kernel::GetRows)
    }

    /// Reads a float weight vector through `dq1` (f32 / f16 / bf16 only).
    pub fn reads_vector(self) -> bool {
        matches!(self, Kernel::RmsNorm | Kernel::HeadNorm | Kernel::AddBias)
    }

    /// Touches the KV cache through a KV file.
    pub fn uses_kv(self) -> bool {
        matches!(self, Kernel::KvStore | Kernel::Attention)
    }

    /// Uses the workgroup reductions, so has a subgroup variant.
    pub fn reduces(self) -> bool {
        matches!(
            self,
            Kernel::MatmulVec | Kernel::RmsNorm | Kernel::HeadNorm | Kernel::Attention
        )
    }

    /// The `WG` override where the kernel has one. 64 for reductions and matvec (one row per
    /// workgroup), 256 for element-wise ops.
    pub fn workgroup_size(self) -> Option<u32> {
        match self {
            Kernel::Matmul | Kernel::Argmax => None,
            Kernel::MatmulVec | Kernel::GetRows | Kernel::RmsNorm | Kernel::HeadNorm | Kernel::Rope => Some(64),
            Kernel::Attention | Kernel::KvStore => Some(64),
            _ => Some(256),
        }
    }
}

/// A kernel specialised for a weight qtype and/or KV type, with or without subgroups.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Variant {
    pub kernel: Kernel,
    pub qtype: Option<QType>,
    pub kv: Option<KvType>,
    pub subgroups: bool,
}

impl Variant {
    pub fn new(kernel: Kernel) -> Variant {
        Variant {
            kernel,
            qtype: None,
            kv: None,
            subgroups: false,
        }
    }

    pub fn with_qtype(kernel: Kernel, q: QType) -> Variant {
        Variant {
            qtype: Some(q),
            ..Variant::new(kernel)
        }
    }

    pub fn with_kv(kernel: Kernel, kv: KvType) -> Variant {
        Variant {
            kv: Some(kv),
            ..Variant::new(kernel)
        }
    }

    /// The same variant on the subgroup path, where the kernel has one.
    pub fn subgroups(self, on: bool) -> Variant {
        Variant {
            subgroups: on && self.kernel.reduces(),
            ..self
        }
    }

    /// `matmul_vec/q4_0/sg`, `attention/kv_f16`, `add`.
    pub fn name(&self) -> String {
        let mut s = self.kernel.name().to_string();
        if let Some(q) = self.qtype {
            s += "/";
            s += q.name();
        }
        if let Some(kv) = self.kv {
            s += "/kv_";
            s += kv.name();
        }
        if self.subgroups {
            s += "/sg";
        }
        s
    }

    /// The whole module, or `None` where a piece has no source (no kernel for that type).
    pub fn source(&self) -> Option<String> {
        let k = self.kernel;
        let mut parts: Vec<&str> = vec![if self.subgroups { REDUCE_SUBGROUP } else { REDUCE_SHARED }, COMMON];
        if !k.reduces() {
            // Keep the module free of the (unused) reduction scratch and Lanes struct.
            parts.remove(0);
        }
        if k.reads_matrix() || k.reads_vector() {
            parts.push(BYTES);
            parts.push(quant_source(self.qtype?)?);
        }
        if k.uses_kv() {
            parts.push(kv_source(self.kv?)?);
        }
        parts.push(k.body(self.kv));
        if k.is_binary() {
            parts.push(BINARY);
        }
        Some(parts.join("\n"))
    }

    /// Pipeline-overridable constants (`WG`).
    pub fn constants(&self) -> Vec<(&'static str, f64)> {
        self.kernel
            .workgroup_size()
            .map(|wg| vec![("WG", wg as f64)])
            .unwrap_or_default()
    }
}

/// Every variant the backend can build: each op with each type it takes, both reduction paths.
/// The naga test validates and translates all of them.
pub fn all_variants() -> Vec<Variant> {
    let mut out = Vec::new();
    for k in Kernel::ALL {
        let base: Vec<Variant> = if k.reads_matrix() {
            weight_qtypes().into_iter().map(|q| Variant::with_qtype(k, q)).collect()
        } else if k.reads_vector() {
            [QType::F32, QType::F16, QType::BF16]
                .into_iter()
                .map(|q| Variant::with_qtype(k, q))
                .collect()
        } else if k.uses_kv() {
            [KvType::F32, KvType::F16]
                .into_iter()
                .map(|kv| Variant::with_kv(k, kv))
                .collect()
        } else {
            vec![Variant::new(k)]
        };
        for v in base {
            out.push(v);
            if k.reduces() {
                out.push(v.subgroups(true));
            }
        }
    }
    out
}
