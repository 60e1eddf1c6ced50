//! `muxlock status RESOURCE`: what every node holds under the resource's key, and whether a majority holds one
//! value.

use clap::Args as ClapArgs;
use muxlock::KeyState;
use serde::Serialize;

use crate::duration::{self, millis};
use crate::exit::{self, CliError};
use crate::nodes::Conn;
use crate::output;
use crate::verdict::{self, Degraded};

/// How many characters of a value the table shows.
const PREFIX: usize = 12;

/// Show who holds a lock, node by node, and whether a majority does.
///
/// Per node: whether the key exists, its value and remaining TTL; then whether a majority holds one value. Reads
/// only (GET and PTTL): it takes and changes nothing. Exits 0 when a majority of nodes answered (held or
/// not), 69 when too few answered to tell.
#[derive(ClapArgs)]
#[command(
    after_help = "Example:\n  muxlock status nightly-report\n  muxlock status nightly-report --json | jq .holder"
)]
pub struct Args {
    /// The resource (the Redis key).
    #[arg(value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub resource: String,

    /// Print a JSON object instead of a table.
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub conn: Conn,
}

#[derive(Serialize)]
struct Status<'a> {
    resource: &'a str,
    held: bool,
    holder: Option<String>,
    holding: usize,
    answered: usize,
    quorum: usize,
    nodes: Vec<Node>,
    /// The nodes that gave no usable answer.
    degraded: Vec<Degraded>,
}

#[derive(Serialize)]
struct Node {
    node: String,
    /// `held`, `absent` or `error`.
    state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<String>,
    /// Present for `held`: the milliseconds left, or null for a key without expiry.
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl_ms: Option<Option<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// Runs the command.
///
/// # Errors
///
/// [`exit::UNAVAILABLE`] when fewer than a majority of nodes answered (after printing what they said).
pub fn run(args: &Args) -> Result<(), CliError> {
    let locks = args.conn.manager(0)?;
    // A fresh process: its one round waits for the nodes' answers, not for their connections too.
    locks.wait_connected();
    let seen = locks.inspect(&args.resource)?;
    let holder = seen
        .holder()
        .map(|v| String::from_utf8_lossy(v).into_owned());
    let nodes: Vec<Node> = seen
        .nodes()
        .iter()
        .map(|(addr, state)| {
            let node = addr.to_string();
            match state {
                KeyState::Held { value, ttl } => Node {
                    node,
                    state: "held",
                    value: Some(String::from_utf8_lossy(value).into_owned()),
                    ttl_ms: Some(ttl.map(millis)),
                    error: None,
                },
                KeyState::Absent => Node {
                    node,
                    state: "absent",
                    value: None,
                    ttl_ms: None,
                    error: None,
                },
                other => Node {
                    node,
                    state: "error",
                    value: None,
                    ttl_ms: None,
                    error: Some(match other {
                        KeyState::Failed(outcome) => outcome.to_string(),
                        other => other.to_string(),
                    }),
                },
            }
        })
        .collect();
    let doc = Status {
        resource: &args.resource,
        held: holder.is_some(),
        holding: seen.holder().map_or(0, |v| seen.holding(v)),
        holder,
        answered: seen.answered(),
        quorum: seen.quorum(),
        nodes,
        degraded: verdict::degraded_in(&seen),
    };
    if doc.answered >= doc.quorum {
        output::warn_degraded(&doc.degraded, &locks, "read");
    }
    output::emit(args.json, &doc, || table(&doc))?;
    if doc.answered < doc.quorum {
        return Err(CliError::new(
            exit::UNAVAILABLE,
            "quorum",
            format!(
                "only {} of {} nodes answered, {} needed to tell whether {:?} is held",
                doc.answered,
                doc.nodes.len(),
                doc.quorum,
                args.resource
            ),
        )
        .after_output());
    }
    Ok(())
}

fn table(doc: &Status<'_>) -> String {
    let n = doc.nodes.len();
    let held_somewhere = doc.nodes.iter().filter(|n| n.state == "held").count();
    let mut out = match &doc.holder {
        Some(v) => format!(
            "{:?} is held by {} on {} of {n} nodes ({} needed)\n",
            doc.resource,
            prefix(v),
            doc.holding,
            doc.quorum
        ),
        None if held_somewhere == 0 && doc.answered == n => {
            format!("{:?} is free: no node holds it\n", doc.resource)
        }
        None => format!(
            "{:?} is not held by a majority: {held_somewhere} of {n} nodes hold a key, {} answered, {} needed\n",
            doc.resource, doc.answered, doc.quorum
        ),
    };
    let width = doc
        .nodes
        .iter()
        .map(|n| n.node.len())
        .max()
        .unwrap_or(4)
        .max(4);
    out.push_str(&format!(
        "{:<width$}  {:<6}  {:<13}  ttl\n",
        "node", "key", "value"
    ));
    for node in &doc.nodes {
        let (value, ttl) = match (node.state, &node.value, node.ttl_ms) {
            ("held", Some(v), Some(Some(ms))) => (
                prefix(v),
                duration::human(std::time::Duration::from_millis(ms)),
            ),
            ("held", Some(v), _) => (prefix(v), "no expiry".to_owned()),
            ("error", _, _) => (node.error.clone().unwrap_or_default(), String::new()),
            _ => ("-".to_owned(), "-".to_owned()),
        };
        let line = format!(
            "{:<width$}  {:<6}  {:<13}  {ttl}",
            node.node, node.state, value
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The first characters of a value, `…` when cut.
fn prefix(value: &str) -> String {
    match value.char_indices().nth(PREFIX) {
        Some((i, _)) => format!("{}…", &value[..i]),
        None => value.to_owned(),
    }
}
