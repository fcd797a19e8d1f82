//! The interpreter's op bodies: what one unit of each opcode computes, row by row, with the CPU
//! reference's ops and rounding points (the program's semantics, as the GPU kernels must reproduce
//! them). The scheduling (program order, shuffled orders, M rows) is `mod.rs`'s.

use std::borrow::Cow;

use crate::isa::access::{k_groups, CTRL_COMMIT, CTRL_NEXT, CTRL_POS, CTRL_TOKEN, GDN_HIST_HEAD};
use crate::isa::{slot, Opcode, Word, FLAG_PARTIAL};
use crate::model::forward::{self as fw, GdnGates, ATTN_PART};
use crate::model::numerics::{bf, bf16_to_f32};
use crate::model::ops;

use super::Interp;

impl<'a> Interp<'a> {
    /// Unit `u` of an M-row program's GdnConv or GdnRecur (the deferred forms, `Opcode::GdnConv`): the
    /// previous step's first n = ctrl[0][COMMIT] kept rows committed into the state (positions pos - n
    /// .. pos), then the step's M rows computed from the committed state without writing it, their
    /// inputs kept (ST1) for the next step's commit. ORDER: the kept rows in order, then the step's rows
    /// in order, each with the one-row arithmetic (`conv_channels`, `gdn_head`).
    pub(super) fn gdn_deferred(&mut self, w: &Word, u: u32) {
        let (m, (rs, _)) = (w.m_rows as usize, w.unit_span(u));
        self.select(0);
        let (pos, n) = (self.bufs[self.ctrl][CTRL_POS] as usize, self.bufs[self.ctrl][CTRL_COMMIT] as usize);
        let (kept_b, st_b, in_b, out_b) = (
            w.ops[slot::ST1] as usize,
            w.ops[slot::ST0] as usize,
            w.ops[slot::IN0] as usize,
            w.ops[slot::OUT0] as usize,
        );
        if w.opcode == Opcode::GdnConv {
            let (cols, len) = (w.rows as usize, rs.len());
            let taps = self.vecw(w, slot::W0)[4 * rs.start..4 * rs.end].to_vec();
            for i in 0..n {
                for c in rs.clone() {
                    // position pos - n + i (mod 4; n <= M <= 8 may pass pos only in a negative control)
                    self.bufs[st_b][4 * c + (pos + 4 * n - n + i) % 4] = self.bufs[kept_b][i * cols + c];
                }
            }
            let mut ring = self.bufs[st_b][4 * rs.start..4 * rs.end].to_vec();
            for r in 0..m {
                self.select(r);
                let x = self.bufs[in_b][rs.clone()].to_vec();
                let mut out = vec![0f32; len];
                fw::conv_channels(&x, &taps, &mut ring, pos + r, 0..len, &mut out);
                self.bufs[out_b][rs.clone()].copy_from_slice(&out);
                self.bufs[kept_b][r * cols + rs.start..r * cols + rs.end].copy_from_slice(&x);
            }
        } else {
            let (dk, dv, hk, hv) = (self.cfg.gdn_k_dim, self.cfg.gdn_v_dim, self.cfg.gdn_k_heads, self.cfg.gdn_v_heads);
            let key_dim = hk * dk;
            let (a_log, dt_bias) = (self.vecw(w, slot::W0).to_vec(), self.vecw(w, slot::W1).to_vec());
            let (norm_w, eps) = (self.vecw(w, slot::W3).to_vec(), self.cfg.rms_eps as f32);
            let (b_b, a_b) = (w.ops[slot::IN1] as usize, w.ops[slot::IN2] as usize);
            let conv_dim = self.prog.buffers[in_b].cols as usize;
            for j in rs {
                let qk = j / (hv / hk);
                let (kc, vc) = (key_dim + qk * dk, 2 * key_dim + j * dv);
                let gates = |b: f32, a: f32| GdnGates { b, a, a_log: a_log[j], dt_bias: dt_bias[j] };
                let mut st = self.bufs[st_b][j * dk * dv..(j + 1) * dk * dv].to_vec();
                let mut drop = vec![0f32; dv];
                for i in 0..n {
                    // the kept row: k, v, b, a (q is not needed by the state update: zeros)
                    let at = (i * hv + j) * GDN_HIST_HEAD;
                    let kept = &self.bufs[kept_b][at..at + GDN_HIST_HEAD];
                    let mut mixed = vec![0f32; conv_dim];
                    mixed[kc..kc + dk].copy_from_slice(&kept[..dk]);
                    mixed[vc..vc + dv].copy_from_slice(&kept[dk..dk + dv]);
                    let g = gates(kept[dk + dv], kept[dk + dv + 1]);
                    fw::gdn_head(&self.cfg, j, &mixed, g, &mut st, &mut drop);
                }
                self.bufs[st_b][j * dk * dv..(j + 1) * dk * dv].copy_from_slice(&st);
                for r in 0..m {
                    self.select(r);
                    let (b, a) = (self.bufs[b_b][j], self.bufs[a_b][j]);
                    let mixed = std::mem::take(&mut self.bufs[in_b]);
                    let mut o = vec![0f32; dv];
                    fw::gdn_head(&self.cfg, j, &mixed, gates(b, a), &mut st, &mut o);
                    let z = &self.bufs[w.ops[slot::IN4] as usize][j * dv..(j + 1) * dv];
                    let mut normed = vec![0f32; dv];
                    ops::rms_norm_gated(&o, z, &norm_w, eps, &mut normed);
                    self.bufs[out_b][j * dv..(j + 1) * dv].copy_from_slice(&normed);
                    let at = (r * hv + j) * GDN_HIST_HEAD;
                    let kept = &mut self.bufs[kept_b][at..at + GDN_HIST_HEAD];
                    kept[..dk].copy_from_slice(&mixed[kc..kc + dk]);
                    kept[dk..dk + dv].copy_from_slice(&mixed[vc..vc + dv]);
                    kept[dk + dv] = b;
                    kept[dk + dv + 1] = a;
                    self.bufs[in_b] = mixed;
                }
            }
        }
        self.select(0);
    }

    /// Unit `u` of a prefill program's GdnChunk: value heads `rs` over every row of the step at once, by
    /// chunks anchored at row 0 (`prefill::gdn_head_chunked`: the CPU reference's prefill's function),
    /// the state left as the last row's, then each row's output gated-RMS-normed per head (GdnRecur's).
    /// ORDER: the heads in order; within a head, the chunked form's.
    pub(super) fn gdn_chunk_rows(&mut self, w: &Word, u: u32) {
        let (m, (rs, _)) = (w.m_rows as usize, w.unit_span(u));
        let (dk, dv) = (self.cfg.gdn_k_dim, self.cfg.gdn_v_dim);
        let (a_log, dt_bias) = (self.vecw(w, slot::W0).to_vec(), self.vecw(w, slot::W1).to_vec());
        let (norm_w, eps) = (self.vecw(w, slot::W3).to_vec(), self.cfg.rms_eps as f32);
        let [in_b, b_b, a_b, z_b, out_b, st_b] =
            [slot::IN0, slot::IN1, slot::IN2, slot::IN4, slot::OUT0, slot::ST0].map(|s| w.ops[s] as usize);
        let (mut mixed, mut gb, mut ga, mut z) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for r in 0..m {
            self.select(r);
            mixed.push(self.bufs[in_b].clone());
            gb.push(self.bufs[b_b].clone());
            ga.push(self.bufs[a_b].clone());
            z.push(self.bufs[z_b].clone());
        }
        let rows: Vec<&[f32]> = mixed.iter().map(|v| v.as_slice()).collect();
        let mut st = std::mem::take(&mut self.bufs[st_b]);
        for j in rs {
            let gates: Vec<GdnGates> =
                (0..m).map(|r| GdnGates { b: gb[r][j], a: ga[r][j], a_log: a_log[j], dt_bias: dt_bias[j] }).collect();
            let o = crate::model::prefill::gdn_head_chunked(
                &self.cfg,
                j,
                &rows,
                &gates,
                &mut st[j * dk * dv..(j + 1) * dk * dv],
            )
            .expect("interpreter: GdnChunk's rows describe the head (the validator checks the shapes)");
            for r in 0..m {
                self.select(r);
                let out = &mut self.bufs[out_b][j * dv..(j + 1) * dv];
                ops::rms_norm_gated(&o[r * dv..(r + 1) * dv], &z[r][j * dv..(j + 1) * dv], &norm_w, eps, out);
            }
        }
        self.bufs[st_b] = st;
        self.select(0);
    }

    /// Unit `u` of `w` on the active row.
    pub(super) fn unit_row(&mut self, w: &Word, u: u32) {
        let w = *w;
        let (rs, kp) = w.unit_span(u);
        let pos = self.pos();
        let eps = self.cfg.rms_eps as f32;
        match w.opcode {
            Opcode::Embed => {
                let tok = self.bufs[self.ctrl][CTRL_TOKEN] as usize;
                let e = self.lin(&w, slot::W0);
                let row: Vec<f32> = match &e.w {
                    ops::LinearW::Bf16(b) => {
                        b[tok * e.cols + rs.start..tok * e.cols + rs.end].iter().map(|x| bf16_to_f32(*x)).collect()
                    }
                    ops::LinearW::Fp8 { .. } => panic!("interpreter: an fp8 embedding"),
                };
                self.out(&w, slot::OUT0)[rs].copy_from_slice(&row);
            }
            Opcode::GemvNorm | Opcode::GemvResidual | Opcode::GemvGateUp => {
                let x: Cow<[f32]> = match w.opcode {
                    Opcode::GemvNorm if w.op(slot::W1).is_some() => {
                        Cow::Owned(self.rms(self.input(&w, slot::IN0), self.vecw(&w, slot::W1), eps))
                    }
                    Opcode::GemvGateUp => Cow::Owned(self.rms(self.input(&w, slot::IN0), self.vecw(&w, slot::W2), eps)),
                    _ => Cow::Owned(self.input(&w, slot::IN0).to_vec()),
                };
                let lin = self.lin(&w, slot::W0);
                if w.flags & FLAG_PARTIAL != 0 {
                    let groups = k_groups(lin.cols, w.k_parts as u32, kp);
                    let vals: Vec<(usize, f32)> = groups
                        .flat_map(|g| rs.clone().map(move |r| (g, r)))
                        .map(|(g, r)| (g * w.rows as usize + r, lin.group_partial(&x, r, g)))
                        .collect();
                    let out = self.out(&w, slot::OUT0);
                    for (at, v) in vals {
                        out[at] = v;
                    }
                } else if w.opcode == Opcode::GemvGateUp {
                    let up = self.lin(&w, slot::W1);
                    let vals: Vec<f32> =
                        rs.clone().map(|r| fw::swiglu(bf(lin.row_dot(&x, r)), bf(up.row_dot(&x, r)))).collect();
                    self.out(&w, slot::OUT0)[rs].copy_from_slice(&vals);
                } else {
                    let vals: Vec<f32> = rs.clone().map(|r| bf(lin.row_dot(&x, r))).collect();
                    let residual = w.opcode != Opcode::GemvNorm;
                    let out = self.out(&w, slot::OUT0);
                    for (r, v) in rs.zip(vals) {
                        out[r] = if residual { bf(out[r] + v) } else { v };
                    }
                }
            }
            Opcode::MtpFc => {
                // ORDER: [the embedding half, the hidden half] (model::mtp::draft_step's)
                let mut x = self.rms(self.input(&w, slot::IN0), self.vecw(&w, slot::W1), eps);
                let g = self.rms(self.input(&w, slot::IN1), self.vecw(&w, slot::W3), eps);
                x.extend(self.rms(&g, self.vecw(&w, slot::W2), eps));
                let lin = self.lin(&w, slot::W0);
                let vals: Vec<f32> = rs.clone().map(|r| bf(lin.row_dot(&x, r))).collect();
                self.out(&w, slot::OUT0)[rs].copy_from_slice(&vals);
            }
            Opcode::ReduceStore | Opcode::ReduceResidual => {
                let (groups, rows) = (w.arg0 as usize, w.rows as usize);
                let part = self.input(&w, slot::IN0);
                // ORDER: groups summed in index order (the same order as `Linear::row_dot`).
                let sums: Vec<f32> = rs
                    .clone()
                    .map(|r| {
                        let mut s = 0f32;
                        for g in 0..groups {
                            s += part[g * rows + r];
                        }
                        bf(s)
                    })
                    .collect();
                let residual = w.opcode == Opcode::ReduceResidual;
                let out = self.out(&w, slot::OUT0);
                for (r, v) in rs.zip(sums) {
                    out[r] = if residual { bf(out[r] + v) } else { v };
                }
            }
            Opcode::GdnConv => {
                let (qkv_b, conv_b, ring_b) =
                    (w.ops[slot::IN0] as usize, w.ops[slot::OUT0] as usize, w.ops[slot::ST0] as usize);
                let qkv = std::mem::take(&mut self.bufs[qkv_b]);
                let mut out = std::mem::take(&mut self.bufs[conv_b]);
                let taps = self.vecw(&w, slot::W0).to_vec();
                fw::conv_channels(&qkv, &taps, &mut self.bufs[ring_b], pos, rs, &mut out);
                self.bufs[qkv_b] = qkv;
                self.bufs[conv_b] = out;
            }
            Opcode::GdnChunk => {
                unreachable!("interpreter: GdnChunk runs every row of its unit at once (gdn_chunk_rows)")
            }
            Opcode::GdnRecur => {
                let (dk, dv) = (self.cfg.gdn_k_dim, self.cfg.gdn_v_dim);
                let (a_log, dt_bias) = (self.vecw(&w, slot::W0).to_vec(), self.vecw(&w, slot::W1).to_vec());
                let conv = self.input(&w, slot::IN0).to_vec();
                let (b, a) = (self.input(&w, slot::IN1).to_vec(), self.input(&w, slot::IN2).to_vec());
                let (z, norm_w) = (self.input(&w, slot::IN4).to_vec(), self.vecw(&w, slot::W3).to_vec());
                let (core_b, st_b) = (w.ops[slot::OUT0] as usize, w.ops[slot::ST0] as usize);
                let mut core = std::mem::take(&mut self.bufs[core_b]);
                for j in rs {
                    let gates = GdnGates { b: b[j], a: a[j], a_log: a_log[j], dt_bias: dt_bias[j] };
                    let st = &mut self.bufs[st_b][j * dk * dv..(j + 1) * dk * dv];
                    let mut o = vec![0f32; dv];
                    fw::gdn_head(&self.cfg, j, &conv, gates, st, &mut o);
                    ops::rms_norm_gated(&o, &z[j * dv..(j + 1) * dv], &norm_w, eps, &mut core[j * dv..(j + 1) * dv]);
                }
                self.bufs[core_b] = core;
            }
            Opcode::GdnStep => {
                // Per value head: the conv of its q/k/v channels (the ring's q/k channels written by the
                // group's first head only; every head computes their outputs), the recurrence, then
                // the gated norm of the head's output: GdnConv's and GdnRecur's arithmetic.
                let (dk, dv, hk, hv) =
                    (self.cfg.gdn_k_dim, self.cfg.gdn_v_dim, self.cfg.gdn_k_heads, self.cfg.gdn_v_heads);
                let (key_dim, ratio) = (hk * dk, hv / hk);
                let (a_log, dt_bias) = (self.vecw(&w, slot::W0).to_vec(), self.vecw(&w, slot::W1).to_vec());
                let (taps, norm_w) = (self.vecw(&w, slot::W2).to_vec(), self.vecw(&w, slot::W3).to_vec());
                let qkv = self.input(&w, slot::IN0).to_vec();
                let (b, a) = (self.input(&w, slot::IN1).to_vec(), self.input(&w, slot::IN2).to_vec());
                let z = self.input(&w, slot::IN4).to_vec();
                let (core_b, st_b, ring_b) =
                    (w.ops[slot::OUT0] as usize, w.ops[slot::ST0] as usize, w.ops[slot::ST1] as usize);
                let mut mixed = vec![0f32; qkv.len()];
                for j in rs {
                    let qk = j / ratio;
                    for (i, c0) in [qk * dk, key_dim + qk * dk, 2 * key_dim + j * dv].into_iter().enumerate() {
                        let n = if i == 2 { dv } else { dk };
                        let mut ring = self.bufs[ring_b][4 * c0..4 * (c0 + n)].to_vec();
                        fw::conv_channels(
                            &qkv[c0..c0 + n],
                            &taps[4 * c0..4 * (c0 + n)],
                            &mut ring,
                            pos,
                            0..n,
                            &mut mixed[c0..c0 + n],
                        );
                        if i == 2 || j % ratio == 0 {
                            self.bufs[ring_b][4 * c0..4 * (c0 + n)].copy_from_slice(&ring);
                        }
                    }
                    let gates = GdnGates { b: b[j], a: a[j], a_log: a_log[j], dt_bias: dt_bias[j] };
                    let mut o = vec![0f32; dv];
                    fw::gdn_head(
                        &self.cfg,
                        j,
                        &mixed,
                        gates,
                        &mut self.bufs[st_b][j * dk * dv..(j + 1) * dk * dv],
                        &mut o,
                    );
                    let out = &mut self.bufs[core_b][j * dv..(j + 1) * dv];
                    ops::rms_norm_gated(&o, &z[j * dv..(j + 1) * dv], &norm_w, eps, out);
                }
            }
            Opcode::AttnKv => {
                let (d, kvd) = (self.cfg.head_dim, self.cfg.attn_kv_dim());
                let (k, v) = (self.input(&w, slot::IN0).to_vec(), self.input(&w, slot::IN1).to_vec());
                let knorm = self.vecw(&w, slot::W0).to_vec();
                for h in rs {
                    let mut kh = vec![0f32; d];
                    fw::attn_k_head(&self.cfg, &k, &knorm, pos, h, &mut kh);
                    self.out(&w, slot::ST0)[pos * kvd + h * d..][..d].copy_from_slice(&kh);
                    self.out(&w, slot::ST1)[pos * kvd + h * d..][..d].copy_from_slice(&v[h * d..(h + 1) * d]);
                }
            }
            Opcode::AttnScores | Opcode::AttnPv => self.attn_part(&w, rs.start, pos),
            Opcode::AttnReduceGate => {
                let (d, parts_max) = (self.cfg.head_dim, w.arg0 as usize);
                let n_parts = fw::attn_parts(pos + 1);
                let (part, q) = (self.input(&w, slot::IN0).to_vec(), self.input(&w, slot::IN1).to_vec());
                for h in rs {
                    let mut o = vec![0f32; d];
                    fw::attn_reduce(&part[h * parts_max * d..(h * parts_max + n_parts) * d], d, &mut o);
                    fw::attn_gate_head(&self.cfg, &mut o, &q, h);
                    self.out(&w, slot::OUT0)[h * d..(h + 1) * d].copy_from_slice(&o);
                }
            }
            Opcode::LmHead => {
                let x = self.rms(self.input(&w, slot::IN0), self.vecw(&w, slot::W1), eps);
                let lin = self.lin(&w, slot::W0);
                // the pruned head: list positions [rs) below the count, each scoring W's row ids[pos]
                let list = w.op(slot::IN1).map(|b| {
                    let l = &self.bufs[b];
                    let end = rs.end.min(l[0] as usize).max(rs.start);
                    (end, l[1 + rs.start..1 + end].to_vec())
                });
                let rs0 = rs.start;
                let id = |r: usize| list.as_ref().map_or(r, |(_, l)| l[r - rs0] as usize);
                let rs = match &list {
                    Some((end, _)) => rs.start..*end,
                    None => rs,
                };
                // the row's head mask (issue 30; `Program::head_mask`: a flag, then 16 ids' bits an
                // element): disallowed ids are not scored (-inf) and never proposed
                let mask = w.op(slot::IN2).map(|_| self.input(&w, slot::IN2)).filter(|m| m[0] != 0.0);
                let allowed =
                    |i: usize| mask.is_none_or(|m| m.get(1 + i / 16).is_some_and(|&e| (e as u32) >> (i % 16) & 1 == 1));
                let vals: Vec<f32> = rs
                    .clone()
                    .map(|r| if allowed(id(r)) { bf(lin.row_dot(&x, id(r))) } else { f32::NEG_INFINITY })
                    .collect();
                let kept: Vec<usize> = (0..vals.len()).filter(|&i| allowed(id(rs.start + i))).collect();
                let (bv, bi) = if kept.is_empty() {
                    (f32::NAN, f32::MAX)
                } else {
                    let kv: Vec<f32> = kept.iter().map(|&i| vals[i]).collect();
                    let best = kept[ops::argmax(&kv)];
                    (vals[best], id(rs.start + best) as f32)
                };
                self.out(&w, slot::OUT0)[rs].copy_from_slice(&vals);
                let cand = self.out(&w, slot::OUT1);
                cand[2 * u as usize] = bv;
                cand[2 * u as usize + 1] = bi;
            }
            Opcode::Argmax => {
                let cand = self.input(&w, slot::IN0);
                // The candidates' winner under argmax's total order (a NaN below every number, then the
                // larger value, then the lower id), so any order of combination gives it.
                let (mut bv, mut bi) = (cand[0], cand[1]);
                for c in cand[..2 * w.arg0 as usize].chunks_exact(2).skip(1) {
                    if c[0] > bv || (bv.is_nan() && !c[0].is_nan()) || (c[0] == bv && c[1] < bi) {
                        (bv, bi) = (c[0], c[1]);
                    }
                }
                self.out(&w, slot::OUT0)[CTRL_NEXT] = bi;
            }
            Opcode::EndStep => {}
        }
    }

    fn rms(&self, x: &[f32], wn: &[f32], eps: f32) -> Vec<f32> {
        let mut out = vec![0f32; x.len()];
        ops::rms_norm_block(x, wn, eps, &mut out);
        out
    }

    /// AttnScores / AttnPv for unit (KV head, partition) `u`: nothing when the partition is past the
    /// context.
    fn attn_part(&mut self, w: &Word, u: usize, pos: usize) {
        let cfg = self.cfg.clone();
        let (d, parts_max, group) = (cfg.head_dim, w.arg0 as usize, w.arg1 as usize);
        let (kvh, part) = (u / parts_max, u % parts_max);
        let n_ctx = pos + 1;
        let (p0, p1) = (part * ATTN_PART, ((part + 1) * ATTN_PART).min(n_ctx));
        if p0 >= n_ctx {
            return;
        }
        let max_ctx = parts_max * ATTN_PART;
        for h in kvh * group..(kvh + 1) * group {
            if w.opcode == Opcode::AttnScores {
                let mut q = vec![0f32; d];
                fw::attn_q_head(&cfg, self.input(w, slot::IN0), self.vecw(w, slot::W0), pos, h, &mut q);
                let kc = std::mem::take(&mut self.bufs[w.ops[slot::ST0] as usize]);
                let (m, l) =
                    fw::attn_scores_part(&cfg, &q, &kc, kvh, p0, p1, &mut self.out(w, slot::OUT0)[h * max_ctx + p0..]);
                self.bufs[w.ops[slot::ST0] as usize] = kc;
                let stats = self.out(w, slot::OUT1);
                stats[(h * parts_max + part) * 2] = m;
                stats[(h * parts_max + part) * 2 + 1] = l;
            } else {
                let st = self.input(w, slot::IN1);
                let stats: Vec<(f32, f32)> = (0..fw::attn_parts(n_ctx))
                    .map(|p| (st[(h * parts_max + p) * 2], st[(h * parts_max + p) * 2 + 1]))
                    .collect();
                let ml = fw::attn_merge(&stats);
                let scores = self.input(w, slot::IN0)[h * max_ctx + p0..h * max_ctx + p1].to_vec();
                let vc = std::mem::take(&mut self.bufs[w.ops[slot::ST1] as usize]);
                let mut o = vec![0f32; d];
                fw::attn_pv_part(&cfg, &scores, ml, &vc, kvh, p0, &mut o);
                self.bufs[w.ops[slot::ST1] as usize] = vc;
                self.out(w, slot::OUT0)[(h * parts_max + part) * d..][..d].copy_from_slice(&o);
            }
        }
    }
}
