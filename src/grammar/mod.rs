//! Grammar-constrained tool calls (issue 30) on the CPU: tool schemas compiled with llguidance into a
//! matcher of the model's own tool-call format (`tools`: the grammar; `matcher`: the token trie and the
//! per-step mask), the mask honoured by the step's choice (`mask`: the scatter method, the mask inside
//! the argmax, the masked head over the allowed rows), constrained greedy decoding with forced spans
//! ingested as rows of the next pass (`decode`: the CPU reference and the interpreter), and the
//! independent checker of completed calls (`check`: the chat parser plus a JSON Schema validator).
//!
//! Owns: everything between a tools list and a checked tool call. The GPU's part is the lm_head's mask
//! (megakernel/ops/lm_head.cuh, set by `GpuExec::set_head_masks`; checked and timed by `mk gpu mask`,
//! `verify::mask`). Refuses: sampling (greedy only), tool formats other than Qwen3.5's XML-like one.

pub mod check;
pub mod decode;
pub mod mask;
pub mod matcher;
pub mod tools;

pub use check::{CallVerdict, Checker, TurnVerdict};
pub use mask::{argmax_masked, masked_head, scatter_argmax, Mask};
pub use matcher::ToolMatcher;
pub use tools::{parse_tools, Choice, Format, Tool};
