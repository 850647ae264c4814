//! The container images `scripts/images` builds, checked without a container runtime. Each OCI
//! archive is unpacked as a runtime would (index → manifest → config and layers, digests
//! verified) into a root filesystem; its config must be the Dockerfile's stage on the
//! distroless base, its files the distroless ones plus one static binary, and its entrypoint
//! must run inside that root filesystem (read-only, own PID namespace, uid 65532, no
//! capabilities: `unshare` + `chroot`). The controller's image then assigns an address on a real
//! kube-apiserver with nothing but what a Pod gets: a ServiceAccount token, the cluster's CA and
//! `KUBERNETES_SERVICE_HOST`/`PORT` (in-cluster configuration is HTTPS only, so the test API
//! server, which speaks plain HTTP, cannot stand in here).
//!
//! ```text
//!   target/images/ferrolb-X-VERSION.oci.tar ──tar──► layout/ ──index.json──► manifest
//!        ├─► config ◄── compared with ── Dockerfile stage `X` (+ what distroless sets)
//!        └─► layers ──tar──► rootfs/ ──unshare --mount --pid; mount -o ro; chroot 65532──► X
//!   RealKube (HTTPS, own CA) ◄── in-cluster config (token, ca.crt, namespace) ── controller
//! ```
//!
//! Skips (prints `SKIPPED: …`) when the archives are not built (`scripts/images`), when not root
//! or when the real control plane is not built (`scripts/realkube`); with
//! `FERROLB_REQUIRE_BINARIES=1` each of those is a failure. `FERROLB_IMAGES_DIR` points at the
//! archives (default `target/images`).

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use ferrolb_api::v1beta1::IPAddressPool;
use ferrolb_tests::realkube::{self, RealKube, RealKubeConfig};
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

/// The base image of both stages and what it gives an image built FROM it (its config and
/// files, from distroless's `static/static.bzl` and `common/BUILD.bazel`), which
/// `scripts/images` reproduces FROM scratch.
const DISTROLESS: &str = "gcr.io/distroless/static-debian12:nonroot";
const DISTROLESS_ENV: [&str; 2] = [
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
];
const DISTROLESS_WORKDIR: &str = "/home/nonroot";
/// The files of the base (all regular); each image adds its binary and nothing else.
const BASE_FILES: [&str; 4] = [
    "etc/group",
    "etc/nsswitch.conf",
    "etc/passwd",
    "etc/ssl/certs/ca-certificates.crt",
];

/// The install namespace and the controller's ServiceAccount, as the chart names them.
const NS: &str = "ferrolb-system";
const ACCOUNT: &str = "ferrolb-controller";
const POD_NAME: &str = "ferrolb-controller-7d9f-abcde";
/// Where the kubelet mounts a Pod's ServiceAccount token, CA and namespace.
const SERVICE_ACCOUNT_DIR: &str = "var/run/secrets/kubernetes.io/serviceaccount";

/// Runs `argv` from inside `ROOTFS` ($0) as a runtime starts a container of the chart's Pods
/// (`readOnlyRootFilesystem`, `allowPrivilegeEscalation: false`, `runAsUser`/`runAsGroup`
/// 65532): own mount and PID namespaces, the root bind-mounted read-only, /proc, and a /dev
/// with the OCI runtime spec's default devices (a glibc static binary reads /dev/urandom where
/// musl calls getrandom(2)), `no_new_privs` set, then `chroot` to uid and gid 65532
/// (supplementary groups: 65532 at most), which leaves no capabilities. The shell runs on the
/// host.
const ENTER: &str = "set -e; mount --bind \"$0\" \"$0\"; mount -o remount,bind,ro \"$0\"
    mount -t proc proc \"$0/proc\"; mount -t tmpfs -o nosuid,mode=755 dev \"$0/dev\"
    for d in null zero full random urandom tty; do
      touch \"$0/dev/$d\"; mount --bind \"/dev/$d\" \"$0/dev/$d\"
    done
    exec setpriv --no-new-privs chroot --userspec=65532:65532 \"$0\" \"$@\"";

use ferrolb_tests::skip::skip;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives in the workspace")
        .to_path_buf()
}

fn images_dir() -> PathBuf {
    std::env::var_os("FERROLB_IMAGES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/images"))
}

/// The archive `scripts/images` writes for `component`, or `None` (skipped) when it is missing
/// or the test cannot unpack and enter it (not root).
fn archive(component: &str) -> Option<PathBuf> {
    let path = images_dir().join(format!(
        "ferrolb-{component}-{}.oci.tar",
        env!("CARGO_PKG_VERSION")
    ));
    if !path.is_file() {
        return skip(format!(
            "{} is missing: build the images with `scripts/images` (or set FERROLB_IMAGES_DIR)",
            path.display()
        ));
    }
    let uid = std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(u32::MAX);
    if uid != 0 {
        return skip("not root: unpacking layers with their owners and chroot need it");
    }
    Some(path)
}

// --- the Dockerfile ------------------------------------------------------------------------------

/// What one stage of the Dockerfile declares.
#[derive(Debug, Default)]
struct Stage {
    from: String,
    user: Option<String>,
    entrypoint: Vec<String>,
    exposed: BTreeSet<String>,
    labels: BTreeMap<String, String>,
    /// Destinations of COPY instructions.
    copied: Vec<String>,
}

/// The stage named `name`, from the Dockerfile's instructions (continuation lines joined,
/// comments dropped). Only the instructions a runtime stage of ours uses are read.
fn dockerfile_stage(dockerfile: &str, name: &str) -> Stage {
    let mut instructions = Vec::new();
    let mut current = String::new();
    for line in dockerfile.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(head) => {
                current.push_str(head);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                instructions.push(std::mem::take(&mut current));
            }
        }
    }
    let mut stage: Option<Stage> = None;
    for ins in instructions {
        let (word, rest) = ins.split_once(' ').unwrap_or((&ins, ""));
        let rest = rest.trim();
        if word.eq_ignore_ascii_case("FROM") {
            if stage.is_some() {
                break;
            }
            let parts: Vec<&str> = rest.split_whitespace().collect();
            if let [image, as_, stage_name] = parts[..]
                && as_.eq_ignore_ascii_case("AS")
                && stage_name == name
            {
                stage = Some(Stage {
                    from: image.to_string(),
                    ..Default::default()
                });
            }
            continue;
        }
        let Some(s) = stage.as_mut() else { continue };
        match word.to_ascii_uppercase().as_str() {
            "USER" => s.user = Some(rest.to_string()),
            "ENTRYPOINT" => {
                s.entrypoint = serde_json::from_str(rest).expect("ENTRYPOINT in JSON form")
            }
            "EXPOSE" => s.exposed.extend(rest.split_whitespace().map(|p| {
                if p.contains('/') {
                    p.to_string()
                } else {
                    format!("{p}/tcp")
                }
            })),
            "LABEL" => {
                for pair in rest.split_whitespace() {
                    let (k, v) = pair.split_once('=').expect("LABEL key=value");
                    s.labels.insert(k.into(), v.trim_matches('"').into());
                }
            }
            "COPY" => {
                let dest = rest.split_whitespace().last().expect("COPY destination");
                s.copied.push(dest.to_string());
            }
            _ => {}
        }
    }
    stage.unwrap_or_else(|| panic!("the Dockerfile has no `{name}` stage"))
}

// --- OCI layout ---------------------------------------------------------------------------------

/// An image unpacked from its archive.
struct Unpacked {
    ref_name: String,
    config: Value,
    rootfs: PathBuf,
    _dir: tempfile::TempDir,
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn sha256(shell_input: &str, path: &Path) -> String {
    let out = run(Command::new("sh")
        .arg("-c")
        .arg(format!("{shell_input} | sha256sum"))
        .arg(path));
    let text = String::from_utf8(out.stdout).expect("sha256sum prints text");
    format!(
        "sha256:{}",
        text.split_whitespace().next().unwrap_or_default()
    )
}

/// Unpacks `archive` the way `podman load` and containerd read it: every blob is checked
/// against its digest and every uncompressed layer against the config's `diff_ids`.
fn unpack(archive: &Path) -> Unpacked {
    let dir = tempfile::Builder::new()
        .prefix("ferrolb-image-")
        .tempdir()
        .expect("temp dir");
    let layout = dir.path().join("layout");
    let rootfs = dir.path().join("rootfs");
    std::fs::create_dir_all(&layout).expect("layout dir");
    std::fs::create_dir_all(&rootfs).expect("rootfs dir");
    run(Command::new("tar")
        .arg("-xf")
        .arg(archive)
        .arg("-C")
        .arg(&layout));
    let read_json = |p: &Path| -> Value {
        let text = std::fs::read(p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
        serde_json::from_slice(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    };
    assert_eq!(
        read_json(&layout.join("oci-layout"))["imageLayoutVersion"],
        "1.0.0"
    );
    let blob = |descriptor: &Value| -> PathBuf {
        let digest = descriptor["digest"].as_str().expect("a digest");
        let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
        let path = layout.join("blobs/sha256").join(hex);
        assert_eq!(
            sha256("cat \"$0\"", &path),
            digest,
            "blob {digest} is intact"
        );
        assert_eq!(
            std::fs::metadata(&path).expect("blob").len(),
            descriptor["size"].as_u64().expect("a size"),
            "blob {digest} has the size its descriptor says"
        );
        path
    };
    let index = read_json(&layout.join("index.json"));
    let manifests = index["manifests"].as_array().expect("manifests");
    assert_eq!(manifests.len(), 1, "one image per archive: {index}");
    let ref_name = manifests[0]["annotations"]["org.opencontainers.image.ref.name"]
        .as_str()
        .expect("the archive names its image")
        .to_string();
    let manifest = read_json(&blob(&manifests[0]));
    assert_eq!(
        manifest["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    let config = read_json(&blob(&manifest["config"]));
    let diff_ids = config["rootfs"]["diff_ids"].as_array().expect("diff_ids");
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), diff_ids.len(), "one diff_id per layer");
    for (layer, diff_id) in layers.iter().zip(diff_ids) {
        let path = blob(layer);
        let media = layer["mediaType"].as_str().unwrap_or_default();
        let uncompressed = if media.ends_with("+gzip") {
            sha256("gzip -dc \"$0\"", &path)
        } else {
            sha256("cat \"$0\"", &path)
        };
        assert_eq!(
            Some(uncompressed.as_str()),
            diff_id.as_str(),
            "diff_id of {media}"
        );
        // Whiteouts would delete files of a lower layer; these images have none to apply.
        let listing = run(Command::new("tar").arg("-tf").arg(&path)).stdout;
        let whiteout = String::from_utf8_lossy(&listing)
            .lines()
            .any(|l| l.rsplit('/').next().is_some_and(|n| n.starts_with(".wh.")));
        assert!(
            !whiteout,
            "layer {path:?} has whiteouts, which unpack() does not apply"
        );
        // GNU tar detects gzip by itself; as root it keeps owners and modes.
        run(Command::new("tar")
            .args(["--numeric-owner", "-xf"])
            .arg(&path)
            .arg("-C")
            .arg(&rootfs));
    }
    let rootfs = rootfs.canonicalize().expect("rootfs path");
    Unpacked {
        ref_name,
        config,
        rootfs,
        _dir: dir,
    }
}

/// Everything under `root` but directories (files, symlinks, devices), relative to it, sorted.
fn non_directories(root: &Path) -> Vec<String> {
    let out = run(Command::new("find")
        .arg(root)
        .args(["!", "-type", "d", "-printf", "%P\\n"]));
    let mut files: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    files.sort();
    files
}

// --- ELF ----------------------------------------------------------------------------------------

/// What an ELF executable asks of the dynamic loader.
#[derive(Debug, PartialEq, Eq)]
struct Linkage {
    /// `PT_INTERP`: the loader the kernel must start first.
    interpreter: Option<String>,
    /// `DT_NEEDED` entries: shared libraries to load.
    needed: usize,
}

/// Reads the program headers of a 64-bit little-endian ELF file (System V gABI, "Program
/// Header" and "Dynamic Section"): a static executable has no `PT_INTERP` and no `DT_NEEDED`.
fn linkage(elf: &[u8]) -> Result<Linkage, String> {
    const PT_DYNAMIC: u32 = 2;
    const PT_INTERP: u32 = 3;
    const DT_NEEDED: u64 = 1;
    let bytes = |at: usize, n: usize| {
        elf.get(at..at + n)
            .ok_or_else(|| format!("truncated at byte {at}"))
    };
    let u16_at = |at| bytes(at, 2).map(|b| u16::from_le_bytes([b[0], b[1]]) as usize);
    let u32_at = |at| bytes(at, 4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")));
    let u64_at = |at| bytes(at, 8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
    if bytes(0, 4)? != b"\x7fELF" {
        return Err("not an ELF file".into());
    }
    if bytes(4, 2)? != [2, 1] {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    let (phoff, phentsize, phnum) = (u64_at(0x20)? as usize, u16_at(0x36)?, u16_at(0x38)?);
    let mut found = Linkage {
        interpreter: None,
        needed: 0,
    };
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        let (offset, size) = (u64_at(ph + 8)? as usize, u64_at(ph + 0x20)? as usize);
        match u32_at(ph)? {
            PT_INTERP => {
                let path = bytes(offset, size)?;
                let path = path.split(|b| *b == 0).next().unwrap_or_default();
                found.interpreter = Some(String::from_utf8_lossy(path).into_owned());
            }
            PT_DYNAMIC => {
                for entry in (offset..offset + size).step_by(16) {
                    match u64_at(entry)? {
                        0 => break,
                        DT_NEEDED => found.needed += 1,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Ok(found)
}

// --- running an entrypoint ----------------------------------------------------------------------

/// A command that runs the image's entrypoint with `args` inside `image.rootfs` (see
/// [`ENTER`]), with the environment a runtime gives it: the config's `Env` plus `extra`.
fn entrypoint(image: &Unpacked, args: &[&str], extra: &[(&str, String)]) -> Command {
    for mount_point in ["proc", "dev"] {
        std::fs::create_dir_all(image.rootfs.join(mount_point)).expect("a mount point");
    }
    let mut cmd = Command::new("unshare");
    cmd.args([
        "--mount",
        "--pid",
        "--fork",
        "--kill-child",
        "sh",
        "-c",
        ENTER,
    ])
    .arg(&image.rootfs)
    .args(strings(&image.config["config"]["Entrypoint"]))
    .args(args)
    .env_clear()
    .stdin(Stdio::null());
    for kv in strings(&image.config["config"]["Env"]) {
        let (k, v) = kv.split_once('=').expect("Env is KEY=VALUE");
        cmd.env(k, v);
    }
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|s| s.as_str().expect("a string").to_string())
        .collect()
}

/// Checks one archive against the Dockerfile's stage and returns it unpacked.
fn checked_image(component: &str, archive: &Path) -> Unpacked {
    let dockerfile =
        std::fs::read_to_string(workspace().join("Dockerfile")).expect("the Dockerfile");
    let stage = dockerfile_stage(&dockerfile, component);
    let image = unpack(archive);
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        image.ref_name,
        format!("ghcr.io/ferrolb/ferrolb-{component}:{version}")
    );
    assert_eq!(
        stage.from, DISTROLESS,
        "scripts/images reproduces this base; change both together"
    );

    let config = &image.config;
    let c = &config["config"];
    assert_eq!(
        (config["os"].as_str(), config["architecture"].as_str()),
        (Some("linux"), Some("amd64"))
    );
    assert_eq!(c["User"].as_str(), stage.user.as_deref(), "USER");
    assert_eq!(c["User"], "65532:65532", "the chart runs as 65532 too");
    assert_eq!(strings(&c["Entrypoint"]), stage.entrypoint, "ENTRYPOINT");
    assert!(strings(&c["Cmd"]).is_empty(), "no CMD: {}", c["Cmd"]);
    let exposed: BTreeSet<String> = c["ExposedPorts"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    assert_eq!(exposed, stage.exposed, "EXPOSE");
    let labels: BTreeMap<String, String> =
        serde_json::from_value(c["Labels"].clone()).unwrap_or_default();
    assert_eq!(
        labels, stage.labels,
        "LABEL (buildah's own label is turned off)"
    );
    assert_eq!(strings(&c["Env"]), DISTROLESS_ENV, "Env of the base");
    assert_eq!(c["WorkingDir"], DISTROLESS_WORKDIR);

    // The distroless files, and exactly one more: the binary where the stage copies it.
    let binary = stage.entrypoint.first().expect("an entrypoint").clone();
    assert_eq!(
        stage.copied,
        std::slice::from_ref(&binary),
        "the stage copies its binary to the entrypoint"
    );
    let mut want: Vec<String> = BASE_FILES.iter().map(|f| f.to_string()).collect();
    want.push(binary.trim_start_matches('/').to_string());
    want.sort();
    assert_eq!(
        non_directories(&image.rootfs),
        want,
        "no shell, no libraries, nothing else"
    );
    let read = |f: &str| std::fs::read_to_string(image.rootfs.join(f)).expect(f);
    assert!(
        read("etc/passwd")
            .contains("\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")
    );
    assert!(read("etc/group").contains("\nnonroot:x:65532:\n"));
    let certificates = read("etc/ssl/certs/ca-certificates.crt")
        .matches("-----BEGIN CERTIFICATE-----")
        .count();
    assert!(
        certificates > 100,
        "Debian's CA bundle ({certificates} certificates)"
    );
    let meta = |f: &str| std::fs::metadata(image.rootfs.join(f)).expect(f);
    assert_eq!(meta("tmp").permissions().mode() & 0o7777, 0o1777, "/tmp");
    let home = meta("home/nonroot");
    assert_eq!(
        (home.uid(), home.gid(), home.mode() & 0o7777),
        (65532, 65532, 0o700)
    );
    let bin = meta(binary.trim_start_matches('/'));
    assert_eq!(
        (bin.uid(), bin.gid(), bin.mode() & 0o7777),
        (0, 0, 0o755),
        "{binary}"
    );

    let elf = std::fs::read(image.rootfs.join(binary.trim_start_matches('/'))).expect("binary");
    assert_eq!(
        linkage(&elf),
        Ok(Linkage {
            interpreter: None,
            needed: 0
        }),
        "{binary} is static: nothing in the image could load a library"
    );
    image
}

/// `--version` and `--help` of the entrypoint, run inside the image; every EXPOSEd port is a
/// default the binary listens on.
fn prints_version_and_help(component: &str, image: &Unpacked) {
    let out = run(&mut entrypoint(image, &["--version"], &[]));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("ferrolb-{component} {}\n", env!("CARGO_PKG_VERSION"))
    );
    let out = run(&mut entrypoint(image, &["--help"], &[]));
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("Usage: ferrolb-"), "{help}");
    let defaults: Vec<&str> = help
        .split("[default: ")
        .skip(1)
        .filter_map(|s| s.split(']').next())
        .collect();
    for port in image.config["config"]["ExposedPorts"]
        .as_object()
        .expect("ExposedPorts")
        .keys()
    {
        let number = port.split('/').next().unwrap_or_default();
        assert!(
            defaults
                .iter()
                .any(|d| *d == number || d.ends_with(&format!(":{number}"))),
            "EXPOSE {port} is a port ferrolb-{component} listens on by default: {defaults:?}"
        );
    }
}

#[test]
fn the_elf_reader_sees_the_loader_and_libraries_of_a_dynamic_executable() {
    // This test binary is linked against glibc: a check that passes it would pass anything.
    let exe = std::fs::read(std::env::current_exe().expect("own path")).expect("own binary");
    let found = linkage(&exe).expect("an ELF file");
    assert!(found.interpreter.is_some_and(|i| i.contains("ld-linux")));
    assert!(found.needed > 0);
    assert!(linkage(b"#!/bin/sh\n").is_err());
}

#[test]
fn the_dockerfile_stages_are_read_as_docker_reads_them() {
    let stage = dockerfile_stage(
        "FROM a AS build\nUSER 1\nFROM b AS run\n# EXPOSE 1\nLABEL x=\"y\" \\\n  z=w\nEXPOSE 80 \
         53/udp\nCOPY --from=build /out/x /usr/bin/x\nUSER 2:2\nENTRYPOINT [\"/usr/bin/x\"]\n",
        "run",
    );
    assert_eq!(stage.from, "b");
    assert_eq!(stage.user.as_deref(), Some("2:2"));
    assert_eq!(stage.entrypoint, ["/usr/bin/x"]);
    assert_eq!(
        stage.exposed,
        BTreeSet::from(["80/tcp".into(), "53/udp".into()])
    );
    assert_eq!(
        stage.labels,
        BTreeMap::from([("x".into(), "y".into()), ("z".into(), "w".into())])
    );
    assert_eq!(stage.copied, ["/usr/bin/x"]);
}

#[test]
fn the_speaker_image_is_its_dockerfile_stage_and_runs_as_65532_from_its_own_root_filesystem() {
    let Some(archive) = archive("speaker") else {
        return;
    };
    let image = checked_image("speaker", &archive);
    prints_version_and_help("speaker", &image);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_controller_image_runs_as_65532_from_a_read_only_root_filesystem_and_assigns_an_address()
 {
    let Some(archive) = archive("controller") else {
        return;
    };
    let image = checked_image("controller", &archive);
    prints_version_and_help("controller", &image);
    if !realkube::available() {
        skip::<()>("the real control plane is not built: run scripts/realkube");
        return;
    }
    let server = RealKube::start(RealKubeConfig {
        controller_manager: false,
        ..Default::default()
    })
    .await
    .expect("the real API server starts");
    let client = server.client().expect("an admin client");
    realkube::install_crds(&client, &[ferrolb_api::crd::chart_crd_dir()])
        .await
        .expect("the CRDs are served");
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("the install namespace");
    // The chart's RBAC is tested on its own (chart.rs); here the account may do anything.
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "ferrolb-controller-image-test"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "cluster-admin",
        },
        "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NS}],
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("the binding");
    let token = server.token_for(NS, ACCOUNT).await.expect("a token");

    // What the kubelet mounts into the Pod (world-readable, as a projected volume's default).
    let mounted = image.rootfs.join(SERVICE_ACCOUNT_DIR);
    std::fs::create_dir_all(&mounted).expect("the token's directory");
    let ca = std::fs::read(server.dir().join("pki/ca.crt")).expect("the cluster's CA");
    for (file, content) in [
        ("token", token.as_bytes()),
        ("ca.crt", &ca),
        ("namespace", NS.as_bytes()),
    ] {
        std::fs::write(mounted.join(file), content).expect("a mounted file");
        std::fs::set_permissions(mounted.join(file), std::fs::Permissions::from_mode(0o644))
            .expect("mode");
    }
    let (host, port) = server
        .url()
        .trim_start_matches("https://")
        .rsplit_once(':')
        .expect("https://HOST:PORT");
    let env = [
        ("KUBERNETES_SERVICE_HOST", host.to_string()),
        ("KUBERNETES_SERVICE_PORT", port.to_string()),
        ("POD_NAMESPACE", NS.to_string()),
        ("POD_NAME", POD_NAME.to_string()),
    ];
    let log_path = tempfile::NamedTempFile::new().expect("a log file");
    let log = log_path.reopen().expect("the log file");
    // Metrics on an ephemeral loopback port: the test shares the host's network.
    let mut cmd = entrypoint(
        &image,
        &["--metrics-addr=127.0.0.1:0", "--log-level=info"],
        &env,
    );
    let started = Instant::now();
    let controller = Running(
        cmd.stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("unshare starts"),
    );
    let log = || std::fs::read_to_string(log_path.path()).unwrap_or_default();

    let pool: IPAddressPool = serde_json::from_value(json!({
        "metadata": {"name": "images", "namespace": NS},
        "spec": {"addresses": ["192.0.2.40/30"]},
    }))
    .unwrap();
    Api::<IPAddressPool>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &pool)
        .await
        .expect("the pool");
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"type": "LoadBalancer", "selector": {"app": "web"}, "ports": [{"port": 80}]},
    }))
    .unwrap();
    let services = Api::<Service>::namespaced(client.clone(), "default");
    services
        .create(&PostParams::default(), &svc)
        .await
        .expect("the Service");

    // The entrypoint is the only child of unshare: pid 1 of its namespace.
    let unshare = controller.0.id();
    let pid = eventually(
        Duration::from_secs(10),
        "the controller's process",
        &log,
        async || child_of(unshare),
    )
    .await;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("its status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.split_whitespace().collect::<Vec<_>>())
            .unwrap_or_default()
    };
    assert_eq!(field("Uid:"), ["65532"; 4], "{status}");
    assert_eq!(field("Gid:"), ["65532"; 4], "{status}");
    assert!(field("Groups:").iter().all(|g| *g == "65532"), "{status}");
    assert_eq!(field("NoNewPrivs:"), ["1"], "{status}");
    assert_eq!(field("CapEff:"), ["0000000000000000"], "{status}");
    assert_eq!(
        std::fs::read_link(format!("/proc/{pid}/root")).expect("its root"),
        image.rootfs,
        "it runs inside the image's root filesystem"
    );

    let ip = eventually(
        Duration::from_secs(60),
        "an address for default/web",
        &log,
        async || {
            let ip = services
                .get("web")
                .await
                .ok()?
                .status?
                .load_balancer?
                .ingress?
                .first()?
                .ip
                .clone()?;
            Some(ip)
        },
    )
    .await;
    assert!(
        ["192.0.2.40", "192.0.2.41", "192.0.2.42", "192.0.2.43"].contains(&ip.as_str()),
        "{ip} is from the pool"
    );
    // The status was written with the mounted token, by the controller of this Pod.
    let user = format!("system:serviceaccount:{NS}:{ACCOUNT}");
    let agent = format!(
        "ferrolb-controller/{} ({POD_NAME})",
        env!("CARGO_PKG_VERSION")
    );
    let audit = "the status write in the audit log";
    let written = eventually(Duration::from_secs(10), audit, &log, async || {
        server.request_log().into_iter().find(|r| {
            r.user == user
                && r.request.subresource.as_deref() == Some("status")
                && r.request.resource.as_deref() == Some("services")
                && (200..300).contains(&r.request.status)
        })
    })
    .await;
    assert_eq!(written.request.user_agent, agent);
    eprintln!(
        "the controller in {} assigned {ip} {:.1} s after it was started",
        image.ref_name,
        started.elapsed().as_secs_f64()
    );
}

/// The first process whose parent is `parent`.
fn child_of(parent: u32) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
        // pid (comm) state ppid ...: comm may hold spaces, so read after its closing paren.
        let ppid: u32 = stat
            .rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        (ppid == parent).then_some(pid)
    })
}

/// Polls `f` every 100 ms until it returns `Some`; after `timeout` fails with `what` and the
/// controller's log.
async fn eventually<T>(
    timeout: Duration,
    what: &str,
    log: &dyn Fn() -> String,
    mut f: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; the controller logged:\n{}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A started `unshare`. Dropping it kills the entrypoint first: it is the PID namespace's
/// init, and `--kill-child` alone does not reach it (the parent-death signal that option sets
/// is cleared when `chroot --userspec` changes the process's credentials), so it would outlive
/// the test.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(init) = child_of(self.0.id()) {
            let _ = Command::new("kill")
                .args(["-KILL", &init.to_string()])
                .status();
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
