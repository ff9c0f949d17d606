//! Appending one batch to another, so a request carrying several profiles (a Push
//! with many series) becomes one [`Batch`]. Decoders always fill a fresh batch and
//! append it only on success, so a failing profile never leaves half its data behind.

use profiledb_model::{Batch, Location};

/// Appends `src`'s symbols, stacks and series to `dst`, shifting every index.
/// Series with equal labels are merged. `src.tenant` is ignored.
pub fn append_batch(dst: &mut Batch, src: Batch) {
    let map_base = dst.symbols.mappings.len() as u32;
    let func_base = dst.symbols.functions.len() as u32;
    let loc_base = dst.symbols.locations.len() as u32;
    let stack_base = dst.stacks.len() as u32;
    dst.symbols.mappings.extend(src.symbols.mappings);
    dst.symbols.functions.extend(src.symbols.functions);
    dst.symbols
        .locations
        .extend(src.symbols.locations.into_iter().map(|l| Location {
            function: l.function.map(|f| f + func_base),
            mapping: l.mapping.map(|m| m + map_base),
            ..l
        }));
    let mut buf = Vec::new();
    for stack in src.stacks.iter() {
        buf.clear();
        buf.extend(stack.iter().map(|l| l + loc_base));
        dst.stacks.push(&buf);
    }
    for mut series in src.series {
        for s in &mut series.samples {
            s.stack += stack_base;
        }
        match dst.series.iter_mut().find(|d| d.labels == series.labels) {
            Some(existing) => existing.samples.extend(series.samples),
            None => dst.series.push(series),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profiledb_model::{Function, Labels, Mapping, Sample, SeriesSamples, TenantId};

    fn one(name: &str, pt: &str, value: i64) -> Batch {
        let mut b = Batch::new(TenantId::default());
        b.symbols.mappings.push(Mapping::default());
        b.symbols.functions.push(Function {
            name: name.into(),
            file: String::new(),
        });
        b.symbols.locations.push(Location {
            function: Some(0),
            mapping: Some(0),
            address: 0,
            line: 0,
        });
        let stack = b.stacks.push(&[0]);
        b.series.push(SeriesSamples {
            labels: Labels::new([("__profile_type__", pt)]),
            samples: vec![Sample {
                timestamp_ms: 1,
                stack,
                value,
            }],
        });
        b
    }

    #[test]
    fn indices_are_shifted_and_equal_series_merged() {
        let mut dst = one("a", "x:a:b:c:d", 1);
        append_batch(&mut dst, one("b", "x:a:b:c:d", 2));
        append_batch(&mut dst, one("c", "y:a:b:c:d", 3));
        assert_eq!(dst.validate(), Ok(()));
        assert_eq!(dst.series.len(), 2);
        let s = &dst.series[0].samples;
        assert_eq!(
            s.iter().map(|s| (s.stack, s.value)).collect::<Vec<_>>(),
            [(0, 1), (1, 2)]
        );
        let loc = dst.symbols.locations[dst.stacks.get(2).unwrap()[0] as usize];
        assert_eq!(loc.function, Some(2));
        assert_eq!(loc.mapping, Some(2));
        assert_eq!(dst.symbols.functions[2].name, "c");
    }
}
