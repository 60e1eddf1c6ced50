//! A node's replies read as text: `CLUSTER NODES` into who owns which slot, bulk strings and flat arrays of them.
//! Deliberately not a RESP parser (that is `muxlock::resp`, the code under test): just enough for the set-up.

use std::collections::HashMap;

use super::SLOTS;

/// What one node's `CLUSTER NODES` says.
#[derive(Debug, Default)]
pub(super) struct NodesView {
    /// Each slot's owner id, by slot.
    pub(super) owners: Vec<Option<String>>,
    /// Slots shown `[slot->-id]` (migrating) or `[slot-<-id]` (importing).
    pub(super) in_migration: Vec<u16>,
    /// Replica id to master id.
    pub(super) master_of: HashMap<String, String>,
    /// Nodes listed, and how many of them are still in the handshake.
    pub(super) known: usize,
    pub(super) handshaking: usize,
}

/// Reads `CLUSTER NODES`: `<id> <ip:port@cport> <flags> <master> <ping> <pong> <epoch> <link> <slot>...`.
pub(super) fn parse_nodes(text: &str) -> NodesView {
    let mut view = NodesView {
        owners: vec![None; usize::from(SLOTS)],
        ..NodesView::default()
    };
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split(' ').collect();
        let [id, _addr, flags, master, _, _, _, _, slots @ ..] = fields.as_slice() else {
            continue;
        };
        view.known += 1;
        if flags.contains("handshake") || flags.contains("noaddr") {
            view.handshaking += 1;
        }
        if *master != "-" {
            view.master_of
                .insert((*id).to_owned(), (*master).to_owned());
        }
        if !flags.contains("master") || flags.contains("fail") && !flags.contains("fail?") {
            continue;
        }
        for range in slots {
            if let Some(inner) = range.strip_prefix('[') {
                if let Some(slot) = inner.split('-').next().and_then(|s| s.parse().ok()) {
                    view.in_migration.push(slot);
                }
                continue;
            }
            let (start, end) = range.split_once('-').unwrap_or((range, range));
            let (Ok(start), Ok(end)) = (start.parse::<usize>(), end.parse::<usize>()) else {
                continue;
            };
            for slot in start..=end.min(usize::from(SLOTS) - 1) {
                view.owners[slot] = Some((*id).to_owned());
            }
        }
    }
    view
}

/// The text of a bulk-string reply (`$n\r\n...\r\n`), lossily; empty for anything else.
pub fn bulk_text(reply: &[u8]) -> String {
    let Some(rest) = reply.strip_prefix(b"$") else {
        return String::new();
    };
    let Some(crlf) = rest.windows(2).position(|w| w == b"\r\n") else {
        return String::new();
    };
    let len: usize = std::str::from_utf8(&rest[..crlf])
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let body = &rest[crlf + 2..];
    String::from_utf8_lossy(&body[..len.min(body.len())]).into_owned()
}

/// The elements of a flat array of bulk strings (`*n\r\n$len\r\n...`), lossily; `None` if it is not one.
pub fn bulk_array(reply: &[u8]) -> Option<Vec<String>> {
    let line = |at: usize| -> Option<(&[u8], usize)> {
        let end = at + reply.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
        Some((&reply[at..end], end + 2))
    };
    let number = |bytes: &[u8]| -> Option<usize> { std::str::from_utf8(bytes).ok()?.parse().ok() };
    let (header, mut at) = line(0)?;
    let count = number(header.strip_prefix(b"*")?)?;
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let (header, next) = line(at)?;
        let len = number(header.strip_prefix(b"$")?)?;
        let body = reply.get(next..next + len)?;
        out.push(String::from_utf8_lossy(body).into_owned());
        at = next + len + 2;
    }
    Some(out)
}
