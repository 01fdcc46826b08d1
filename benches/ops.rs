//! Per-op CPU benchmarks: `cargo bench --bench ops`. Ids follow `op/qtype/backend`;
//! throughput is weight bytes (matmul) or activation bytes (rms_norm, attention) per second.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

use minfer::backend::{KvType, Step};
use minfer::quant::QType;
use minfer::tensor::{Bytes, Tensor};
use minfer::testing::cpu::matmul;
use minfer::testing::cpu::rms_norm;
use minfer::testing::cpu::Isa;
use minfer::testing::cpu::Pool;
use minfer::testing::cpu::{attention, AttnParams, KvCache};

fn weight(qtype: QType, k: usize, m: usize) -> Tensor {
    let vals: Vec<f32> = (0..k * m)
        .map(|i| ((i * 2654435761) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let data = qtype.quantize_to_vec(&vals).expect("quantize");
    Tensor {
        name: "w".into(),
        qtype,
        shape: vec![k as u64, m as u64],
        data: Bytes::from_vec(data),
        part: 0,
        file_offset: 0,
    }
}

fn bench_matmul(c: &mut Criterion) {
    let pool = Pool::new(minfer::testing::cpu::default_threads());
    // The kernels `MINFER_CPU_ISA` names, else the best this CPU runs.
    let isa = minfer::overrides::Overrides::from_env()
        .unwrap_or_else(|e| panic!("{e}"))
        .cpu_isa;
    let kernels = Isa::select(isa.as_deref()).unwrap_or_else(|e| panic!("{e}"));
    let (k, m) = (576, 1536); // SmolLM2's FFN up projection
    for qtype in [
        QType::Q4_0,
        QType::Q4_1,
        QType::Q5_0,
        QType::Q8_0,
        QType::Q4K,
        QType::Q5K,
        QType::Q6K,
        QType::F16,
    ] {
        let w = weight(qtype, if qtype.block_elems() == 256 { 768 } else { k }, m);
        let kk = w.row_len();
        for n in [1usize, 512] {
            let mut g = c.benchmark_group(format!("matmul/{}/cpu", qtype.name()));
            g.throughput(Throughput::Bytes(w.bytes().len() as u64));
            g.sample_size(if n == 1 { 100 } else { 10 });
            let x: Vec<f32> = (0..n * kk).map(|i| (i % 13) as f32 * 0.1 - 0.6).collect();
            let mut y = vec![0f32; n * m];
            let mut act = Vec::new();
            g.bench_function(BenchmarkId::new("batch", n), |b| {
                b.iter(|| matmul(&pool, kernels, &w, &x, n, &mut y, &mut act, None))
            });
            g.finish();
        }
    }
}

fn bench_rms_norm(c: &mut Criterion) {
    let n = 576;
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.01).collect();
    let w = vec![1.0f32; n];
    let mut y = vec![0f32; n];
    let mut g = c.benchmark_group("rms_norm/f32/cpu");
    g.throughput(Throughput::Bytes((n * 4) as u64));
    g.bench_function("576", |b| b.iter(|| rms_norm(&x, &w, 1e-5, &mut y)));
    g.finish();
}

fn bench_attention(c: &mut Criterion) {
    let pool = Pool::new(minfer::testing::cpu::default_threads());
    let (n_head, n_head_kv, hd) = (9, 3, 64);
    for n_kv in [128usize, 1024] {
        let mut kv = KvCache::new(&minfer::backend::KvLayout {
            kv: KvType::F16,
            n_cells: n_kv + 1,
            n_layer: 1,
            k_width: n_head_kv * hd,
            v_width: n_head_kv * hd,
        });
        let k = vec![0.1f32; n_kv * n_head_kv * hd];
        let mut out = vec![0f32; n_kv * n_head * hd];
        let p = AttnParams {
            layer: 0,
            n_head,
            n_head_kv,
            head_dim: hd,
            head_dim_v: hd,
            scale: 0.125,
            window: None,
            softcap: None,
            flash: false,
            sinks: false,
            kv_from: None,
            causal: true,
        };
        let q = vec![0.2f32; n_kv * n_head * hd];
        let fill = Step::contiguous(&vec![0; n_kv], 0);
        attention(&pool, Isa::best(), &mut kv, &p, None, &q, &k, &k, &fill, &mut out).expect("fill");
        let decode = Step::contiguous(&[0], n_kv);
        let mut g = c.benchmark_group("attention/f16/cpu");
        g.throughput(Throughput::Bytes((2 * n_kv * n_head_kv * hd * 2) as u64));
        g.bench_function(BenchmarkId::new("decode_at", n_kv), |b| {
            b.iter(|| {
                attention(
                    &pool,
                    Isa::best(),
                    &mut kv,
                    &p,
                    None,
                    &q[..n_head * hd],
                    &k[..n_head_kv * hd],
                    &k[..n_head_kv * hd],
                    &decode,
                    &mut out[..n_head * hd],
                )
            })
        });
        g.finish();
    }
}

criterion_group!(benches, bench_matmul, bench_rms_norm, bench_attention);
criterion_main!(benches);
