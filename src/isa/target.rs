//! What a program is compiled for (`Target`: the GPU's SMs and threads, M rows, the context, the unit
//! shapes) and the lowering choices a target carries (`UnitPolicy`, `GdnLowering`). Part of the contract
//! (`isa`): every program records its target.

use serde::{Deserialize, Serialize};

use super::access;
use crate::bail;
use crate::error::Result;

/// What a program was compiled for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    pub sms: u32,
    pub threads: u32,
    pub m_rows: u32,
    /// KV cache positions the program's attention words cover.
    pub max_context: u32,
    /// How GEMV words are cut into units (row slices and split-K parts).
    #[serde(default)]
    pub units: UnitPolicy,
    /// Output rows per fp8 GEMV unit (a multiple of 8, 8-256, rounded up to whole 32-row chunk groups;
    /// the programs in programs/ use the default, 32, and do not write it); bf16 GEMV words take 8-row
    /// units (`compiler::BF16_UNIT_ROWS`). Bits never depend on it.
    #[serde(default = "default_gemv_unit_rows", skip_serializing_if = "is_default_gemv_unit_rows")]
    pub gemv_unit_rows: u32,
    /// How a GDN layer's conv, recurrence and gated norm are lowered (the programs in programs/ use the
    /// default, fused, and do not write it). Bits never depend on it.
    #[serde(default, skip_serializing_if = "GdnLowering::is_fused")]
    pub gdn: GdnLowering,
    /// A prefill program (issue 28): M rows of a prompt at positions pos .. pos + M, every row kept (no
    /// deferred commit), the GDN recurrence by chunks (`Opcode::GdnChunk`), the head on the last row
    /// only (`FLAG_LAST_ROW`); M up to `MAX_PREFILL_ROWS`. Decode and verification programs leave it
    /// false and do not write it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub prefill: bool,
    /// The head honours a per-row mask of allowed ids (issue 30: grammar-constrained decoding): the
    /// program carries the Control buffer `head_mask` (`Program::head_mask`), its LmHead reads it (IN2).
    /// Programs without it (those in programs/) do not write it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub head_mask: bool,
}

/// Rows of a prefill program's step (two GDN chunks of 64; a word's `m_rows` is a byte).
pub const MAX_PREFILL_ROWS: u32 = 128;

impl Target {
    /// A target the kernels can run: 1-1,024 SMs, the kernels' 256 threads a block, M of 1-8 rows (a
    /// prefill program's 1-`MAX_PREFILL_ROWS`), a max context that is a positive multiple of the
    /// attention partition and at most the model's positions.
    pub fn check(&self) -> Result<()> {
        if !(1..=1024).contains(&self.sms) {
            bail!("target: {} SMs (1-1,024)", self.sms);
        }
        if self.threads != 256 {
            bail!("target: {} threads a block (the kernels run 256)", self.threads);
        }
        let max_m = if self.prefill { MAX_PREFILL_ROWS } else { 8 };
        if !(1..=max_m).contains(&self.m_rows) {
            let what = if self.prefill { "a prefill program's" } else { "supported" };
            bail!("target: M = {} rows (1-{max_m} {what})", self.m_rows);
        }
        if self.head_mask && self.prefill {
            bail!("target: a head mask on a prefill program (constrained steps are decode or verification steps)");
        }
        let (ctx, part) = (self.max_context as usize, access::ATTN_PART);
        if ctx == 0 || ctx % part != 0 || ctx > access::MAX_POSITIONS {
            bail!("target: max context {ctx} (a positive multiple of {part}, at most {})", access::MAX_POSITIONS);
        }
        Ok(())
    }
}

/// How the compiler lowers a GDN layer's mixer between its projections and its out_proj. Both forms
/// compute the same bits (the same per-channel conv, per-head recurrence and per-head gated norm, each
/// in the same order); only the words, launches and joins differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum GdnLowering {
    /// One `GdnStep` word (conv + recurrence + gated norm per value head), then out_proj as a plain
    /// `GemvResidual`: two words a layer fewer to join on.
    #[default]
    Fused,
    /// `GdnConv`, `GdnRecur` (recurrence + gated norm per value head), then out_proj as a plain
    /// `GemvResidual`: M-row programs' form (the conv's ring window kept per channel across the rows).
    Split,
}

impl GdnLowering {
    fn is_fused(&self) -> bool {
        *self == GdnLowering::Fused
    }
}

impl std::str::FromStr for GdnLowering {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "fused" => Ok(GdnLowering::Fused),
            "split" => Ok(GdnLowering::Split),
            _ => Err(format!("GDN lowering '{s}': expected fused or split")),
        }
    }
}

/// GEMV output rows per unit unless a target says otherwise.
pub const DEFAULT_GEMV_UNIT_ROWS: u32 = 32;
fn default_gemv_unit_rows() -> u32 {
    DEFAULT_GEMV_UNIT_ROWS
}
fn is_default_gemv_unit_rows(r: &u32) -> bool {
    *r == DEFAULT_GEMV_UNIT_ROWS
}

/// How the compiler shapes GEMV units. Bits never depend on it (a row is one warp's fixed-order dot
/// product over k-groups in order, whether the groups' partials meet in registers or through a split-K
/// reduce); only the time does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum UnitPolicy {
    /// Split-K parts that minimise each launch's estimated makespan: blocks run units strided, so a
    /// launch lasts ceil(units / resident blocks) rounds of a unit (see `compiler::split_parts`).
    /// Measured 0.98x the fixed shapes' ms/token on the graph, 0.97x on the megakernel (27B,
    /// results/unitsync_72e2775).
    #[default]
    Balanced,
    /// The first shapes: split-K only below 4 row slices per SM (of the target's unit rows), into at most
    /// ceil(4 x SMs / row slices) parts.
    Fixed,
}

impl std::str::FromStr for UnitPolicy {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "balanced" => Ok(UnitPolicy::Balanced),
            "fixed" => Ok(UnitPolicy::Fixed),
            _ => Err(format!("unit policy '{s}': expected balanced or fixed")),
        }
    }
}
