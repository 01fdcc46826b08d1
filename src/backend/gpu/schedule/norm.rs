//! The norms: `RmsNorm`, `HeadNorm` and `HeadNormPlain`, all the `rms_norm` kernel (a head norm
//! is an RMS norm over rows one head wide; the plain one has no weight), and BERT's
//! `LayerNorm` (`layer_norm`).

use super::{fold, Launch, Pass, Res, Stage, When};
use crate::backend::gpu::kernels::Variant;
use crate::backend::gpu::params::{KernelParams, LayerNormParams, RmsNormParams};
use crate::backend::gpu::table::Kernel;
use crate::model::{Node, Op};
use crate::quant::QType;

impl Pass<'_> {
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
        // A model-wide norm spreads its few rows over the device; head norms have rows enough.
        let slice = match node.op {
            Op::RmsNorm { .. } => row_slice(
                nrows,
                nwidth,
                fused.map_or(64, |a| a.block_elems() as u32),
                self.shape.sms,
            ),
            _ => 0,
        };
        let slices = if slice == 0 { 1 } else { nwidth.div_ceil(slice) };
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
                    slice,
                }
                .words(),
                res: vec![w, self.inp(node, 0), Res::Act(out), q],
                // One workgroup per row's slice.
                groups: fold(nrows as u64 * slices as u64, self.maxg),
                when: When::Always,
            }],
        })
    }
}

/// The elements of a row each `rms_norm` workgroup takes so that `rows` rows of `width` make at
/// least `sms` workgroups where whole blocks of `block` elements allow it (the last slice may be
/// shorter), or halves of q8_K's 256 where whole ones are too few; 0 (a workgroup a row) where
/// the rows alone fill the device.
fn row_slice(rows: u32, width: u32, block: u32, sms: u32) -> u32 {
    let want = sms.div_ceil(rows.max(1));
    if want <= 1 || !width.is_multiple_of(block) {
        return 0;
    }
    let per = width / want;
    // Rounded down to whole blocks: at least `want` slices, unless that leaves fewer than 128
    // elements to a workgroup of 256 invocations; a q8_K block then goes to two workgroups
    // (the kernel computes the block's scale in each).
    let slice = match block {
        256 if per < 256 => 128,
        _ => (per / block * block).max(block.max(128)),
    };
    if slice >= width {
        0
    } else {
        slice
    }
}

#[cfg(test)]
mod tests {
    use super::row_slice;

    /// A decode step's row of 4,096 spreads over an H200's 132 SMs in whole activation blocks;
    /// rows that fill the device, and rows of one block, stay whole.
    #[test]
    fn rows_split_into_whole_blocks_until_the_device_is_full() {
        let slices = |rows, width, block, sms| match row_slice(rows, width, block, sms) {
            0 => rows,
            s => {
                assert!(
                    s % block == 0 || (block == 256 && s == 128),
                    "whole blocks or q8_K halves"
                );
                rows * width.div_ceil(s)
            }
        };
        // q8_0 blocks of 32: one token 32 slices of 128, eight tokens 19 slices of 224.
        assert_eq!(row_slice(1, 4096, 32, 132), 128);
        assert_eq!(slices(8, 4096, 32, 132), 8 * 19);
        // q8_K blocks of 256: halves once whole blocks are too few (eight tokens: 256
        // workgroups, not 128), whole blocks where they fill the device.
        assert_eq!(row_slice(1, 4096, 256, 132), 128);
        assert_eq!(row_slice(8, 4096, 256, 132), 128);
        assert_eq!(slices(8, 4096, 256, 132), 256);
        assert_eq!(row_slice(2, 4096, 256, 16), 512);
        assert_eq!(row_slice(1, 256, 256, 16), 128);
        // Enough rows already, or a row too short to split: a workgroup a row.
        assert_eq!(row_slice(512, 4096, 256, 132), 0);
        assert_eq!(row_slice(1, 128, 32, 132), 0);
        assert_eq!(row_slice(1, 100, 64, 132), 0);
    }
}
