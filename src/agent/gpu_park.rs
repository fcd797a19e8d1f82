//! A GPU session's moves off the GPU and back (issue 29 item 2 on the GPU): park to pinned host memory
//! and restore (with a prefill program, the anchor too: the prefill program's state at the checkpoint
//! and the tokens fed), and the state's digest for the bit comparisons.
//!
//! Owns: `park`, `restore`, their slots, `state_digest`. Refuses: a slot that holds a state already, a
//! restore from an empty slot.

use std::time::Instant;

use super::gpu::GpuSession;
use crate::bail;
use crate::error::Result;

impl GpuSession {
    /// Parks the session: its state into pinned host memory (one copy), the GPU's programs emptied;
    /// `restore` brings it back. Returns the bytes moved.
    pub fn park(&mut self) -> Result<u64> {
        self.park_as(0)
    }

    /// Restores the parked state (into the one-row program).
    pub fn restore(&mut self) -> Result<()> {
        self.restore_from(0)
    }

    /// `park` into slot `slot` (one per session taking turns on the GPU: `replay_interleaved`).
    pub fn park_as(&mut self, slot: usize) -> Result<u64> {
        if self.slots.len() <= slot {
            self.slots.resize_with(slot + 1, || (None, None));
        }
        if self.slots[slot].1.is_some() {
            bail!("agent: slot {slot} holds a parked state already (restore it first)");
        }
        self.to_one()?;
        if self.slots[slot].0.is_none() {
            self.slots[slot].0 = Some(self.one.park_buffer()?);
        }
        let Some(host) = self.slots[slot].0.as_mut() else {
            bail!("agent: no park buffer");
        };
        let t = Instant::now();
        let (pos, mut bytes) = self.one.park(host)?;
        // the anchor: the prefill program's state at its checkpoint, and the tokens fed
        if self.anchor_slots.len() <= slot {
            self.anchor_slots.resize_with(slot + 1, || (None, None));
        }
        let mut cp = None;
        if let (Some(p), true) = (self.prefill.as_ref(), self.anchored()) {
            if self.anchor_slots[slot].0.is_none() {
                self.anchor_slots[slot].0 = Some(p.park_buffer()?);
            }
            if let Some(h) = self.anchor_slots[slot].0.as_mut() {
                let (at, b) = p.park(h)?;
                (cp, bytes) = (Some(at), bytes + b);
            }
        }
        self.anchor_slots[slot].1 = Some((std::mem::take(&mut self.fed), cp));
        let ms = t.elapsed().as_secs_f64() * 1e3;
        self.reset()?;
        self.slots[slot].1 = Some((pos, self.moves.parked.len()));
        self.moves.parked.push((pos, ms, 0.0));
        self.moves.park_bytes += bytes;
        Ok(bytes)
    }

    /// `restore` from slot `slot`.
    pub fn restore_from(&mut self, slot: usize) -> Result<()> {
        let Some((Some(host), pos)) = self.slots.get_mut(slot) else {
            bail!("agent: slot {slot} has no parked state");
        };
        let (Some((pos, entry)), Some((anchor, Some((fed, cp))))) =
            (pos.take(), self.anchor_slots.get_mut(slot).map(|(a, f)| (a, f.take())))
        else {
            bail!("agent: slot {slot} has no parked state");
        };
        let t = Instant::now();
        self.one.restore(host, pos, self.restore_skips)?;
        (self.in_one, self.in_prefill) = (true, false);
        self.fed = fed;
        match (self.prefill.as_mut(), anchor.as_ref(), cp) {
            // the prefill program back at the checkpoint (its state there: the anchor)
            (Some(p), Some(h), Some(cp)) => p.restore(h, cp, self.restore_skips)?,
            // (parked without an anchor: the prefill program from the empty state, position 0)
            (Some(p), _, _) => p.reset()?,
            (None, _, _) => {}
        }
        if let Some(e) = self.moves.parked.get_mut(entry) {
            e.2 = t.elapsed().as_secs_f64() * 1e3;
        }
        Ok(())
    }

    /// The session's state bits as a digest (FNV-1a, hex): every state buffer, a KV cache below the
    /// position, as the one-row program holds them after the hand-off to it (the bit comparisons of
    /// resident, stateless, parked and unanchored sessions; one device-to-host copy of the state).
    pub fn state_digest(&mut self) -> Result<String> {
        self.to_one()?;
        if self.digest_buf.is_none() {
            self.digest_buf = Some(self.one.park_buffer()?);
        }
        let Some(h) = self.digest_buf.as_mut() else { bail!("agent: no digest buffer") };
        let (_, n) = self.one.park(h)?;
        let bytes = crate::exec::gpu::cu(h.as_slice(), "the digest buffer")?;
        Ok(crate::isa::fnv_hex(&[&bytes[..n as usize]]))
    }
}
