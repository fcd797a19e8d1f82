//! The agent workload (issue 29): synthetic trajectories with the seed's statistics (`trajectory`), the
//! data a fixed-count replay feeds, and the replay itself on the CPU reference (`replay`: a resident
//! append-anchored session or a stateless re-prefill each step), and the session pool (`pool`: KV pages,
//! copy-on-write forks, park / restore); the agent step and the replay on the GPU paths (`gpu`: one resident
//! session, appends as M-row passes) and the composed replay with tool calls under the grammar (`composed`,
//! issue 30).

mod anchor;
pub mod composed;
pub mod gpu;
mod gpu_park;
mod gpu_replay;
pub mod pool;
pub mod replay;
pub mod step;
pub mod trajectory;
