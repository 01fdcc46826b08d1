//! The mixture-of-experts ops: `moe_route`, the expert matmul (`matmul_vec_id`, after
//! `quantize_act` where the weight type pairs with 8-bit activations), `add_bias_id`,
//! `moe_sum`, and the activations that come with experts (`swiglu_oai`, `sigmoid_gate`).

use super::{fold, Launch, Pass, Res, Stage, When};
use crate::backend::gpu::kernels::Variant;
use crate::backend::gpu::params::{
    KernelParams, MatmulParams, MoeRouteParams, MoeSlotParams, SigmoidGateParams, SwigluOaiParams,
};
use crate::backend::gpu::table::Kernel;
use crate::model::{Gating, Node, Op};

use super::matmul::VEC_ROWS_PER_WG;
/// The most (token, slot) pairs one `matmul_vec_id` dispatch takes (its grid's z).
const MAX_SLOTS: usize = 65_535;

impl Pass<'_> {
    pub(super) fn moe(&mut self, node: &Node, out: usize) -> Result<Stage, String> {
        let n = (node.rows * node.width) as u32;
        let width_of = |id: usize| self.g.nodes[id].width;
        let launch = match &node.op {
            &Op::MoeRoute {
                logits,
                k,
                gating,
                norm,
            } => Launch {
                variant: Variant::new(Kernel::MoeRoute),
                params: MoeRouteParams {
                    n_expert: width_of(logits) as u32,
                    k: k as u32,
                    rows: node.rows as u32,
                    gating: (gating == Gating::SoftmaxSelected) as u32,
                    norm: norm as u32,
                    ..Default::default()
                }
                .words(),
                res: vec![self.inp(node, 0), Res::Act(out)],
                groups: fold(
                    (node.rows as u64).div_ceil(Kernel::MoeRoute.threads() as u64),
                    self.maxg,
                ),
                when: When::Always,
            },
            Op::MatmulId { x, route, weight } => return self.matmul_id(node, *x, *route, weight, out),
            Op::AddBiasId { route, bias, .. } => {
                let w = self.weight(bias)?;
                let k = width_of(*route) / 2;
                let width = node.width / k;
                Launch {
                    variant: Variant::with_qtype(Kernel::AddBiasId, w.qtype),
                    params: MoeSlotParams {
                        n,
                        width: width as u32,
                        k: k as u32,
                        n_expert: (w.parts.iter().map(|p| p.1).sum::<usize>()) as u32,
                    }
                    .words(),
                    res: vec![Res::Weight(w, 0), self.inp(node, 0), self.inp(node, 1), Res::Act(out)],
                    groups: self.linear(node, Kernel::AddBiasId),
                    when: When::Always,
                }
            }
            Op::MoeSum { route, .. } => Launch {
                variant: Variant::new(Kernel::MoeSum),
                params: MoeSlotParams {
                    n,
                    width: node.width as u32,
                    k: (width_of(*route) / 2) as u32,
                    n_expert: 0,
                }
                .words(),
                res: vec![self.inp(node, 0), self.inp(node, 1), Res::Act(out)],
                groups: self.linear(node, Kernel::MoeSum),
                when: When::Always,
            },
            &Op::SwigluOai { alpha, limit, .. } => Launch {
                variant: Variant::new(Kernel::SwigluOai),
                params: SwigluOaiParams {
                    n,
                    alpha,
                    limit,
                    ..Default::default()
                }
                .words(),
                res: vec![self.inp(node, 0), self.inp(node, 1), Res::Act(out)],
                groups: self.linear(node, Kernel::SwigluOai),
                when: When::Always,
            },
            Op::SigmoidGate { .. } => Launch {
                variant: Variant::new(Kernel::SigmoidGate),
                params: SigmoidGateParams {
                    n,
                    width: node.width as u32,
                    ..Default::default()
                }
                .words(),
                res: vec![self.inp(node, 0), self.inp(node, 1), Res::Act(out)],
                groups: self.linear(node, Kernel::SigmoidGate),
                when: When::Always,
            },
            op => return Err(format!("{}: {} is not a mixture-of-experts op", node.name, op.kind())),
        };
        Ok(Stage::Compute {
            kind: node.op.kind().to_string(),
            launches: vec![launch],
        })
    }

    /// One workgroup per 8 rows of each (token, slot): only the chosen experts' rows are read.
    fn matmul_id(&mut self, node: &Node, x: usize, route: usize, name: &str, out: usize) -> Result<Stage, String> {
        let w = self.weight(name)?;
        let k = self.g.nodes[route].width / 2;
        let n_out = node.width / k;
        let x_slot = self.g.nodes[x].width != w.row_len;
        let x_rows = if x_slot { node.rows * k } else { node.rows };
        let slots = node.rows * k;
        let &[(_, all_rows)] = &w.parts[..] else {
            return Err(format!("{name}: an expert tensor split over several bindings"));
        };
        if slots > MAX_SLOTS || n_out == 0 {
            return Err(format!("{}: {slots} (token, expert) pairs in one dispatch", node.name));
        }
        let xin = self.quantized_input(node, x, w.qtype, w.row_len, x_rows);
        let mut groups = fold((n_out as u32).div_ceil(VEC_ROWS_PER_WG) as u64, self.maxg);
        groups[2] = slots as u32;
        let launch = Launch {
            variant: Variant::with_qtype(Kernel::MatmulVecId, w.qtype).subgroups(self.subgroups),
            params: MatmulParams {
                k: w.row_len as u32,
                m: n_out as u32,
                rows: n_out as u32,
                row0: 0,
                n: x_rows as u32,
                ids: k as u32,
                x_slot: x_slot as u32,
                n_expert: (all_rows / n_out) as u32,
                ..Default::default()
            }
            .words(),
            res: vec![Res::Weight(w.clone(), 0), xin, Res::Act(out), self.inp(node, 1)],
            groups,
            when: When::Always,
        };
        Ok(Stage::Compute {
            kind: format!("matmul_id/{}", w.qtype),
            launches: vec![launch],
        })
    }
}
