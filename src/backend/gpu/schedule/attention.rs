//! Position-dependent ops: `Rope` (one table per distinct RoPE) and `Attention` as `kv_store`
//! (the step's K and V into the cache) followed by `attention` (reading the cache). A KV-shared
//! layer (`Attn::kv_from`) stores nothing and reads its source layer's cache, written earlier
//! in the same forward (the cache buffers of a layer are its own widths: `KvLayout::layer_bytes`).

use super::{fold, Launch, Pass, Res, Stage, When, VEC_MAX_TOKENS};
use crate::backend::gpu::kernels::Variant;
use crate::backend::gpu::params::{AttentionParams, AttentionTileParams, KernelParams, KvStoreParams, RopeParams};
use crate::backend::gpu::table::Kernel;
use crate::backend::KvType;
use crate::model::{Attn, Node, Op, RopeMode};

/// Tokens per `attention` launch.
pub const ATTN_TOKENS: u32 = 256;

/// The longest span before a step takes the split-KV attention (`attention_split` +
/// `attention_reduce` for decode, `attention_tile` + `attention_reduce` for prefill): a small
/// device's, whose SMs the one-kernel attention's workgroups (a query head's each) already
/// fill ([`split_span`]).
pub const SPLIT_SPAN: u32 = 256;

/// The context from which a device of `sms` SMs takes the split-KV attention, unless the
/// backend was given another span: 8,192 positions over its SMs, between 32 and 256. The
/// one-kernel attention runs a workgroup per query head (32 for a 7B model): on an H200's 132
/// SMs a quarter of the device, so a context of 200 (3.3 MB of f16 cache a layer) took 25 µs
/// where its split takes 2–3; a device of 32 SMs or fewer keeps 256.
pub fn split_span(sms: u32) -> u32 {
    (8192 / sms.max(1)).clamp(32, SPLIT_SPAN)
}

/// The parts `attention_reduce` splits each head's `hdv` dims into for `tokens` tokens of
/// `n_head` heads on `sms` SMs: a power of two, enough for a workgroup an SM where the dims
/// allow (parts of at least 16, whole words of 4), so a decode step of one token is not one
/// workgroup per head (32 for a 7B model, reading up to 64 ranges each at a long context).
fn reduce_parts(n_head: usize, hdv: usize, tokens: u32, sms: u32) -> u32 {
    let want = sms.div_ceil((n_head as u32 * tokens).max(1));
    let mut parts = 1;
    while parts < want && hdv.is_multiple_of(8 * parts as usize) && hdv / (2 * parts as usize) >= 16 {
        parts *= 2;
    }
    parts
}

/// Ranges the split-KV attention cuts a context into, at most (`attention_reduce` combines up to
/// 64).
pub const MAX_SPLIT: u32 = 64;

/// The workgroups the split-KV attention aims for across heads and ranges on a device of `sms`
/// SMs: eight of its 64 invocations per SM (a quarter of a 2,048-thread SM: enough loads in
/// flight to keep its share of the memory busy, as ggml's `parallel_blocks` fills the SMs'
/// resident blocks), and at least 32.
fn split_groups(sms: u32) -> u32 {
    (8 * sms).max(32)
}

/// (head, dimension) pairs one `attention_split` workgroup holds, at most: its query heads times
/// the wider of head_dim and head_dim_v (`MAX_HG_D` in the kernel), with at most 16 heads.
const SPLIT_HG_D: usize = 1024;

/// The query heads one `attention_split` workgroup takes: the most of a KV head's `gq` that
/// divide it and fit `SPLIT_HG_D` at head width `hd`.
pub fn split_heads(gq: usize, hd: usize) -> usize {
    (1..=gq.min(16))
        .rev()
        .find(|&hg| gq.is_multiple_of(hg) && hg * hd <= SPLIT_HG_D)
        .unwrap_or(1)
}

/// `attention_tile`'s workgroup memory in f32s (its `MAX_QD`, `MAX_KD`, `MAX_PS`), its most
/// rows (query heads × tokens), and the rows each invocation takes in its products (`RB`).
const TILE_QD: usize = 2048;
const TILE_KD: usize = 1024;
const TILE_PS: usize = 768;
const TILE_ROWS: usize = 64;
const TILE_RB: usize = 4;

/// `attention_tile`'s workgroup for a KV head's `gq` query heads of widths `hd` (K) and `hdv`
/// (V): (query heads, query tokens, positions per K / V tile). The rows, heads × tokens, are
/// as many as its workgroup memory holds at these widths: every K and V row it loads serves
/// all of them. The heads are the most of `gq` that divide it, the tokens a power of two (so a
/// tile never crosses a launch of `ATTN_TOKENS`); the rows a multiple of `TILE_RB`, whose
/// blocks the products take whole. None where a head is too wide (over 512).
pub fn tile_shape(gq: usize, hd: usize, hdv: usize) -> Option<(usize, usize, usize)> {
    let w = hd.max(hdv);
    // The K tile's rows are w + 1 apart.
    let kt = (TILE_KD / (w + 1)).min(64);
    if kt == 0 {
        return None;
    }
    let rows = TILE_ROWS.min(TILE_QD / w).min(TILE_PS / kt) / TILE_RB * TILE_RB;
    if rows == 0 {
        return None;
    }
    let hg = (1..=gq.min(rows)).rev().find(|&hg| gq.is_multiple_of(hg))?;
    Some((hg, 1 << (rows / hg).ilog2(), kt))
}

impl Pass<'_> {
    /// Node `i`: a rope, or the attention's store and launches. An attention whose first reader
    /// is a matmul over quantized weights, with that format's blocks within a head, also rounds
    /// its output into the scratch buffer as `quantize_act` would.
    pub(super) fn attention(&mut self, i: usize, node: &Node, out: usize) -> Result<Stage, String> {
        let rows = node.rows as u32;
        let mut act = None;
        let launches = match &node.op {
            Op::Rope {
                n_heads,
                head_dim,
                rope,
                ..
            } => {
                let ri = self.rope_index(rope);
                let hd = *head_dim as u32;
                vec![Launch {
                    variant: Variant::new(Kernel::Rope),
                    params: RopeParams {
                        n_heads: *n_heads as u32,
                        head_dim: hd,
                        n_rot: rope.n_rot as u32,
                        neox: u32::from(rope.mode == RopeMode::Neox),
                        n: rows,
                        ..Default::default()
                    }
                    .words(),
                    res: vec![Res::RopeTable(ri), self.inp(node, 0), Res::Act(out)],
                    // One invocation per (pair, head, token).
                    groups: [(hd / 2).div_ceil(Kernel::Rope.threads()), *n_heads as u32, rows],
                    when: When::Always,
                }]
            }
            &Op::Attention {
                q,
                k,
                attn:
                    Attn {
                        layer,
                        n_head,
                        n_head_kv,
                        head_dim,
                        head_dim_v,
                        scale,
                        window,
                        softcap,
                        flash,
                        sinks,
                        kv_from,
                        causal,
                    },
                ..
            } => {
                // Without sinks binding 6 is never read; the step buffer stands in for it.
                let sk = match attn_sinks(node) {
                    Some(name) => Res::Weight(self.weight(&name)?, 0),
                    None => Res::Step,
                };
                let (kw, vw) = ((n_head_kv * head_dim) as u32, (n_head_kv * head_dim_v) as u32);
                // Elements per kv_store invocation: a word, or a pair of q8_0 blocks.
                let epw = match self.kv {
                    KvType::F32 => 1,
                    KvType::F16 => 2,
                    KvType::Q8_0 => 64,
                };
                // The cache this layer reads: its own, or (shared) the source layer's, whose
                // widths the gate checked against this layer's heads.
                let src = kv_from.unwrap_or(layer);
                // A rope folded in: (rotated dimensions, neox, its table).
                let (qr, kr) = (self.folded_rope(q), self.folded_rope(k));
                // Without the fused rounding binding 8 is never written.
                act = self.first_matmul_act(i).filter(|a| head_dim_v % a.block_elems() == 0);
                let (act_p, qy) = self.fused_round(i, node, act)?;
                let store = Launch {
                    variant: Variant::with_kv(Kernel::KvStore, self.kv),
                    params: KvStoreParams {
                        kw,
                        vw,
                        n: rows,
                        head_dim: head_dim as u32,
                        n_rot: kr.0,
                        neox: kr.1,
                        ..Default::default()
                    }
                    .words(),
                    res: vec![
                        Res::Step,
                        self.inp(node, 1),
                        self.inp(node, 2),
                        Res::Kc(layer),
                        Res::Vc(layer),
                        kr.2.clone(),
                    ],
                    groups: fold(
                        ((rows * (kw + vw)) / epw).div_ceil(Kernel::KvStore.threads()) as u64,
                        self.maxg,
                    ),
                    when: When::Always,
                };
                // One workgroup per (q head, token) over tokens t0.. (at most ATTN_TOKENS): steps
                // whose context is shorter than the split span.
                let attend = |t0: u32| Launch {
                    variant: Variant::with_kv(Kernel::Attention, self.kv).subgroups(self.subgroups),
                    params: AttentionParams {
                        n_head: n_head as u32,
                        n_head_kv: n_head_kv as u32,
                        head_dim: head_dim as u32,
                        head_dim_v: head_dim_v as u32,
                        scale,
                        window: window.unwrap_or(0) as u32,
                        softcap: softcap.unwrap_or(0.0),
                        n: rows,
                        flash: u32::from(flash),
                        sinks: u32::from(sinks),
                        t0,
                        n_rot: qr.0,
                        neox: qr.1,
                        act: act_p,
                        ..Default::default()
                    }
                    .words(),
                    res: vec![
                        Res::Step,
                        self.inp(node, 0),
                        Res::Kc(src),
                        Res::Vc(src),
                        Res::Act(out),
                        sk.clone(),
                        qr.2.clone(),
                        qy.clone(),
                    ],
                    groups: [n_head as u32, (rows - t0).min(ATTN_TOKENS), 1],
                    when: When::Always,
                };
                // The split-KV pair over tokens t0.. (at most ATTN_TOKENS): every query head of
                // a KV head per workgroup, the context cut into up to `n_split` ranges, then the
                // reduce. A step whose context reaches the split span takes it (`When::Long`),
                // others the one-kernel attention (`When::Short`), decode and prefill alike, so
                // a sequence's logits do not depend on what it is batched with (up to the order
                // of the sums). A prefill's pair is the tiled kernel's: its workgroups take a
                // tile of query tokens as well, so each K and V row loaded serves every one.
                let decode = rows as usize <= VEC_MAX_TOKENS;
                let gq = n_head / n_head_kv;
                let tokens = rows.min(ATTN_TOKENS);
                let tile = tile_shape(gq, head_dim, head_dim_v).filter(|_| !decode);
                let (hg, tq, kt) = tile.unwrap_or((split_heads(gq, head_dim.max(head_dim_v)), 1, 0));
                let gx = (n_head / hg) as u32;
                // Where the CUDA backend will take the tensor-core tiles, or wgpu the f16
                // cooperative-matrix ones, their token count.
                let v = Variant::with_kv(Kernel::AttentionTile, self.kv);
                let (hd, hdv) = (head_dim as u32, head_dim_v as u32);
                let tq_run = match tile {
                    Some(_) if self.shape.matrix_tiles && v.mma_entry(hd).is_some() => {
                        Variant::mma_attention_tq(hd, hdv, hg as u32)
                    }
                    Some(_) if self.shape.coop_f16 && v.takes_coop_f16() => {
                        Variant::coop_attention_tq(self.kv, hd, hdv, hg as u32)
                    }
                    _ => None,
                }
                .unwrap_or(tq as u32);
                let workgroups = gx * tokens.div_ceil(tq_run);
                let n_split = match decode {
                    true => split_groups(self.shape.sms).div_ceil(gx).clamp(2, MAX_SPLIT),
                    false => (split_groups(self.shape.sms) / workgroups).clamp(1, MAX_SPLIT),
                };
                let split = |t0: u32| {
                    let ap = AttentionParams {
                        n_split,
                        hg: hg as u32,
                        ..AttentionParams::from_words(&attend(t0).params)
                    };
                    let n = (rows - t0).min(ATTN_TOKENS);
                    let (variant, params, groups) = match tile {
                        Some(_) => (
                            Kernel::AttentionTile,
                            AttentionTileParams {
                                n_head: ap.n_head,
                                n_head_kv: ap.n_head_kv,
                                head_dim: ap.head_dim,
                                head_dim_v: ap.head_dim_v,
                                scale: ap.scale,
                                window: ap.window,
                                softcap: ap.softcap,
                                n: ap.n,
                                t0,
                                n_rot: ap.n_rot,
                                neox: ap.neox,
                                n_split,
                                hg: hg as u32,
                                tq: tq as u32,
                                kt: kt as u32,
                                ..Default::default()
                            }
                            .words(),
                            [gx, n_split, n.div_ceil(tq as u32)],
                        ),
                        None => (Kernel::AttentionSplit, ap.words(), [gx, n_split, n]),
                    };
                    [
                        Launch {
                            variant: Variant::with_kv(variant, self.kv),
                            params,
                            res: vec![
                                Res::Step,
                                self.inp(node, 0),
                                Res::Kc(src),
                                Res::Vc(src),
                                Res::Split,
                                qr.2.clone(),
                            ],
                            groups,
                            when: When::Long,
                        },
                        Launch {
                            variant: Variant::new(Kernel::AttentionReduce),
                            params: ap.words(),
                            res: vec![Res::Step, Res::Split, Res::Act(out), sk.clone(), qy.clone()],
                            groups: [
                                n_head as u32 * reduce_parts(n_head, head_dim_v, n, self.shape.sms),
                                n,
                                1,
                            ],
                            when: When::Long,
                        },
                    ]
                };
                let chunks = (0..rows).step_by(ATTN_TOKENS as usize);
                let short = chunks.clone().map(|t0| Launch {
                    when: When::Short,
                    ..attend(t0)
                });
                // An encoder's attention (each token over its whole sequence, whose last
                // position the step carries) is the one-kernel attention's alone.
                let attends: Vec<Launch> = match causal {
                    true => short.chain(chunks.flat_map(split)).collect(),
                    false => chunks.map(attend).collect(),
                };
                let bytes = (tokens as usize * n_head * n_split as usize * (head_dim_v + 2) * 4) as u64;
                self.split_bytes = self.split_bytes.max(bytes);
                match kv_from {
                    Some(_) => attends,
                    None => std::iter::once(store).chain(attends).collect(),
                }
            }
            op => return Err(format!("{}: {} is not rope or attention", node.name, op.kind())),
        };
        let mut kind = match &node.op {
            Op::Attention { q, k, .. } if self.folded[*q] || self.folded[*k] => "attention+rope".to_string(),
            op => op.kind().to_string(),
        };
        if let Some(a) = act {
            kind = format!("{kind}+quantize_act/{a}");
        }
        Ok(Stage::Compute { kind, launches })
    }

    /// Where node `i` is a rope folded into the attention reading it: its rotated dimensions,
    /// whether its pairs are neox's, and its table; else no rope (the step buffer stands in for
    /// the read-only table binding, never read).
    fn folded_rope(&mut self, i: usize) -> (u32, u32, Res) {
        match &self.g.nodes[i].op {
            Op::Rope { rope, .. } if self.folded[i] => {
                let ri = self.rope_index(rope);
                (
                    rope.n_rot as u32,
                    u32::from(rope.mode == RopeMode::Neox),
                    Res::RopeTable(ri),
                )
            }
            _ => (0, 0, Res::Step),
        }
    }
}

/// The sink weight of an attention node that has sinks.
fn attn_sinks(node: &Node) -> Option<String> {
    match &node.op {
        Op::Attention { attn, .. } => attn.sinks_weight(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A decode step's heads spread over an H200's SMs in parts of at least 16 dims; enough
    /// heads or tokens already, or dims that do not halve into words, stay whole.
    #[test]
    fn reduce_parts_fill_the_device() {
        assert_eq!(reduce_parts(32, 128, 1, 132), 8);
        assert_eq!(reduce_parts(32, 128, 8, 132), 1);
        assert_eq!(reduce_parts(64, 128, 1, 132), 4);
        assert_eq!(reduce_parts(32, 128, 512, 132), 1);
        assert_eq!(reduce_parts(32, 32, 1, 132), 2);
        assert_eq!(reduce_parts(4, 36, 1, 132), 1);
        assert_eq!(reduce_parts(2, 64, 1, 16), 4);
    }

    /// The split starts early on a device the one-kernel attention leaves mostly idle, and
    /// stays at 256 positions where a workgroup per head already fills it.
    #[test]
    fn the_split_span_follows_the_sms() {
        assert_eq!(split_span(132), 62, "H200");
        assert_eq!(split_span(1000), 32);
        for small in [1, 2, 16, 32] {
            assert_eq!(split_span(small), SPLIT_SPAN, "{small} SMs");
        }
        assert_eq!(split_span(0), SPLIT_SPAN);
    }

    /// A KV head's query heads go to one workgroup whole where they fit (SmolLM2 3 × 64,
    /// Qwen2.5-0.5B 7 × 64, gemma-3-270m 4 × 256), else in the largest equal groups that do.
    #[test]
    fn split_workgroups_take_whole_gqa_groups_where_they_fit() {
        for (gq, hd, want) in [
            (3, 64, 3),
            (7, 64, 7),
            (4, 256, 4),
            (8, 256, 4),
            (16, 128, 8),
            (64, 64, 16),
            (5, 512, 1),
            (1, 512, 1),
        ] {
            let hg = split_heads(gq, hd);
            assert_eq!(hg, want, "{gq} heads of {hd}");
            assert!(gq.is_multiple_of(hg) && hg * hd <= SPLIT_HG_D && hg <= 16);
        }
    }

    /// A tiled workgroup's rows (query heads × tokens) fill the workgroup memory at the head's
    /// width: SmolLM2 3 heads × 8 tokens of 64, Qwen2.5-0.5B 7 × 4, gemma-3-270m 4 × 2 of 256; a
    /// single head takes 16 tokens; a head over 512 does not fit.
    #[test]
    fn tiled_workgroups_fill_their_memory() {
        for (gq, hd, hdv, want) in [
            (3, 64, 64, Some((3, 8, 15))),
            (7, 64, 64, Some((7, 4, 15))),
            (4, 256, 256, Some((4, 2, 3))),
            (1, 32, 32, Some((1, 16, 31))),
            (16, 128, 128, Some((16, 1, 7))),
            (5, 512, 512, Some((1, 4, 1))),
            (2, 64, 512, Some((2, 2, 1))),
            (1, 96, 96, Some((1, 16, 10))),
            (1, 600, 600, None),
            (1, 1024, 1024, None),
        ] {
            let shape = tile_shape(gq, hd, hdv);
            assert_eq!(shape, want, "{gq} heads of {hd} / {hdv}");
            if let Some((hg, tq, kt)) = shape {
                let (w, rows) = (hd.max(hdv), hg * tq);
                assert!(gq.is_multiple_of(hg) && tq.is_power_of_two() && rows <= TILE_ROWS);
                assert!(rows * w <= TILE_QD && kt * (w + 1) <= TILE_KD && rows * kt <= TILE_PS);
                assert!(rows.div_ceil(TILE_RB) * TILE_RB * w <= TILE_QD, "{rows} rows in blocks");
            }
        }
    }
}
