//! Compiles the crate's own `.proto` files into prost code.
//!
//! protox parses the files in pure Rust, so building needs no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Shared with the collector: the workspace-level `proto/` folder.
    const FILES: [&str; 3] = [
        "../proto/profile.proto",
        "../proto/types.proto",
        "../proto/push.proto",
    ];
    for f in FILES {
        println!("cargo:rerun-if-changed={f}");
    }
    let descriptors = protox::compile(FILES, ["../proto"])?;
    prost_build::Config::new()
        // Zero-copy string table: entries become `Bytes` slices of the input buffer.
        .bytes([".perftools.profiles.Profile.string_table"])
        .compile_fds(descriptors)?;
    Ok(())
}
