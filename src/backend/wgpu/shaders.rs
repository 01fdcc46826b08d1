//! The WGSL sources (`shaders/`) and how a kernel variant is assembled from them: a reduction
//! prelude (workgroup memory or subgroups), `common.wgsl`, then for weight-reading ops the byte
//! readers and one quant file (plus, for the matmuls, whether the activations carry q8_1
//! corrections), for the attention ops one KV file, and last the op's files as its row of the
//! kernel table (`gpu::table`) names them: declarations it shares (`kv_store_io.wgsl`), the
//! body, and the shared body of the element-wise ops (`binary.wgsl`, `unary.wgsl`), whose files
//! hold only `fn op`. Plain concatenation; workgroup sizes (and
//! `quantize_act`'s format) are WGSL `override`s set at pipeline creation.

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
    crate::backend::gpu::kernels::WEIGHT_QTYPES.to_vec()
}

pub use crate::backend::gpu::kernels::{all_variants, Bind, Kernel, Variant};

/// For the matmuls: whether the weight type's activation partner is q8_1, whose block sums
/// `quantize_act` leaves as corrections (`ACT_S`), and the block offset `qmin` they multiply.
/// Only q4_1 and q5_1 have one; the other types get a stub that is never called.
fn act_s(q: QType) -> &'static str {
    if crate::backend::gpu::kernels::act_qtype(q) == Some(QType::Q8_1) {
        "const ACT_S: bool = true;\n"
    } else {
        "const ACT_S: bool = false;\nfn qmin(b: u32) -> f32 {\n    return 0.0;\n}\n"
    }
}

/// WGSL assembly of a variant.
pub trait WgslSource {
    /// The whole module, or `None` where a piece has no source (no kernel for that type).
    fn source(&self) -> Option<String>;
    /// Pipeline-overridable constants (`WG`).
    fn constants(&self) -> Vec<(&'static str, f64)>;
}

impl WgslSource for Variant {
    fn source(&self) -> Option<String> {
        let k = self.kernel;
        let mut parts: Vec<&str> = vec![if self.subgroups { REDUCE_SUBGROUP } else { REDUCE_SHARED }, COMMON];
        if !k.reduces() {
            // Keep the module free of the (unused) reduction scratch and Lanes struct.
            parts.remove(0);
        }
        let info = k.info();
        if k.reads_matrix() || k.reads_vector() {
            parts.push(BYTES);
            parts.push(quant_source(self.qtype?)?);
            if info.act_input {
                parts.push(act_s(self.qtype?));
            }
        }
        if k.uses_kv() {
            parts.push(kv_source(self.kv?)?);
        }
        let w = &info.wgsl;
        parts.extend(w.head);
        parts.push(match w.body_kv_q8_0 {
            Some(b) if self.kv == Some(KvType::Q8_0) => b,
            _ => w.body,
        });
        parts.extend(w.tail);
        Some(parts.join("\n"))
    }

    fn constants(&self) -> Vec<(&'static str, f64)> {
        let mut c: Vec<(&'static str, f64)> = self
            .kernel
            .workgroup_size()
            .map(|wg| vec![("WG", wg as f64)])
            .unwrap_or_default();
        if self.kernel == Kernel::QuantizeAct {
            // quantize_act.wgsl's ACT: 0 q8_0, 1 q8_1, 2 q8_K.
            let act = crate::backend::gpu::kernels::ACT_QTYPES
                .iter()
                .position(|&a| Some(a) == self.qtype);
            c.push(("ACT", act.unwrap_or(0) as f64));
        }
        c
    }
}
