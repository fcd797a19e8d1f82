//! The CUDA tunables an experiment may set (`defines: {"ATTN_UNROLL": 8}` in its RON file, `--define
//! NAME=VALUE` on `mk gpu`): each a C define of megakernel/ with its default, its range and what it
//! does. Everything else that once was a switch is gone (docs/notebook/deleted.md).
//!
//! Owns: the list of known names, validation (before anything compiles), the NVRTC flags, the values
//! the host reads for its launch shapes. Refuses: unknown names, values out of range. Recorded in every
//! `record.json` with the NVRTC options.

use std::collections::BTreeMap;

use crate::error::Result;

/// One tunable: its C name, default (as the CUDA sources' `#ifndef` blocks set it; a test checks they
/// agree), the values it takes, and what it changes.
pub struct Known {
    pub name: &'static str,
    pub default: u32,
    pub min: u32,
    pub max: u32,
    /// A flag tested with `#ifdef` (the negative controls): 0 leaves it undefined.
    pub flag: bool,
    pub what: &'static str,
}

/// Every name an experiment may set. Speed only, never bits, except the negative controls (wrong
/// results on purpose, for checks that must fail).
pub const KNOWN: [Known; 13] = [
    Known {
        name: "GEMM_MIN_BLOCKS",
        default: 1,
        min: 1,
        max: 2,
        flag: false,
        what: "prefill GEMM's launch bounds (blocks per SM ptxas must fit; `mk gpu gemm`)",
    },
    Known {
        name: "GEMV_MIN_BLOCKS",
        default: 2,
        min: 1,
        max: 4,
        flag: false,
        what: "discrete GEMV kernels' launch bounds (blocks per SM ptxas must fit)",
    },
    Known {
        name: "ATTN_UNROLL",
        default: 4,
        min: 1,
        max: 16,
        flag: false,
        what: "positions whose K/V loads a warp has in flight",
    },
    Known {
        name: "PV_UNROLL",
        default: 4,
        min: 1,
        max: 16,
        flag: false,
        what: "value rows in flight in attention PV (default: ATTN_UNROLL)",
    },
    Known {
        name: "GRAPH_STAMPS",
        default: 0,
        min: 0,
        max: 1,
        flag: false,
        what: "1: the graph's kernels stamp every unit (the graph timeline)",
    },
    Known {
        name: "TOPK_BREAK",
        default: 0,
        min: 0,
        max: 1,
        flag: false,
        what: "NEGATIVE CONTROL: the fused top-k threshold one key high",
    },
    Known {
        name: "MK_BREAK_GEMV",
        default: 0,
        min: 0,
        max: 1,
        flag: true,
        what: "NEGATIVE CONTROL: every GEMV pairs x's elements wrongly",
    },
    Known {
        name: "MK_LOADS_ONLY",
        default: 0,
        min: 0,
        max: 1,
        flag: true,
        what: "PROBE (wrong results): the fp8 GEMV loads its weights but does no arithmetic",
    },
    Known {
        name: "MK_SKIP_PREP",
        default: 0,
        min: 0,
        max: 1,
        flag: true,
        what: "PROBE (wrong results): an M-row fp8 GEMV's inputs neither prepared nor staged (its shared-memory rows as they are)",
    },
    Known {
        name: "GDNC_DV",
        default: 32,
        min: 16,
        max: 64,
        flag: false,
        what: "prefill's chunked GDN: state columns a scan block (16, 32 or 64; `mk gpu gdn-chunk`)",
    },
    Known {
        name: "MK_BREAK_GDN",
        default: 0,
        min: 0,
        max: 1,
        flag: true,
        what: "NEGATIVE CONTROL: the chunked GDN without its decay inside the chunks",
    },
    Known {
        name: "MK_BREAK_ATTN",
        default: 0,
        min: 0,
        max: 1,
        flag: true,
        what: "NEGATIVE CONTROL: prefill's causal attention lets each row see the next position's key",
    },
    Known {
        name: "MK_BREAK_MASK",
        default: 0,
        min: 0,
        max: 1,
        flag: true,
        what: "NEGATIVE CONTROL: the lm_head ignores the head mask (issue 30; `mk gpu mask`)",
    },
];

/// A further negative control of the envelope check (queries rotated for the next position).
pub const MK_BREAK_ROPE: Known = Known {
    name: "MK_BREAK_ROPE",
    default: 0,
    min: 0,
    max: 1,
    flag: true,
    what: "NEGATIVE CONTROL: RoPE of the queries one position off",
};

fn known(name: &str) -> Option<&'static Known> {
    KNOWN.iter().find(|k| k.name == name).or_else(|| (name == MK_BREAK_ROPE.name).then_some(&MK_BREAK_ROPE))
}

/// The tunables of one run: name -> value, validated on construction.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Defines(BTreeMap<String, u32>);

impl Defines {
    /// Checks every name and value; the error names what is wrong and what is known.
    pub fn new(map: BTreeMap<String, u32>) -> Result<Defines> {
        for (name, &v) in &map {
            let Some(k) = known(name) else {
                let names: Vec<&str> = KNOWN.iter().map(|k| k.name).chain([MK_BREAK_ROPE.name]).collect();
                crate::bail!("defines: unknown name {name} (known: {})", names.join(", "));
            };
            if !(k.min..=k.max).contains(&v) {
                crate::bail!("defines: {name} = {v} is out of range ({}..={}: {})", k.min, k.max, k.what);
            }
        }
        Ok(Defines(map))
    }

    /// From `NAME=VALUE` strings (the command line's `--define`); a bare NAME is NAME=1.
    pub fn parse(items: &[String]) -> Result<Defines> {
        let mut map = BTreeMap::new();
        for it in items {
            let (name, value) = it.split_once('=').unwrap_or((it.as_str(), "1"));
            let v = value
                .parse::<u32>()
                .map_err(|_| crate::error::Error::new(format!("--define {it}: the value must be a decimal number")))?;
            map.insert(name.to_string(), v);
        }
        Defines::new(map)
    }

    /// The value the kernels see (the default where unset).
    pub fn get(&self, name: &str) -> u32 {
        if let Some(&v) = self.0.get(name) {
            return v;
        }
        match name {
            "PV_UNROLL" => self.get("ATTN_UNROLL"),
            _ => known(name).map_or(0, |k| k.default),
        }
    }

    /// NVRTC's `-D` flags, in name order (flags at 0 are left undefined).
    pub fn flags(&self) -> Vec<String> {
        self.0
            .iter()
            .filter(|(n, &v)| !(known(n).is_some_and(|k| k.flag) && v == 0))
            .map(|(n, v)| format!("-D{n}={v}"))
            .collect()
    }

    pub fn map(&self) -> &BTreeMap<String, u32> {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(items: &[&str]) -> Result<Defines> {
        Defines::parse(&items.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn known_names_in_range_pass_and_the_rest_is_refused() {
        let ok = d(&["ATTN_UNROLL=8", "MK_BREAK_GEMV", "GEMV_MIN_BLOCKS=3"]).unwrap();
        assert_eq!(ok.get("ATTN_UNROLL"), 8);
        assert_eq!(ok.get("PV_UNROLL"), 8, "PV_UNROLL follows ATTN_UNROLL");
        assert_eq!(ok.flags(), ["-DATTN_UNROLL=8", "-DGEMV_MIN_BLOCKS=3", "-DMK_BREAK_GEMV=1"]);
        assert!(d(&["MK_BREAK_GEMV=0"]).unwrap().flags().is_empty());
        for (bad, says) in [
            ("GEMV_RING=1", "unknown name GEMV_RING"),
            ("ATTN_UNROLL=0", "out of range"),
            ("GEMV_MIN_BLOCKS=9", "out of range"),
            ("GEMV_MIN_BLOCKS=0x2", "decimal"),
            ("PV_UNROLL=ATTN_UNROLL", "decimal"),
        ] {
            let e = d(&[bad]).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    /// The defaults here are the CUDA sources' (`#ifndef NAME` then `#define NAME value`).
    #[test]
    fn defaults_match_the_cuda_sources() {
        let src = super::super::device::source();
        for k in KNOWN.iter().filter(|k| !k.flag) {
            let at =
                src.find(&format!("#ifndef {}\n#define {} ", k.name, k.name)).unwrap_or_else(|| panic!("{}", k.name));
            let rest = &src[at..];
            let line = rest.lines().nth(1).unwrap();
            let value = line.split_whitespace().nth(2).unwrap();
            let want = match k.name {
                "PV_UNROLL" => "ATTN_UNROLL".to_string(),
                _ => k.default.to_string(),
            };
            assert_eq!(value, want, "{}", k.name);
        }
        for k in KNOWN.iter().filter(|k| k.flag).chain([&MK_BREAK_ROPE]) {
            assert!(src.contains(&format!("#ifdef {}", k.name)), "{}", k.name);
        }
    }
}
