//! Compiles every wire schema under `schema/` once, with protox (pure Rust: no system
//! `protoc`), into prost code, and saves the descriptor set for the server's protojson.
//!
//! pprof is written once, as `perftools.profiles`. Pyroscope's query API returns the
//! same message under the package `google.v1`; that file is derived here from the
//! pprof descriptor instead of being written a second time.

use prost::Message;
use prost_types::field_descriptor_proto::Type;
use prost_types::{FileDescriptorProto, FileDescriptorSet};
use protox::file::{ChainFileResolver, DescriptorSetFileResolver, IncludeFileResolver};

const SCHEMA_DIR: &str = "schema";
const PPROF: &str = "perftools/profiles/profile.proto";
const PYROSCOPE_PPROF: &str = "google/v1/profile.proto";
const FILES: [&str; 9] = [
    PPROF,
    "control/v1/control.proto",
    "types/v1/types.proto",
    "push/v1/push.proto",
    "querier/v1/querier.proto",
    "version/v1/version.proto",
    "capabilities/v1/feature_flags.proto",
    "settings/v1/setting.proto",
    // Imports the OTLP common, resource and profiles schemas.
    "opentelemetry/proto/collector/profiles/v1development/profiles_service.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed={SCHEMA_DIR}");
    let pprof = protox::compile([PPROF], [SCHEMA_DIR])?;
    let pprof = pprof
        .file
        .into_iter()
        .find(|f| f.name() == PPROF)
        .ok_or("protox returned no descriptor for the pprof schema")?;

    let mut resolver = ChainFileResolver::new();
    resolver.add(DescriptorSetFileResolver::new(FileDescriptorSet {
        file: vec![pyroscope_pprof(&pprof)],
    }));
    resolver.add(IncludeFileResolver::new(SCHEMA_DIR.into()));
    let mut compiler = protox::Compiler::with_file_resolver(resolver);
    compiler.include_imports(true).include_source_info(true);
    compiler.open_files(FILES)?;
    let all = compiler.file_descriptor_set();

    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("descriptors.bin"), all.encode_to_vec())?;

    // The derived alias gets no Rust types of its own (that would be a second pprof
    // type): `extern_path` maps `google.v1` onto `perftools.profiles`, whose bytes
    // are the same message, so a field of type `google.v1.Profile` is our pprof.
    prost_build::Config::new()
        // Zero-copy: string table entries, and a push's profiles, become `Bytes`
        // slices of the input buffer.
        .bytes([
            ".perftools.profiles.Profile.string_table",
            ".push.v1.RawSample.raw_profile",
        ])
        .extern_path(".google.v1", "crate::perftools::profiles")
        .compile_fds(all)?;
    Ok(())
}

/// pprof under Pyroscope's package name `google.v1`. Pyroscope declares the string
/// table as `string` (ours is `bytes`, for the decoder's zero-copy slices): identical
/// on the wire, but protojson renders `string` as text rather than base64.
fn pyroscope_pprof(pprof: &FileDescriptorProto) -> FileDescriptorProto {
    let from = format!(".{}.", pprof.package());
    let mut alias = pprof.clone();
    alias.name = Some(PYROSCOPE_PPROF.into());
    alias.package = Some("google.v1".into());
    alias.source_code_info = None;
    for message in &mut alias.message_type {
        let is_profile = message.name() == "Profile";
        for field in &mut message.field {
            if let Some(rest) = field
                .type_name
                .as_deref()
                .and_then(|t| t.strip_prefix(&from))
            {
                field.type_name = Some(format!(".google.v1.{rest}"));
            }
            if is_profile && field.name() == "string_table" {
                field.set_type(Type::String);
            }
        }
    }
    alias
}
