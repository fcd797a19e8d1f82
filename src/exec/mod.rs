//! Executors of programs: the CPU interpreter (`interp`), the discrete-kernel CUDA graph and the
//! megakernel (`gpu`). Executors never see the model's structure: weights arrive as named
//! buffers of the program.

pub mod gpu;
pub mod interp;
pub mod spec;

/// A rollback's checks, one rule for every executor (`who` names it in the error): an M-row program
/// (M = `m` > 1), a verification step not yet committed (`rows_start`, taken: one commit a step), 1 ..= M
/// rows kept. Returns the step's start position.
pub(crate) fn commit_start(
    who: &str,
    m: usize,
    rows_start: &mut Option<usize>,
    n: usize,
) -> crate::error::Result<usize> {
    if m < 2 {
        crate::bail!("{who}: rollback takes an M-row program (this one has M = 1: its GDN state is written at once)");
    }
    let Some(start) = rows_start.take() else {
        crate::bail!("{who}: commit with no verification step to commit (one commit a step)");
    };
    if n == 0 || n > m {
        crate::bail!("{who}: commit of {n} rows of a {m}-row verification step (1 ..= {m})");
    }
    Ok(start)
}
