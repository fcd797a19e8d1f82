//! Stamps the binary with the git state it was built from, so that a record written on a machine
//! that has only a copy of the working tree (the GPU machine) still names its sha honestly.

fn git(args: &[&str]) -> Option<String> {
    let o = std::process::Command::new("git").args(args).output().ok()?;
    o.status.success().then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

fn main() {
    let sha = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    // Tracked source files only: results/ and other outputs do not make a build dirty.
    let dirty = git(&[
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        "src",
        "megakernel",
        "Cargo.toml",
        "Cargo.lock",
        "build.rs",
    ])
    .is_some_and(|s| !s.is_empty());
    println!("cargo:rustc-env=MK_BUILD_SHA={sha}");
    println!("cargo:rustc-env=MK_BUILD_DIRTY={dirty}");
    for p in [".git/HEAD", ".git/index", "src", "megakernel"] {
        println!("cargo:rerun-if-changed={p}");
    }
}
