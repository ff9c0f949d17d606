//! The one pprof encoder: a [`ProfileBuilder`] interns strings, functions and
//! locations and collects samples into a [`Profile`].
//!
//! Both producers of pprof use it: the collector (symbolized stacks with mappings and
//! labels) and the server's export of a merged call tree. Ids are handed out in
//! first-use order starting at 1, and string 0 is the empty string, as the format
//! requires.

use std::collections::HashMap;

use bytes::Bytes;

use crate::pprof::{Function, Label, Line, Location, Mapping, Profile, Sample, ValueType};

/// A binary or shared library mapped into the profiled process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MappingInfo<'a> {
    /// First address of the mapping.
    pub memory_start: u64,
    /// One past its last address.
    pub memory_limit: u64,
    /// Offset in the file of `memory_start`.
    pub file_offset: u64,
    /// Path of the mapped file.
    pub filename: &'a str,
    /// Build id of the file, empty when unknown.
    pub build_id: &'a str,
    /// Whether the profile's locations in this mapping name their functions.
    pub has_functions: bool,
}

/// Builds one pprof [`Profile`].
#[derive(Debug)]
pub struct ProfileBuilder {
    profile: Profile,
    strings: HashMap<String, i64>,
    /// Function name (string id) → function id.
    functions: HashMap<i64, u64>,
    /// (mapping id, address, function id or 0) → location id.
    locations: HashMap<(u64, u64, u64), u64>,
}

impl Default for ProfileBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl ProfileBuilder {
    /// An empty profile whose string table holds only the empty string.
    pub fn new() -> Self {
        let mut builder = ProfileBuilder {
            profile: Profile::default(),
            strings: HashMap::new(),
            functions: HashMap::new(),
            locations: HashMap::new(),
        };
        builder.string("");
        builder
    }

    /// The string table index of `s`, adding it on first use.
    pub fn string(&mut self, s: &str) -> i64 {
        if let Some(&id) = self.strings.get(s) {
            return id;
        }
        let id = self.profile.string_table.len() as i64;
        self.profile
            .string_table
            .push(Bytes::copy_from_slice(s.as_bytes()));
        self.strings.insert(s.to_owned(), id);
        id
    }

    fn value_type(&mut self, r#type: &str, unit: &str) -> ValueType {
        ValueType {
            r#type: self.string(r#type),
            unit: self.string(unit),
        }
    }

    /// Appends a sample type: every sample then carries one more value.
    pub fn add_sample_type(&mut self, r#type: &str, unit: &str) {
        let value_type = self.value_type(r#type, unit);
        self.profile.sample_type.push(value_type);
    }

    /// Sets what one sampling event measures and how much of it (`period`).
    pub fn set_period(&mut self, r#type: &str, unit: &str, period: i64) {
        self.profile.period_type = Some(self.value_type(r#type, unit));
        self.profile.period = period;
    }

    /// Sets when collection started and how long it ran, in nanoseconds.
    pub fn set_time(&mut self, time_nanos: i64, duration_nanos: i64) {
        self.profile.time_nanos = time_nanos;
        self.profile.duration_nanos = duration_nanos;
    }

    /// Adds a mapping and returns its id. Mappings are not deduplicated: the caller
    /// knows which of its modules are the same.
    pub fn add_mapping(&mut self, mapping: &MappingInfo<'_>) -> u64 {
        let id = self.profile.mapping.len() as u64 + 1;
        let filename = self.string(mapping.filename);
        let build_id = self.string(mapping.build_id);
        self.profile.mapping.push(Mapping {
            id,
            memory_start: mapping.memory_start,
            memory_limit: mapping.memory_limit,
            file_offset: mapping.file_offset,
            filename,
            build_id,
            has_functions: mapping.has_functions,
            ..Default::default()
        });
        id
    }

    /// The id of the function named `name` (also its system name), adding it on first
    /// use.
    pub fn function(&mut self, name: &str) -> u64 {
        let name = self.string(name);
        if let Some(&id) = self.functions.get(&name) {
            return id;
        }
        let id = self.profile.function.len() as u64 + 1;
        self.profile.function.push(Function {
            id,
            name,
            system_name: name,
            ..Default::default()
        });
        self.functions.insert(name, id);
        id
    }

    /// The id of the location at `address` in mapping `mapping_id` (0: none) that runs
    /// `function_id` (`None`: unsymbolized, no line), adding it on first use.
    pub fn location(&mut self, mapping_id: u64, address: u64, function_id: Option<u64>) -> u64 {
        let key = (mapping_id, address, function_id.unwrap_or(0));
        if let Some(&id) = self.locations.get(&key) {
            return id;
        }
        let id = self.profile.location.len() as u64 + 1;
        self.profile.location.push(Location {
            id,
            mapping_id,
            address,
            line: function_id
                .map(|function_id| Line {
                    function_id,
                    ..Default::default()
                })
                .into_iter()
                .collect(),
            is_folded: false,
        });
        self.locations.insert(key, id);
        id
    }

    /// Adds a sample: its stack as location ids, leaf first, one value per sample
    /// type, and string labels.
    pub fn add_sample<'a>(
        &mut self,
        location_ids: Vec<u64>,
        values: Vec<i64>,
        labels: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) {
        let label = labels
            .into_iter()
            .map(|(key, value)| Label {
                key: self.string(key),
                str: self.string(value),
                ..Default::default()
            })
            .collect();
        self.profile.sample.push(Sample {
            location_id: location_ids,
            value: values,
            label,
        });
    }

    /// The finished profile.
    pub fn finish(self) -> Profile {
        self.profile
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    fn text(p: &Profile, id: i64) -> &str {
        std::str::from_utf8(&p.string_table[id as usize]).unwrap()
    }

    #[test]
    fn interns_strings_functions_and_locations_in_first_use_order() {
        let mut b = ProfileBuilder::new();
        b.add_sample_type("cpu", "nanoseconds");
        b.set_period("cpu", "nanoseconds", 10);
        b.set_time(5, 7);
        let bin = b.add_mapping(&MappingInfo {
            memory_start: 0x1000,
            memory_limit: 0x2000,
            filename: "/bin/app",
            build_id: "ab",
            has_functions: true,
            ..Default::default()
        });
        let main = b.function("main");
        let work = b.function("work");
        assert_eq!((bin, main, work, b.function("main")), (1, 1, 2, 1));
        let l_work = b.location(bin, 0x1010, Some(work));
        let l_main = b.location(bin, 0x1020, Some(main));
        let l_raw = b.location(bin, 0x1030, None);
        assert_eq!((l_work, l_main, l_raw), (1, 2, 3));
        assert_eq!(b.location(bin, 0x1010, Some(work)), 1);
        b.add_sample(vec![l_work, l_main], vec![3], [("pid", "7")]);
        b.add_sample(vec![l_raw, l_main], vec![4], []);
        let p = b.finish();

        let strings: Vec<&str> = (0..p.string_table.len() as i64)
            .map(|i| text(&p, i))
            .collect();
        assert_eq!(
            strings,
            [
                "",
                "cpu",
                "nanoseconds",
                "/bin/app",
                "ab",
                "main",
                "work",
                "pid",
                "7"
            ]
        );
        assert_eq!(p.period, 10);
        assert_eq!((p.time_nanos, p.duration_nanos), (5, 7));
        assert_eq!(p.period_type, Some(p.sample_type[0]));
        assert_eq!(text(&p, p.function[1].name), "work");
        assert_eq!(p.function[1].system_name, p.function[1].name);
        assert_eq!(p.location[0].line[0].function_id, work);
        assert!(p.location[2].line.is_empty());
        assert_eq!(p.location[2].address, 0x1030);
        assert_eq!(p.sample[0].location_id, vec![1, 2]);
        assert_eq!(text(&p, p.sample[0].label[0].str), "7");
        assert!(p.sample[1].label.is_empty());

        let decoded = Profile::decode(p.encode_to_vec().as_slice()).unwrap();
        assert_eq!(decoded, p);
    }

    #[test]
    fn an_empty_profile_has_only_the_empty_string() {
        let p = ProfileBuilder::new().finish();
        assert_eq!(p.string_table, vec![Bytes::new()]);
        assert!(p.sample.is_empty() && p.function.is_empty() && p.location.is_empty());
        assert_eq!(p.period_type, None);
    }
}
