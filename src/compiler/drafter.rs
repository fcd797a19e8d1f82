//! The MTP drafter's program (issue 27): the checkpoint's `mtp.*` head lowered into one draft step with
//! the decode step's Builder (its attention layer, FFN and head).

use super::{check, Builder, EMBED_UNIT};
use crate::bail;
use crate::error::Result;
use crate::isa::access::CTRL_LEN;
use crate::isa::{slot, BufKind, Opcode, Program, Target};
use crate::model::config::ModelConfig;

/// What the MTP drafter's fc takes as its hidden half (issue 27): the target's residual stream through
/// the target's final norm (a round's first draft, and the rows that rebuild the drafter's KV at the
/// kept positions), or the drafter's own through `mtp.norm` (a round's later drafts). Both programs
/// hold the same state buffers (`k_cache.0`, `v_cache.0`): an executor gives them one storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DraftInput {
    Target,
    Own,
}

/// Lowers the checkpoint's MTP head (`mtp.*`, the shared embedding and lm_head) into the program of one
/// draft step (model::mtp::draft_step's arithmetic): ctrl's token is t(p + 1) and its position p, `h_in`
/// the residual stream the fc's hidden half is normed from (DraftInput), `h` the drafter's own; the
/// embedding, MtpFc, one full-attention decoder layer with its own KV cache (the target's attention
/// and FFN lowering), `mtp.norm` folded into the lm_head, the argmax (the drafted token) and the
/// hand-off (position p + 1, the drafted token next: a round's drafts chain).
pub fn compile_drafter(cfg: &ModelConfig, name: &str, t: &Target, input: DraftInput) -> Result<Program> {
    drafter(cfg, name, t, input, None)
}

/// `compile_drafter` with the pruned head (issue 27, item 2): the lm_head scores only the rows of a list
/// the host writes before a step (`head_rows`, a Control row [n, ids ..], ids ascending: the working
/// vocabulary, `model::mtp::WorkingVocab`), at most `capacity` of them (rounded up to the head's unit
/// rows of 64, clamped to the vocabulary); its logits are by list position.
pub fn compile_drafter_pruned(
    cfg: &ModelConfig,
    name: &str,
    t: &Target,
    input: DraftInput,
    capacity: usize,
) -> Result<Program> {
    let cap = (capacity.div_ceil(super::LM_UNIT_ROWS as usize) * super::LM_UNIT_ROWS as usize).min(cfg.vocab);
    if capacity == 0 || capacity > cfg.vocab {
        bail!("compile the drafter: a pruned head of {capacity} rows (1 ..= the vocabulary's {})", cfg.vocab);
    }
    drafter(cfg, name, t, input, Some(cap))
}

fn drafter(cfg: &ModelConfig, name: &str, t: &Target, input: DraftInput, pruned: Option<usize>) -> Result<Program> {
    check(cfg, t, "compile the drafter")?;
    if cfg.mtp_layers == 0 {
        bail!("compile the drafter: the model has no MTP head (mtp_num_hidden_layers = 0)");
    }
    if t.prefill {
        bail!("compile the drafter: a draft step is not a prefill");
    }
    if t.head_mask {
        bail!("compile the drafter: a head mask is the target's (issue 30), not the drafter's");
    }
    if t.m_rows != 1 {
        bail!("compile the drafter: a draft step is one row (the target's M = {})", t.m_rows);
    }
    let mut b = Builder::new(cfg, t);
    let (hd, p) = (cfg.hidden, cfg.prefix.clone());
    let ctrl = b.buf("ctrl", BufKind::Control, 1, CTRL_LEN as u64, 4);
    // (State: the host hands it in before the step, no word of the step writes it)
    let h_in = b.buf("h_in", BufKind::State, 1, hd as u64, 2);
    let e = b.act("e", hd);
    let h = b.act("h", hd);
    let ab = b.attn_bufs(cfg, ctrl, h);
    let act = b.act("act", cfg.intermediate);
    let rows = pruned.unwrap_or(cfg.vocab);
    let list = pruned.map(|cap| b.buf("head_rows", BufKind::Control, 1, cap as u64 + 1, 4));
    let head = b.head_bufs_rows(rows);
    let mut em = b.word(Opcode::Embed, hd as u32, EMBED_UNIT);
    em.ops[slot::W0] = b.weight(&format!("{p}embed_tokens.weight"))?;
    em.ops[slot::IN0] = ctrl;
    em.ops[slot::OUT0] = e;
    b.stage(vec![em]);
    let (mut fc, _) = b.gemv(Opcode::MtpFc, hd, 2 * hd, h, 0, hd, "mtp.fc.weight");
    fc.ops[slot::W0] = b.weight("mtp.fc.weight")?;
    fc.ops[slot::W1] = b.weight("mtp.pre_fc_norm_embedding.weight")?;
    fc.ops[slot::W2] = b.weight("mtp.pre_fc_norm_hidden.weight")?;
    fc.ops[slot::W3] = b.weight(
        match input {
            DraftInput::Target => format!("{p}norm.weight"),
            DraftInput::Own => "mtp.norm.weight".to_string(),
        }
        .as_str(),
    )?;
    fc.ops[slot::IN0] = e;
    fc.ops[slot::IN1] = h_in;
    b.stage(vec![fc]);
    let lp = "mtp.layers.0.";
    let in_norm = b.weight(&format!("{lp}input_layernorm.weight"))?;
    b.attention_layer(cfg, lp, 0, &ab, in_norm)?;
    b.ffn(cfg, lp, h, act)?;
    b.head_rows(rows as u32, list, ctrl, h, "mtp.norm.weight", head)?;
    let shape = format!(
        "MTP drafter ({input:?} input): hidden {}, one attention layer, FFN {}, vocab {}{}",
        hd,
        cfg.intermediate,
        cfg.vocab,
        pruned.map_or(String::new(), |c| format!(", pruned head of {c} rows"))
    );
    Ok(b.program(name, shape))
}
