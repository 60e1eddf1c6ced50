//! A small blocking Redis client for the local cluster's housekeeping (is this node ours and ready, its uptime,
//! role and persistence): one loopback connection, commands pipelined, replies decoded by `muxlock::resp`.
//!
//! Locks never go through here: they use the library's `LockManager`.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use muxlock::resp::{Decoder, Value, encode_command};

/// One connection to a node on 127.0.0.1.
pub struct Client {
    stream: TcpStream,
    buf: BytesMut,
    decoder: Decoder,
    timeout: Duration,
}

impl Client {
    /// Connects to `127.0.0.1:port`; every later call waits at most `timeout` for its replies.
    ///
    /// # Errors
    ///
    /// The connection's error (refused when nothing listens).
    pub fn connect(port: u16, timeout: Duration) -> io::Result<Client> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_nodelay(true)?;
        stream.set_write_timeout(Some(timeout))?;
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
            self.stream.set_read_timeout(Some(left))?;
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
