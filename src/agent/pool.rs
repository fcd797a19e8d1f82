//! The session pool (issue 29 items 1, 2 and 4) on the CPU reference: every session's KV caches in
//! pages of `PAGE_TOKENS` positions taken from one free list (a page table per session), sized once
//! (`Pool::new`: nothing is allocated after it), forks that share their pages copy-on-write and copy
//! the GDN state, and park / restore of a session's KV to host memory, its pages given back meanwhile.
//!
//! A session runs on the pool's one working `Session` (`Pool::run`): its KV pages are gathered into
//! the working caches, the closure appends or decodes, and the positions the run wrote (from the
//! session's 64-token checkpoint on: an anchored append re-runs from there) are scattered back into
//! its pages, a shared page copied first. The GPU's pool keeps the same tables and lets attention read
//! the pages in place; the bits of a session must not depend on which pages it got, on other sessions
//! run between its steps, on a fork taken from it, or on a park and restore: tests/pool.rs checks all
//! four bit for bit, with a negative control (forks without copy-on-write).
//!
//! Owns: the page allocator (free list, reference counts), the page tables, the copies. Refuses: a run
//! past its reservation or the context, more sessions than slots, more pages than the pool has (a short
//! error, the pool unchanged), an unknown or parked session where a resident one is needed.

use crate::bail;
use crate::error::Result;
use crate::model::config::ModelConfig;
use crate::model::forward::Weights;
use crate::model::prefill::{Session, SessionParts};

/// Positions a KV page holds (every attention layer's keys and values for them).
pub const PAGE_TOKENS: usize = 256;

/// A session of the pool (its slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionId(pub usize);

struct Slot {
    parts: SessionParts,
    /// pages of positions [PAGE_TOKENS i, PAGE_TOKENS (i + 1)); empty while parked
    table: Vec<u32>,
    /// while parked: the KV of positions [0, len) on the host ([position][layer][k, v][kv])
    parked: Option<Vec<f32>>,
}

/// Counters of what the pool did (copies are what a GPU pool would time).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    pub cow_copies: usize,
    pub forks: usize,
    pub parks: usize,
    pub restores: usize,
}

pub struct Pool {
    layers: usize,
    kv: usize,
    /// [page][layer][k, v][PAGE_TOKENS][kv]
    data: Vec<f32>,
    refs: Vec<u32>,
    free: Vec<u32>,
    slots: Vec<Option<Slot>>,
    resident_max: usize,
    work: Session,
    /// a new session's parts (zero states, no tokens)
    empty: SessionParts,
    max_context: usize,
    cow: bool,
    pub stats: PoolStats,
}

impl Pool {
    /// A pool of `pages` KV pages and at most `sessions` resident sessions of up to `max_context`
    /// positions each, all allocated here.
    pub fn new(cfg: &ModelConfig, pages: usize, sessions: usize, max_context: usize) -> Result<Pool> {
        if pages == 0 || sessions == 0 || max_context == 0 {
            bail!(
                "session pool: {pages} pages, {sessions} sessions, max context {max_context} (each must be positive)"
            );
        }
        let (layers, kv) = (cfg.n_attn_layers(), cfg.attn_kv_dim());
        let mut work = Session::new(cfg, max_context);
        let empty = work.take_parts();
        work.put_parts(empty.clone());
        Ok(Pool {
            layers,
            kv,
            data: vec![0.0; pages * layers * 2 * PAGE_TOKENS * kv],
            refs: vec![0; pages],
            free: (0..pages as u32).rev().collect(),
            slots: (0..sessions).map(|_| None).collect(),
            resident_max: sessions,
            work,
            empty,
            max_context,
            cow: true,
            stats: PoolStats::default(),
        })
    }

    /// NEGATIVE CONTROL for the fork checks: forks share pages and writes go into them without a copy.
    #[doc(hidden)]
    pub fn without_copy_on_write(mut self) -> Pool {
        self.cow = false;
        self
    }

    pub fn free_pages(&self) -> usize {
        self.free.len()
    }

    pub fn total_pages(&self) -> usize {
        self.refs.len()
    }

    /// A new empty session.
    pub fn open(&mut self) -> Result<SessionId> {
        if self.resident() >= self.resident_max {
            bail!("session pool: all {} resident session slots in use", self.resident_max);
        }
        let i = match self.slots.iter().position(|s| s.is_none()) {
            Some(i) => i,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        self.slots[i] = Some(Slot { parts: self.empty.clone(), table: Vec::new(), parked: None });
        Ok(SessionId(i))
    }

    /// Closes `id`, its pages back to the free list (shared ones when their last holder goes).
    pub fn close(&mut self, id: SessionId) -> Result<()> {
        let slot = self.slot(id)?;
        let table = std::mem::take(&mut slot.table);
        self.slots[id.0] = None;
        for p in table {
            self.release(p);
        }
        Ok(())
    }

    /// The tokens `id` holds.
    pub fn tokens(&mut self, id: SessionId) -> Result<&[u32]> {
        Ok(&self.slot(id)?.parts.tokens)
    }

    /// Runs `f` on session `id`, which may write positions up to `upto` (its tokens after the run):
    /// the pages for them are taken first (the pool unchanged if there are too few), shared pages it
    /// will write copied first; the session as it was if `f` fails or passes `upto`.
    pub fn run<T>(
        &mut self,
        id: SessionId,
        w: &Weights,
        upto: usize,
        f: impl FnOnce(&mut Session, &Weights) -> Result<T>,
    ) -> Result<T> {
        let (len, from) = {
            let s = self.resident_slot(id)?;
            (s.parts.tokens.len(), s.parts.anchor_pos.min(s.parts.tokens.len()))
        };
        if upto > self.max_context {
            bail!("session pool: a run up to {upto} positions passes the max context {}", self.max_context);
        }
        let upto = upto.max(len);
        self.reserve(id, from, upto)?;
        // gather
        let table = self.slot(id)?.table.clone();
        let (layers, kv) = (self.layers, self.kv);
        for p in 0..len {
            let (pg, t) = (table[p / PAGE_TOKENS] as usize, p % PAGE_TOKENS);
            for l in 0..layers {
                for (kind, cache) in
                    [&mut self.work.state.k_cache[l], &mut self.work.state.v_cache[l]].into_iter().enumerate()
                {
                    let at = page_at(layers, kv, pg, l, kind, t);
                    cache[p * kv..(p + 1) * kv].copy_from_slice(&self.data[at..at + kv]);
                }
            }
        }
        let parts = self.slot(id)?.parts.clone();
        self.work.put_parts(parts);
        let out = f(&mut self.work, w);
        let after = self.work.take_parts();
        let end = after.tokens.len();
        let out = match out {
            Ok(_) if end > upto => Err(crate::error::Error::new(format!(
                "session pool: the run reached {end} positions, past its reservation of {upto}"
            ))),
            o => o,
        };
        if out.is_err() {
            self.trim(id);
            return out;
        }
        // scatter the positions the run wrote: from the checkpoint it resumed at on
        let table = self.slot(id)?.table.clone();
        for p in from..end {
            let (pg, t) = (table[p / PAGE_TOKENS] as usize, p % PAGE_TOKENS);
            for l in 0..layers {
                for (kind, cache) in [&self.work.state.k_cache[l], &self.work.state.v_cache[l]].into_iter().enumerate()
                {
                    let at = page_at(layers, kv, pg, l, kind, t);
                    self.data[at..at + kv].copy_from_slice(&cache[p * kv..(p + 1) * kv]);
                }
            }
        }
        self.slot(id)?.parts = after;
        self.trim(id);
        out
    }

    /// A fork of `id` (a branch of an agent tree): its pages shared (copy-on-write), its GDN state,
    /// checkpoint and tokens copied.
    pub fn fork(&mut self, id: SessionId) -> Result<SessionId> {
        let (parts, table) = {
            let s = self.resident_slot(id)?;
            (s.parts.clone(), s.table.clone())
        };
        let child = self.open()?;
        for &p in &table {
            self.refs[p as usize] += 1;
        }
        let s = self.slot(child)?;
        s.parts = parts;
        s.table = table;
        self.stats.forks += 1;
        Ok(child)
    }

    /// Parks `id`: its KV copied to the host, its pages given back; its GDN state kept.
    pub fn park(&mut self, id: SessionId) -> Result<()> {
        let len = self.resident_slot(id)?.parts.tokens.len();
        let table = std::mem::take(&mut self.slot(id)?.table);
        let mut host = Vec::with_capacity(len * self.layers * 2 * self.kv);
        for p in 0..len {
            let (pg, t) = (table[p / PAGE_TOKENS] as usize, p % PAGE_TOKENS);
            for l in 0..self.layers {
                for kind in 0..2 {
                    let at = self.page_at(pg, l, kind, t);
                    host.extend_from_slice(&self.data[at..at + self.kv]);
                }
            }
        }
        for p in table {
            self.release(p);
        }
        self.slot(id)?.parked = Some(host);
        self.stats.parks += 1;
        Ok(())
    }

    /// Restores a parked `id` into fresh pages (it stays parked if there are too few).
    pub fn restore(&mut self, id: SessionId) -> Result<()> {
        let slot = self.slot(id)?;
        if slot.parked.is_none() {
            bail!("session pool: session {} is not parked", id.0);
        }
        let len = slot.parts.tokens.len();
        if self.resident() >= self.resident_max {
            bail!("session pool: all {} resident session slots in use", self.resident_max);
        }
        let need = len.div_ceil(PAGE_TOKENS);
        if need > self.free.len() {
            bail!("session pool: restoring session {} needs {need} pages, {} are free", id.0, self.free.len());
        }
        let table: Vec<u32> = (0..need).map(|_| self.take()).collect::<Result<_>>()?;
        let Some(host) = self.slot(id)?.parked.take() else { bail!("session pool: session {} is not parked", id.0) };
        let mut i = 0;
        for p in 0..len {
            let (pg, t) = (table[p / PAGE_TOKENS] as usize, p % PAGE_TOKENS);
            for l in 0..self.layers {
                for kind in 0..2 {
                    let at = self.page_at(pg, l, kind, t);
                    self.data[at..at + self.kv].copy_from_slice(&host[i..i + self.kv]);
                    i += self.kv;
                }
            }
        }
        self.slot(id)?.table = table;
        self.stats.restores += 1;
        Ok(())
    }

    /// The full state of `id` as one `State` would hold it (KV rows below its length; for the bit
    /// comparisons), from the working session's caches after a gather.
    pub fn snapshot(&mut self, id: SessionId, w: &Weights) -> Result<crate::model::forward::State> {
        let len = self.resident_slot(id)?.parts.tokens.len();
        self.run(id, w, len, |s, _| Ok(s.state.clone()))
    }

    fn page_at(&self, page: usize, layer: usize, kind: usize, t: usize) -> usize {
        page_at(self.layers, self.kv, page, layer, kind, t)
    }

    fn resident(&self) -> usize {
        self.slots.iter().flatten().filter(|s| s.parked.is_none()).count()
    }

    fn slot(&mut self, id: SessionId) -> Result<&mut Slot> {
        match self.slots.get_mut(id.0).and_then(|s| s.as_mut()) {
            Some(s) => Ok(s),
            None => bail!("session pool: no session {}", id.0),
        }
    }

    fn resident_slot(&mut self, id: SessionId) -> Result<&mut Slot> {
        let s = self.slot(id)?;
        if s.parked.is_some() {
            bail!("session pool: session {} is parked (restore it first)", id.0);
        }
        Ok(s)
    }

    /// A free page (the callers count the free pages first: an empty list is a bug, reported).
    fn take(&mut self) -> Result<u32> {
        let Some(p) = self.free.pop() else { bail!("session pool: internal: no free page where one was counted") };
        self.refs[p as usize] = 1;
        Ok(p)
    }

    fn release(&mut self, p: u32) {
        let r = &mut self.refs[p as usize];
        *r -= 1;
        if *r == 0 {
            self.free.push(p);
        }
    }

    /// Pages for positions [0, upto) in `id`'s table, and its pages from position `from` on its own
    /// (copied where shared): all or nothing.
    fn reserve(&mut self, id: SessionId, from: usize, upto: usize) -> Result<()> {
        let table = self.slot(id)?.table.clone();
        let need = upto.div_ceil(PAGE_TOKENS);
        let shared: Vec<usize> = if self.cow {
            (from / PAGE_TOKENS..table.len().min(need)).filter(|&i| self.refs[table[i] as usize] > 1).collect()
        } else {
            Vec::new()
        };
        let want = need.saturating_sub(table.len()) + shared.len();
        if want > self.free.len() {
            bail!("session pool: session {} needs {want} more pages, {} are free", id.0, self.free.len());
        }
        let mut table = table;
        for i in shared {
            let (old, new) = (table[i], self.take()?);
            let n = self.layers * 2 * PAGE_TOKENS * self.kv;
            let (o, d) = (self.page_at(old as usize, 0, 0, 0), self.page_at(new as usize, 0, 0, 0));
            self.data.copy_within(o..o + n, d);
            self.release(old);
            table[i] = new;
            self.stats.cow_copies += 1;
        }
        while table.len() < need {
            let p = self.take()?;
            table.push(p);
        }
        self.slot(id)?.table = table;
        Ok(())
    }

    /// Gives back the pages past `id`'s length (a reservation the run did not use).
    fn trim(&mut self, id: SessionId) {
        let Some(s) = self.slots.get_mut(id.0).and_then(|s| s.as_mut()) else { return };
        let keep = s.parts.tokens.len().div_ceil(PAGE_TOKENS);
        let extra: Vec<u32> = s.table.drain(keep.min(s.table.len())..).collect();
        for p in extra {
            self.release(p);
        }
    }
}

/// The offset of (page, layer, keys 0 / values 1, position in the page) in the pool's data.
fn page_at(layers: usize, kv: usize, page: usize, layer: usize, kind: usize, t: usize) -> usize {
    (((page * layers + layer) * 2 + kind) * PAGE_TOKENS + t) * kv
}

/// Bytes of one KV page on the GPU (bf16 keys and values of every attention layer).
pub fn page_bytes(cfg: &ModelConfig) -> u64 {
    (cfg.n_attn_layers() * 2 * PAGE_TOKENS * cfg.attn_kv_dim() * 2) as u64
}

/// Bytes of one session's GDN state slot on the GPU: the fp32 recurrent states and bf16 conv rings of
/// every GDN layer, twice (the state and its 64-token checkpoint).
pub fn state_bytes(cfg: &ModelConfig) -> u64 {
    let rec = cfg.gdn_v_heads * cfg.gdn_k_dim * cfg.gdn_v_dim * 4;
    let conv = cfg.gdn_conv_dim() * 4 * 2;
    (2 * cfg.n_gdn_layers() * (rec + conv)) as u64
}

/// How many sessions of `tokens` positions fit in `free` bytes (each its pages and a state slot).
pub fn sessions_that_fit(cfg: &ModelConfig, free: u64, tokens: usize) -> u64 {
    free / (tokens.div_ceil(PAGE_TOKENS) as u64 * page_bytes(cfg) + state_bytes(cfg))
}
