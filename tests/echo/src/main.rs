//! `ferrolb-echo`: the one binary of the lab's own container image (FROM scratch, static), run
//! by real kubelets in the real-cluster lab (`ferrolb-lab --cluster real`).
//!
//! ```text
//! ferrolb-echo serve [PORT]   answer every HTTP request (default port 8080, IPv4 and IPv6)
//! ferrolb-echo [pause]        the Pod sandbox's process: wait for SIGTERM or SIGINT, exit 0
//!                             (the image's entrypoint without arguments, so the same image is
//!                             containerd's `sandbox_image`)
//! ```
//!
//! `serve` answers with the node's name as the body (`NODE_NAME`, from the downward API, else
//! the host name), the Pod's name in `X-Pod-Name` (`POD_NAME`) and the address the request came
//! from in `X-Client-Address`: the same answer as the lab's stand-in server, so the lab's checks
//! read both alike. Both modes stop at once on SIGTERM: as a Pod's first process (PID 1 of its
//! PID namespace) a signal without a handler would be ignored, and every Pod deletion would wait
//! out its grace period.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{SignalKind, signal};

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ferrolb-echo: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = match args.first().map(String::as_str) {
        None | Some("pause") => rt.block_on(stopped()),
        Some("serve") => {
            let port = match args.get(1).map(|p| p.parse::<u16>()) {
                None => Ok(8080),
                Some(Ok(p)) => Ok(p),
                Some(Err(e)) => Err(std::io::Error::other(format!("port: {e}"))),
            };
            port.and_then(|port| {
                rt.block_on(async {
                    tokio::select! {
                        r = serve(port) => r,
                        r = stopped() => r,
                    }
                })
            })
        }
        _ => {
            eprintln!("usage: ferrolb-echo serve [PORT] | ferrolb-echo [pause]");
            return std::process::ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ferrolb-echo: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Returns once SIGTERM or SIGINT arrives.
async fn stopped() -> std::io::Result<()> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}

async fn serve(port: u16) -> std::io::Result<()> {
    // `[::]` takes IPv4 too (a dual-stack socket) where the Pod has IPv6; a Pod without IPv6
    // (a single-stack cluster, or IPv6 disabled) listens on IPv4 only.
    let listener = match TcpListener::bind(("::", port)).await {
        Ok(l) => l,
        Err(_) => TcpListener::bind(("0.0.0.0", port)).await?,
    };
    let node = std::env::var("NODE_NAME")
        .ok()
        .filter(|n| !n.is_empty())
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .unwrap_or_default()
        .trim()
        .to_string();
    let pod = std::env::var("POD_NAME").unwrap_or_default();
    eprintln!("ferrolb-echo: serving on port {port} as {pod} on {node}");
    loop {
        let (conn, peer) = listener.accept().await?;
        let answer = answer(&node, &pod, &peer.ip().to_canonical().to_string());
        tokio::spawn(reply(conn, answer));
    }
}

/// The whole HTTP answer.
fn answer(node: &str, pod: &str, client: &str) -> String {
    let body = format!("{node}\n");
    format!(
        "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
         X-Pod-Name: {pod}\r\nX-Client-Address: {client}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

async fn reply(mut conn: TcpStream, answer: String) {
    // Read the request head first: closing with unread bytes would reset the connection.
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    let read = async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), read).await;
    let _ = conn.write_all(answer.as_bytes()).await;
}

#[cfg(test)]
mod tests {
    use super::answer;

    #[test]
    fn the_answer_names_the_node_in_the_body_and_the_pod_and_client_in_headers() {
        let a = answer("node-a", "web-1", "10.99.0.2");
        let (head, body) = a.split_once("\r\n\r\n").unwrap();
        assert_eq!(body, "node-a\n");
        assert!(head.starts_with("HTTP/1.0 200 OK\r\n"));
        assert!(head.contains("\r\nContent-Length: 7\r\n"));
        assert!(head.contains("\r\nX-Pod-Name: web-1\r\n"));
        assert!(head.contains("\r\nX-Client-Address: 10.99.0.2\r\n"));
    }
}
