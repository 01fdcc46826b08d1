//! llama-batched-bench's mode (`bench --npl`): parallel sequences decoding together.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use serde_json::json;

use minfer::Batch;

use super::{prompt_tokens, session, Config};

/// The KV cells a batched case needs, as llama-batched-bench counts them.
fn n_kv_req(pp: usize, tg: usize, pl: usize, shared: bool) -> usize {
    if shared {
        pp + pl * tg
    } else {
        pl * (pp + tg)
    }
}

/// llama-batched-bench's run: per backend, every (pp, tg, pl) case from an empty pool.
pub fn run(path: &std::path::Path, args: &Config) -> Result<()> {
    let model = Arc::new(minfer::load::open_model(path)?);
    let mut cases = Vec::new();
    for &pp in &args.npp {
        for &tg in &args.ntg {
            for &pl in &args.npl {
                if pp == 0 || pl == 0 {
                    anyhow::bail!("-npp and -npl take values of at least 1 (got pp {pp}, pl {pl})");
                }
                cases.push((pp, tg, pl));
            }
        }
    }
    let n_ctx = cases
        .iter()
        .map(|&(pp, tg, pl)| n_kv_req(pp, tg, pl, args.pp_shared))
        .max()
        .unwrap_or(16)
        .max(16);
    for &b in &args.backends {
        let Some(mut s) = session(&model, args, b, n_ctx, args.n_batch)? else {
            continue;
        };
        let n_threads = args.threads.unwrap_or_else(minfer::testing::cpu::default_threads);
        let mut rng = prompt_tokens(1 << 16, s.n_vocab()).into_iter().cycle();
        // Warm-up: 16 tokens, as llama-batched-bench.
        let warm: Vec<u32> = rng.by_ref().take(16).collect();
        s.eval(&warm, false)?;
        s.reset();
        if !args.json {
            println!();
            println!(
                "n_kv_max = {n_ctx}, n_batch = {}, is_pp_shared = {}, backend = {}, n_threads = {n_threads}",
                args.n_batch,
                u8::from(args.pp_shared),
                s.backend_name
            );
            println!();
            println!(
                "|{:>6} | {:>6} | {:>4} | {:>6} | {:>8} | {:>8} | {:>8} | {:>8} | {:>8} | {:>8} |",
                "PP", "TG", "B", "N_KV", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s"
            );
            println!(
                "|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|"
            );
        }
        for &(pp, tg, pl) in &cases {
            let main = s.main_seq();
            let seqs: Vec<_> = (0..pl).map(|i| if i == 0 { main } else { s.seq_new() }).collect();
            let mut batch = Batch::new();
            for (j, &seq) in seqs.iter().enumerate() {
                if args.pp_shared && j > 0 {
                    break;
                }
                for i in 0..pp {
                    batch.push(seq, rng.next().unwrap_or(0), i, i == pp - 1);
                }
            }
            let t0 = Instant::now();
            s.decode(&batch)?;
            let t_pp = t0.elapsed().as_secs_f64();
            let mut seqs = seqs;
            if args.pp_shared {
                for seq in seqs.iter_mut().skip(1) {
                    s.seq_remove(*seq)?;
                    *seq = s.seq_fork(main, pp)?;
                }
            }
            let t1 = Instant::now();
            for i in 0..tg {
                batch.clear();
                for &seq in &seqs {
                    batch.push(seq, rng.next().unwrap_or(0), pp + i, true);
                }
                s.decode(&batch)?;
            }
            let t_tg = t1.elapsed().as_secs_f64();
            for &seq in &seqs {
                s.seq_remove(seq)?;
            }
            let t = t_pp + t_tg;
            let n_kv = n_kv_req(pp, tg, pl, args.pp_shared);
            let pp_tokens = if args.pp_shared { pp } else { pl * pp };
            let speed_pp = pp_tokens as f64 / t_pp;
            let speed_tg = (pl * tg) as f64 / t_tg;
            let speed = (pp_tokens + pl * tg) as f64 / t;
            if args.json {
                let rec = json!({
                    "n_kv_max": n_ctx,
                    "n_batch": args.n_batch,
                    "n_ubatch": args.n_batch,
                    "flash_attn": 0,
                    "is_pp_shared": u8::from(args.pp_shared),
                    "n_gpu_layers": 0,
                    "n_threads": n_threads,
                    "n_threads_batch": n_threads,
                    "pp": pp,
                    "tg": tg,
                    "pl": pl,
                    "n_kv": n_kv,
                    "t_pp": t_pp,
                    "speed_pp": speed_pp,
                    "t_tg": t_tg,
                    "speed_tg": speed_tg,
                    "t": t,
                    "speed": speed,
                    "backend": s.backend_name,
                });
                println!("{rec}");
            } else {
                println!(
                    "|{pp:>6} | {tg:>6} | {pl:>4} | {n_kv:>6} | {t_pp:>8.3} | {speed_pp:>8.2} | {t_tg:>8.3} | {speed_tg:>8.2} | {t:>8.3} | {speed:>8.2} |"
                );
            }
        }
        crate::cli::print_profile(&s);
    }
    Ok(())
}
