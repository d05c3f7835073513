//! The OCI image (`deploy/Containerfile`, staged by `scripts/oci-image`):
//! built from scratch with podman from the binary under test, it holds the
//! binary, every library `ldd` says it loads, the shipped config pointed at
//! the image's suites, and `serve` as its command. Then it is run with
//! `config check`; a machine that cannot run containers (no permission to
//! set a container's limits, as on this project's CI machine) says so
//! loudly, and the build is still asserted. Needs podman: missing, it
//! fails with `INTENTGATE_REQUIRE_PODMAN=1` (CI) and is skipped loudly
//! otherwise.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

#[test]
fn the_image_builds_from_scratch_and_holds_what_serve_needs() {
    let Some(podman) = common::system_binary("podman", "INTENTGATE_REQUIRE_PODMAN", "the OCI image test")
    else {
        return;
    };
    let tag = format!("localhost/intentgate-test:{}", uuid::Uuid::now_v7().simple());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/oci-image");
    let built = Command::new(script)
        .args(["--binary", env!("CARGO_BIN_EXE_intentgate"), "--tag", &tag])
        .env(
            "PATH",
            format!("{}:{}", podman.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default()),
        )
        .output()
        .unwrap();
    assert!(built.status.success(), "scripts/oci-image failed: {}", String::from_utf8_lossy(&built.stderr));
    let podman = |args: &[&str]| Command::new(&podman).args(args).output().unwrap();

    let inspect =
        podman(&["image", "inspect", &tag, "--format", "{{json .Config.Entrypoint}} {{json .Config.Cmd}}"]);
    let config = String::from_utf8_lossy(&inspect.stdout);
    assert!(config.contains(r#"["/usr/bin/intentgate"]"#), "{config}");
    assert!(config.contains(r#"["serve","--config","/etc/intentgate/gateway.toml"]"#), "{config}");

    // What the image holds, read without running it.
    let created = podman(&["create", &tag]);
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    let container = String::from_utf8_lossy(&created.stdout).trim().to_owned();
    let exported = podman(&["export", &container]);
    let _ = podman(&["rm", &container]);
    let mut files = tar_names(&exported.stdout);
    files.sort();
    for wanted in [
        "usr/bin/intentgate",
        "lib64/ld-linux-x86-64.so.2",
        "etc/intentgate/gateway.toml",
        "etc/intentgate/contract-tests/chat.toml",
    ] {
        assert!(files.iter().any(|f| f == wanted), "{wanted} missing from the image: {files:?}");
    }
    let libraries = Command::new("ldd").arg(env!("CARGO_BIN_EXE_intentgate")).output().unwrap();
    for lib in String::from_utf8_lossy(&libraries.stdout).split_whitespace().filter(|w| w.starts_with("/lib"))
    {
        let inside = lib.trim_start_matches('/');
        assert!(files.iter().any(|f| f == inside), "{lib} (the binary loads it) missing from the image");
    }

    let run = podman(&["run", "--rm", &tag, "config", "check", "--config", "/etc/intentgate/gateway.toml"]);
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    if !run.status.success() && stderr.contains("OCI permission denied") {
        common::loud(&format!(
            "\n!!! the image was built and inspected, but this machine cannot run a container:\n!!! {}\n",
            stderr.trim()
        ));
    } else {
        assert!(run.status.success(), "config check inside the image: {stderr}");
    }
    let _ = podman(&["rmi", &tag]);
}

/// The member names of a tar archive (ustar headers, 512-byte blocks).
fn tar_names(archive: &[u8]) -> Vec<String> {
    let mut names = Vec::new();
    let mut offset = 0;
    while offset + 512 <= archive.len() {
        let header = &archive[offset..offset + 512];
        if header.iter().all(|b| *b == 0) {
            break;
        }
        let field = |range: std::ops::Range<usize>| {
            let bytes = &header[range];
            String::from_utf8_lossy(&bytes[..bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len())])
                .into_owned()
        };
        let (name, prefix) = (field(0..100), field(345..500));
        let size = usize::from_str_radix(field(124..136).trim(), 8).unwrap_or(0);
        let full = if prefix.is_empty() { name } else { format!("{prefix}/{name}") };
        names.push(full.trim_start_matches("./").trim_end_matches('/').to_owned());
        offset += 512 + size.div_ceil(512) * 512;
    }
    names
}
