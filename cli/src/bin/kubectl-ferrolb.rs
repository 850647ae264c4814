//! `kubectl-ferrolb`: the same command line as `ferrolb`, under the name kubectl looks for, so
//! that `kubectl ferrolb explain ...` works once it is on the PATH.

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    ferrolb_cli::app::run().await
}
