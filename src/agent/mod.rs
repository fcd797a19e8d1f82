//! The agent workload (issue 29): synthetic trajectories with the seed's statistics (`trajectory`), the
//! data a fixed-count replay feeds.

pub mod trajectory;
