//! The norms: `RmsNorm`, `HeadNorm` and `HeadNormPlain`, all the `rms_norm` kernel (a head norm
//! is an RMS norm over rows one head wide; the plain one has no weight).

use super::{fold, Builder, Launch, Res, Stage};
use crate::backend::gpu::kernels::{Kernel, Variant};
use crate::backend::gpu::params::{KernelParams, RmsNormParams};
use crate::model::{Node, Op};
use crate::quant::QType;

impl Builder<'_> {
    pub(super) fn norm(&self, node: &Node, out: usize) -> Result<Stage, String> {
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
        Ok(Stage::Compute {
            kind: node.op.kind().to_string(),
            launches: vec![Launch {
                variant: Variant::with_qtype(Kernel::RmsNorm, qtype).subgroups(self.subgroups),
                params: RmsNormParams {
                    width: nwidth,
                    eps,
                    rows: nrows,
                    plain: u32::from(name.is_none()),
                }
                .words(),
                res: vec![w, self.inp(node, 0), Res::Act(out)],
                // One workgroup per row.
                groups: fold(nrows as u64, self.maxg),
            }],
        })
    }
}
