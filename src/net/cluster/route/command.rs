//! A request's commands and their slots: what the routing layer reads from the engine's encoded bytes to send
//! each command to the master owning its key (pure; no socket, no map).
//!
//! The engine encodes every request as RESP arrays of bulk strings (`encode_command`, `lua::eval`). A request
//! for a cluster member is cut into its commands here, and each command's slot is read from its keys: the first
//! argument of the single-key commands the engine sends (`SET`, `GET`, `PTTL`, `DEL`, `DELIFEQ`, `DELEX`), the
//! declared keys of a script (`EVALSHA`/`EVAL sha numkeys key...`), the keys of `MSETEX numkeys key value ...`
//! (a set's acquisition without Lua). Anything else, a script whose keys span two
//! slots, or bytes that are not such arrays is [`Unroutable`]: that command's outcome is a failed vote, never a
//! guess at a master.
//!
//! Why the slot is read from the bytes, not handed down by the engine with each request: every path of the engine
//! (the guards' pipelined renewals, the folded releases, `inspect`, batches) sends several keys' commands in one
//! request, and each would have to be taught to split them; reading the slots here routes every path the same way,
//! costs only cluster members (plain members never reach this file), and turns a command that would be `CROSSSLOT`
//! into a refusal before it is sent.

use std::ops::Range;

use crate::net::cluster::key_slot;

/// One command of a request: where its bytes are, and its slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Command {
    /// Its bytes within the request.
    pub(crate) bytes: Range<usize>,
    /// The slot of its keys, or why it has none.
    pub(crate) slot: Result<u16, Unroutable>,
}

/// Why a command cannot be routed to one master.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unroutable {
    /// The bytes are not a RESP array of bulk strings (or are cut short).
    Malformed,
    /// A command the routing layer does not know the keys of.
    Unknown,
    /// A command without a key (a script declaring none).
    NoKey,
    /// Keys in different slots: no single master can run it (`CROSSSLOT`).
    CrossSlot,
}

impl Unroutable {
    /// Lower-case words for error messages.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Unroutable::Malformed => "a request that could not be cut into commands",
            Unroutable::Unknown => "a command whose key the routing layer does not know",
            Unroutable::NoKey => "a command without a key",
            Unroutable::CrossSlot => "a command whose keys lie in different slots (CROSSSLOT)",
        }
    }
}

/// Cuts `request` into its commands. A request whose bytes stop making sense ends with one [`Command`] covering
/// the rest, [`Unroutable::Malformed`]; so every byte belongs to exactly one command.
pub(crate) fn split(request: &[u8]) -> Vec<Command> {
    let mut commands = Vec::new();
    let mut at = 0;
    while at < request.len() {
        match parse(request, at) {
            Some((end, args)) => {
                commands.push(Command {
                    bytes: at..end,
                    slot: slot_of(request, &args),
                });
                at = end;
            }
            None => {
                commands.push(Command {
                    bytes: at..request.len(),
                    slot: Err(Unroutable::Malformed),
                });
                break;
            }
        }
    }
    commands
}

/// The one slot of `keys` (ranges of `request`): [`Unroutable::CrossSlot`] if they span two, `NoKey` if none.
fn one_slot<'a>(
    request: &[u8],
    keys: impl Iterator<Item = &'a Range<usize>>,
) -> Result<u16, Unroutable> {
    let mut slot = None;
    for k in keys {
        let s = key_slot(&request[k.clone()]);
        if slot.is_some_and(|first| first != s) {
            return Err(Unroutable::CrossSlot);
        }
        slot = Some(s);
    }
    slot.ok_or(Unroutable::NoKey)
}

/// The slot of a command given its arguments' ranges.
fn slot_of(request: &[u8], args: &[Range<usize>]) -> Result<u16, Unroutable> {
    let arg = |i: usize| args.get(i).map(|r| &request[r.clone()]);
    let name = arg(0).ok_or(Unroutable::Malformed)?;
    let is = |word: &str| name.eq_ignore_ascii_case(word.as_bytes());
    if [
        "EVAL",
        "EVALSHA",
        "EVAL_RO",
        "EVALSHA_RO",
        "FCALL",
        "FCALL_RO",
    ]
    .iter()
    .any(|w| is(w))
    {
        let numkeys: usize = arg(2)
            .and_then(|n| std::str::from_utf8(n).ok())
            .and_then(|n| n.parse().ok())
            .ok_or(Unroutable::Malformed)?;
        if numkeys == 0 {
            return Err(Unroutable::NoKey);
        }
        let keys = args
            .get(3..3usize.saturating_add(numkeys))
            .ok_or(Unroutable::Malformed)?;
        return one_slot(request, keys.iter());
    }
    if is("MSETEX") {
        // `MSETEX numkeys key value [key value ...] [options]`: the keys at 2, 4, ...
        let numkeys: usize = arg(1)
            .and_then(|n| std::str::from_utf8(n).ok())
            .and_then(|n| n.parse().ok())
            .ok_or(Unroutable::Malformed)?;
        if numkeys == 0 {
            return Err(Unroutable::NoKey);
        }
        let pairs = args
            .get(2..2usize.saturating_add(numkeys.saturating_mul(2)))
            .ok_or(Unroutable::Malformed)?;
        return one_slot(request, pairs.iter().step_by(2));
    }
    if [
        "SET", "GET", "PTTL", "DEL", "DELIFEQ", "DELEX", "PEXPIRE", "EXISTS",
    ]
    .iter()
    .any(|w| is(w))
    {
        // `DEL` and `EXISTS` take several keys; the engine sends them one.
        if (is("DEL") || is("EXISTS")) && args.len() > 2 {
            let first = key_slot(arg(1).ok_or(Unroutable::NoKey)?);
            if args[2..]
                .iter()
                .any(|k| key_slot(&request[k.clone()]) != first)
            {
                return Err(Unroutable::CrossSlot);
            }
            return Ok(first);
        }
        return arg(1).map(key_slot).ok_or(Unroutable::NoKey);
    }
    Err(Unroutable::Unknown)
}

/// Parses one RESP array of bulk strings starting at `at`: its end and its arguments' ranges; `None` if the bytes
/// are not one (or are cut short).
pub(crate) fn parse(buf: &[u8], at: usize) -> Option<(usize, Vec<Range<usize>>)> {
    let (count, mut at) = header(buf, at, b'*')?;
    let mut args = Vec::with_capacity(count.min(64));
    for _ in 0..count {
        let (len, start) = header(buf, at, b'$')?;
        let end = start.checked_add(len)?;
        if buf.get(end..end.checked_add(2)?)? != b"\r\n" {
            return None;
        }
        args.push(start..end);
        at = end + 2;
    }
    Some((at, args))
}

/// `<prefix><decimal>\r\n` at `at`: the number and where the bytes after it start.
fn header(buf: &[u8], at: usize, prefix: u8) -> Option<(usize, usize)> {
    if *buf.get(at)? != prefix {
        return None;
    }
    let rest = buf.get(at + 1..)?;
    let cr = rest.iter().position(|&b| b == b'\r')?;
    if rest.get(cr + 1) != Some(&b'\n') || cr == 0 || cr > 19 {
        return None;
    }
    let digits = std::str::from_utf8(&rest[..cr]).ok()?;
    let n: usize = digits.parse().ok()?;
    Some((n, at + 1 + cr + 2))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::encode_command;
    use bytes::BytesMut;

    fn enc(cmds: &[&[&[u8]]]) -> BytesMut {
        let mut buf = BytesMut::new();
        for c in cmds {
            encode_command(c, &mut buf);
        }
        buf
    }

    #[test]
    fn single_key_commands_take_their_key_slot() {
        let buf = enc(&[
            &[b"SET", b"invoice:42", b"v", b"NX", b"PX", b"1000"],
            &[b"PTTL", b"a"],
        ]);
        let cmds = split(&buf);
        assert_eq!(cmds.len(), 2);
        assert_eq!(cmds[0].slot, Ok(key_slot(b"invoice:42")));
        assert_eq!(cmds[1].slot, Ok(key_slot(b"a")));
        assert_eq!(cmds[0].bytes.start, 0);
        assert_eq!(cmds[1].bytes.end, buf.len());
        assert_eq!(cmds[0].bytes.end, cmds[1].bytes.start);
    }

    #[test]
    fn scripts_take_their_declared_keys() {
        let buf = enc(&[
            &[b"EVALSHA", b"abc", b"2", b"{r}a", b"{r}b", b"v"],
            &[b"EVALSHA", b"abc", b"2", b"a", b"b", b"v"],
            &[b"EVAL", b"return 1", b"0"],
            &[b"PING"],
        ]);
        let cmds = split(&buf);
        assert_eq!(cmds[0].slot, Ok(key_slot(b"r")));
        assert_eq!(cmds[1].slot, Err(Unroutable::CrossSlot));
        assert_eq!(cmds[2].slot, Err(Unroutable::NoKey));
        assert_eq!(cmds[3].slot, Err(Unroutable::Unknown));
    }

    #[test]
    fn msetex_takes_its_keys_not_its_values() {
        let buf = enc(&[
            &[
                b"MSETEX", b"2", b"{r}a", b"v", b"{r}b", b"v", b"NX", b"PX", b"100",
            ],
            &[b"MSETEX", b"2", b"{r}a", b"{x}v", b"{s}b", b"v", b"NX"],
            &[b"MSETEX", b"1", b"k", b"{zz}", b"NX", b"PX", b"9"],
            &[b"MSETEX", b"2", b"k", b"v"],
            &[b"MSETEX", b"0"],
            &[b"MSETEX", b"x", b"k", b"v"],
        ]);
        let cmds = split(&buf);
        assert_eq!(cmds[0].slot, Ok(key_slot(b"r")));
        assert_eq!(cmds[1].slot, Err(Unroutable::CrossSlot));
        assert_eq!(cmds[2].slot, Ok(key_slot(b"k")), "a value is no key");
        assert_eq!(cmds[3].slot, Err(Unroutable::Malformed), "cut short");
        assert_eq!(cmds[4].slot, Err(Unroutable::NoKey));
        assert_eq!(cmds[5].slot, Err(Unroutable::Malformed));
    }

    /// A command that cannot be routed is a failed vote whose error (`NodeError::Cluster`) says why in words: each
    /// reason its own.
    #[test]
    fn an_unroutable_command_is_described_by_its_reason() {
        let mut buf = enc(&[
            &[b"PING"],
            &[b"EVAL", b"return 1", b"0"],
            &[b"EVALSHA", b"abc", b"2", b"a", b"b"],
        ]);
        buf.extend_from_slice(b"*2\r\n$3\r\nGET\r\n");
        let said: Vec<&str> = split(&buf)
            .iter()
            .map(|c| c.slot.err().map_or("routed", Unroutable::describe))
            .collect();
        assert_eq!(
            said,
            [
                "a command whose key the routing layer does not know",
                "a command without a key",
                "a command whose keys lie in different slots (CROSSSLOT)",
                "a request that could not be cut into commands",
            ]
        );
    }

    #[test]
    fn junk_and_cut_requests_are_malformed_never_a_panic() {
        let buf = enc(&[&[b"GET", b"k"]]);
        for cut in 1..buf.len() {
            let cmds = split(&buf[..cut]);
            assert_eq!(cmds.len(), 1);
            assert_eq!(cmds[0].slot, Err(Unroutable::Malformed));
            assert_eq!(cmds[0].bytes, 0..cut);
        }
        for junk in [
            &b"+OK\r\n"[..],
            b"*1\r\n$99999999999999999999\r\n",
            b"*9\r\n",
            b"*-1\r\n$",
        ] {
            let cmds = split(junk);
            assert!(cmds.iter().all(|c| c.slot.is_err()), "{junk:?}");
        }
        assert!(split(b"").is_empty());
    }
}
