//! A small blocking Redis client for the local cluster's housekeeping (is this node ours and ready, its uptime,
//! role and persistence): one loopback connection, commands pipelined, replies decoded by `muxlock::resp`. For the
//! nodes of `cluster up --tls`, the connection is TLS (rustls, blocking) with the cluster's CA and client
//! certificate: those nodes have no plain port.
//!
//! Locks never go through here: they use the library's `LockManager`.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use muxlock::resp::{Decoder, Value, encode_command};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

use crate::state::TlsFiles;

/// One connection to a node on 127.0.0.1.
pub struct Client {
    stream: Stream,
    buf: BytesMut,
    decoder: Decoder,
    timeout: Duration,
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Stream {
    fn socket(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => &s.sock,
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

impl Client {
    /// Connects to `127.0.0.1:port`, over TLS with `tls`'s CA and client certificate if given; every later call
    /// waits at most `timeout` for its replies (the TLS handshake happens with the first one).
    ///
    /// # Errors
    ///
    /// The connection's error (refused when nothing listens); `InvalidData` for certificate files that cannot be
    /// read or used (naming the file).
    pub fn connect(port: u16, tls: Option<&TlsFiles>, timeout: Duration) -> io::Result<Client> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let socket = TcpStream::connect_timeout(&addr, timeout)?;
        socket.set_nodelay(true)?;
        socket.set_write_timeout(Some(timeout))?;
        let stream = match tls {
            None => Stream::Plain(socket),
            Some(files) => {
                let name = ServerName::IpAddress(Ipv4Addr::LOCALHOST.into());
                let conn = ClientConnection::new(Arc::new(tls_config(files)?), name)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                Stream::Tls(Box::new(StreamOwned::new(conn, socket)))
            }
        };
        Ok(Client {
            stream,
            buf: BytesMut::with_capacity(4096),
            decoder: Decoder::new(),
            timeout,
        })
    }

    /// Sends `commands` in one write and returns their replies, in order (error replies included, as values).
    ///
    /// # Errors
    ///
    /// `TimedOut` if the replies do not all come within the timeout; `InvalidData` for bytes that are not RESP;
    /// `UnexpectedEof` if the node closes the connection.
    pub fn pipeline(&mut self, commands: &[&[&[u8]]]) -> io::Result<Vec<Value>> {
        let mut request = BytesMut::new();
        for command in commands {
            encode_command(command, &mut request);
        }
        self.stream.write_all(&request)?;
        let deadline = Instant::now() + self.timeout;
        let mut replies = Vec::with_capacity(commands.len());
        let mut chunk = [0u8; 4096];
        while replies.len() < commands.len() {
            match self.decoder.decode(&mut self.buf) {
                Ok(Some(value)) => {
                    replies.push(value);
                    continue;
                }
                Ok(None) => {}
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "no reply in time"));
            }
            self.stream.socket().set_read_timeout(Some(left))?;
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "no reply in time"));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(replies)
    }
}

/// A rustls client configuration that trusts the cluster's CA only and presents its client certificate.
fn tls_config(files: &TlsFiles) -> io::Result<ClientConfig> {
    let bad = |path: &std::path::Path, e: &dyn std::fmt::Display| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("TLS file {}: {e}", path.display()),
        )
    };
    let certs = |path: &std::path::Path| {
        CertificateDer::pem_file_iter(path)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| bad(path, &e))
    };
    let mut roots = RootCertStore::empty();
    for ca in certs(&files.ca)? {
        roots.add(ca).map_err(|e| bad(&files.ca, &e))?;
    }
    let key =
        PrivateKeyDer::from_pem_file(&files.client_key).map_err(|e| bad(&files.client_key, &e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?
        .with_root_certificates(roots)
        .with_client_auth_cert(certs(&files.client_cert)?, key)
        .map_err(|e| bad(&files.client_cert, &e))
}

/// Writes the restart guard's persistence marker with an old time (`SET NX`: a marker the node reloaded from its
/// files stays), so that the new nodes, which hold no lock from before, are trusted at once from their first
/// second (see `muxlock::redlock::PERSIST_MARKER_KEY`). Best effort: without it they wait one lease first.
pub fn provision_marker(port: u16, tls: Option<&TlsFiles>) {
    if let Ok(mut client) = Client::connect(port, tls, Duration::from_secs(2)) {
        let key = muxlock::redlock::PERSIST_MARKER_KEY.as_bytes();
        let _ = client.pipeline(&[&[b"SET", key, b"0 provisioned-by-muxlock-cluster-up", b"NX"]]);
    }
}

/// The text of a string-like reply (simple, bulk or verbatim string); `None` for anything else.
pub fn text(value: &Value) -> Option<String> {
    match value.without_attributes() {
        Value::SimpleString(b) | Value::BulkString(b) => {
            Some(String::from_utf8_lossy(b).into_owned())
        }
        Value::Verbatim { data, .. } => Some(String::from_utf8_lossy(data).into_owned()),
        _ => None,
    }
}

/// The value of `field` in an `INFO` reply (`field:value` lines).
pub fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines()
        .filter_map(|line| line.trim_end().split_once(':'))
        .find(|(name, _)| *name == field)
        .map(|(_, value)| value)
}

/// The value of a `CONFIG GET name` reply (`[name, value]` as an array or a RESP3 map).
pub fn config_value(reply: &Value) -> Option<String> {
    match reply.without_attributes() {
        Value::Array(items) => items.get(1).and_then(text),
        Value::Map(pairs) => pairs.first().and_then(|(_, v)| text(v)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_fields_and_config_replies() {
        let info =
            "# Server\r\nredis_version:7.0.15\r\nprocess_id:4242\r\nuptime_in_seconds:12\r\n";
        assert_eq!(info_field(info, "process_id"), Some("4242"));
        assert_eq!(info_field(info, "uptime_in_seconds"), Some("12"));
        assert_eq!(info_field(info, "uptime"), None);
        let reply = Value::Array(vec![
            Value::BulkString("appendfsync".into()),
            Value::BulkString("always".into()),
        ]);
        assert_eq!(config_value(&reply).as_deref(), Some("always"));
        assert_eq!(config_value(&Value::Array(vec![])), None);
        assert_eq!(text(&Value::Integer(1)), None);
    }
}
