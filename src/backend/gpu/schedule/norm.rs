//! The norms: `RmsNorm` and `HeadNorm`, both the `rms_norm` kernel (a head norm is an RMS norm
//! over rows one head wide).

use super::{fold, Builder, Launch, Res, Stage};
use crate::backend::gpu::kernels::{Kernel, Variant};
use crate::backend::gpu::params::{KernelParams, RmsNormParams};
use crate::model::{Node, Op};

impl Builder<'_> {
    pub(super) fn norm(&self, node: &Node, out: usize) -> Result<Stage, String> {
        let (rows, width) = (node.rows as u32, node.width as u32);
        let (name, eps, nrows, nwidth) = match &node.op {
            Op::RmsNorm { weight, eps, .. } => (weight, *eps, rows, width),
            Op::HeadNorm {
                weight, eps, head_dim, ..
            } => (weight, *eps, rows * (width / *head_dim as u32), *head_dim as u32),
            op => return Err(format!("{}: {} is not a norm", node.name, op.kind())),
        };
        let w = self.weight(name)?;
        Ok(Stage::Compute {
            kind: node.op.kind().to_string(),
            launches: vec![Launch {
                variant: Variant::with_qtype(Kernel::RmsNorm, w.qtype).subgroups(self.subgroups),
                params: RmsNormParams {
                    width: nwidth,
                    eps,
                    rows: nrows,
                    ..Default::default()
                }
                .words(),
                res: vec![Res::Weight(w, 0), self.inp(node, 0), Res::Act(out)],
                // One workgroup per row.
                groups: fold(nrows as u64, self.maxg),
            }],
        })
    }
}
