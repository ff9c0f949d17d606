//! Compiles the agent's own pprof and push.v1 protos with protox (no system protoc).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The workspace-level `proto/` folder, shared with the ingest crate (files only:
    // the agent still depends on no other profiledb crate).
    let files = [
        "../proto/profile.proto",
        "../proto/types.proto",
        "../proto/push.proto",
    ];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["../proto"])?;
    prost_build::Config::new().compile_fds(fds)?;
    Ok(())
}
