//! The `themisto` binary: parse arguments, run, map errors to exit codes.

fn main() {
    themisto::cli::process_setup();
    let cli = themisto::cli::parse();
    if let Err(err) = themisto::cli::dispatch(cli) {
        eprintln!("error: {}", themisto::cli::render_error(&err));
        std::process::exit(themisto::cli::exit_code(&err));
    }
}
