//! The matmuls over the weights of one pack (`gpu::packs`: a layer's Q/K/V, gate/up) as one
//! `matmul_vec_pack` launch in decode: consecutive matmul nodes reading one x whose weights are
//! a pack's members from its first, in order, each into its own buffer, with their f32 bias
//! adds where every member has one in the pack of biases, and the RMS norm before them where
//! they are its only readers (each workgroup normalizes its row first).

use std::sync::Arc;

use super::matmul::VEC_ROWS_PER_WG;
use super::{fold, Launch, Pass, Res, Stage, WeightParts, When, VEC_MAX_TOKENS};
use crate::backend::gpu::kernels::{act_qtype, Variant};
use crate::backend::gpu::params::{KernelParams, MatmulPackParams};
use crate::backend::gpu::table::Kernel;
use crate::model::Op;
use crate::quant::QType;

/// The longest row `matmul_vec_pack` normalizes itself (its workgroup memory).
const MAX_NORM_K: usize = 2048;

/// A run of matmul nodes one launch computes.
pub(super) struct PackRun {
    /// The matmul nodes, member 0's first.
    nodes: Vec<usize>,
    weights: Vec<Arc<WeightParts>>,
    /// Each member's bias add and bias, where they are fused.
    biases: Option<Vec<(usize, Arc<WeightParts>)>>,
}

/// The byte offset of a pack member from the first.
fn offset(w: &WeightParts, first: &WeightParts) -> Result<u32, String> {
    let at = |w: &WeightParts| w.pack.as_ref().map_or(0, |s| s.offset);
    u32::try_from(at(w) - at(first)).map_err(|_| format!("{}: pack offset past 4 GiB", w.name))
}

impl Pass<'_> {
    /// The input of RMS norm node `i` where the norm folds into the matmuls reading it: its
    /// readers are exactly runs of them (`run_from`: a pack's, or single matmuls), its weight is
    /// one f32 row of its width, its rows fit `MAX_NORM_K` (whole vec4s and activation blocks),
    /// it is one token's (a launch over several reads each weight row once for all of them, from
    /// rows normalized before), and it is not a kept node.
    pub(super) fn folds_norm(&self, i: usize) -> Option<usize> {
        let node = &self.g.nodes[i];
        let Op::RmsNorm { x, weight, .. } = &node.op else {
            return None;
        };
        let w = (self.weight)(weight)?;
        let plain_f32 = w.qtype == QType::F32 && w.row_len == node.width && w.parts.len() == 1;
        if !plain_f32 || node.rows > 1 || self.kept(i) || node.width > MAX_NORM_K || !node.width.is_multiple_of(4) {
            return None;
        }
        let readers = &self.readers[i];
        let mut at = 0;
        while at < readers.len() {
            let run = self.run_from(readers[at])?;
            let block = act_qtype(run.weights[0].qtype).map_or(1, |a| a.block_elems());
            if readers.get(at..at + run.nodes.len()) != Some(&run.nodes[..]) || !node.width.is_multiple_of(block) {
                return None;
            }
            at += run.nodes.len();
        }
        (at > 0).then_some(*x)
    }

    /// The run starting at node `i` that one `matmul_vec_pack` launch computes: two or more
    /// matmuls over a pack's members, or any run `run_from` gives where its input is a norm
    /// folded into it.
    pub(super) fn pack_run(&self, i: usize) -> Option<PackRun> {
        let run = self.run_from(i)?;
        let Op::Matmul { x, .. } = self.g.nodes[i].op else {
            return None;
        };
        (run.nodes.len() >= 2 || self.folded[x]).then_some(run)
    }

    /// The decode matmul node `i`, followed, where its weight is a pack's first member, by the
    /// matmuls over the next members of the same x; none of them kept or accumulating into a
    /// residual, each weight in one part. With the bias adds of them all where each member's
    /// is in the pack of biases (a single matmul: any f32 bias).
    fn run_from(&self, i: usize) -> Option<PackRun> {
        let g = self.g;
        let Op::Matmul { weight, x } = &g.nodes[i].op else {
            return None;
        };
        let w0 = (self.weight)(weight)?;
        if g.nodes[i].rows > VEC_MAX_TOKENS {
            return None;
        }
        let (mut nodes, mut weights) = (vec![i], vec![w0.clone()]);
        let first = w0.pack.as_ref().is_some_and(|s| s.index == 0);
        for (j, node) in g.nodes.iter().enumerate().skip(i + 1).take_while(|_| first) {
            let Op::Matmul { weight, x: xj } = &node.op else {
                break;
            };
            let Some(w) = (self.weight)(weight) else {
                break;
            };
            let next = w
                .pack
                .as_ref()
                .is_some_and(|s| s.first == w0.name && s.index == nodes.len());
            if xj != x || !next {
                break;
            }
            nodes.push(j);
            weights.push(w);
        }
        let whole = |(&j, w): (&usize, &Arc<WeightParts>)| {
            let n = &g.nodes[j];
            let one_part = w.parts.len() == 1 && w.parts[0].1 == n.width;
            one_part && n.rows == g.nodes[i].rows && !self.kept(j) && self.residual_add(j).is_none()
        };
        if !nodes.iter().zip(&weights).all(whole) {
            return None;
        }
        let biases = nodes
            .iter()
            .map(|&j| self.bias_add(j))
            .collect::<Option<Vec<_>>>()
            .filter(|adds| {
                let b0 = &adds[0].1;
                adds.len() == 1
                    || adds
                        .iter()
                        .enumerate()
                        .all(|(m, (_, b))| b.pack.as_ref().is_some_and(|s| s.first == b0.name && s.index == m))
            });
        Some(PackRun { nodes, weights, biases })
    }

    /// The run's launch (after its `quantize_act` where needed), its outputs placed now.
    pub(super) fn matmul_pack(&mut self, run: &PackRun) -> Result<Stage, String> {
        let g = self.g;
        let node = &g.nodes[run.nodes[0]];
        let Op::Matmul { x, .. } = node.op else {
            return Err(format!("{}: not a matmul", node.name));
        };
        let w0 = run.weights[0].clone();
        // A norm folded in: its input, its weight and eps, the format its rows are rounded to.
        let (xin, norm) = match &g.nodes[x].op {
            Op::RmsNorm { weight, eps, .. } if self.folded[x] => {
                let act = act_qtype(w0.qtype)
                    .map(super::act_index)
                    .transpose()?
                    .map_or(0, |a| a + 1);
                (Res::Act(self.live.buf_of[x]), Some((self.weight(weight)?, *eps, act)))
            }
            _ => (self.quantized_input(node, x, w0.qtype, w0.row_len, node.rows), None),
        };
        let mut outs = Vec::with_capacity(3);
        for &j in &run.nodes {
            let n = &g.nodes[j];
            let buf = self.live.place(g, j, (n.rows * n.width * 4) as u64);
            if j != run.nodes[0] {
                self.done_in[j] = Some(buf);
            }
            outs.push(Res::Act(buf));
        }
        // A third output where there are two: never written.
        outs.resize(3, Res::Unused);
        let rows = |m: usize| run.weights.get(m).map_or(0, |w| w.parts[0].1 as u32);
        let off = |m: usize| run.weights.get(m).map_or(Ok(0), |w| offset(w, &w0));
        // Without biases binding 4 is never read: the weights stand in (read-only, as binding 1).
        let (mut bias, mut boff, mut b) = (0, [0u32; 2], Res::Pack(w0.clone()));
        if let Some(adds) = &run.biases {
            for (&(a, _), out) in adds.iter().zip(&outs) {
                if let Res::Act(buf) = out {
                    self.done_in[a] = Some(*buf);
                }
            }
            let b0 = &adds[0].1;
            for (m, (_, bm)) in adds.iter().enumerate().skip(1) {
                boff[m - 1] = offset(bm, b0)? / 4;
            }
            (bias, b) = (1, Res::Pack(b0.clone()));
        }
        let params = MatmulPackParams {
            k: w0.row_len as u32,
            n: node.rows as u32,
            rows0: rows(0),
            rows1: rows(1),
            rows2: rows(2),
            off1: off(1)?,
            off2: off(2)?,
            bias,
            boff1: boff[0],
            boff2: boff[1],
            norm: u32::from(norm.is_some()),
            eps: norm.as_ref().map_or(0.0, |n| n.1),
            act: norm.as_ref().map_or(0, |n| n.2),
        };
        let total = params.rows0 + params.rows1 + params.rows2;
        // z: one token per workgroup where it normalizes its row, else every token in each.
        let mut groups = fold(total.div_ceil(VEC_ROWS_PER_WG) as u64, self.maxg);
        groups[2] = if params.n > 1 { 1 } else { params.n };
        let [y0, y1, y2] = <[Res; 3]>::try_from(outs).map_err(|_| "three outputs".to_string())?;
        // Without a norm binding 7 is never read: the weights stand in.
        let nw = norm.map_or(Res::Pack(w0.clone()), |n| Res::Weight(n.0, 0));
        let kind = format!(
            "{}matmul_vec_pack/{}{}",
            if params.norm != 0 { "rms_norm+" } else { "" },
            w0.qtype,
            if bias != 0 { "+add_bias" } else { "" }
        );
        Ok(Stage::Compute {
            kind,
            launches: vec![Launch {
                variant: Variant::with_qtype(Kernel::MatmulVecPack, w0.qtype).subgroups(self.subgroups),
                params: params.words(),
                res: vec![Res::Pack(w0), xin, y0, b, y1, y2, nw],
                groups,
                when: When::Always,
            }],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{mm, node, sched};
    use super::*;
    use crate::backend::gpu::schedule::{PackSlot, Schedule};
    use crate::model::Node;
    use crate::quant::QType;

    /// Q/K/V as one pack of 64-row q8_0 weights (V 32 rows), their biases another.
    fn layout(name: &str) -> Option<Arc<WeightParts>> {
        let (first, index, rows) = match name {
            "wq" => ("wq", 0, 64),
            "wk" => ("wq", 1, 64),
            "wv" => ("wq", 2, 32),
            "bq" => ("bq", 0, 1),
            "bk" => ("bq", 1, 1),
            "bv" => ("bq", 2, 1),
            // An f32 bias in no pack; the norm's weight.
            "other" => ("", 2, 1),
            "nw" => ("", 0, 1),
            "wv2" => ("", 0, 32),
            _ => ("", 0, 64),
        };
        let bias = name.starts_with('b') || name == "other" || name == "nw";
        Some(Arc::new(WeightParts {
            name: name.into(),
            qtype: if bias { QType::F32 } else { QType::Q8_0 },
            row_len: if bias { [64, 64, 32][index] } else { 64 },
            parts: vec![(0, rows)],
            pack: (!first.is_empty()).then(|| PackSlot {
                first: first.into(),
                index,
                offset: 4096 * index as u64,
            }),
        }))
    }

    fn nodes(biases: &[&str]) -> Vec<Node> {
        let mut v = vec![
            node("emb", Op::GetRows { weight: "emb".into() }, 64),
            mm(0, "wq", 64),
            mm(0, "wk", 64),
            mm(0, "wv", 32),
        ];
        for (i, b) in biases.iter().enumerate() {
            let w = if i < 2 { 64 } else { 32 };
            v.push(node(
                b,
                Op::AddBias {
                    x: 1 + i,
                    bias: b.to_string(),
                },
                w,
            ));
        }
        v.push(node(
            "sum",
            Op::Add {
                a: v.len() - 3,
                b: v.len() - 2,
            },
            64,
        ));
        v
    }

    fn kinds(s: &Schedule) -> Vec<Kernel> {
        s.stages
            .iter()
            .flat_map(|st| match st {
                Stage::Compute { launches, .. } => launches.iter().map(|l| l.variant.kernel).collect(),
                Stage::Copy { .. } => Vec::new(),
            })
            .collect()
    }

    /// In decode the three matmuls and their bias adds are one launch writing three buffers,
    /// each member at its offset; a kept member, a bias outside the pack, or a prefill batch
    /// leave the matmuls apart.
    #[test]
    fn a_pack_of_matmuls_is_one_launch_in_decode_only() {
        let s = sched(nodes(&["bq", "bk", "bv"]), 1, None, &layout);
        let pack: Vec<&Launch> = s
            .stages
            .iter()
            .flat_map(|st| match st {
                Stage::Compute { launches, .. } => launches.iter().collect(),
                Stage::Copy { .. } => Vec::new(),
            })
            .filter(|l| l.variant.kernel == Kernel::MatmulVecPack)
            .collect();
        assert_eq!(pack.len(), 1);
        let p = MatmulPackParams::from_words(&pack[0].params);
        assert_eq!((p.rows0, p.rows1, p.rows2, p.off1, p.off2), (64, 64, 32, 4096, 8192));
        assert_eq!((p.bias, p.boff1, p.boff2), (1, 1024, 2048));
        let outs = [&pack[0].res[2], &pack[0].res[4], &pack[0].res[5]];
        for (m, r) in outs.into_iter().enumerate() {
            assert_eq!(*r, Res::Act(s.node_buf[1 + m]), "member {m}'s buffer");
            assert_eq!(s.node_buf[4 + m], s.node_buf[1 + m], "its bias add in place");
        }
        assert!(!kinds(&s).contains(&Kernel::AddBias) && !kinds(&s).contains(&Kernel::MatmulVec));
        // Apart: V's bias from elsewhere (then no bias is fused, and each add runs), K kept,
        // three tokens.
        let s = sched(nodes(&["bq", "bk", "other"]), 1, None, &layout);
        assert_eq!(kinds(&s).iter().filter(|&&k| k == Kernel::AddBias).count(), 3);
        assert!(kinds(&s).contains(&Kernel::MatmulVecPack));
        for (toks, keep) in [(1, Some(2)), (3, None)] {
            let s = sched(nodes(&[]), toks, keep, &layout);
            assert!(!kinds(&s).contains(&Kernel::MatmulVecPack), "{toks} {keep:?}");
        }
    }

    /// An RMS norm read only by the matmuls folds into their launches: the pack normalizes x
    /// itself (and rounds it: nothing is quantized apart), and a matmul outside the pack (V of
    /// another type) is a one-member launch doing the same. Read by anything else, the norm runs.
    #[test]
    fn a_norm_read_only_by_matmuls_folds_into_their_launches() {
        let norm = |x| Op::RmsNorm {
            x,
            weight: "nw".into(),
            eps: 1e-5,
        };
        let with_norm = |v: &str, extra: bool| {
            let mut n = vec![
                node("emb", Op::GetRows { weight: "emb".into() }, 64),
                node("norm", norm(0), 64),
                mm(1, "wq", 64),
                mm(1, "wk", 64),
                mm(1, v, 32),
                node("prod", Op::Mul { a: 2, b: 3 }, 64),
            ];
            if extra {
                n.push(node("prod2", Op::Mul { a: 5, b: 1 }, 64));
            }
            n
        };
        let s = sched(with_norm("wv", false), 1, None, &layout);
        assert_eq!(kinds(&s), [Kernel::GetRows, Kernel::MatmulVecPack, Kernel::Mul]);
        let l = match &s.stages[2] {
            Stage::Compute { launches, .. } => launches[0].clone(),
            Stage::Copy { .. } => unreachable!(),
        };
        let p = MatmulPackParams::from_words(&l.params);
        assert_eq!((p.norm, p.eps, p.act), (1, 1e-5, 1), "normalized, rounded to q8_0");
        assert_eq!(l.res[1], Res::Act(s.node_buf[0]), "x is the norm's input");
        assert!(matches!(&l.res[6], Res::Weight(w, 0) if &*w.name == "nw"));
        // V outside the pack: Q/K and V each one launch, both normalizing.
        let s = sched(with_norm("wv2", false), 1, None, &layout);
        assert_eq!(
            kinds(&s),
            [
                Kernel::GetRows,
                Kernel::MatmulVecPack,
                Kernel::MatmulVecPack,
                Kernel::Mul
            ]
        );
        // The norm read by a product too: it runs (rounding for the matmuls), the pack reads it.
        let s = sched(with_norm("wv", true), 1, None, &layout);
        assert_eq!(
            kinds(&s),
            [
                Kernel::GetRows,
                Kernel::RmsNorm,
                Kernel::MatmulVecPack,
                Kernel::Mul,
                Kernel::Mul
            ]
        );
    }
}
