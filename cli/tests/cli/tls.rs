//! `--tls-ca`, `--tls-cert`, `--tls-key` (and `MUXLOCK_TLS_*`) against a real redis-server speaking TLS and asking
//! for a client certificate, with a CA made for the run.

use crate::support;

/// The root's certificate maker needs `make_temp_dir` where it expects it.
mod process {
    pub use super::support::process::*;
}
#[path = "../../../tests/support/certs.rs"]
mod certs;

use certs::Certs;
use support::{RedisServer, TempDir, get};

#[test]
fn tls_nodes_with_a_ca_and_a_client_certificate() {
    let certs = Certs::generate();
    let node = RedisServer::builder().tls(certs.dir(), true).start();
    let state = TempDir::new();
    let url = node.tls_url();
    let path = |name: &str| certs.path(name).to_str().unwrap().to_owned();
    let (ca, cert, key) = (path("ca.crt"), path("client.crt"), path("client.key"));
    let muxlock = |args: &[&str]| {
        support::Muxlock::new(state.path(), args)
            .env("MUXLOCK_NODES", &url)
            .env("MUXLOCK_RESTART_GUARD", "off")
    };

    // Flags.
    let run = muxlock(&[
        "acquire",
        "job",
        "--ttl",
        "10s",
        "--tls-ca",
        &ca,
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
    ])
    .run();
    run.expect(0);
    let value = run.stdout.trim().to_owned();
    assert_eq!(get(&node, "job"), format!("$40\r\n{value}\r\n"));
    muxlock(&[
        "release",
        "job",
        &value,
        "--tls-ca",
        &ca,
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
    ])
    .run()
    .expect(0);

    // The environment, and exec.
    let run = muxlock(&[
        "exec",
        "job",
        "--",
        "sh",
        "-c",
        "echo \"$MUXLOCK_RESOURCE\"",
    ])
    .env("MUXLOCK_TLS_CA", &ca)
    .env("MUXLOCK_TLS_CERT", &cert)
    .env("MUXLOCK_TLS_KEY", &key)
    .run();
    run.expect(0);
    assert_eq!(run.stdout, "job\n");

    // No client certificate: the node refuses the handshake; the headline and a line naming the node, no lock.
    let run = muxlock(&["acquire", "-n", "job", "--ttl", "10s", "--tls-ca", &ca]).run();
    assert_ne!(run.code(), 0, "{run:#?}");
    run.error_with_nodes(1);
    assert!(run.stderr.contains(&url), "{run:#?}");
    // The wrong CA: the node's certificate is refused.
    let other = path("other-ca.crt");
    let run = muxlock(&[
        "acquire",
        "-n",
        "job",
        "--ttl",
        "10s",
        "--tls-ca",
        &other,
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
    ])
    .run();
    assert_ne!(run.code(), 0, "{run:#?}");
    run.error_with_nodes(1);
    // A certificate without its key: a usage error before anything is sent.
    muxlock(&["acquire", "job", "--ttl", "10s", "--tls-cert", &cert])
        .run()
        .expect(64);
    assert_eq!(get(&node, "job"), "$-1\r\n");
}
