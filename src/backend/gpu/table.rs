//! The kernel table: one row per kernel, from which every property the backends and tests ask
//! about derives — name, bindings, workgroup size, whether it reduces (so wgpu has a subgroup
//! variant), what it is specialised over, its parameter struct, its WGSL body and its CUDA
//! source. `Kernel` indexes it. Adding a kernel is one row here (see `backend`'s recipe).

use super::params::{self, FieldInfo, KernelParams};

/// One kernel per op; the name is the op's, and the file's in `shaders/` and `cuda/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    QuantizeAct,
    MatmulVec,
    Matmul,
    GetRows,
    RmsNorm,
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
    MatmulVecId,
    MoeRoute,
    AddBiasId,
    MoeSum,
    SwigluOai,
    SigmoidGate,
    Slice,
    ScaleBy,
    MatmulVecPack,
    AttentionSplit,
    AttentionReduce,
    AttentionTile,
    LayerNorm,
    AddPosRows,
    Gelu,
}

/// How a kernel binds a buffer (binding i of group 0 is entry i).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bind {
    Uniform,
    Read,
    ReadWrite,
}

use Bind::{Read as R, ReadWrite as RW, Uniform as U};

/// What a kernel has one variant per.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spec {
    /// One variant.
    None,
    /// A weight matrix of any weight qtype (`WEIGHT_QTYPES`).
    Matrix,
    /// A float weight vector (f32 / f16 / bf16).
    Vector,
    /// The KV cache type.
    Kv,
    /// The activation format written (`ACT_QTYPES`).
    Act,
}

/// The WGSL of a kernel beyond the shared prelude and the type's file: the op's own file and,
/// where ops share a body or declarations, those files.
pub struct Wgsl {
    /// Declarations before the body (both kv_store bodies share theirs).
    pub head: Option<&'static str>,
    pub body: &'static str,
    /// The body for a q8_0 KV cache, where it differs (blocks quantized whole).
    pub body_kv_q8_0: Option<&'static str>,
    /// The shared body after an element-wise op's `fn op` (`binary.wgsl`, `unary.wgsl`), or
    /// functions the body calls that other kernels share (`matmul_vec_row.wgsl`).
    pub tail: Option<&'static str>,
    /// The body for quantized weights, where it differs: the tiled matmul in 8-bit integers
    /// (`matmul_i8.wgsl`).
    pub body_i8: Option<&'static str>,
    /// The tail for quantized weights, where it differs: the matvecs' int8 row reader
    /// (`matmul_vec_row_i8.wgsl`) in place of the f32 one.
    pub tail_i8: Option<&'static str>,
    /// The body on cooperative matrices, where the device has them (`matmul_coop.wgsl`).
    pub body_coop: Option<&'static str>,
    /// The body on 16 × 16 f16 cooperative matrices (`matmul_coop16.wgsl`,
    /// `attention_tile_coop16.wgsl`), before the matrix operations that hold its entry point
    /// (`wgpu::shaders::COOP16_OPS`, `attention_coop16.wgsl`), for the variants
    /// `Variant::takes_coop_f16`.
    pub body_coop16: Option<&'static str>,
}

/// A kernel's parameter struct (`params.rs`), by name and fields.
pub struct ParamsInfo {
    pub name: &'static str,
    pub fields: &'static [FieldInfo],
}

const fn of<P: KernelParams>() -> ParamsInfo {
    ParamsInfo {
        name: P::NAME,
        fields: P::FIELDS,
    }
}

/// One row of the table.
pub struct KernelInfo {
    pub kernel: Kernel,
    pub name: &'static str,
    /// Binding 0 is the params uniform; the rest as the WGSL declares them.
    pub bindings: &'static [Bind],
    pub spec: Spec,
    /// Reduces across the workgroup, so the wgpu backend has a subgroup variant.
    pub reduces: bool,
    /// Reads `quantize_act`'s output for quantized weights (the matmuls): its WGSL is told
    /// whether q8_1 corrections follow the values (`ACT_S`).
    pub act_input: bool,
    /// Threads per workgroup (CUDA block).
    pub threads: u32,
    /// `threads` is set at pipeline creation (WGSL `override WG`) rather than fixed in the
    /// shader (`matmul`'s 8 × 8, `argmax`'s `WGA`).
    pub wg_override: bool,
    pub params: ParamsInfo,
    pub wgsl: Wgsl,
    /// `cuda/<name>.cu`.
    pub cuda: &'static str,
    /// Why the kernel may run under a quarter of an SM's threads (its registers or workgroup
    /// memory), where it does: the geometry check lets it pass only with a reason.
    pub low_occupancy: Option<&'static str>,
}

macro_rules! wgsl {
    ($path:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/shaders/", $path))
    };
}

macro_rules! cuda {
    ($path:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/cuda/", $path))
    };
}

const fn body(body: &'static str) -> Wgsl {
    Wgsl {
        head: None,
        body,
        body_kv_q8_0: None,
        tail: None,
        body_i8: None,
        tail_i8: None,
        body_coop: None,
        body_coop16: None,
    }
}

/// An element-wise binary op: its file's `fn op`, then `binary.wgsl` (which may round its
/// output through `quantize_word.wgsl`).
const fn binary(body: &'static str) -> Wgsl {
    Wgsl {
        head: Some(wgsl!("quantize_word.wgsl")),
        tail: Some(wgsl!("binary.wgsl")),
        ..self::body(body)
    }
}

/// An element-wise op with a scalar: its file's `fn op`, then `unary.wgsl`.
const fn unary(body: &'static str) -> Wgsl {
    Wgsl {
        tail: Some(wgsl!("unary.wgsl")),
        ..self::body(body)
    }
}

/// Threads of the binary element-wise kernels (CUDA `BINARY_WG`): a decode step's GLU over 8
/// tokens, rounding a word of 4 per thread, still fills an H200.
pub const BINARY_THREADS: u32 = 128;

/// A one-variant element-wise kernel of 256 threads.
const fn elementwise(
    kernel: Kernel,
    name: &'static str,
    bindings: &'static [Bind],
    params: ParamsInfo,
    wgsl: Wgsl,
    cuda: &'static str,
) -> KernelInfo {
    KernelInfo {
        kernel,
        name,
        bindings,
        spec: Spec::None,
        reduces: false,
        act_input: false,
        threads: 256,
        wg_override: true,
        params,
        wgsl,
        cuda,
        low_occupancy: None,
    }
}

/// The table, in `Kernel` order.
pub static KERNELS: [KernelInfo; 31] = [
    KernelInfo {
        kernel: Kernel::QuantizeAct,
        name: "quantize_act",
        bindings: &[U, R, RW],
        spec: Spec::Act,
        reduces: false,
        act_input: false,
        threads: 64,
        wg_override: true,
        params: of::<params::QuantizeActParams>(),
        wgsl: Wgsl {
            head: Some(wgsl!("quantize_word.wgsl")),
            ..body(wgsl!("quantize_act.wgsl"))
        },
        cuda: cuda!("quantize_act.cu"),
        low_occupancy: None,
    },
    KernelInfo {
        kernel: Kernel::MatmulVec,
        name: "matmul_vec",
        bindings: &[U, R, R, RW, R],
        spec: Spec::Matrix,
        reduces: true,
        act_input: true,
        threads: 128,
        wg_override: true,
        params: of::<params::MatmulParams>(),
        wgsl: Wgsl {
            head: Some(concat!(wgsl!("matmul_params.wgsl"), wgsl!("matmul_vec_plain.wgsl"))),
            tail: Some(concat!(wgsl!("matmul_vec_row.wgsl"), wgsl!("matmul_vec_loop.wgsl"))),
            tail_i8: Some(concat!(wgsl!("matmul_vec_row_i8.wgsl"), wgsl!("matmul_vec_loop.wgsl"))),
            ..body(wgsl!("matmul_vec.wgsl"))
        },
        cuda: cuda!("matmul_vec.cu"),
        low_occupancy: None,
    },
    KernelInfo {
        kernel: Kernel::Matmul,
        name: "matmul",
        bindings: &[U, R, R, RW, R],
        spec: Spec::Matrix,
        reduces: false,
        act_input: true,
        // 8 × 8, fixed in the shader.
        threads: 64,
        wg_override: false,
        params: of::<params::MatmulParams>(),
        wgsl: Wgsl {
            head: Some(wgsl!("matmul_params.wgsl")),
            tail: Some(wgsl!("matmul_store.wgsl")),
            body_i8: Some(wgsl!("matmul_i8.wgsl")),
            body_coop: Some(wgsl!("matmul_coop.wgsl")),
            body_coop16: Some(wgsl!("matmul_coop16.wgsl")),
            ..body(wgsl!("matmul.wgsl"))
        },
        cuda: cuda!("matmul.cu"),
        low_occupancy: None,
    },
    KernelInfo {
        kernel: Kernel::GetRows,
        name: "get_rows",
        bindings: &[U, R, R, RW],
        spec: Spec::Matrix,
        reduces: false,
        act_input: false,
        // A gather: small workgroups, so a batched decode step's few rows spread over the SMs.
        threads: 32,
        wg_override: true,
        params: of::<params::GetRowsParams>(),
        wgsl: body(wgsl!("get_rows.wgsl")),
        cuda: cuda!("get_rows.cu"),
        low_occupancy: None,
    },
    KernelInfo {
        kernel: Kernel::RmsNorm,
        name: "rms_norm",
        bindings: &[U, R, R, RW, RW],
        spec: Spec::Vector,
        reduces: true,
        act_input: false,
        threads: 256,
        wg_override: true,
        params: of::<params::RmsNormParams>(),
        wgsl: Wgsl {
            head: Some(wgsl!("quantize_word.wgsl")),
            ..body(wgsl!("rms_norm.wgsl"))
        },
        cuda: cuda!("rms_norm.cu"),
        low_occupancy: None,
    },
    KernelInfo {
        spec: Spec::Vector,
        ..elementwise(
            Kernel::AddBias,
            "add_bias",
            &[U, R, R, RW],
            of::<params::AddBiasParams>(),
            Wgsl {
                head: Some("fn combine(x: f32, w: f32) -> f32 { return x + w; }\n"),
                ..body(wgsl!("add_bias.wgsl"))
            },
            cuda!("add_bias.cu"),
        )
    },
    KernelInfo {
        kernel: Kernel::Rope,
        name: "rope",
        bindings: &[U, R, R, RW],
        spec: Spec::None,
        reduces: false,
        act_input: false,
        threads: 64,
        wg_override: true,
        params: of::<params::RopeParams>(),
        wgsl: body(wgsl!("rope.wgsl")),
        cuda: cuda!("rope.cu"),
        low_occupancy: None,
    },
    KernelInfo {
        kernel: Kernel::KvStore,
        name: "kv_store",
        bindings: &[U, R, R, R, RW, RW, R],
        spec: Spec::Kv,
        reduces: false,
        act_input: false,
        threads: 64,
        wg_override: true,
        params: of::<params::KvStoreParams>(),
        wgsl: Wgsl {
            head: Some(wgsl!("kv_store_io.wgsl")),
            body_kv_q8_0: Some(wgsl!("kv_store_q8_0.wgsl")),
            ..body(wgsl!("kv_store.wgsl"))
        },
        cuda: cuda!("kv_store.cu"),
        low_occupancy: None,
    },
    KernelInfo {
        kernel: Kernel::Attention,
        name: "attention",
        bindings: &[U, R, R, R, R, RW, R, R, RW],
        spec: Spec::Kv,
        reduces: true,
        act_input: false,
        threads: 64,
        wg_override: true,
        params: of::<params::AttentionParams>(),
        wgsl: Wgsl {
            head: Some(wgsl!("quantize_block.wgsl")),
            tail: Some(concat!(wgsl!("attention_q.wgsl"), wgsl!("attention_q_round.wgsl"))),
            ..body(wgsl!("attention.wgsl"))
        },
        cuda: cuda!("attention.cu"),
        low_occupancy: None,
    },
    KernelInfo {
        threads: BINARY_THREADS,
        ..elementwise(
            Kernel::Add,
            "add",
            &[U, R, R, RW, RW],
            of::<params::BinaryParams>(),
            binary(wgsl!("add.wgsl")),
            cuda!("add.cu"),
        )
    },
    KernelInfo {
        threads: BINARY_THREADS,
        ..elementwise(
            Kernel::Mul,
            "mul",
            &[U, R, R, RW, RW],
            of::<params::BinaryParams>(),
            binary(wgsl!("mul.wgsl")),
            cuda!("mul.cu"),
        )
    },
    elementwise(
        Kernel::Scale,
        "scale",
        &[U, R, RW],
        of::<params::UnaryParams>(),
        unary(wgsl!("scale.wgsl")),
        cuda!("scale.cu"),
    ),
    KernelInfo {
        threads: BINARY_THREADS,
        ..elementwise(
            Kernel::Swiglu,
            "swiglu",
            &[U, R, R, RW, RW],
            of::<params::BinaryParams>(),
            binary(wgsl!("swiglu.wgsl")),
            cuda!("swiglu.cu"),
        )
    },
    KernelInfo {
        threads: BINARY_THREADS,
        ..elementwise(
            Kernel::Geglu,
            "geglu",
            &[U, R, R, RW, RW],
            of::<params::BinaryParams>(),
            binary(wgsl!("geglu.wgsl")),
            cuda!("geglu.cu"),
        )
    },
    elementwise(
        Kernel::Softcap,
        "softcap",
        &[U, R, RW],
        of::<params::UnaryParams>(),
        unary(wgsl!("softcap.wgsl")),
        cuda!("softcap.cu"),
    ),
    KernelInfo {
        kernel: Kernel::Argmax,
        name: "argmax",
        bindings: &[U, R, RW],
        spec: Spec::None,
        reduces: false,
        act_input: false,
        // `WGA`, fixed in the shader.
        threads: 256,
        wg_override: false,
        params: of::<params::ArgmaxParams>(),
        wgsl: body(wgsl!("argmax.wgsl")),
        cuda: cuda!("argmax.cu"),
        low_occupancy: None,
    },
    KernelInfo {
        kernel: Kernel::MatmulVecId,
        name: "matmul_vec_id",
        bindings: &[U, R, R, RW, R],
        spec: Spec::Matrix,
        reduces: true,
        act_input: true,
        threads: 128,
        wg_override: true,
        params: of::<params::MatmulParams>(),
        wgsl: Wgsl {
            head: Some(concat!(wgsl!("matmul_params.wgsl"), wgsl!("matmul_vec_id.wgsl"))),
            tail: Some(concat!(wgsl!("matmul_vec_row.wgsl"), wgsl!("matmul_vec_loop.wgsl"))),
            tail_i8: Some(concat!(wgsl!("matmul_vec_row_i8.wgsl"), wgsl!("matmul_vec_loop.wgsl"))),
            ..body(wgsl!("matmul_vec.wgsl"))
        },
        // The file on disk includes matmul_vec.cu; an NVRTC program has no include path.
        cuda: concat!("#define MF_MATMUL_VEC_ID 1\n", cuda!("matmul_vec.cu")),
        low_occupancy: None,
    },
    KernelInfo {
        kernel: Kernel::MoeRoute,
        name: "moe_route",
        bindings: &[U, R, RW],
        spec: Spec::None,
        reduces: false,
        act_input: false,
        threads: 64,
        wg_override: true,
        params: of::<params::MoeRouteParams>(),
        wgsl: body(wgsl!("moe_route.wgsl")),
        cuda: cuda!("moe_route.cu"),
        low_occupancy: None,
    },
    KernelInfo {
        spec: Spec::Vector,
        ..elementwise(
            Kernel::AddBiasId,
            "add_bias_id",
            &[U, R, R, R, RW],
            of::<params::MoeSlotParams>(),
            body(wgsl!("add_bias_id.wgsl")),
            cuda!("add_bias_id.cu"),
        )
    },
    elementwise(
        Kernel::MoeSum,
        "moe_sum",
        &[U, R, R, RW],
        of::<params::MoeSlotParams>(),
        body(wgsl!("moe_sum.wgsl")),
        cuda!("moe_sum.cu"),
    ),
    elementwise(
        Kernel::SwigluOai,
        "swiglu_oai",
        &[U, R, R, RW],
        of::<params::SwigluOaiParams>(),
        body(wgsl!("swiglu_oai.wgsl")),
        cuda!("swiglu_oai.cu"),
    ),
    elementwise(
        Kernel::SigmoidGate,
        "sigmoid_gate",
        &[U, R, R, RW],
        of::<params::SigmoidGateParams>(),
        body(wgsl!("sigmoid_gate.wgsl")),
        cuda!("sigmoid_gate.cu"),
    ),
    elementwise(
        Kernel::Slice,
        "slice",
        &[U, R, RW],
        of::<params::SliceParams>(),
        body(wgsl!("slice.wgsl")),
        cuda!("slice.cu"),
    ),
    KernelInfo {
        spec: Spec::Vector,
        ..elementwise(
            Kernel::ScaleBy,
            "scale_by",
            &[U, R, R, RW],
            of::<params::AddBiasParams>(),
            // add_bias's body with a product; the file on disk includes add_bias.cu.
            Wgsl {
                head: Some("fn combine(x: f32, w: f32) -> f32 { return x * w; }\n"),
                ..body(wgsl!("add_bias.wgsl"))
            },
            concat!("#define MF_SCALE_BY 1\n", cuda!("add_bias.cu")),
        )
    },
    KernelInfo {
        kernel: Kernel::MatmulVecPack,
        name: "matmul_vec_pack",
        bindings: &[U, R, R, RW, R, RW, RW, R],
        spec: Spec::Matrix,
        reduces: true,
        act_input: true,
        threads: 128,
        wg_override: true,
        params: of::<params::MatmulPackParams>(),
        wgsl: Wgsl {
            head: Some(wgsl!("quantize_word.wgsl")),
            tail: Some(concat!(wgsl!("matmul_vec_row.wgsl"), wgsl!("matmul_vec_loop.wgsl"))),
            tail_i8: Some(concat!(wgsl!("matmul_vec_row_i8.wgsl"), wgsl!("matmul_vec_loop.wgsl"))),
            ..body(wgsl!("matmul_vec_pack.wgsl"))
        },
        // The file on disk includes matmul_vec.cu.
        cuda: concat!("#define MF_MATMUL_VEC_PACK 1\n", cuda!("matmul_vec.cu")),
        low_occupancy: None,
    },
    KernelInfo {
        kernel: Kernel::AttentionSplit,
        name: "attention_split",
        bindings: &[U, R, R, R, R, RW, R],
        spec: Spec::Kv,
        reduces: false,
        act_input: false,
        // 64, fixed in the shader: one position per invocation in a tile.
        threads: 64,
        wg_override: false,
        params: of::<params::AttentionParams>(),
        wgsl: Wgsl {
            tail: Some(concat!(wgsl!("attention_q.wgsl"), wgsl!("attention_q_round.wgsl"))),
            ..body(wgsl!("attention_split.wgsl"))
        },
        cuda: cuda!("attention_split.cu"),
        low_occupancy: None,
    },
    KernelInfo {
        kernel: Kernel::AttentionReduce,
        name: "attention_reduce",
        bindings: &[U, R, R, RW, R, RW],
        spec: Spec::None,
        reduces: false,
        act_input: false,
        threads: 64,
        wg_override: false,
        params: of::<params::AttentionParams>(),
        wgsl: Wgsl {
            head: Some(wgsl!("quantize_word.wgsl")),
            ..body(wgsl!("attention_reduce.wgsl"))
        },
        cuda: cuda!("attention_reduce.cu"),
        low_occupancy: None,
    },
    KernelInfo {
        kernel: Kernel::AttentionTile,
        name: "attention_tile",
        bindings: &[U, R, R, R, R, RW, R],
        spec: Spec::Kv,
        reduces: false,
        act_input: false,
        threads: 64,
        wg_override: false,
        params: of::<params::AttentionTileParams>(),
        wgsl: Wgsl {
            head: Some(wgsl!("attention_tile_head.wgsl")),
            tail: Some(concat!(wgsl!("attention_q.wgsl"), wgsl!("attention_q_round.wgsl"))),
            body_coop16: Some(wgsl!("attention_tile_coop16.wgsl")),
            ..body(wgsl!("attention_tile.wgsl"))
        },
        cuda: cuda!("attention_tile.cu"),
        low_occupancy: None,
    },
    KernelInfo {
        kernel: Kernel::LayerNorm,
        name: "layer_norm",
        bindings: &[U, R, R, R, RW],
        spec: Spec::None,
        reduces: true,
        act_input: false,
        threads: 256,
        wg_override: true,
        params: of::<params::LayerNormParams>(),
        wgsl: body(wgsl!("layer_norm.wgsl")),
        cuda: cuda!("layer_norm.cu"),
        low_occupancy: None,
    },
    elementwise(
        Kernel::AddPosRows,
        "add_pos_rows",
        &[U, R, R, R, RW],
        of::<params::AddPosRowsParams>(),
        body(wgsl!("add_pos_rows.wgsl")),
        cuda!("add_pos_rows.cu"),
    ),
    elementwise(
        Kernel::Gelu,
        "gelu",
        &[U, R, RW],
        of::<params::UnaryParams>(),
        unary(wgsl!("gelu.wgsl")),
        cuda!("gelu.cu"),
    ),
];

/// The CUDA headers every program starts with, in order (`cuda/`).
#[cfg(any(test, feature = "cuda"))]
pub const CUDA_HEADERS: [(&str, &str); 3] = [
    ("common.cuh", cuda!("common.cuh")),
    ("quant.cuh", cuda!("quant.cuh")),
    ("kv.cuh", cuda!("kv.cuh")),
];

impl Kernel {
    pub const ALL: [Kernel; 31] = [
        Kernel::QuantizeAct,
        Kernel::MatmulVec,
        Kernel::Matmul,
        Kernel::GetRows,
        Kernel::RmsNorm,
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
        Kernel::MatmulVecId,
        Kernel::MoeRoute,
        Kernel::AddBiasId,
        Kernel::MoeSum,
        Kernel::SwigluOai,
        Kernel::SigmoidGate,
        Kernel::Slice,
        Kernel::ScaleBy,
        Kernel::MatmulVecPack,
        Kernel::AttentionSplit,
        Kernel::AttentionReduce,
        Kernel::AttentionTile,
        Kernel::LayerNorm,
        Kernel::AddPosRows,
        Kernel::Gelu,
    ];

    /// The most storage buffers one kernel binds: what a wgpu adapter must allow per shader
    /// stage.
    pub fn max_storage_bindings() -> u32 {
        Kernel::ALL
            .iter()
            .map(|k| k.bindings().iter().filter(|&&b| b != Bind::Uniform).count() as u32)
            .max()
            .unwrap_or(0)
    }

    /// The kernel's row of the table.
    pub fn info(self) -> &'static KernelInfo {
        &KERNELS[self as usize]
    }

    pub fn name(self) -> &'static str {
        self.info().name
    }

    pub fn bindings(self) -> &'static [Bind] {
        self.info().bindings
    }

    /// Reads a weight matrix in any weight qtype (`WEIGHT_QTYPES`).
    pub fn reads_matrix(self) -> bool {
        self.info().spec == Spec::Matrix
    }

    /// Reads a float weight vector (f32 / f16 / bf16 only).
    pub fn reads_vector(self) -> bool {
        self.info().spec == Spec::Vector
    }

    /// Touches the KV cache (one variant per cache type).
    pub fn uses_kv(self) -> bool {
        self.info().spec == Spec::Kv
    }

    /// Reduces across the workgroup, so the wgpu backend has a subgroup variant.
    pub fn reduces(self) -> bool {
        self.info().reduces
    }

    /// The workgroup size set at pipeline creation (WGSL `WG` override), where the kernel
    /// takes one: 64 for reductions and matvec, 256 for element-wise ops.
    pub fn workgroup_size(self) -> Option<u32> {
        let i = self.info();
        i.wg_override.then_some(i.threads)
    }

    /// Threads per workgroup (CUDA block) at dispatch: the override, or the size fixed in the
    /// kernel (`matmul` 64 as 8 × 8, `argmax` 256).
    pub fn threads(self) -> u32 {
        self.info().threads
    }
}

/// Threads per block of the tensor-core entries of the prefill attention
/// (`attention_tile_mma<hd>_*`, launched in `attention_tile`'s place with `Variant::mma_launch`'s
/// grid): four warps.
pub const MMA_THREADS: u32 = 128;

/// Threads per block of the tensor-core entries of the prefill matmul (`matmul_mma<cols>_*`):
/// eight warps, each 32 rows × half the tile's tokens.
pub const MMA_MATMUL_THREADS: u32 = 256;

#[cfg(test)]
mod tests {
    use super::*;

    /// The number after `key` in `src` (`override WG: u32 = 64u;` → 64).
    fn number_after(src: &str, key: &str) -> Option<u32> {
        let rest = &src[src.find(key)? + key.len()..];
        let digits: String = rest.trim_start().chars().take_while(|c| c.is_ascii_digit()).collect();
        digits.parse().ok()
    }

    /// The table is the one place a kernel's workgroup size is decided: its WGSL declares the
    /// same size (the override's default, or the constant or literal of `@workgroup_size`) and
    /// each of its CUDA entries the same `__launch_bounds__` (the tensor-core entries
    /// `MMA_MATMUL_THREADS` or `MMA_THREADS`), as do the `WG` constants of its CUDA bodies.
    #[test]
    fn workgroup_sizes_agree_between_the_table_wgsl_and_cuda() {
        for k in Kernel::ALL {
            let info = k.info();
            let w = &info.wgsl;
            let wgsl: String = [
                w.head,
                Some(w.body),
                w.body_kv_q8_0,
                w.tail,
                w.body_i8,
                w.tail_i8,
                w.body_coop,
                w.body_coop16,
            ]
            .into_iter()
            .flatten()
            .collect();
            let mut sizes = Vec::new();
            for (i, _) in wgsl.match_indices("@workgroup_size(") {
                let arg: String = wgsl[i + 16..].chars().take_while(|&c| c != ')').collect();
                let n = match arg.trim().parse::<u32>() {
                    Ok(n) => n,
                    Err(_) => number_after(&wgsl, &format!("override {}: u32 =", arg.trim()))
                        .or_else(|| number_after(&wgsl, &format!("const {}: u32 =", arg.trim())))
                        .unwrap_or_else(|| panic!("{}: @workgroup_size({arg}) has no value", info.name)),
                };
                sizes.push(n);
            }
            assert!(!sizes.is_empty(), "{}: no @workgroup_size", info.name);
            for n in sizes {
                assert_eq!(n, info.threads, "{}: WGSL workgroup size", info.name);
            }
            let cuda = info.cuda;
            let mut entries = 0;
            for (i, _) in cuda.match_indices("__launch_bounds__(") {
                // The threads, then optionally the blocks per SM asked for.
                let arg: String = cuda[i + 18..].chars().take_while(|&c| c != ')').collect();
                let n: u32 = arg
                    .split(',')
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("{}: __launch_bounds__({arg})", info.name));
                let entry = cuda[i..].split(')').nth(1).unwrap_or_default().trim();
                let want = if entry.contains("matmul_mma") {
                    MMA_MATMUL_THREADS
                } else if entry.contains("_mma") {
                    MMA_THREADS
                } else {
                    info.threads
                };
                assert_eq!(n, want, "{}: __launch_bounds__ of {entry}", info.name);
                entries += 1;
            }
            assert!(entries > 0, "{}: no __launch_bounds__", info.name);
            for (i, _) in cuda.match_indices("constexpr u32 WG = ") {
                let n = number_after(&cuda[i..], "constexpr u32 WG =").unwrap_or(0);
                assert_eq!(n, info.threads, "{}: a CUDA body's WG", info.name);
            }
        }
        // The binary kernels' shared body (common.cuh's binary_body).
        let common = cuda!("common.cuh");
        assert!(common.contains(&format!("#define BINARY_WG {BINARY_THREADS}u")));
        for k in [Kernel::Add, Kernel::Mul, Kernel::Swiglu, Kernel::Geglu] {
            assert_eq!(k.threads(), BINARY_THREADS, "{k:?}");
        }
    }

    #[test]
    fn the_table_is_in_kernel_order_with_params_in_binding_0() {
        for (i, k) in Kernel::ALL.into_iter().enumerate() {
            assert_eq!(KERNELS[i].kernel, k);
            assert_eq!(k as usize, i);
            assert_eq!(k.bindings()[0], Bind::Uniform, "{}", k.name());
            assert!(KERNELS[i].params.fields.len() <= 16);
        }
        let mut names: Vec<_> = KERNELS.iter().map(|r| r.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), KERNELS.len());
    }
}
