//! [`Certs`]: a throwaway certificate authority, a server certificate and a client certificate, made with rcgen
//! for each test run and written as PEM files in a temp directory (removed on drop).
//!
//! The server certificate names `localhost` and `127.0.0.1` as subject alternative names: rustls (webpki) checks
//! a server's name against those only. Redis' own `utils/gen-test-certs.sh` makes certificates with a common
//! name and no SAN, which rustls rejects, hence this.

use std::fs;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};

use super::process::make_temp_dir;

/// A CA with a server and a client certificate it signed, as files.
#[derive(Debug)]
pub struct Certs {
    dir: PathBuf,
}

struct Ca {
    cert: Certificate,
    key: KeyPair,
}

fn ca(name: &str) -> Ca {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let key = KeyPair::generate().expect("CA key");
    let cert = params.self_signed(&key).expect("CA certificate");
    Ca { cert, key }
}

/// A leaf certificate signed by `ca`, for `names` (subject alternative names) and one purpose.
fn leaf(
    ca: &Ca,
    common_name: &str,
    names: &[&str],
    purpose: ExtendedKeyUsagePurpose,
) -> (String, String) {
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let mut params = CertificateParams::new(names).expect("leaf params");
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![purpose];
    let key = KeyPair::generate().expect("leaf key");
    let cert = params
        .signed_by(&key, &ca.cert, &ca.key)
        .expect("leaf certificate");
    (cert.pem(), key.serialize_pem())
}

impl Certs {
    /// Makes a new CA (`ca.crt`), a server certificate for `localhost` and `127.0.0.1` (`server.crt`,
    /// `server.key`), a client certificate (`client.crt`, `client.key`), and a second, unrelated CA
    /// (`other-ca.crt`) to trust by mistake.
    ///
    /// # Panics
    /// If rcgen fails or the files cannot be written.
    #[track_caller]
    pub fn generate() -> Certs {
        let dir = make_temp_dir();
        let authority = ca("muxlock test CA");
        let (server, server_key) = leaf(
            &authority,
            "muxlock test server",
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let (client, client_key) = leaf(
            &authority,
            "muxlock test client",
            &["muxlock-client"],
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        let other = ca("another CA");
        let files = [
            ("ca.crt", authority.cert.pem()),
            ("server.crt", server),
            ("server.key", server_key),
            ("client.crt", client),
            ("client.key", client_key),
            ("other-ca.crt", other.cert.pem()),
        ];
        for (name, pem) in files {
            fs::write(dir.join(name), pem).expect("write a PEM file");
        }
        Certs { dir }
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// One of the files: `ca.crt`, `server.crt`, `server.key`, `client.crt`, `client.key`, `other-ca.crt`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// The directory of the files, as `RedisServerBuilder::tls` takes it.
impl AsRef<Path> for Certs {
    fn as_ref(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}
