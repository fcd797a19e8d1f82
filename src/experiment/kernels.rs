//! The timed paths' kernel tables (part of `mk run`'s timing pass): per-instruction times into
//! instructions.csv and the record's kernel rows, the in-step rows from a timeline, and the per-shape
//! GEMV table (`shapes: true`).

use super::*;

/// Per-instruction times (ns per step by word) into instructions.csv and the record's kernel table.
pub(super) fn kernel_stats(
    prog: &Program,
    path: &str,
    ns: &[u64],
    ctx: u32,
    rec: &mut Record,
    res: &mut Results,
) -> Result<()> {
    for (wi, t) in ns.iter().enumerate() {
        let wd = &prog.words[wi];
        res.instr_row(&InstrRow {
            path,
            context: ctx,
            word: wi,
            opcode: &format!("{:?}", wd.opcode),
            layer: wd.layer,
            ms_per_step: *t as f64 / 1e6,
        })?;
    }
    let words = ns.iter().enumerate().map(|(wi, t)| (wi, *t as f64 / 1e6));
    let ceiling = rec.ceiling_gbps;
    rec.kernels.extend(kernel_rows(prog, path, words, ctx, ceiling));
    Ok(())
}

/// The GEMV words by weight shape: `ms` their word-by-word times, `read` the streaming read of the
/// same weights, both in the order of `words`; rows sorted by bytes, largest first.
pub(super) fn shape_rows(
    prog: &Program,
    words: &[usize],
    ms: &[f64],
    read: &[f64],
    ceiling_gbps: f64,
) -> Vec<record::ShapeStat> {
    let mut by: std::collections::BTreeMap<String, (usize, u64, f64, f64)> = Default::default();
    for (j, &wi) in words.iter().enumerate() {
        let w = &prog.words[wi];
        let bufs = crate::exec::gpu::reads::weight_stream(w);
        let b = &prog.buffers[bufs[0]];
        let ty = if b.elem_bytes == 1 { "fp8" } else { "bf16" };
        let n = if bufs.len() > 1 { format!("{} x ", bufs.len()) } else { String::new() };
        let key = format!("{:?} {n}{}x{} {ty}", w.opcode, b.rows, b.cols);
        let e = by.entry(key).or_default();
        e.0 += 1;
        e.1 += bufs
            .iter()
            .map(|&i| prog.buffers[i].rows * prog.buffers[i].cols * prog.buffers[i].elem_bytes as u64)
            .sum::<u64>();
        e.2 += ms[j];
        e.3 += read[j];
    }
    let gbps = |bytes: u64, ms: f64| if ms > 0.0 { bytes as f64 / (ms * 1e-3) / 1e9 } else { 0.0 };
    let mut rows: Vec<record::ShapeStat> = by
        .into_iter()
        .map(|(shape, (words, bytes, gemv_ms, read_ms))| record::ShapeStat {
            shape,
            words,
            bytes,
            gemv_ms,
            read_ms,
            gemv_gb_per_s: gbps(bytes, gemv_ms),
            read_gb_per_s: gbps(bytes, read_ms),
            gemv_of_read: if gemv_ms > 0.0 { read_ms / gemv_ms } else { 0.0 },
            gemv_of_ceiling: if ceiling_gbps > 0.0 { gbps(bytes, gemv_ms) / ceiling_gbps } else { 0.0 },
        })
        .collect();
    rows.sort_by(|a, b| b.bytes.cmp(&a.bytes));
    rows
}

/// shapes.csv: `shape_rows` as a table.
pub(super) fn write_shapes(dir: &std::path::Path, rows: &[record::ShapeStat]) -> Result<()> {
    let mut s =
        String::from("shape,words,bytes,gemv_ms,read_ms,gemv_gb_per_s,read_gb_per_s,gemv_of_read,gemv_of_ceiling\n");
    for r in rows {
        s += &format!(
            "{},{},{},{:.4},{:.4},{:.1},{:.1},{:.3},{:.3}\n",
            r.shape,
            r.words,
            r.bytes,
            r.gemv_ms,
            r.read_ms,
            r.gemv_gb_per_s,
            r.read_gb_per_s,
            r.gemv_of_read,
            r.gemv_of_ceiling
        );
    }
    let p = dir.join("shapes.csv");
    std::fs::write(&p, s).map_err(|e| crate::error::Error::new(format!("write {}: {e}", p.display())))
}

/// The record's kernel table from a timeline (path "<path> in step"): per opcode, the words' shares
/// of the step's critical path (`WordTime::span_us`) and the bytes they stream: each kind of kernel's
/// bandwidth measured inside the running step, where the word-by-word times include each launch's
/// fixed cost and none of the overlap between kernels.
pub(super) fn in_step_stats(
    prog: &Program,
    path: &str,
    words: &[timeline::WordTime],
    ctx: u32,
    ceiling: f64,
) -> Vec<record::KernelStat> {
    let words = words.iter().map(|w| (w.word as usize, w.span_us / 1e3));
    kernel_rows(prog, &format!("{path} in step"), words, ctx, ceiling)
}

/// Per opcode: the words, their summed ms per step and the bytes they stream at position `ctx` (they
/// attend over ctx + 1 positions), and the bandwidth that implies.
fn kernel_rows(
    prog: &Program,
    path: &str,
    words: impl Iterator<Item = (usize, f64)>,
    ctx: u32,
    ceiling_gbps: f64,
) -> Vec<record::KernelStat> {
    let mut by: std::collections::BTreeMap<String, (usize, f64, u64)> = Default::default();
    for (wi, ms) in words {
        let wd = &prog.words[wi];
        let e = by.entry(format!("{:?}", wd.opcode)).or_default();
        e.0 += 1;
        e.1 += ms;
        e.2 += crate::isa::report::streamed_bytes(prog, wd, ctx as u64 + 1);
    }
    by.into_iter()
        .map(|(op, (n, ms, bytes))| {
            let gbps = if ms > 0.0 { bytes as f64 / (ms * 1e-3) / 1e9 } else { 0.0 };
            record::KernelStat {
                path: path.into(),
                opcode: op,
                words: n,
                ms_per_step: ms,
                bytes,
                gb_per_s: gbps,
                fraction_of_ceiling: if ceiling_gbps > 0.0 { gbps / ceiling_gbps } else { 0.0 },
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemv_words_group_by_weight_shape() {
        // tiny: every GEMV word lands in one shape row; gate/up counts both matrices; the ratios are
        // the times' (here read 1 ms against the GEMV's 2 ms a word: 50 %).
        let prog = Program::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("programs/tiny.ron")).unwrap();
        let words: Vec<usize> = (0..prog.words.len())
            .filter(|&i| !crate::exec::gpu::reads::weight_stream(&prog.words[i]).is_empty())
            .collect();
        let rows = shape_rows(&prog, &words, &vec![2.0; words.len()], &vec![1.0; words.len()], 4620.0);
        assert_eq!(rows.iter().map(|r| r.words).sum::<usize>(), words.len());
        let gu = rows.iter().find(|r| r.shape.starts_with("GemvGateUp 2 x ")).expect("gate/up's row");
        let gw = words.iter().find(|&&i| prog.words[i].opcode == crate::isa::Opcode::GemvGateUp).unwrap();
        let b = &prog.buffers[prog.words[*gw].ops[crate::isa::slot::W0] as usize];
        assert_eq!(gu.bytes, gu.words as u64 * 2 * b.rows * b.cols * b.elem_bytes as u64);
        assert!(rows.iter().any(|r| r.shape.starts_with("LmHead") && r.shape.ends_with("bf16")));
        for r in &rows {
            assert!((r.gemv_of_read - 0.5).abs() < 1e-12 && (r.gemv_ms - 2.0 * r.words as f64).abs() < 1e-12);
            assert!((r.gemv_gb_per_s / r.read_gb_per_s - 0.5).abs() < 1e-9);
        }
        assert!(rows.windows(2).all(|p| p[0].bytes >= p[1].bytes), "largest first");
        // no GEMV word, no row
        assert!(shape_rows(&prog, &[], &[], &[], 4620.0).is_empty());
    }

    #[test]
    fn in_step_rows_sum_the_words_shares_per_opcode() {
        let prog = Program::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("programs/tiny.ron")).unwrap();
        let word = |wi: usize, span_us: f64| timeline::WordTime {
            word: wi as u32,
            opcode: format!("{:?}", prog.words[wi].opcode),
            units: 1,
            work_us: 0.0,
            wait_us: 0.0,
            first_ready_us: 0.0,
            last_done_us: 0.0,
            skew_us: 0.0,
            span_us,
        };
        // Two words of one opcode and one of another.
        let op1 = prog.words[1].opcode;
        let other = (2..prog.words.len()).find(|&i| prog.words[i].opcode == op1).unwrap();
        let third = (2..prog.words.len()).find(|&i| prog.words[i].opcode != op1).unwrap();
        let rows = in_step_stats(&prog, "graph", &[word(1, 10.0), word(other, 30.0), word(third, 5.0)], 0, 4620.0);
        assert_eq!(rows.len(), 2);
        let r = rows.iter().find(|k| k.opcode == format!("{op1:?}")).unwrap();
        assert_eq!((r.path.as_str(), r.words), ("graph in step", 2));
        assert!((r.ms_per_step - 0.040).abs() < 1e-12, "{}", r.ms_per_step);
        let bytes = crate::isa::report::streamed_bytes(&prog, &prog.words[1], 1)
            + crate::isa::report::streamed_bytes(&prog, &prog.words[other], 1);
        assert_eq!(r.bytes, bytes);
        assert!((r.gb_per_s - bytes as f64 / 0.040e-3 / 1e9).abs() < 1e-6);
    }
}
