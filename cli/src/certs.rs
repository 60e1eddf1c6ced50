//! The throwaway certificates of `cluster up --tls`: a CA made for this one cluster, a server certificate it signed
//! for `127.0.0.1` and `localhost`, and a client certificate (Redis asks every TLS client for one by default,
//! `tls-auth-clients yes`). Written as PEM files into the cluster's data directory, so `cluster down` removes them
//! with the nodes' data; private keys are readable by their owner only.
//!
//! The server certificate names its addresses as subject alternative names: rustls (webpki) checks a server's name
//! against those only, never the common name.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

use crate::state::TlsFiles;

/// Makes a new CA, server and client certificate in `dir` (created if needed) and returns where they are.
///
/// # Errors
///
/// A message naming what failed: rcgen's error, or the file that could not be written.
pub fn generate(dir: &Path) -> Result<TlsFiles, String> {
    let failed = |what: &str, e: rcgen::Error| format!("cannot make the {what}: {e}");
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(|e| failed("CA", e))?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name = name("muxlock cluster up throwaway CA");
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key = KeyPair::generate().map_err(|e| failed("CA key", e))?;
    let ca_cert = ca.self_signed(&ca_key).map_err(|e| failed("CA", e))?;

    let leaf = |common: &str, names: &[&str], purpose| -> Result<(String, String), String> {
        let names = names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
        let mut params = CertificateParams::new(names).map_err(|e| failed(common, e))?;
        params.distinguished_name = name(common);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![purpose];
        let key = KeyPair::generate().map_err(|e| failed(common, e))?;
        let cert = params
            .signed_by(&key, &ca_cert, &ca_key)
            .map_err(|e| failed(common, e))?;
        Ok((cert.pem(), key.serialize_pem()))
    };
    let (server, server_key) = leaf(
        "muxlock local node",
        &["127.0.0.1", "localhost"],
        ExtendedKeyUsagePurpose::ServerAuth,
    )?;
    let (client, client_key) = leaf(
        "muxlock client",
        &["muxlock-client"],
        ExtendedKeyUsagePurpose::ClientAuth,
    )?;

    fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let files = TlsFiles::in_dir(dir);
    let written = [
        (&files.ca, ca_cert.pem(), false),
        (&files.server_cert, server, false),
        (&files.server_key, server_key, true),
        (&files.client_cert, client, false),
        (&files.client_key, client_key, true),
    ];
    for (path, pem, private) in written {
        write(path, pem.as_bytes(), private)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(files)
}

fn name(common: &str) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, common);
    name
}

/// Writes a new file; a private key is created with mode 0600 from the start (never readable by others, even
/// for a moment).
fn write(path: &Path, bytes: &[u8], private: bool) -> io::Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(if private { 0o600 } else { 0o644 })
        .open(path)?;
    f.write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_files_are_pem_and_the_keys_private() {
        let dir = std::env::temp_dir().join(format!("muxlock-certs-{}", std::process::id()));
        let files = generate(&dir).unwrap();
        for path in [&files.ca, &files.server_cert, &files.client_cert] {
            assert!(
                fs::read_to_string(path)
                    .unwrap()
                    .starts_with("-----BEGIN CERTIFICATE-----")
            );
        }
        for path in [&files.server_key, &files.client_key] {
            assert!(fs::read_to_string(path).unwrap().contains("PRIVATE KEY"));
            assert_eq!(
                fs::metadata(path).unwrap().permissions().mode() & 0o777,
                0o600
            );
        }
        fs::remove_dir_all(&dir).unwrap();
    }
}
