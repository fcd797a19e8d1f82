//! What Rust and CUDA share, written once here and generated into the header every NVRTC unit starts
//! with (`megakernel/abi.cuh` is the committed copy; a test keeps it fresh): the ISA's opcodes, slots
//! and word (`isa::cuda_header`), the constants both sides size things by, and the two structs the host
//! passes to the kernels by value.
//!
//! Owns: the constants and the context structs' layouts. Refuses: anything the kernels alone use.

use cudarc::driver::DeviceRepr;

use crate::isa::access::{ATTN_PART, CTRL_COMMIT, CTRL_LEN, GDN_HIST_HEAD, KGROUP};

/// Threads of every block (the sampler's k_sample has its own 1,024).
pub const THREADS: u32 = 256;
/// Query heads per KV head the attention ops handle (their accumulators; the host refuses more).
pub const MAX_GROUP: u32 = 8;
/// The GPU sampler's largest top_k (full-vocabulary sampling is CPU-only).
pub const SAMPLE_MAX: usize = 2048;
/// The sampler's room for kept ids, ties at the k-th value included (a power of two: the bitonic sort's
/// padding; 2 x 16 KB of its shared memory).
pub const SAMPLE_CAP: usize = 4096;
/// k_sample_collect's threads per block, 8 ids each.
pub const COLLECT_THREADS: u32 = 256;
/// The sampler's block in the arena, in u32 words: SampleParams (6 words), the sticky status, the last
/// step's kept count, then what the fused top-k keeps between the lm_head and the sampler (zero between
/// steps: the count, the histograms by high byte and by key, the kept ids).
pub const SB_STATUS: usize = 6;
pub const SB_KEPT: usize = 7;
pub const SB_COUNT: usize = 8;
pub const SB_HI: usize = 256;
pub const SB_FULL: usize = 512;
pub const SB_CANDS: usize = SB_FULL + 65536;
pub const SB_WORDS: usize = SB_CANDS + SAMPLE_CAP;
/// Megakernel blocks per SM (its launch bounds; the host launches as many): 2, so that the fp8 GEMV
/// has the discrete kernels' 128 registers (3 blocks of 80 registers measured 13.54 ms/token with the
/// earlier GEMV; 2 of 128 with this one 12.19, results/issue25_c992b85).
pub const MEGA_BLOCKS_PER_SM: u32 = 2;
/// M-row steps (M > 1): the most shared memory a GEMV word's M prepared inputs may take for its unit to
/// run the M rows in one weight pass (launch.rs `mrow_gemv`, gemv.cuh `mrow_gemv`); a word whose inputs
/// do not fit runs its rows one after another. 96 KiB: the 27B's widest normed input (6,144) at M = 8,
/// with the tile sums, inside the 113 KiB a block has at 2 blocks per SM.
pub const MROW_X_BYTES: u32 = 96 * 1024;

/// A `#[repr(C)]` struct with its C declaration beside it (field by field, the C type named), so the
/// layout is written once; both sides assert its size.
macro_rules! c_struct {
    ($(#[$m:meta])* $name:ident, $size:literal { $($(#[$fm:meta])* $f:ident : $rt:ty = $ct:literal),* $(,)? }) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $name { $($(#[$fm])* pub $f: $rt),* }
        const _: () = assert!(std::mem::size_of::<$name>() == $size);
        // SAFETY: plain old data with the C layout declared below.
        unsafe impl DeviceRepr for $name {}
        impl $name {
            pub const C_DECL: &'static str = concat!(
                "struct ", stringify!($name), " {\n", $("  ", $ct, " ", stringify!($f), ";\n",)*
                "};\nstatic_assert(sizeof(", stringify!($name), ") == ", stringify!($size), ", \"", stringify!($name), " as src/exec/gpu/abi.rs lays it out\");\n"
            );
        }
    };
}

c_struct! {
    /// The device context every op reads (by value, a kernel parameter).
    DevCtx, 136 {
        /// Per buffer id, the device pointer (M row views of n_bufs pointers each).
        bufs: u64 = "void* const*",
        /// Per buffer id: fp8 weight_scale_inv as f32 [rows/128][cols/128], else null.
        scales: u64 = "const float* const*",
        rows: u64 = "const unsigned*",
        cols: u64 = "const unsigned*",
        /// Per buffer id, its storage: 1 fp8 + bf16-valued scales, 2 bf16, 3 fp8 + other scales, 4 f32.
        wbytes: u64 = "const unsigned char*",
        /// [max_ctx][2][rotary_dim]: cos then sin, bf16 values (the CPU reference's tables).
        rope: u64 = "const float*",
        /// The device-side stop: [0] stop token + 1 (0: none), [1] stopped (set by EndStep).
        stop: u64 = "unsigned*",
        /// [n_words][2]: a discrete GEMV launch's unit tickets and finished blocks (by its first word).
        tickets: u64 = "unsigned*",
        /// GRAPH_STAMPS: the timeline slots (four u64 per unit), else null.
        stamps: u64 = "unsigned long long*",
        /// [n_words]: each word's first timeline slot.
        unit_base: u64 = "const unsigned*",
        /// The sampler's block (SB_*), or null (the megakernel: it never samples).
        sampler: u64 = "unsigned*",
        rotary_dim: u32 = "unsigned",
        head_dim: u32 = "unsigned",
        gdn_dim: u32 = "unsigned",
        n_heads: u32 = "unsigned",
        n_kv_heads: u32 = "unsigned",
        gdn_k_heads: u32 = "unsigned",
        gdn_v_heads: u32 = "unsigned",
        max_ctx: u32 = "unsigned",
        eps: f32 = "float",
        /// Buffers per row view.
        n_bufs: u32 = "unsigned",
        /// Padding to 136 bytes, read by nothing: at 128 ptxas spills 8-32 bytes a thread in three GEMV
        /// kernels (measured with NVRTC 13.5, 2026-12-02; docs/notebook/gemv.md). A layout choice for
        /// the register allocator.
        reserved: u64 = "unsigned long long",
    }
}

c_struct! {
    /// The megakernel's control (a kernel parameter next to DevCtx).
    MkCtl, 80 {
        /// [n_counters]
        counters: u64 = "unsigned*",
        /// [n_words]: the next unit of each word to hand out.
        next: u64 = "unsigned*",
        /// [0]: 0, or 1 + the first word whose wait ran past the time limit; [1]: its step.
        error: u64 = "unsigned*",
        /// A wait longer than this (wall clock) is a hang: stop.
        timeout_ns: u64 = "unsigned long long",
        /// The timeline (null: off): per executed unit, at unit_base[word] + unit, four u64: word << 48 |
        /// block << 32 | unit, then %globaltimer at the ticket, when the wait was over, and when done.
        stamps: u64 = "unsigned long long*",
        unit_base: u64 = "const unsigned*",
        /// [n_words]: increments per step of the counter the word waits on.
        wait_stride: u64 = "const unsigned*",
        /// Blocks that finished a step (the grid join between steps).
        step_done: u64 = "unsigned*",
        /// [n_steps]: each step's token, written by the block that ran EndStep.
        tokens: u64 = "unsigned*",
        /// Steps in this launch (>= 1; the timeline needs 1).
        n_steps: u32 = "unsigned",
    }
}

/// The header: the ISA's, the shared constants, the context structs.
pub fn header() -> String {
    let mut s = crate::isa::cuda_header();
    s += "// GENERATED from src/exec/gpu/abi.rs: constants and structs the host shares.\n";
    for (name, v) in [
        ("THREADS", THREADS as usize),
        ("KGROUP", KGROUP),
        ("ATTN_PART", ATTN_PART),
        ("CTRL_LEN", CTRL_LEN),
        ("CTRL_COMMIT", CTRL_COMMIT),
        ("GDN_HIST_HEAD", GDN_HIST_HEAD),
        ("MAX_GROUP", MAX_GROUP as usize),
        ("SAMPLE_MAX", SAMPLE_MAX),
        ("SAMPLE_CAP", SAMPLE_CAP),
        ("COLLECT_THREADS", COLLECT_THREADS as usize),
        ("SB_STATUS", SB_STATUS),
        ("SB_KEPT", SB_KEPT),
        ("SB_COUNT", SB_COUNT),
        ("SB_HI", SB_HI),
        ("SB_FULL", SB_FULL),
        ("SB_CANDS", SB_CANDS),
        ("SB_WORDS", SB_WORDS),
        ("MEGA_BLOCKS_PER_SM", MEGA_BLOCKS_PER_SM as usize),
        ("MROW_X_BYTES", MROW_X_BYTES as usize),
    ] {
        s += &format!("#define {name} {v}\n");
    }
    s += DevCtx::C_DECL;
    s += MkCtl::C_DECL;
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_declares_the_structs_and_constants() {
        let h = header();
        assert!(h.contains("#define OP_END_STEP 16\n"));
        assert!(h.contains("#define KGROUP 1024\n#define ATTN_PART 256\n#define CTRL_LEN 4\n"));
        assert!(h.contains("struct DevCtx {\n  void* const* bufs;\n"));
        assert!(h.contains("  unsigned n_steps;\n};\nstatic_assert(sizeof(MkCtl) == 80"));
        // The sampler's regions do not overlap: 256 + 65,536 counts after the count word.
        assert!(SB_COUNT < SB_HI && SB_HI + 256 == SB_FULL && SB_FULL + 65536 == SB_CANDS);
        assert_eq!(SAMPLE_CAP.count_ones(), 1, "the bitonic sort pads to a power of two");
        assert!(SAMPLE_MAX <= SAMPLE_CAP);
        assert_eq!(SB_CANDS, 66048);
    }
}
