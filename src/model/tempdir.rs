//! Scratch folders for the model's unit tests (a tiny synthetic checkpoint each).

/// A scratch folder removed on drop.
pub struct Dir(std::path::PathBuf);
impl Dir {
    pub fn new(tag: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("mk-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Dir(p)
    }
    pub fn path(&self) -> &std::path::Path {
        &self.0
    }
}
impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A tiny synthetic checkpoint (`seed`) in a scratch folder of its own (`tag`: one per test, they run in
/// parallel), with the preset's config.
pub fn tiny(tag: &str, seed: u64) -> (Dir, crate::model::checkpoint::Checkpoint, crate::model::config::ModelConfig) {
    let dir = Dir::new(tag);
    let cfg = crate::model::config::ModelConfig::preset("tiny").unwrap();
    crate::model::synth::write_checkpoint(&cfg, seed, dir.path()).unwrap();
    let ck = crate::model::checkpoint::Checkpoint::open(dir.path()).unwrap();
    (dir, ck, cfg)
}
