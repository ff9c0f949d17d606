use super::*;

#[inline(never)]
#[no_mangle]
pub extern "C" fn profiledb_agent_test_symbol(x: u64) -> u64 {
    std::hint::black_box(x).wrapping_mul(31).wrapping_add(7)
}

/// Symbol lookup on a binary built by the test: the test executable itself.
#[test]
fn resolves_own_function_by_file_offset() {
    let me = std::process::id();
    let mut procs = ProcessTable::new();
    assert!(procs.load_from_proc(me));
    let addr = profiledb_agent_test_symbol as *const () as u64 + 2;
    assert!(profiledb_agent_test_symbol(1) > 0);
    let mut s = HostSymbolizer::new();
    let stacks = [(me, &[addr, 0x10][..])];
    let out = s.symbolize_procs(&procs, &stacks);
    assert_eq!(out.len(), 1);
    assert_eq!(
        out[0][0].function.as_deref(),
        Some("profiledb_agent_test_symbol")
    );
    let m = out[0][0].module.as_ref().expect("has a mapping");
    assert!(m.build_id.is_some(), "rust test binaries carry a build id");
    // an unmapped address stays unsymbolized with its address
    assert_eq!(out[0][1].function, None);
    assert_eq!(out[0][1].address, 0x10);
    assert_eq!(s.stats.unsymbolized, 1);
}

/// In server mode user frames keep no name but their mapping and build id, and
/// a caller's address is its call's (the return address minus one), what the
/// server then symbolizes.
#[test]
fn server_mode_sends_addresses_with_build_ids() {
    let me = std::process::id();
    let mut procs = ProcessTable::new();
    assert!(procs.load_from_proc(me));
    let addr = profiledb_agent_test_symbol as *const () as u64 + 2;
    let mut s = HostSymbolizer::with_mode(SymbolizeMode::Server);
    let stacks = [(me, &[addr, addr + 4][..])];
    let out = s.symbolize_procs(&procs, &stacks);
    assert_eq!(out[0][0].function, None);
    assert_eq!(out[0][0].address, addr);
    assert_eq!(
        out[0][1].address,
        addr + 3,
        "the call, not the return address"
    );
    let m = out[0][0].module.as_ref().expect("has a mapping");
    assert!(m.build_id.is_some());
    assert!(m.start <= addr && addr < m.end);
    assert!(s.names.is_empty(), "no symbol table was read");
}

#[test]
fn display_names() {
    let f = Frame {
        function: None,
        address: 0x1234,
        module: Some(ModuleRef {
            file: Arc::new(FileId {
                path: "/usr/lib/libfoo.so".into(),
                dev: 0,
                ino: 0,
            }),
            build_id: None,
            start: 0x1000,
            end: 0x2000,
            pgoff: 0x100,
        }),
    };
    assert_eq!(f.display_name(), "libfoo.so+0x334");
}

#[test]
fn bounded_cache_evicts_cold_entries_and_keeps_used_ones() {
    let mut c: BoundedCache<u32, u32> = BoundedCache::new(4);
    for k in 0..2 {
        c.insert(k, k * 10);
    }
    // young full: 0 and 1 become old
    c.insert(2, 20);
    assert_eq!(c.len(), 3);
    // a hit moves 0 back to young (now 2, 0 → full)
    assert_eq!(c.get(&0), Some(&0));
    c.insert(3, 30); // young {2, 0} becomes old, 1 is evicted
    assert!(!c.contains(&1), "unused entry evicted");
    assert!(c.contains(&0) && c.contains(&2) && c.contains(&3));
    assert!(c.len() <= 4);
    for k in 100..1000 {
        c.insert(k, k);
        assert!(c.len() <= 4, "bounded");
    }
    assert!(c.evicted > 900);
    // re-inserting an existing key does not rotate or duplicate
    let before = c.len();
    c.insert(999, 1);
    assert_eq!(c.len(), before);
    assert_eq!(c.get(&999), Some(&1));
}

#[test]
fn file_key_is_build_id_or_inode_identity() {
    let me = std::fs::read_link("/proc/self/exe").expect("exe");
    let md = std::fs::metadata(&me).expect("stat");
    let own = FileId {
        path: Arc::from(me.to_string_lossy().as_ref()),
        dev: 0,
        ino: md.ino(),
    };
    let info = HostSymbolizer::read_file_info(&own).expect("own binary");
    assert!(matches!(info.key, FileKey::BuildId(_)));
    // the same bytes at another path share the key (and so the cache entries)
    let dir = tempfile::tempdir().expect("tempdir");
    let copy = dir.path().join("copy");
    std::fs::copy(&me, &copy).expect("copy");
    let copied = FileId {
        path: Arc::from(copy.to_string_lossy().as_ref()),
        dev: 0,
        ino: 0,
    };
    let info2 = HostSymbolizer::read_file_info(&copied).expect("copy");
    assert_eq!(info.key, info2.key);
    // a file without a build id is keyed by inode and mtime: rewriting it changes the key
    let plain = dir.path().join("plain");
    std::fs::write(&plain, b"not an elf").expect("write");
    let plain_id = FileId {
        path: Arc::from(plain.to_string_lossy().as_ref()),
        dev: 0,
        ino: 0,
    };
    let k1 = HostSymbolizer::read_file_info(&plain_id)
        .expect("plain")
        .key;
    assert!(matches!(k1, FileKey::Inode { .. }));
    std::fs::write(&plain, b"not an elf, longer").expect("rewrite");
    let k2 = HostSymbolizer::read_file_info(&plain_id)
        .expect("plain")
        .key;
    assert_ne!(k1, k2);
    // the file at the path is not the mapped one (other inode): no symbols
    let stale = FileId {
        ino: md.ino().wrapping_add(1),
        ..own
    };
    assert!(HostSymbolizer::read_file_info(&stale).is_none());
}

#[test]
fn symbolizer_thread_matches_direct_resolution() {
    let me = std::process::id();
    let mut procs = ProcessTable::new();
    assert!(procs.load_from_proc(me));
    let a = profiledb_agent_test_symbol as *const () as u64 + 1;
    let b = display_names as *const () as u64 + 1;
    let stacks: Vec<(u32, Vec<u64>)> = vec![
        (me, vec![a, b, 0x10]),
        (me, vec![b]),
        (me, vec![0xffff_ffff_8100_0000, a]),
    ];
    let mut batch = Batch::default();
    let mut direct_batch = Batch::default();
    for (pid, f) in &stacks {
        batch.push(&procs, *pid, f);
        direct_batch.push(&procs, *pid, f);
    }
    let direct = HostSymbolizer::new().symbolize(&direct_batch);
    let (tx, rx) = mpsc::channel();
    let mut t = SymbolizerThread::spawn(1, move |job: u32, frames| {
        let _ = tx.send((job, frames));
    })
    .expect("spawn");
    assert!(t.submit(7, batch));
    let stats = t.finish();
    let (job, queued) = rx.recv().expect("one window");
    assert_eq!(job, 7);
    assert_eq!(queued, direct);
    assert_eq!(
        queued[0][0].function.as_deref(),
        Some("profiledb_agent_test_symbol")
    );
    assert_eq!(stats.frames, 6);
    assert_eq!(stats.dropped_windows, 0);
}

#[test]
fn full_symbolizer_queue_drops_and_counts_instead_of_blocking() {
    let (started_tx, started_rx) = mpsc::channel::<u32>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let mut t = SymbolizerThread::spawn(1, move |job: u32, _frames| {
        let _ = started_tx.send(job);
        let _ = go_rx.recv();
    })
    .expect("spawn");
    assert!(t.submit(1, Batch::default()));
    assert_eq!(started_rx.recv().ok(), Some(1), "thread busy with window 1");
    assert!(t.submit(2, Batch::default()), "window 2 waits in the queue");
    assert!(!t.submit(3, Batch::default()), "window 3 does not fit");
    for _ in 0..3 {
        let _ = go_tx.send(());
    }
    // the final window at shutdown waits for room instead
    assert!(t.submit_wait(4, Batch::default()));
    let stats = t.finish();
    assert_eq!(stats.dropped_windows, 1);
    let seen: Vec<u32> = started_rx.try_iter().collect();
    assert_eq!(seen, vec![2, 4]);
}
