//! The element-wise ops, one invocation per element: `add_bias` (a float weight vector per
//! row), the binary ops (`add`, `mul`, `swiglu`, `geglu`) and those with a scalar (`scale`,
//! `softcap`), `gelu`, `scale_by` (x times a weight's one value), `slice` (columns of each row)
//! and `add_pos_rows` (BERT's position embeddings).

use super::{fold, Launch, Pass, Res, Stage, When};
use crate::backend::gpu::kernels::Variant;
use crate::backend::gpu::params::{
    AddBiasParams, AddPosRowsParams, BinaryParams, KernelParams, SliceParams, UnaryParams,
};
use crate::backend::gpu::table::Kernel;
use crate::model::{Node, Op};

impl Pass<'_> {
    /// Node `i`'s op. A GLU whose first reader is a matmul over quantized weights also rounds
    /// its output into the scratch buffer as `quantize_act` would (one invocation per word), as
    /// the fused `rms_norm` does.
    pub(super) fn elementwise(&mut self, i: usize, node: &Node, out: usize) -> Result<Stage, String> {
        let n = (node.rows * node.width) as u32;
        let mut kind = node.op.kind().to_string();
        let launch = match &node.op {
            Op::AddBias { bias, .. } => {
                let w = self.weight(bias)?;
                Launch {
                    variant: Variant::with_qtype(Kernel::AddBias, w.qtype),
                    params: AddBiasParams {
                        n,
                        width: node.width as u32,
                        ..Default::default()
                    }
                    .words(),
                    res: vec![Res::Weight(w, 0), self.inp(node, 0), Res::Act(out)],
                    groups: self.linear(node, Kernel::AddBias),
                    when: When::Always,
                }
            }
            Op::ScaleBy { weight, .. } => {
                // The gate took only a one-element weight: width 1 broadcasts it.
                let w = self.weight(weight)?;
                Launch {
                    variant: Variant::with_qtype(Kernel::ScaleBy, w.qtype),
                    params: AddBiasParams {
                        n,
                        width: 1,
                        ..Default::default()
                    }
                    .words(),
                    res: vec![Res::Weight(w, 0), self.inp(node, 0), Res::Act(out)],
                    groups: self.linear(node, Kernel::ScaleBy),
                    when: When::Always,
                }
            }
            &Op::Slice { x, col0 } => Launch {
                variant: Variant::new(Kernel::Slice),
                params: SliceParams {
                    n,
                    width: node.width as u32,
                    src_width: self.g.nodes[x].width as u32,
                    col0: col0 as u32,
                }
                .words(),
                res: vec![self.inp(node, 0), Res::Act(out)],
                groups: self.linear(node, Kernel::Slice),
                when: When::Always,
            },
            Op::Add { .. } | Op::Mul { .. } | Op::Swiglu { .. } | Op::Geglu { .. } => {
                let kernel = match node.op {
                    Op::Add { .. } => Kernel::Add,
                    Op::Mul { .. } => Kernel::Mul,
                    Op::Swiglu { .. } => Kernel::Swiglu,
                    _ => Kernel::Geglu,
                };
                let glu = matches!(kernel, Kernel::Swiglu | Kernel::Geglu);
                // Without the fused rounding binding 4 is never written.
                let fused = self.first_matmul_act(i).filter(|_| glu);
                let (act, qy) = self.fused_round(i, node, fused)?;
                let groups = match fused {
                    Some(a) => {
                        kind = format!("{kind}+quantize_act/{a}");
                        // One invocation per packed word of 4 elements.
                        let words = (n / 4) as u64;
                        fold(words.div_ceil(kernel.threads() as u64), self.maxg)
                    }
                    None => self.linear(node, kernel),
                };
                Launch {
                    variant: Variant::new(kernel),
                    params: BinaryParams {
                        n,
                        act,
                        ..Default::default()
                    }
                    .words(),
                    res: vec![self.inp(node, 0), self.inp(node, 1), Res::Act(out), qy],
                    groups,
                    when: When::Always,
                }
            }
            &Op::Scale { s, .. } | &Op::Softcap { cap: s, .. } => {
                let kernel = if matches!(node.op, Op::Scale { .. }) {
                    Kernel::Scale
                } else {
                    Kernel::Softcap
                };
                Launch {
                    variant: Variant::new(kernel),
                    params: UnaryParams {
                        n,
                        s,
                        ..Default::default()
                    }
                    .words(),
                    res: vec![self.inp(node, 0), Res::Act(out)],
                    groups: self.linear(node, kernel),
                    when: When::Always,
                }
            }
            Op::Gelu { .. } => Launch {
                variant: Variant::new(Kernel::Gelu),
                params: UnaryParams {
                    n,
                    ..Default::default()
                }
                .words(),
                res: vec![self.inp(node, 0), Res::Act(out)],
                groups: self.linear(node, Kernel::Gelu),
                when: When::Always,
            },
            Op::AddPosRows { weight, .. } => {
                // The gate took only an f32 table; its first part's rows are bound (the whole
                // table where it is not split, as a position table never is).
                let w = self.weight(weight)?;
                let n_pos = w.parts.first().map_or(0, |p| p.1) as u32;
                Launch {
                    variant: Variant::new(Kernel::AddPosRows),
                    params: AddPosRowsParams {
                        n,
                        width: node.width as u32,
                        n_pos,
                        ..Default::default()
                    }
                    .words(),
                    res: vec![Res::Step, Res::Weight(w, 0), self.inp(node, 0), Res::Act(out)],
                    groups: self.linear(node, Kernel::AddPosRows),
                    when: When::Always,
                }
            }
            op => return Err(format!("{}: {} is not element-wise", node.name, op.kind())),
        };
        Ok(Stage::Compute {
            kind,
            launches: vec![launch],
        })
    }
}
