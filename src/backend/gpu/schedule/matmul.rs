//! The weight-matrix ops: `get_rows`, and `matmul` as `matmul_vec` (decode) or the tiled
//! `matmul` (prefill), each after `quantize_act` where the weight type pairs with 8-bit
//! activations. One launch per weight part.

use std::sync::Arc;

use super::{act_bytes, act_index, fold, Launch, Pass, Res, Stage, WeightParts, When, VEC_MAX_TOKENS, VEC_WIDE_TOKENS};
use crate::backend::gpu::kernels::{act_qtype, Variant};
use crate::backend::gpu::params::{GetRowsParams, KernelParams, MatmulParams, QuantizeActParams};
use crate::backend::gpu::table::Kernel;
use crate::model::{Node, Op};
use crate::quant::QType;

/// Invocations per `matmul_vec` row (its WGSL `TPR`, CUDA `MV_TPR`): a warp, so each step of a
/// row reads 32 consecutive 8-element chunks.
pub(super) const VEC_TPR: u32 = 32;

/// Rows per `matmul_vec` workgroup (and `matmul_vec_pack`'s and `matmul_vec_id`'s): 128
/// invocations, 32 per row.
pub(super) const VEC_ROWS_PER_WG: u32 = 128 / VEC_TPR;

impl Pass<'_> {
    /// `GetRows` or `Matmul` (pushing its `quantize_act` stage first where one is needed);
    /// `acc`: the matmul adds into `out`, which holds the residual of a fused add; `bias`: the
    /// f32 bias of a fused bias add, added to every row.
    pub(super) fn matmul(
        &mut self,
        node: &Node,
        out: usize,
        acc: bool,
        bias: Option<Arc<WeightParts>>,
    ) -> Result<Stage, String> {
        match &node.op {
            Op::GetRows { weight } => self.get_rows(weight, out),
            Op::Matmul { weight, x } => self.matmul_op(node, weight, *x, out, acc, bias),
            op => Err(format!("{}: {} is not a matmul", node.name, op.kind())),
        }
    }

    fn get_rows(&self, name: &str, out: usize) -> Result<Stage, String> {
        let w = self.weight(name)?;
        let n = self.g.key.n_tokens as u32;
        let k = w.row_len as u32;
        let launches = w
            .parts
            .iter()
            .enumerate()
            .map(|(pi, &(row0, prows))| Launch {
                variant: Variant::with_qtype(Kernel::GetRows, w.qtype),
                params: GetRowsParams {
                    k,
                    rows: prows as u32,
                    row0: row0 as u32,
                    n,
                }
                .words(),
                res: vec![Res::Weight(w.clone(), pi), Res::Ids, Res::Act(out)],
                // One invocation per (8-element chunk, token).
                groups: [(k / 8).div_ceil(Kernel::GetRows.threads()), n, 1],
                when: When::Always,
            })
            .collect();
        Ok(Stage::Compute {
            kind: format!("get_rows/{}", w.qtype),
            launches,
        })
    }

    /// The x a matmul of `qtype` weights reads: node `x`'s `n_rows` rows of `row_len` as they
    /// are for float weights, else after `quantize_act` (pushed here, once for a run of
    /// matmuls over the same x, such as Q/K/V or gate/up) into the shared scratch buffer.
    pub(super) fn quantized_input(
        &mut self,
        node: &Node,
        x: usize,
        qtype: QType,
        row_len: usize,
        n_rows: usize,
    ) -> Res {
        let Some(act) = act_qtype(qtype) else {
            return self.inp(node, 0);
        };
        let sb = self.scratch(n_rows, row_len);
        if self.scratch_holds != Some((x, act)) {
            self.scratch_holds = Some((x, act));
            // One invocation per packed word of 4 elements; q8_K's halves apart where a block a
            // workgroup would leave compute units idle (8 tokens of 4,096 are 128 blocks).
            let words = (n_rows * row_len / 4) as u64;
            let groups = words.div_ceil(Kernel::QuantizeAct.threads() as u64);
            let split = if act == QType::Q8K && groups < self.shape.sms as u64 {
                2
            } else {
                1
            };
            self.stages.push(Stage::Compute {
                kind: format!("quantize_act/{act}"),
                launches: vec![Launch {
                    variant: Variant::with_qtype(Kernel::QuantizeAct, act),
                    params: QuantizeActParams {
                        k: row_len as u32,
                        n: n_rows as u32,
                        split,
                    }
                    .words(),
                    res: vec![self.inp(node, 0), Res::Act(sb)],
                    groups: fold(groups * split as u64, self.maxg),
                    when: When::Always,
                }],
            });
        }
        Res::Act(sb)
    }

    /// The scratch buffer for quantized activations, grown to `n_rows` rows of `row_len`.
    pub(super) fn scratch(&mut self, n_rows: usize, row_len: usize) -> usize {
        let sb = match self.scratch {
            Some(sb) => sb,
            None => *self.scratch.insert(self.live.add(0)),
        };
        let bytes = n_rows as u64 * act_bytes(row_len);
        self.live.sizes[sb] = self.live.sizes[sb].max(bytes);
        sb
    }

    /// Where node `i` (of `node`'s shape) rounds its own output for the matmul after it, in
    /// format `act`: the kernel's `act` parameter (1 + the format's index) and the scratch
    /// buffer it writes, now holding node `i`'s rows; else 0 and an untouched binding.
    pub(super) fn fused_round(&mut self, i: usize, node: &Node, act: Option<QType>) -> Result<(u32, Res), String> {
        let Some(a) = act else {
            return Ok((0, Res::Unused));
        };
        let sb = self.scratch(node.rows, node.width);
        self.scratch_holds = Some((i, a));
        Ok((act_index(a)? + 1, Res::Act(sb)))
    }

    /// The activation format of node `i`'s first reader where that is a matmul over quantized
    /// weights: what a norm computing node `i` can round its rows to itself.
    pub(super) fn first_matmul_act(&self, i: usize) -> Option<QType> {
        let j = *self.readers[i].first()?;
        match &self.g.nodes[j].op {
            Op::Matmul { weight, x } if *x == i => {
                let w = (self.weight)(weight)?;
                (w.row_len == self.g.nodes[i].width).then_some(act_qtype(w.qtype)?)
            }
            _ => None,
        }
    }

    fn matmul_op(
        &mut self,
        node: &Node,
        name: &str,
        x: usize,
        out: usize,
        acc: bool,
        bias: Option<Arc<WeightParts>>,
    ) -> Result<Stage, String> {
        let w = self.weight(name)?;
        let vec = node.rows <= VEC_MAX_TOKENS || (!self.shape.matrix_tiles && node.rows <= VEC_WIDE_TOKENS);
        let rows = node.rows as u32;
        let (k, m) = (w.row_len as u32, node.width as u32);
        let xin = self.quantized_input(node, x, w.qtype, w.row_len, node.rows);
        let mut launches = Vec::with_capacity(w.parts.len());
        for (pi, &(row0, prows)) in w.parts.iter().enumerate() {
            let (pr, r0) = (prows as u32, row0 as u32);
            let params = MatmulParams {
                k,
                m,
                rows: pr,
                row0: r0,
                n: rows,
                acc: u32::from(acc),
                bias: u32::from(bias.is_some()),
                ..Default::default()
            }
            .words();
            // Without a bias binding 4 is never read.
            let b = bias.clone().map_or(Res::Unused, |b| Res::Weight(b, 0));
            let res = vec![Res::Weight(w.clone(), pi), xin.clone(), Res::Act(out), b];
            launches.push(if vec {
                // (x, y) over row groups; every token in each workgroup.
                let groups = fold(pr.div_ceil(VEC_ROWS_PER_WG) as u64, self.maxg);
                Launch {
                    variant: Variant::with_qtype(Kernel::MatmulVec, w.qtype).subgroups(self.subgroups),
                    params,
                    res,
                    groups,
                    when: When::Always,
                }
            } else {
                // 32-row × 32-token tiles.
                Launch {
                    variant: Variant::with_qtype(Kernel::Matmul, w.qtype),
                    params,
                    res,
                    groups: [pr.div_ceil(32), rows.div_ceil(32), 1],
                    when: When::Always,
                }
            });
        }
        let add = match (acc, &bias) {
            (true, _) => "+add",
            (false, Some(_)) => "+add_bias",
            (false, None) => "",
        };
        Ok(Stage::Compute {
            kind: format!("{}/{}{add}", if vec { "matmul_vec" } else { "matmul" }, w.qtype),
            launches,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tokens one pass of the matvecs over their rows takes (CUDA and WGSL `MV_COLS`:
    /// accumulators in registers, which every launch pays for in occupancy); a step's tokens, up
    /// to `VEC_MAX_TOKENS`, take passes of it, the rows read from memory once and from the cache
    /// after.
    const VEC_PASS_COLS: usize = 2;

    /// The rows per workgroup the grids are sized by are what the kernels take: their
    /// workgroup over the invocations per row, for every matvec, in the WGSL as in the table.
    #[test]
    fn matvec_rows_per_workgroup_follow_the_table() {
        for k in [Kernel::MatmulVec, Kernel::MatmulVecId, Kernel::MatmulVecPack] {
            assert_eq!(k.threads() / VEC_TPR, VEC_ROWS_PER_WG, "{k:?}");
            let w = k.info().wgsl.body;
            assert!(w.contains(&format!("override TPR: u32 = {VEC_TPR}u;")), "{k:?}");
        }
        let cuda = Kernel::MatmulVec.info().cuda;
        assert!(cuda.contains(&format!("#define MV_TPR {VEC_TPR}u")));
        assert!(cuda.contains(&format!("#define MV_COLS {VEC_PASS_COLS}u")));
        let wgsl = &Kernel::MatmulVec.info().wgsl;
        for row in [wgsl.tail.unwrap(), wgsl.tail_i8.unwrap()] {
            assert!(row.contains(&format!("const MV_COLS: u32 = {VEC_PASS_COLS}u;")));
        }
    }
}
