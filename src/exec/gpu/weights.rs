//! The weights on the device, apart from a program's arena and shareable between the programs of one
//! model (issue 29: a session holds its decode, verification and prefill programs on one copy of the
//! 27 GB of weights, where one copy each left room for two programs on an 80 GB card). Each fp8 matrix
//! in the GEMV's chunk layout (layout.rs) with its block scales as f32, bf16 matrices as they are, small
//! vectors as f32. Weights are read-only after the upload (synchronised before any program runs), so
//! programs on other streams read one copy.
//!
//! Owns: the weights' allocations, their places, which of a program's weights come from a shared copy.
//! Refuses: a shared weight whose bytes or storage differ from the program's buffer (uploaded instead),
//! a weight the host does not have.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};

use super::arena::Place;
use super::cu;
use crate::error::Result;
use crate::isa::weights::{HostWeight, Weights};
use crate::isa::{BufKind, Program};

const ALIGN: usize = 256;

/// A program's weights on the device: the allocations they live in (its own upload, and the shared
/// copies it took) and each weight's place by name (`addr` and `scale_addr` absolute).
pub struct DeviceWeights {
    _mems: Vec<Arc<CudaSlice<u8>>>,
    places: HashMap<String, Place>,
    /// Bytes this program uploaded itself (the rest it shares).
    pub own_bytes: usize,
}

fn lef32(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

impl DeviceWeights {
    /// `prog`'s weights: every one `shared` holds with the same bytes and storage taken from it, the
    /// rest uploaded now into one allocation of their own (synchronised before it returns).
    pub fn build(
        stream: &Arc<CudaStream>,
        prog: &Program,
        w: &dyn Weights,
        shared: Option<&DeviceWeights>,
    ) -> Result<DeviceWeights> {
        let mut places = HashMap::new();
        let mut mems = shared.map(|s| s._mems.clone()).unwrap_or_default();
        let mut at = 0usize;
        let mut take = |n: usize| {
            let o = at;
            at = (at + n).div_ceil(ALIGN) * ALIGN;
            o
        };
        let mut upload = Vec::new(); // (name, place, host weight, rows, cols)
        let mut queued = std::collections::HashSet::new(); // (a name twice in a program: one upload)
        for b in prog.buffers.iter().filter(|b| b.kind == BufKind::Weight) {
            if places.contains_key(&b.name) || !queued.insert(b.name.clone()) {
                continue;
            }
            let hw = w.weight(&b.name)?;
            let p = match &hw {
                HostWeight::Fp8 { bytes, scales } => {
                    // (offsets in this executor's own allocation: assigned below, unless shared)
                    let (off, scale_off) = (0, Some(scales.len() * 4));
                    // scales that are bf16 values below 2^8 (every real release, and mk synth): code 1;
                    // others 3 (recorded; the kernels read both alike)
                    let bf16_ok = scales.iter().all(|x| crate::model::numerics::bf(*x) == *x && x.abs() < 256.0);
                    Place {
                        off,
                        bytes: bytes.len(),
                        scale_off,
                        elem_bytes: if bf16_ok { 1 } else { 3 },
                        addr: 0,
                        scale_addr: 0,
                    }
                }
                HostWeight::Bf16(bytes) => {
                    Place { off: 0, bytes: bytes.len(), scale_off: None, elem_bytes: 2, addr: 0, scale_addr: 0 }
                }
                HostWeight::F32(v) => {
                    Place { off: 0, bytes: v.len() * 4, scale_off: None, elem_bytes: 4, addr: 0, scale_addr: 0 }
                }
            };
            let want =
                b.elems() as usize * if p.elem_bytes == 1 || p.elem_bytes == 3 { 1 } else { p.elem_bytes as usize };
            if p.bytes != want {
                crate::bail!("gpu: weight {} has {} bytes, the program's buffer needs {want}", b.name, p.bytes);
            }
            match shared.and_then(|s| s.places.get(&b.name)) {
                Some(sp) if (sp.bytes, sp.elem_bytes) == (p.bytes, p.elem_bytes) => {
                    places.insert(b.name.clone(), *sp);
                }
                _ => {
                    // its own bytes: the weight, then its scales (scale_off held their size until here)
                    let mut p = p;
                    p.off = take(p.bytes);
                    p.scale_off = p.scale_off.map(&mut take);
                    upload.push((b.name.clone(), p, hw, b.rows as usize, b.cols as usize))
                }
            }
        }
        let own_bytes = at;
        if own_bytes > 0 {
            let mut mem = cu(stream.alloc_zeros::<u8>(own_bytes), "cuMemAlloc (weights)")?;
            let base = mem.device_ptr(stream).0;
            for (name, mut p, hw, rows, cols) in upload {
                let mut put = |off: usize, bytes: &[u8]| -> Result<()> {
                    let mut v = mem.slice_mut(off..off + bytes.len());
                    cu(stream.memcpy_htod(bytes, &mut v), "cuMemcpyHtoD (weights)")
                };
                match &hw {
                    // the GEMV's chunk layout (layout.rs), one weight at a time on the host
                    HostWeight::Fp8 { bytes, scales } => {
                        put(p.off, &super::layout::to_chunks(bytes, rows, cols)?)?;
                        put(p.scale_off.unwrap_or(p.off), &lef32(scales))?;
                    }
                    HostWeight::Bf16(bytes) => put(p.off, bytes)?,
                    HostWeight::F32(v) => put(p.off, &lef32(v))?,
                }
                p.addr = base + p.off as u64;
                p.scale_addr = p.scale_off.map_or(0, |o| base + o as u64);
                places.insert(name, p);
            }
            cu(stream.synchronize(), "cuStreamSynchronize (weights)")?;
            mems.push(Arc::new(mem));
        }
        Ok(DeviceWeights { _mems: mems, places, own_bytes })
    }

    /// Weight `name`'s place (absolute addresses).
    pub fn place(&self, name: &str) -> Option<Place> {
        self.places.get(name).copied()
    }

    /// These weights as a shared copy for another program (the allocations stay alive while any holds them).
    pub fn share(&self) -> DeviceWeights {
        DeviceWeights { _mems: self._mems.clone(), places: self.places.clone(), own_bytes: 0 }
    }
}

impl super::GpuExec {
    /// Bytes of weights this executor uploaded itself (0 when it shares another's).
    pub fn own_weight_bytes(&self) -> usize {
        self.weights.own_bytes
    }
}
