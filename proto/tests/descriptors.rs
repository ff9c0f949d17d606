//! The descriptor set behind the server's protojson: it names every message, and
//! `google.v1.Profile` (derived at build time) is pprof with a text string table.

use prost::Message;
use prost_types::field_descriptor_proto::Type;
use prost_types::{DescriptorProto, FileDescriptorSet};

fn descriptors() -> FileDescriptorSet {
    FileDescriptorSet::decode(profiledb_proto::DESCRIPTORS).expect("a valid descriptor set")
}

fn message<'a>(set: &'a FileDescriptorSet, package: &str, name: &str) -> &'a DescriptorProto {
    set.file
        .iter()
        .filter(|f| f.package() == package)
        .flat_map(|f| &f.message_type)
        .find(|m| m.name() == name)
        .unwrap_or_else(|| panic!("no {package}.{name} in the descriptor set"))
}

fn fields(m: &DescriptorProto) -> Vec<(&str, i32, Type)> {
    m.field
        .iter()
        .map(|f| (f.name(), f.number(), f.r#type()))
        .collect()
}

#[test]
fn pyroscope_profile_is_pprof_with_a_string_string_table() {
    let set = descriptors();
    for name in [
        "Profile",
        "ValueType",
        "Sample",
        "Label",
        "Mapping",
        "Location",
        "Line",
        "Function",
    ] {
        let pprof = message(&set, "perftools.profiles", name);
        let alias = message(&set, "google.v1", name);
        let mut expected = fields(pprof);
        for f in &mut expected {
            if name == "Profile" && f.0 == "string_table" {
                assert_eq!(f.2, Type::Bytes);
                f.2 = Type::String;
            }
        }
        assert_eq!(fields(alias), expected, "google.v1.{name}");
        for f in &alias.field {
            if f.r#type() == Type::Message {
                assert!(
                    f.type_name().starts_with(".google.v1."),
                    "{}",
                    f.type_name()
                );
            }
        }
    }
}

#[test]
fn every_package_is_in_the_set_once() {
    let set = descriptors();
    let mut packages: Vec<&str> = set.file.iter().map(|f| f.package()).collect();
    packages.sort_unstable();
    assert_eq!(
        packages,
        [
            "capabilities.v1",
            "control.v1",
            "google.v1",
            "opentelemetry.proto.collector.profiles.v1development",
            "opentelemetry.proto.common.v1",
            "opentelemetry.proto.profiles.v1development",
            "opentelemetry.proto.resource.v1",
            "perftools.profiles",
            "push.v1",
            "querier.v1",
            "settings.v1",
            "types.v1",
            "version.v1"
        ]
    );
    message(&set, "querier.v1", "SelectMergeProfileRequest");
    message(&set, "querier.v1", "SelectHeatmapRequest");
    message(&set, "settings.v1", "SetSettingsRequest");
    message(&set, "version.v1", "VersionResponse");
    message(&set, "capabilities.v1", "GetFeatureFlagsResponse");
    message(&set, "push.v1", "PushRequest");
    message(&set, "types.v1", "LabelNamesRequest");
    message(
        &set,
        "opentelemetry.proto.collector.profiles.v1development",
        "ExportProfilesServiceRequest",
    );
}
