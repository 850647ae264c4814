//! A read-only stand-in for the Kubernetes API that Helm's `lookup` reads during an upgrade: it
//! serves the core `v1` discovery document and a fixed set of objects by path, 404 for the rest.
//! Bound to 127.0.0.1, it answers a bounded number of connections and then stops.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::thread::JoinHandle;

use serde_json::{Value, json};

/// Connections served before the thread ends (Helm makes two per lookup).
const MAX_CONNECTIONS: usize = 32;

/// A running stand-in; `url()` is what Helm's `--kube-apiserver` gets.
pub(crate) struct LookupServer {
    port: u16,
    _thread: JoinHandle<Vec<String>>,
}

impl LookupServer {
    /// Serves `objects`, each under its API path (`/api/v1/namespaces/NS/secrets/NAME`).
    pub(crate) fn start(objects: BTreeMap<String, Value>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let port = listener.local_addr().expect("local address").port();
        let thread = std::thread::spawn(move || {
            let mut seen = Vec::new();
            for stream in listener.incoming().take(MAX_CONNECTIONS) {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(&stream);
                let mut request_line = String::new();
                if reader.read_line(&mut request_line).is_err() {
                    continue;
                }
                // Drain the headers; `lookup` sends GETs without a body.
                let mut header = String::new();
                while reader.read_line(&mut header).is_ok_and(|n| n > 2) {
                    header.clear();
                }
                let target = request_line.split_whitespace().nth(1).unwrap_or("/");
                let path = target.split('?').next().unwrap_or("/").to_owned();
                let (status, body) = respond(&objects, &path);
                seen.push(path);
                let body = body.to_string();
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
            seen
        });
        Self {
            port,
            _thread: thread,
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

fn respond(objects: &BTreeMap<String, Value>, path: &str) -> (&'static str, Value) {
    if path == "/api/v1" {
        let resources = json!([{
            "name": "secrets", "singularName": "secret", "namespaced": true, "kind": "Secret",
            "verbs": ["get", "list", "watch"]
        }]);
        let list = json!({"kind": "APIResourceList", "groupVersion": "v1", "resources": resources});
        return ("200 OK", list);
    }
    match objects.get(path) {
        Some(object) => ("200 OK", object.clone()),
        None => (
            "404 Not Found",
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                   "reason": "NotFound", "code": 404, "message": format!("{path} not found")}),
        ),
    }
}
