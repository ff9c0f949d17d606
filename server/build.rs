//! Compiles the server's own `.proto` files (Pyroscope's query API) into prost code,
//! and saves the descriptor set so the Connect handlers can speak protojson through
//! prost-reflect. protox parses in pure Rust: no system `protoc` needed.

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    const FILES: [&str; 3] = [
        "proto/types/v1/types.proto",
        "proto/google/v1/profile.proto",
        "proto/querier/v1/querier.proto",
    ];
    for f in FILES {
        println!("cargo:rerun-if-changed={f}");
    }
    let descriptors = protox::compile(FILES, ["proto"])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("query_descriptors.bin"),
        descriptors.encode_to_vec(),
    )?;
    prost_build::Config::new().compile_fds(descriptors)?;
    Ok(())
}
