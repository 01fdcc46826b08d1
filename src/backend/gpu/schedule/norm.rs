//! The norms: `RmsNorm`, `HeadNorm` and `HeadNormPlain`, all the `rms_norm` kernel (a head norm
//! is an RMS norm over rows one head wide; the plain one has no weight), and BERT's
//! `LayerNorm` (`layer_norm`).

use super::{fold, Builder, Launch, Res, Stage, When};
use crate::backend::gpu::kernels::{Kernel, Variant};
use crate::backend::gpu::params::{KernelParams, LayerNormParams, RmsNormParams};
use crate::model::{Node, Op};
use crate::quant::QType;

impl Builder<'_> {
    /// Node `node`'s LayerNorm: one workgroup per row (the gate took only f32 weight and bias).
    pub(super) fn layer_norm(&mut self, node: &Node, out: usize) -> Result<Stage, String> {
        let Op::LayerNorm { weight, bias, eps, .. } = &node.op else {
            return Err(format!("{}: {} is not a LayerNorm", node.name, node.op.kind()));
        };
        let (w, b) = (self.weight(weight)?, self.weight(bias)?);
        let rows = node.rows as u32;
        Ok(Stage::Compute {
            kind: node.op.kind().to_string(),
            launches: vec![Launch {
                variant: Variant::new(Kernel::LayerNorm).subgroups(self.subgroups),
                params: LayerNormParams {
                    width: node.width as u32,
                    eps: *eps,
                    rows,
                    ..Default::default()
                }
                .words(),
                res: vec![Res::Weight(w, 0), Res::Weight(b, 0), self.inp(node, 0), Res::Act(out)],
                groups: fold(rows as u64, self.maxg),
                when: When::Always,
            }],
        })
    }

    /// Node `i`'s norm. An `RmsNorm` whose first reader is a matmul over quantized weights also
    /// rounds its rows into the scratch buffer as `quantize_act` would, so that matmul (and the
    /// others over it in the same format: Q/K/V, gate/up) reads them without a launch of its own.
    pub(super) fn norm(&mut self, i: usize, node: &Node, out: usize) -> Result<Stage, String> {
        let (rows, width) = (node.rows as u32, node.width as u32);
        let heads = |hd: usize| (rows * (width / hd as u32), hd as u32);
        let (name, eps, (nrows, nwidth)) = match &node.op {
            Op::RmsNorm { weight, eps, .. } => (Some(weight), *eps, (rows, width)),
            Op::HeadNorm {
                weight, eps, head_dim, ..
            } => (Some(weight), *eps, heads(*head_dim)),
            Op::HeadNormPlain { eps, head_dim, .. } => (None, *eps, heads(*head_dim)),
            op => return Err(format!("{}: {} is not a norm", node.name, op.kind())),
        };
        // Without a weight binding 1 is never read (`plain`): the input stands in for it, as
        // the f32 variant.
        let (w, qtype) = match name {
            Some(name) => {
                let w = self.weight(name)?;
                let q = w.qtype;
                (Res::Weight(w, 0), q)
            }
            None => (self.inp(node, 0), QType::F32),
        };
        let fused = match node.op {
            Op::RmsNorm { .. } => self.first_matmul_act(i),
            _ => None,
        };
        // Without the fused rounding binding 4 is never written.
        let (act, q) = self.fused_round(i, node, fused)?;
        let kind = match fused {
            Some(a) => format!("{}+quantize_act/{a}", node.op.kind()),
            None => node.op.kind().to_string(),
        };
        Ok(Stage::Compute {
            kind,
            launches: vec![Launch {
                variant: Variant::with_qtype(Kernel::RmsNorm, qtype).subgroups(self.subgroups),
                params: RmsNormParams {
                    width: nwidth,
                    eps,
                    rows: nrows,
                    plain: u32::from(name.is_none()),
                    act,
                }
                .words(),
                res: vec![w, self.inp(node, 0), Res::Act(out), q],
                // One workgroup per row.
                groups: fold(nrows as u64, self.maxg),
                when: When::Always,
            }],
        })
    }
}
