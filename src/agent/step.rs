//! The agent-step API (issue 29 item 3) on the CPU reference: append token ids to a pooled session,
//! prefill them (append-anchored), decode greedily until a stop token or a count, and return the tokens
//! with the step's clocks (submit, first token, last token). The GPU paths take the same call once the
//! GPU's session pool exists; sampling and speculation settings per step come with them (greedy here).
//!
//! Owns: the step's loop and clocks. Refuses (from the pool): a step whose reservation does not fit, a
//! parked or unknown session, the context.

use std::time::Instant;

use super::pool::{Pool, SessionId};
use crate::bail;
use crate::error::Result;
use crate::model::forward::Weights;
use crate::model::ops::argmax;

/// What one step does after its append.
#[derive(Debug, Clone, Default)]
pub struct StepSpec {
    /// At most this many tokens (at least 1).
    pub max_tokens: usize,
    /// Stop after emitting any of these (it is returned and fed to the session).
    pub stop: Vec<u32>,
}

/// A step's tokens and clocks: ms from the submit to the first token and to the last.
#[derive(Debug, Clone)]
pub struct StepOut {
    pub tokens: Vec<u32>,
    /// the emitted stop token, if the step ended on one
    pub stopped: Option<u32>,
    pub first_ms: f64,
    pub last_ms: f64,
}

/// Appends `append` to session `id`, prefills it, decodes per `spec`. Every emitted token goes into the
/// session (the next append follows the last one).
pub fn agent_step(pool: &mut Pool, id: SessionId, w: &Weights, append: &[u32], spec: &StepSpec) -> Result<StepOut> {
    if append.is_empty() {
        bail!("agent step: nothing to append (a step starts with the tokens it adds)");
    }
    if spec.max_tokens == 0 {
        bail!("agent step: max_tokens 0 (a step emits at least one token)");
    }
    let submit = Instant::now();
    let len = pool.tokens(id)?.len();
    pool.run(id, w, len + append.len() + spec.max_tokens, |s, w| {
        let mut logits = s.append(w, append)?;
        let (mut tokens, mut stopped, mut first_ms) = (Vec::new(), None, 0.0);
        while tokens.len() < spec.max_tokens {
            let t = argmax(&logits) as u32;
            if tokens.is_empty() {
                first_ms = submit.elapsed().as_secs_f64() * 1e3;
            }
            tokens.push(t);
            logits = s.step(w, t)?;
            if spec.stop.contains(&t) {
                stopped = Some(t);
                break;
            }
        }
        Ok(StepOut { tokens, stopped, first_ms, last_ms: submit.elapsed().as_secs_f64() * 1e3 })
    })
}

/// One step of a script (`mk agent DIR FILE`): the tokens to append (ids, or text through the real
/// tokenizer with its special tokens), at most `max_tokens`, optional stop ids.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptStep {
    #[serde(default)]
    pub ids: Vec<u32>,
    #[serde(default)]
    pub text: Option<String>,
    pub max_tokens: usize,
    #[serde(default)]
    pub stop: Vec<u32>,
}

/// Parses a script: a JSON array of steps, each with ids or text (not both, not neither).
pub fn parse_script(text: &str) -> Result<Vec<ScriptStep>> {
    let steps: Vec<ScriptStep> =
        serde_json::from_str(text).map_err(|e| crate::error::Error::new(format!("agent script: {e}")))?;
    for (i, s) in steps.iter().enumerate() {
        if s.ids.is_empty() == s.text.is_none() {
            bail!("agent script: step {i} needs ids or text (exactly one of them)");
        }
    }
    if steps.is_empty() {
        bail!("agent script: no steps");
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_needs_steps_each_with_ids_or_text() {
        let ok = parse_script(r#"[{"text": "hi", "max_tokens": 2}, {"ids": [1, 2], "max_tokens": 1, "stop": [7]}]"#)
            .unwrap();
        assert_eq!((ok.len(), ok[1].stop.as_slice()), (2, &[7u32][..]));
        for (bad, says) in [
            ("[]", "no steps"),
            (r#"[{"max_tokens": 2}]"#, "step 0 needs ids or text"),
            (r#"[{"ids": [1], "text": "a", "max_tokens": 2}]"#, "exactly one"),
            (r#"[{"ids": [1], "max_tokens": 2, "temperature": 1}]"#, "unknown field"),
            ("{", "agent script"),
        ] {
            let e = parse_script(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
