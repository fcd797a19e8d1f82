//! `mk trace`: the CPU reference against an oracle trace (`scripts/oracle_trace.py`), op by op, each op
//! fed the oracle's own inputs (teacher forcing at every op), so a departure is pinned to one op.
//!
//! Owns: the per-op comparison table. Refuses: judging; it reports counts of differing elements and the
//! largest difference per op (rounding noise shows as a few elements at one ulp).

use std::collections::BTreeMap;
use std::path::Path;

use super::golden::Golden;
use crate::error::Result;
use crate::model::forward::{attn_core, attn_gate, attn_k, attn_q, conv_channels, gdn_head, GdnGates, Mixer, Weights};
use crate::model::numerics::bf;
use crate::model::ops;

/// Per op: (differing elements, elements, largest |difference|, largest |oracle value|).
pub type Table = BTreeMap<String, (usize, usize, f32, f32)>;

fn record(t: &mut Table, op: &str, ours: &[f32], theirs: &[f32]) {
    let n = ours.iter().zip(theirs).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
    let md = ours.iter().zip(theirs).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    let mx = theirs.iter().fold(0f32, |m, x| m.max(x.abs()));
    let e = t.entry(op.to_string()).or_insert((0, 0, 0.0, 0.0));
    e.0 += n + ours.len().abs_diff(theirs.len());
    e.1 += theirs.len();
    e.2 = e.2.max(md);
    e.3 = e.3.max(mx);
}

/// Compares every op of every traced token.
pub fn compare(w: &Weights, trace_path: &Path) -> Result<Table> {
    let tr = Golden::load(trace_path)?;
    let cfg = &w.cfg;
    let g = |k: String| tr.get(&k);
    let mut t = Table::new();
    let (cd, dv) = (cfg.gdn_conv_dim(), cfg.gdn_v_dim);
    for pos in 0..tr.ids.len() {
        let mut gi = 0;
        for (li, layer) in w.layers.iter().enumerate() {
            if li > 0 {
                let mut xn = vec![0f32; cfg.hidden];
                ops::rms_norm_block(
                    g(format!("layer{}.t{pos}", li - 1))?,
                    &layer.input_norm,
                    cfg.rms_eps as f32,
                    &mut xn,
                );
                record(&mut t, "rmsnorm (input)", &xn, g(format!("l{li}.innorm.t{pos}"))?);
            }
            let xn = g(format!("l{li}.innorm.t{pos}"))?;
            match &layer.mixer {
                Mixer::Gdn(gw) => {
                    record(
                        &mut t,
                        "gemv fp8 in_proj_qkv",
                        &gw.in_proj_qkv.gemv(xn),
                        g(format!("l{li}.in_proj_qkv.t{pos}"))?,
                    );
                    record(
                        &mut t,
                        "gemv bf16 in_proj_b",
                        &gw.in_proj_b.gemv(xn),
                        g(format!("l{li}.in_proj_b.t{pos}"))?,
                    );
                    // The oracle's first token takes the chunked path; its recurrent calls start at token 1.
                    if pos >= 1 {
                        let j = (pos - 1) * cfg.n_gdn_layers() + gi;
                        // The oracle's conv state holds positions pos-4 .. pos-1; our ring needs pos-3 .. pos-1.
                        let st4 = g(format!("conv.state_in.t{j}"))?;
                        let mut ring = vec![0f32; 4 * cd];
                        for c in 0..cd {
                            for i in 0..3 {
                                ring[4 * c + (pos + 1 + i) % 4] = st4[4 * c + 1 + i];
                            }
                        }
                        let mut conv = vec![0f32; cd];
                        conv_channels(g(format!("conv.in.t{j}"))?, &gw.conv1d, &mut ring, pos, 0..cd, &mut conv);
                        record(&mut t, "conv + silu", &conv, g(format!("conv.out.t{j}"))?);
                        let (b, a) = (g(format!("l{li}.in_proj_b.t{pos}"))?, g(format!("l{li}.in_proj_a.t{pos}"))?);
                        let beta: Vec<f32> = b.iter().map(|x| bf(ops::sigmoid(*x))).collect();
                        record(&mut t, "beta", &beta, g(format!("rec.beta.t{j}"))?);
                        let gl: Vec<f32> = (0..cfg.gdn_v_heads)
                            .map(|i| -gw.a_log[i].exp() * ops::softplus(a[i] + gw.dt_bias[i]))
                            .collect();
                        record(&mut t, "g (log decay)", &gl, g(format!("rec.g.t{j}"))?);
                        let mut state = g(format!("rec.state_in.t{j}"))?.to_vec();
                        let mut core = vec![0f32; cfg.gdn_value_dim()];
                        let hs = cfg.gdn_k_dim * dv;
                        for h in 0..cfg.gdn_v_heads {
                            let gates = GdnGates { b: b[h], a: a[h], a_log: gw.a_log[h], dt_bias: gw.dt_bias[h] };
                            let conv_out = g(format!("conv.out.t{j}"))?;
                            gdn_head(
                                cfg,
                                h,
                                conv_out,
                                gates,
                                &mut state[h * hs..(h + 1) * hs],
                                &mut core[h * dv..(h + 1) * dv],
                            );
                        }
                        record(&mut t, "gdn recurrence output", &core, g(format!("rec.out.t{j}"))?);
                        record(&mut t, "gdn recurrence state", &state, g(format!("rec.state_out.t{j}"))?);
                        let (oc, z) = (g(format!("rec.out.t{j}"))?, g(format!("l{li}.in_proj_z.t{pos}"))?);
                        let mut normed = vec![0f32; oc.len()];
                        for h in 0..cfg.gdn_v_heads {
                            let r = h * dv..(h + 1) * dv;
                            ops::rms_norm_gated(
                                &oc[r.clone()],
                                &z[r.clone()],
                                &gw.norm,
                                cfg.rms_eps as f32,
                                &mut normed[r],
                            );
                        }
                        record(&mut t, "gated rmsnorm", &normed, g(format!("l{li}.norm.t{pos}"))?);
                    }
                    let out = gw.out_proj.gemv(g(format!("l{li}.norm.t{pos}"))?);
                    record(&mut t, "gemv fp8 out_proj", &out, g(format!("l{li}.out_proj.t{pos}"))?);
                    gi += 1;
                }
                Mixer::Attn(aw) => {
                    let qg = g(format!("l{li}.q_proj.t{pos}"))?;
                    record(&mut t, "gemv fp8 q_proj", &aw.q_proj.gemv(xn), qg);
                    record(
                        &mut t,
                        "attn q (norm + rope)",
                        &attn_q(cfg, qg, &aw.q_norm, pos),
                        g(format!("attn.q.t{pos}"))?,
                    );
                    // Oracle caches are [kv_heads, t, 256]; ours [t, kv_heads, 256].
                    let (nkv, d, n) = (cfg.n_kv_heads, cfg.head_dim, pos + 1);
                    let (kf, vf) = (g(format!("attn.k.t{pos}"))?, g(format!("attn.v.t{pos}"))?);
                    let mut kc = vec![0f32; n * nkv * d];
                    let mut vc = kc.clone();
                    for p in 0..n {
                        for h in 0..nkv {
                            kc[(p * nkv + h) * d..][..d].copy_from_slice(&kf[(h * n + p) * d..][..d]);
                            vc[(p * nkv + h) * d..][..d].copy_from_slice(&vf[(h * n + p) * d..][..d]);
                        }
                    }
                    let kk = attn_k(cfg, g(format!("l{li}.k_proj.t{pos}"))?, &aw.k_norm, pos);
                    record(&mut t, "attn k (norm + rope)", &kk, &kc[pos * nkv * d..]);
                    let o = attn_core(cfg, g(format!("attn.q.t{pos}"))?, &kc, &vc, n);
                    let oo = g(format!("attn.out.t{pos}"))?;
                    record(&mut t, "attn core (softmax, pv)", &o, oo);
                    let mut gated = oo.to_vec();
                    attn_gate(cfg, &mut gated, qg);
                    record(
                        &mut t,
                        "gemv fp8 o_proj (gated input)",
                        &aw.o_proj.gemv(&gated),
                        g(format!("l{li}.o_proj.t{pos}"))?,
                    );
                }
            }
        }
    }
    Ok(t)
}

pub fn print(t: &Table) {
    println!("{:34} {:>9} {:>9} {:>8} {:>11} {:>11}", "op", "differ", "of", "%", "max |diff|", "max |value|");
    for (op, (n, tot, md, mx)) in t {
        println!("{op:34} {n:9} {tot:9} {:8.3} {md:11.3e} {mx:11.3e}", 100.0 * *n as f64 / (*tot).max(1) as f64);
    }
}
