//! What the tool binaries (`bgp-probe`, `bfd-probe`, ...) share.

use std::io::BufRead;

use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

/// Reads one JSON command per line of standard input, on a thread of its own, into the returned
/// channel; a line that is no command is reported on standard error as `tool` ignoring it and
/// skipped; `end` is sent when standard input closes.
pub fn commands_from_stdin<C>(tool: &'static str, end: C) -> mpsc::UnboundedReceiver<C>
where
    C: DeserializeOwned + Send + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<C>(&line) {
                Ok(c) => {
                    if tx.send(c).is_err() {
                        return;
                    }
                }
                Err(e) => eprintln!("{tool}: ignoring bad command {line:?}: {e}"),
            }
        }
        let _ = tx.send(end);
    });
    rx
}
