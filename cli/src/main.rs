//! `ferrolb`: FerroLB's command line; see `ferrolb --help`.

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    ferrolb_cli::app::run().await
}
