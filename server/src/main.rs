//! `profiledb`: the continuous-profiling database server and its admin commands
//! (the command line is `profiledb::cli`).

// glibc's allocator returns freed memory to the kernel between uploads and pays for
// it in page faults on the decode path; mimalloc keeps it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    profiledb::cli::main()
}
