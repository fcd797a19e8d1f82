//! The head's mask on the GPU paths (issue 30): the masks written into the program's `head_mask`
//! buffer, and the graph path's constrained step with the mask computed while the step's body runs
//! (the step as two graphs, body and head).
//!
//! Owns: `set_head_masks`, `step_overlapped`. Refuses: programs without a head mask (`Program::head_mask`).

use super::{cu, GpuExec, CTRL_LEN, CTRL_TOKEN};
use crate::error::Result;
use crate::isa::Opcode;

impl GpuExec {
    /// The head's masks for the next steps (issue 30; `Program::head_mask` says what a mask is and
    /// refuses a bad one, or a program compiled without a head mask): one per row, or none (empty:
    /// every row unmasked). They hold until set again; `reset` clears them.
    pub fn set_head_masks(&mut self, masks: &[Option<Vec<u32>>]) -> Result<()> {
        let (at, v) = self.prog.head_mask(masks)?;
        self.write(at, &v)
    }

    /// One constrained decode step on the graph path (issue 30) with the head's mask computed while the
    /// GPU runs the step: the body's graph is launched, then `masks` runs on the host (the matcher's mask,
    /// overlapped with the body), its masks are copied in stream order from pinned memory (an async
    /// copy: the host does not wait for the body), then the head's graph. The same bits as
    /// `set_head_masks` then `step`. One-row programs with a head mask only.
    pub fn step_overlapped(
        &mut self,
        token: u32,
        masks: &mut dyn FnMut() -> Result<Vec<Option<Vec<u32>>>>,
    ) -> Result<u32> {
        self.check(token)?;
        let lm =
            self.prog.words.iter().position(|w| w.opcode == Opcode::LmHead && w.op(crate::isa::slot::IN2).is_some());
        let Some(lm) = lm else {
            crate::bail!("gpu: an overlapped step needs a program with a head mask (Target::head_mask)");
        };
        let r = self.step_overlapped_unchecked(token, lm, masks);
        let t = self.advance(r, 1)?;
        self.stopped = Some(t) == self.stop_token;
        Ok(t)
    }

    fn step_overlapped_unchecked(
        &mut self,
        token: u32,
        lm: usize,
        masks: &mut dyn FnMut() -> Result<Vec<Option<Vec<u32>>>>,
    ) -> Result<u32> {
        if self.split.is_none() {
            let (body, head): (Vec<_>, Vec<_>) = self.launch_groups().into_iter().partition(|g| g.0 < lm);
            self.split = Some((self.capture_groups(&body)?, self.capture_groups(&head)?));
        }
        self.write_token(token)?;
        if let Some((body, _)) = &self.split {
            cu(body.launch(), "cuGraphLaunch (body)")?;
        }
        let m = masks()?;
        let (at, v) = self.prog.head_mask(&m)?;
        let p = self.layout.places[at];
        let Some(pin) = self.mask_pinned.as_mut() else {
            crate::bail!("gpu: the program's head mask has no pinned copy");
        };
        // (no copy from it is in flight: the last step's token read synchronised the stream)
        let host = cu(pin.as_mut_slice(), "the pinned mask")?;
        if v.len() * 4 > p.bytes || v.len() * 4 > host.len() {
            crate::bail!("gpu: {} mask elements for a buffer of {} bytes", v.len(), p.bytes);
        }
        for (d, x) in host.chunks_exact_mut(4).zip(&v) {
            d.copy_from_slice(&(*x as u32).to_le_bytes());
        }
        let stream = self.gpu.stream.clone();
        let mut dst = self.arena.slice_mut(p.off..p.off + v.len() * 4);
        let src = cu(pin.as_slice(), "the pinned mask")?;
        cu(stream.memcpy_htod(&src[..v.len() * 4], &mut dst), "cuMemcpyHtoDAsync (head mask)")?;
        if let Some((_, head)) = &self.split {
            cu(head.launch(), "cuGraphLaunch (head)")?;
        }
        let ctrl = self.read_u32(self.ctrl, 0, CTRL_LEN)?;
        self.check_sampler()?;
        Ok(ctrl[CTRL_TOKEN])
    }
}
