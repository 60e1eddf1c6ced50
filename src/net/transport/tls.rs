//! TLS on the fanout's own `mio` sockets, with rustls 0.23 driven sans-IO (its `tlsclient-mio` example's calls:
//! `read_tls`, `process_new_packets`, `reader`, `writer`, `write_tls`): no second runtime, no thread of its own.
//!
//! # Sharing a session between the writer and the driver, and the lock order
//!
//! Over plain TCP the writer role and the driver's read side share the socket freely: they use its two
//! directions. A TLS session is one state for both: the writer encrypts (`writer`, then `write_tls`), the driver
//! decrypts (`read_tls`, `process_new_packets`, `reader`) and also writes (a handshake's next flight, alerts, key
//! updates: rustls queues them while processing what was read). So each [`TlsLink`] keeps its session behind a
//! mutex of its own, held only around rustls calls and the socket system calls that go with them, never to wait.
//!
//! **Lock order.** The session mutex is a leaf: a thread holding it takes no other lock, and the fanout's lock is
//! never held while taking it (writes and reads run outside the fanout's lock; closing a connection under the
//! fanout's lock shuts the socket down without the session, sending no `close_notify`). So the two are never held
//! together, and there is no order to get wrong.
//!
//! # The rules followed
//!
//! - **Read until the socket is drained**: an edge-triggered poll reports the socket once per arrival, and rustls
//!   may hold plaintext after a read; every `read_tls` is followed by `process_new_packets` and by draining
//!   `reader` into the connection's buffer, until `WouldBlock` or a short read (which, as over plain TCP, drained
//!   the socket: see [`TlsLink::read`]), within the driver's per-turn budget.
//! - **Flush after reads**: processing may queue records (the handshake's next flight, a key update), so every
//!   read ends with `write_tls` while rustls wants to write. A write that meets a full socket leaves the rest in
//!   rustls and returns `Ok(false)`, even when the whole batch was taken: the node's state then counts the write
//!   as stalled, a driver keeps turning, and the socket's next writable event makes the driver read (nothing) and
//!   flush again, as does the next writer first.
//! - **One turn's commands share records**: the writer hands a node's whole batch to `writer()` at once, and
//!   rustls cuts it into records of up to 16 KiB, written with one vectored `write_tls`.
//! - **The handshake counts against the connect timeout**: the connection is not up until the handshake is done
//!   (see [`NodeState`](crate::net::state::NodeState)'s link).
//! - **Nothing is written before the handshake completes**: commands queued meanwhile wait in the node's queue,
//!   not in rustls (which would hold them until the driver reads the server's last flight, out of sight of
//!   whoever decides that a driver must keep turning: a release round that ended at a majority would leave its
//!   request there, unsent). The turn that reads that flight sends the Finished message, files the end of the
//!   handshake, and writes the queue.

use std::io::{self, Read, Write};
use std::sync::{Arc, Mutex};

use bytes::{Buf, BytesMut};
use mio::net::TcpStream;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    AlertDescription, ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore,
    SignatureScheme,
};

use super::{READ_BUDGET, ReadOutcome, Transport};
use crate::net::addr::NodeAddr;
use crate::net::error::{NodeError, TlsError};
use crate::net::stats::NodeStats;
use crate::net::tls_config::TlsConfig;
use crate::sync::lock;

/// The client configurations the nodes of one fanout need, built once (certificates read, roots loaded) and
/// shared: their session caches let a reconnect resume its session.
#[derive(Debug)]
pub(crate) struct Connector {
    verified: Option<Arc<ClientConfig>>,
    unverified: Option<Arc<ClientConfig>>,
}

/// What one node's TLS connections are made with.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
    server: Arc<str>,
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

impl Connector {
    /// The configurations `nodes` need (`None` if none of them is `rediss://`).
    ///
    /// # Errors
    ///
    /// `InvalidInput`, with a message naming the file or setting: a CA file or client certificate that cannot be
    /// read or holds nothing usable, no root certificates on the platform, or a host that is not a valid server
    /// name.
    pub(crate) fn new(tls: &TlsConfig, nodes: &[NodeAddr]) -> io::Result<Option<Connector>> {
        let tls_nodes = || nodes.iter().filter(|a| a.tls());
        if tls_nodes().next().is_none() {
            return Ok(None);
        }
        for addr in tls_nodes() {
            ServerName::try_from(addr.host()).map_err(|_| {
                invalid(format!(
                    "node {addr}: {:?} is not a valid TLS server name",
                    addr.host()
                ))
            })?;
        }
        let skip_all = tls.dangerous_no_verification();
        let verified = match tls_nodes().any(|a| !a.insecure()) && !skip_all {
            true => Some(Arc::new(client_config(tls, true)?)),
            false => None,
        };
        let unverified = match tls_nodes().any(|a| a.insecure()) || skip_all {
            true => Some(Arc::new(client_config(tls, false)?)),
            false => None,
        };
        Ok(Some(Connector {
            verified,
            unverified,
        }))
    }

    /// What `addr`'s connections are made with (`None` for a plain node).
    pub(crate) fn target(&self, addr: &NodeAddr) -> Option<Target> {
        if !addr.tls() {
            return None;
        }
        let config = match addr.insecure() {
            true => self.unverified.as_ref(),
            false => self.verified.as_ref().or(self.unverified.as_ref()),
        }?;
        let name = ServerName::try_from(addr.host().to_owned()).ok()?;
        Some(Target {
            config: Arc::clone(config),
            name,
            server: addr.host().into(),
        })
    }
}

/// A rustls client configuration with the `ring` provider (explicit, so that no process-wide default is needed).
fn client_config(tls: &TlsConfig, verify: bool) -> io::Result<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(format!("TLS: {e}")))?;
    let builder = match verify {
        true => builder.with_root_certificates(roots(tls)?),
        false => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerification(provider))),
    };
    match tls.client_cert() {
        None => Ok(builder.with_no_client_auth()),
        Some((cert, key)) => {
            let chain = read_pem(cert, "client certificate", |pem| {
                CertificateDer::pem_slice_iter(pem).collect::<Result<Vec<_>, _>>()
            })?;
            if chain.is_empty() {
                return Err(invalid(format!(
                    "TLS client certificate {}: no CERTIFICATE in the file",
                    cert.display()
                )));
            }
            let key = read_pem(key, "client key", PrivateKeyDer::from_pem_slice)?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| invalid(format!("TLS client certificate and key: {e}")))
        }
    }
}

/// Reads a PEM file and parses it, with errors naming the file (never quoting its contents).
fn read_pem<T>(
    path: &std::path::Path,
    what: &str,
    parse: impl FnOnce(&[u8]) -> Result<T, rustls::pki_types::pem::Error>,
) -> io::Result<T> {
    let pem =
        std::fs::read(path).map_err(|e| invalid(format!("TLS {what} {}: {e}", path.display())))?;
    parse(&pem).map_err(|e| invalid(format!("TLS {what} {}: {e}", path.display())))
}

/// The roots to verify against: the CA file's, or else the platform's.
fn roots(tls: &TlsConfig) -> io::Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    match tls.ca_file() {
        Some(path) => {
            let certs = read_pem(path, "CA file", |pem| {
                CertificateDer::pem_slice_iter(pem).collect::<Result<Vec<_>, _>>()
            })?;
            for cert in certs {
                roots
                    .add(cert)
                    .map_err(|e| invalid(format!("TLS CA file {}: {e}", path.display())))?;
            }
            if roots.is_empty() {
                return Err(invalid(format!(
                    "TLS CA file {}: no CERTIFICATE in the file",
                    path.display()
                )));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                let why = found
                    .errors
                    .first()
                    .map_or_else(String::new, |e| format!(" ({e})"));
                return Err(invalid(format!(
                    "TLS: no root certificates found on this system{why}: give the nodes' CA with \
                     TlsConfig::with_ca_file"
                )));
            }
        }
    }
    Ok(roots)
}

/// Accepts any server certificate (signatures are still checked, so the handshake itself is sound). Only for
/// [`TlsConfig::with_dangerous_no_verification`] and `#insecure` nodes.
#[derive(Debug)]
struct NoVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

impl Target {
    /// A TLS session over `socket`, its handshake to start as soon as the socket connects: the ClientHello is
    /// queued in rustls, and the driver's first read of the connection flushes it.
    pub(crate) fn link(&self, socket: TcpStream) -> Result<Transport, NodeError> {
        let session = ClientConnection::new(Arc::clone(&self.config), self.name.clone())
            .map_err(|e| tls_error(&self.server, e))?;
        Ok(Transport::Tls(Box::new(TlsLink {
            socket,
            session: Mutex::new(session),
            server: Arc::clone(&self.server),
        })))
    }
}

/// A TLS error of the session with `server`, explained where a hint helps.
fn tls_error(server: &Arc<str>, e: rustls::Error) -> NodeError {
    use rustls::Error as E;
    let hint = match &e {
        E::InvalidCertificate(_) => Some(
            "the node's certificate is not trusted: check the CA (TlsConfig::with_ca_file) and that the \
             certificate names this host",
        ),
        E::AlertReceived(AlertDescription::CertificateRequired) => Some(
            "the node requires a client certificate (TlsConfig::with_client_cert; Redis' tls-auth-clients)",
        ),
        E::AlertReceived(
            AlertDescription::UnknownCA
            | AlertDescription::BadCertificate
            | AlertDescription::CertificateUnknown
            | AlertDescription::DecryptError,
        ) => Some("the node refused our client certificate"),
        E::InvalidMessage(_) => Some("the peer does not speak TLS (a plain redis:// port?)"),
        _ => None,
    };
    let certificate = matches!(
        &e,
        E::InvalidCertificate(_)
            | E::NoCertificatesPresented
            | E::AlertReceived(
                AlertDescription::CertificateRequired
                    | AlertDescription::UnknownCA
                    | AlertDescription::BadCertificate
                    | AlertDescription::CertificateUnknown
            )
    );
    NodeError::Tls(TlsError::new(
        Arc::clone(server),
        Arc::new(e),
        certificate,
        hint,
    ))
}

/// One TLS connection: the socket and the session, shared by the writer and the driver's read side.
#[derive(Debug)]
pub(crate) struct TlsLink {
    socket: TcpStream,
    /// See the module docs: held only around rustls calls and their system calls; never with another lock.
    session: Mutex<ClientConnection>,
    server: Arc<str>,
}

impl TlsLink {
    pub(crate) fn socket(&self) -> &TcpStream {
        &self.socket
    }

    /// Writes what rustls has queued, until done or the socket is full (`Ok(false)`).
    fn flush(&self, session: &mut ClientConnection, writes: &mut u32) -> Result<bool, NodeError> {
        while session.wants_write() {
            match session.write_tls(&mut &self.socket) {
                Ok(0) => return Err(NodeError::Closed),
                Ok(_) => *writes += 1,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(NodeError::from_io(e)),
            }
        }
        Ok(true)
    }

    /// See [`Transport::write`](super::Transport::write). Ciphertext rustls already holds goes first;
    /// then the batch is encrypted in one piece (sharing records) and written. Called only once the handshake
    /// completed (the node's link is up): rustls then encrypts at once, up to its 64 KiB buffer at a time.
    pub(crate) fn write(&self, bytes: &mut BytesMut, writes: &mut u32) -> Result<bool, NodeError> {
        let mut session = lock(&self.session);
        loop {
            if !self.flush(&mut session, writes)? {
                return Ok(false);
            }
            if bytes.is_empty() {
                return Ok(true);
            }
            let n = session.writer().write(bytes).map_err(NodeError::from_io)?;
            if n == 0 {
                // rustls took nothing though its buffer was just flushed (a session that cannot send data): the
                // rest waits, as for a full socket, and is offered again at the next turn.
                return Ok(false);
            }
            bytes.advance(n);
        }
    }

    /// See [`Transport::read`](super::Transport::read): reads until the socket is drained (or the
    /// budget), processing each read and draining the plaintext into `into`, then flushes what processing queued.
    ///
    /// Drained means `WouldBlock`, or a short read: as over plain TCP, a read that got less than rustls asked for
    /// emptied the socket, and bytes arriving later raise a new edge-triggered event, so the extra system call
    /// that would only return `WouldBlock` is skipped (unless the peer closed: then the socket is read to its end).
    /// Nothing is left behind in rustls: every read's plaintext is drained before the next.
    pub(crate) fn read(
        &self,
        into: &mut BytesMut,
        scratch: &mut [u8],
        closed: bool,
        stats: &NodeStats,
    ) -> ReadOutcome {
        let mut out = ReadOutcome::default();
        let mut session = lock(&self.session);
        let handshaking = session.is_handshaking();
        let mut budget = READ_BUDGET;
        let mut socket = Source {
            socket: &self.socket,
            short: false,
        };
        out.end = loop {
            let n = match session.read_tls(&mut socket) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break None,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => break Some(NodeError::from_io(e)),
            };
            out.bytes += n;
            if n > 0 {
                stats.read();
            }
            if let Err(e) = session.process_new_packets() {
                // Best effort: tell the peer why (rustls queued an alert).
                let _ = session.write_tls(&mut &self.socket);
                break Some(tls_error(&self.server, e));
            }
            if let Err(e) = drain(&mut session, into, scratch) {
                break Some(e);
            }
            if n == 0 {
                break Some(NodeError::Closed);
            }
            if socket.short && !closed {
                break None;
            }
            budget = budget.saturating_sub(n);
            if budget == 0 {
                out.backlog = true;
                break None;
            }
        };
        out.secured = handshaking && !session.is_handshaking() && out.end.is_none();
        if out.end.is_none() {
            let mut writes = 0;
            if let Err(e) = self.flush(&mut session, &mut writes) {
                out.end = Some(e);
            }
            (0..writes).for_each(|_| stats.write());
        }
        out
    }
}

/// The socket as rustls reads it, noting whether the last read was short (got less than was asked for).
struct Source<'a> {
    socket: &'a TcpStream,
    short: bool,
}

impl Read for Source<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = (&mut &*self.socket).read(buf)?;
        self.short = n < buf.len();
        Ok(n)
    }
}

/// Moves the plaintext rustls decrypted into `into`. `Err(Closed)` once the peer closed the session
/// (`close_notify`, or a TCP close without one).
fn drain(
    session: &mut ClientConnection,
    into: &mut BytesMut,
    scratch: &mut [u8],
) -> Result<(), NodeError> {
    loop {
        match session.reader().read(scratch) {
            Ok(0) => return Err(NodeError::Closed),
            Ok(n) => into.extend_from_slice(&scratch[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) => return Err(NodeError::from_io(e)),
        }
    }
}
