//! A step's timeline: `%globaltimer` stamps of every unit of one step, decoded into a Chrome trace
//! (one track per block, opens in Perfetto), a per-word CSV (work, wait, skew at the word's join, the
//! word's share of the step's critical path) and a PNG of blocks against time. The megakernel records
//! one always (issue 6); the graph's kernels with GRAPH_STAMPS=1 (the track is then the SM), which is
//! how the graph's per-word times inside the captured step are measured (issue 5).
//!
//! Owns: decoding the raw stamps and writing those three files. Refuses: measuring (the kernel
//! stamps, `GpuExec::step_mega_timeline` reads them back).

use std::path::Path;

use plotters::prelude::*;

use crate::error::{Context, Result};
use crate::isa::Program;

/// One executed unit: which block ran unit `unit` of word `word`, when it got its ticket, when its
/// wait was over and when it was done (ns of the GPU's global timer).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stamp {
    pub word: u32,
    pub block: u32,
    pub unit: u32,
    pub ticket: u64,
    pub ready: u64,
    pub done: u64,
}

/// Four u64 per unit slot (`word << 48 | block << 32 | unit`, ticket, ready, done); slots never
/// written (all zero) are skipped. Sorted by ticket time.
pub fn decode(raw: &[u64]) -> Vec<Stamp> {
    let mut v: Vec<Stamp> = raw
        .chunks_exact(4)
        .filter(|e| e[3] != 0)
        .map(|e| Stamp {
            word: (e[0] >> 48) as u32,
            block: ((e[0] >> 32) & 0xffff) as u32,
            unit: e[0] as u32,
            ticket: e[1],
            ready: e[2],
            done: e[3],
        })
        .collect();
    v.sort_by_key(|s| (s.ticket, s.block));
    v
}

/// Per word: units run, the sum of their work and wait times, and the skew at its join (the last
/// unit's end minus the first unit's end): what a grid-wide join after the word would wait for.
#[derive(Debug, Clone, PartialEq)]
pub struct WordTime {
    pub word: u32,
    pub opcode: String,
    pub units: usize,
    pub work_us: f64,
    pub wait_us: f64,
    pub first_ready_us: f64,
    pub last_done_us: f64,
    pub skew_us: f64,
    /// The word's share of the step: how far its last unit's end lies past every earlier word's (in
    /// program order; 0 when an earlier word ended later). The shares sum to the step's span from the
    /// first ticket.
    pub span_us: f64,
}

pub fn per_word(prog: &Program, stamps: &[Stamp]) -> Vec<WordTime> {
    let t0 = stamps.iter().map(|s| s.ticket).min().unwrap_or(0);
    let us = |t: u64| t.saturating_sub(t0) as f64 / 1e3;
    let mut out: Vec<WordTime> = Vec::new();
    let mut reached = t0;
    for (wi, w) in prog.words.iter().enumerate() {
        let mine: Vec<&Stamp> = stamps.iter().filter(|s| s.word as usize == wi).collect();
        if mine.is_empty() {
            continue;
        }
        let first_done = mine.iter().map(|s| s.done).min().unwrap_or(0);
        let last_done = mine.iter().map(|s| s.done).max().unwrap_or(0);
        let span_us = last_done.saturating_sub(reached) as f64 / 1e3;
        reached = reached.max(last_done);
        out.push(WordTime {
            word: wi as u32,
            opcode: format!("{:?}", w.opcode),
            units: mine.len(),
            work_us: mine.iter().map(|s| s.done.saturating_sub(s.ready) as f64 / 1e3).sum(),
            wait_us: mine.iter().map(|s| s.ready.saturating_sub(s.ticket) as f64 / 1e3).sum(),
            first_ready_us: us(mine.iter().map(|s| s.ready).min().unwrap_or(0)),
            last_done_us: us(last_done),
            skew_us: (last_done - first_done) as f64 / 1e3,
            span_us,
        });
    }
    out
}

/// Chrome trace JSON: per unit a "wait" slice (ticket to ready, when it waited) and a work slice named
/// by opcode, on the track of its block (tid), times in microseconds from the first ticket.
pub fn chrome_trace(prog: &Program, stamps: &[Stamp], track: Track) -> String {
    let t0 = stamps.iter().map(|s| s.ticket).min().unwrap_or(0);
    let us = |t: u64| t.saturating_sub(t0) as f64 / 1e3;
    let lanes = trace_lanes(stamps, track);
    let mut ev = Vec::with_capacity(2 * stamps.len());
    for (s, &tid) in stamps.iter().zip(&lanes) {
        let op = prog.words.get(s.word as usize).map(|w| format!("{:?}", w.opcode)).unwrap_or_default();
        if s.ready > s.ticket {
            ev.push(serde_json::json!({"name": "wait", "cat": "wait", "ph": "X", "pid": 0, "tid": tid,
                "ts": us(s.ticket), "dur": us(s.ready) - us(s.ticket), "args": {"word": s.word}}));
        }
        ev.push(serde_json::json!({"name": op, "cat": "work", "ph": "X", "pid": 0, "tid": tid,
            "ts": us(s.ready), "dur": us(s.done) - us(s.ready), "args": {"word": s.word, "unit": s.unit}}));
    }
    serde_json::json!({"traceEvents": ev, "displayTimeUnit": "ns"}).to_string()
}

/// The trace's track of each stamp: the megakernel's block; for the graph, whose blocks of several
/// kernels share an SM at once, the SM times 64 plus the first of its lanes free at the unit's ticket
/// (stamps in ticket order), so that slices on one track never overlap.
fn trace_lanes(stamps: &[Stamp], track: Track) -> Vec<u64> {
    if track == Track::Megakernel {
        return stamps.iter().map(|s| s.block as u64).collect();
    }
    let mut busy: std::collections::HashMap<u32, Vec<u64>> = Default::default();
    stamps
        .iter()
        .map(|s| {
            let ends = busy.entry(s.block).or_default();
            let lane = match ends.iter().position(|&e| e <= s.ticket) {
                Some(l) => l,
                None => {
                    ends.push(0);
                    ends.len() - 1
                }
            };
            ends[lane] = s.done;
            64 * s.block as u64 + lane as u64
        })
        .collect()
}

/// Which path a timeline is of: the megakernel's files are timeline.*, the graph's graph_timeline.*.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Track {
    Megakernel,
    Graph,
}

impl Track {
    fn prefix(self) -> &'static str {
        match self {
            Track::Megakernel => "timeline",
            Track::Graph => "graph_timeline",
        }
    }
    pub fn label(self) -> &'static str {
        match self {
            Track::Megakernel => "megakernel",
            Track::Graph => "graph",
        }
    }
    fn lane(self) -> &'static str {
        match self {
            Track::Megakernel => "block",
            Track::Graph => "SM",
        }
    }
}

/// Writes <prefix>.json (Chrome trace), <prefix>.csv (per word) and <prefix>.png into `dir`; returns
/// a one-line summary (step time, busy fraction, the largest join skew) and the per-word times.
pub fn write(dir: &Path, prog: &Program, raw: &[u64], track: Track) -> Result<(String, Vec<WordTime>)> {
    let stamps = decode(raw);
    if stamps.is_empty() {
        crate::bail!("timeline: no unit was stamped");
    }
    let pre = track.prefix();
    std::fs::write(dir.join(format!("{pre}.json")), chrome_trace(prog, &stamps, track))
        .context("write the timeline's trace")?;
    let words = per_word(prog, &stamps);
    let mut csv = String::from("word,opcode,units,work_us,wait_us,first_ready_us,last_done_us,skew_us,span_us\n");
    for w in &words {
        csv += &format!(
            "{},{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3}\n",
            w.word, w.opcode, w.units, w.work_us, w.wait_us, w.first_ready_us, w.last_done_us, w.skew_us, w.span_us
        );
    }
    std::fs::write(dir.join(format!("{pre}.csv")), csv).context("write the timeline's csv")?;
    chart(&dir.join(format!("{pre}.png")), prog, &stamps, track)?;
    let t0 = stamps.iter().map(|s| s.ticket).min().unwrap_or(0);
    let t1 = stamps.iter().map(|s| s.done).max().unwrap_or(t0);
    // Lanes: the megakernel's blocks, or the SMs the graph's blocks ran on (several blocks may share
    // one at a time, so the graph's busy fraction can pass 100 %).
    let lanes = stamps.iter().map(|s| s.block).max().unwrap_or(0) as f64 + 1.0;
    let work: f64 = stamps.iter().map(|s| s.done.saturating_sub(s.ready) as f64).sum();
    let worst = words.iter().max_by(|a, b| a.skew_us.total_cmp(&b.skew_us));
    // Words with no stamp (a kernel that does not stamp its units): their share of
    // the step is counted in the next stamped word's.
    let unstamped: Vec<usize> =
        (0..prog.words.len()).filter(|wi| !words.iter().any(|w| w.word as usize == *wi)).collect();
    let missing = if unstamped.is_empty() {
        String::new()
    } else {
        format!(
            "; {} words unstamped (first: {}), their time counted in the next word's share",
            unstamped.len(),
            unstamped.iter().take(4).map(|w| w.to_string()).collect::<Vec<_>>().join(", ")
        )
    };
    let line = format!(
        "{} timeline: {:.3} ms from first ticket to last unit, {}s busy {:.1} % of it, \
         largest join skew {:.1} us (word {} {}){missing}; {pre}.json opens in Perfetto",
        track.label(),
        t1.saturating_sub(t0) as f64 / 1e6,
        track.lane(),
        100.0 * work / (lanes * t1.saturating_sub(t0).max(1) as f64),
        worst.map(|w| w.skew_us).unwrap_or(0.0),
        worst.map(|w| w.word).unwrap_or(0),
        worst.map(|w| w.opcode.as_str()).unwrap_or("")
    );
    Ok((line, words))
}

/// Blocks (rows) against time: a bar per unit, coloured by the kind of work.
fn chart(file: &Path, prog: &Program, stamps: &[Stamp], track: Track) -> Result<()> {
    super::chart::fonts()?;
    let t0 = stamps.iter().map(|s| s.ticket).min().unwrap_or(0);
    let t1 = stamps.iter().map(|s| s.done).max().unwrap_or(t0 + 1);
    let blocks = stamps.iter().map(|s| s.block).max().unwrap_or(0) + 1;
    let err = |e: &dyn std::fmt::Display| crate::error::Error::new(format!("timeline chart: {e}"));
    let root = BitMapBackend::new(file, (1400, 700)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut c = ChartBuilder::on(&root)
        .caption(
            format!("{}: units per {} against time (grey: waiting)", track.label(), track.lane()),
            ("sans-serif", 20),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..(t1 - t0) as f64 / 1e3, 0u32..blocks)
        .map_err(|e| err(&e))?;
    c.configure_mesh().x_desc("us from the first ticket").y_desc(track.lane()).draw().map_err(|e| err(&e))?;
    let us = |t: u64| t.saturating_sub(t0) as f64 / 1e3;
    let colour = |op: &str| match op {
        o if o.starts_with("Gemv") || o == "LmHead" => RGBColor(44, 160, 44),
        o if o.starts_with("Attn") => RGBColor(214, 39, 40),
        o if o.starts_with("Gdn") => RGBColor(31, 119, 180),
        _ => RGBColor(255, 127, 14),
    };
    c.draw_series(stamps.iter().filter(|s| s.ready > s.ticket).map(|s| {
        Rectangle::new([(us(s.ticket), s.block), (us(s.ready), s.block + 1)], RGBColor(200, 200, 200).filled())
    }))
    .map_err(|e| err(&e))?;
    c.draw_series(stamps.iter().map(|s| {
        let op = prog.words.get(s.word as usize).map(|w| format!("{:?}", w.opcode)).unwrap_or_default();
        Rectangle::new([(us(s.ready), s.block), (us(s.done), s.block + 1)], colour(&op).filled())
    }))
    .map_err(|e| err(&e))?;
    // Layer boundaries: a faint line where each layer's first word first started (its number every 8).
    let mut first: std::collections::BTreeMap<u16, u64> = std::collections::BTreeMap::new();
    for st in stamps {
        if let Some(w) = prog.words.get(st.word as usize) {
            let e = first.entry(w.layer).or_insert(u64::MAX);
            *e = (*e).min(st.ready);
        }
    }
    let edge = RGBColor(120, 120, 120);
    for (layer, t) in &first {
        c.draw_series(std::iter::once(PathElement::new(vec![(us(*t), 0u32), (us(*t), blocks)], edge.mix(0.35))))
            .map_err(|e| err(&e))?;
        if layer % 8 == 0 {
            c.draw_series(std::iter::once(Text::new(format!("L{layer}"), (us(*t), blocks), ("sans-serif", 12))))
                .map_err(|e| err(&e))?;
        }
    }
    // The legend: the kinds of work and the wait.
    for (name, col) in [
        ("GEMV / lm_head", colour("Gemv")),
        ("attention", colour("Attn")),
        ("GDN", colour("Gdn")),
        ("other", colour("")),
        ("waiting", RGBColor(200, 200, 200)),
    ] {
        c.draw_series(std::iter::empty::<Rectangle<(f64, u32)>>())
            .map_err(|e| err(&e))?
            .label(name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 16, y + 5)], col.filled()));
    }
    c.configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(entries: &[(u32, u32, u32, u64, u64, u64)]) -> Vec<u64> {
        let mut v = vec![0u64; 4 * (entries.len() + 1)]; // one slot never written
        for (i, e) in entries.iter().enumerate() {
            v[4 * i] = ((e.0 as u64) << 48) | ((e.1 as u64) << 32) | e.2 as u64;
            v[4 * i + 1..4 * i + 4].copy_from_slice(&[e.3, e.4, e.5]);
        }
        v
    }

    #[test]
    fn graph_trace_lanes_never_overlap_on_an_sm() {
        let st = |block: u32, ticket: u64, done: u64| Stamp { word: 0, block, unit: 0, ticket, ready: ticket, done };
        // SM 3: two blocks at once, then a third unit after the first ended; SM 5 alone.
        let s = [st(3, 0, 10), st(3, 2, 20), st(5, 3, 4), st(3, 10, 15)];
        assert_eq!(trace_lanes(&s, Track::Graph), vec![192, 193, 320, 192]);
        assert_eq!(trace_lanes(&s, Track::Megakernel), vec![3, 3, 5, 3]);
    }

    #[test]
    fn stamps_decode_and_summarise_per_word() {
        let prog = Program::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("programs/tiny.ron")).unwrap();
        // Word 0 (two units on blocks 0 and 1), word 1 (one unit that waited 500 ns).
        let r = raw(&[(0, 0, 0, 1000, 1000, 3000), (0, 1, 1, 1100, 1100, 4000), (1, 0, 0, 3100, 3600, 5000)]);
        let s = decode(&r);
        assert_eq!(s.len(), 3, "the unwritten slot is skipped");
        assert_eq!(s[1], Stamp { word: 0, block: 1, unit: 1, ticket: 1100, ready: 1100, done: 4000 });
        let w = per_word(&prog, &s);
        assert_eq!(w.len(), 2);
        assert_eq!((w[0].units, w[0].work_us, w[0].skew_us), (2, 2.0 + 2.9, 1.0));
        assert_eq!((w[1].wait_us, w[1].last_done_us), (0.5, 4.0));
        // Shares of the step: word 0 ends 3 us after the first ticket, word 1 1 us later.
        assert_eq!((w[0].span_us, w[1].span_us), (3.0, 1.0));
        let trace: serde_json::Value = serde_json::from_str(&chrome_trace(&prog, &s, Track::Megakernel)).unwrap();
        let ev = trace["traceEvents"].as_array().unwrap();
        assert_eq!(ev.len(), 4, "three work slices and one wait");
        assert_eq!(ev.iter().filter(|e| e["name"] == "wait").count(), 1);
        let dir = std::env::temp_dir().join(format!("mk-timeline-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (line, words) = write(&dir, &prog, &r, Track::Megakernel).unwrap();
        assert!(line.contains("largest join skew 1.0 us (word 0"), "{line}");
        assert_eq!(words, w);
        for f in ["timeline.json", "timeline.csv", "timeline.png"] {
            assert!(dir.join(f).exists(), "{f}");
        }
        let (line, _) = write(&dir, &prog, &r, Track::Graph).unwrap();
        assert!(line.starts_with("graph timeline") && line.contains("SMs busy"), "{line}");
        let n = prog.words.len() - 2;
        assert!(line.contains(&format!("{n} words unstamped (first: 2, 3, 4, 5)")), "{line}");
        for f in ["graph_timeline.json", "graph_timeline.csv", "graph_timeline.png"] {
            assert!(dir.join(f).exists(), "{f}");
        }
        assert!(write(&dir, &prog, &[0; 8], Track::Graph).is_err());
        let _ = std::fs::remove_dir_all(&dir); // (nothing left in the system's temporary folder)
    }
}
