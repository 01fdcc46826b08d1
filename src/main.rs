mod cli;

fn main() -> std::process::ExitCode {
    // Die quietly on a closed pipe (`minfer-wgpu info M | head`), as other CLI tools do.
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    cli::main()
}
