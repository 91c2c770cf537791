//! A URL query as command-line flags: `burst=400&server_skips_expired=1`
//! becomes `--burst=400 --server-skips-expired`, parsed by the subcommand's
//! own clap definition. A flag the subcommand gains works in the API the
//! day it lands, with the same validation and messages.

use clap::{ArgAction, Command, FromArgMatches};

/// A request the API refuses: which parameter, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadParam {
    /// The parameter as the query names it (`burst`), or empty when the
    /// problem is not one parameter's.
    pub(crate) parameter: String,
    /// What is wrong, in the command line's words.
    pub(crate) message: String,
}

impl BadParam {
    /// A problem with `parameter` (as the query names it, or empty).
    pub fn new(parameter: impl Into<String>, message: impl Into<String>) -> Self {
        BadParam {
            parameter: parameter.into(),
            message: message.into(),
        }
    }

    /// From a usage message that starts with the flag (`--rate: …`).
    pub fn from_usage(message: &str) -> Self {
        let parameter = message
            .strip_prefix("--")
            .and_then(|m| m.split(':').next())
            .filter(|f| !f.contains(' '))
            .unwrap_or("")
            .replace('-', "_");
        BadParam::new(parameter, message.trim())
    }

    /// The parameter as the query names it (`burst`), or empty when the
    /// problem is not one parameter's.
    pub fn parameter(&self) -> &str {
        &self.parameter
    }

    /// What is wrong, in the command line's words.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// Decodes `application/x-www-form-urlencoded` pairs (`+` is a space,
/// `%XX` a byte). A malformed escape or non-UTF-8 text is an error.
pub(crate) fn pairs(query: &str) -> Result<Vec<(String, String)>, BadParam> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let k =
                decode(k).ok_or_else(|| BadParam::new("", format!("`{p}` is not URL-encoded")))?;
            let v = decode(v).ok_or_else(|| BadParam::new(k.clone(), "is not URL-encoded"))?;
            Ok((k, v))
        })
        .collect()
}

fn decode(s: &str) -> Option<String> {
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'+' => out.push(b' '),
            b'%' => {
                let hi = (bytes.next()? as char).to_digit(16)?;
                let lo = (bytes.next()? as char).to_digit(16)?;
                out.push((hi * 16 + lo) as u8);
            }
            b => out.push(b),
        }
    }
    String::from_utf8(out).ok()
}

/// Parses the query with the clap definition `A` of subcommand `name`.
/// Parameters in `refused` (say `out`, which would write files) are
/// refused; so is any name the subcommand does not know.
pub(crate) fn parse<A: clap::Args + FromArgMatches>(
    name: &'static str,
    query: &str,
    refused: &[&str],
) -> Result<A, BadParam> {
    let cmd = A::augment_args(
        Command::new(name)
            .no_binary_name(true)
            .disable_help_flag(true)
            .disable_version_flag(true),
    );
    let mut argv: Vec<String> = Vec::new();
    for (key, value) in pairs(query)? {
        let flag = key.replace('_', "-");
        let param = flag.replace('-', "_");
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(flag.as_str()))
            .filter(|_| !refused.contains(&param.as_str()))
            .ok_or_else(|| {
                BadParam::new(
                    param.clone(),
                    format!("`{key}` is not a parameter of {name} here"),
                )
            })?;
        if matches!(arg.get_action(), ArgAction::SetTrue) {
            match value.as_str() {
                "" | "1" | "true" | "on" | "yes" => argv.push(format!("--{flag}")),
                "0" | "false" | "off" | "no" => {}
                v => {
                    return Err(BadParam::new(
                        param,
                        format!("`{v}` is not a switch value; write 1 or 0"),
                    ))
                }
            }
        } else {
            argv.push(format!("--{flag}={value}"));
        }
    }
    let matches = cmd.try_get_matches_from(&argv).map_err(clap_error)?;
    A::from_arg_matches(&matches).map_err(clap_error)
}

/// The first line of clap's message, with the parameter it names.
fn clap_error(e: clap::Error) -> BadParam {
    let parameter = match e.get(clap::error::ContextKind::InvalidArg) {
        Some(clap::error::ContextValue::String(s)) => s
            .trim_start_matches('-')
            .split([' ', '='])
            .next()
            .unwrap_or("")
            .replace('-', "_"),
        _ => String::new(),
    };
    let text = e.render().to_string();
    let line = text.lines().next().unwrap_or("").trim();
    let line = line.strip_prefix("error: ").unwrap_or(line);
    BadParam::new(parameter, line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, clap::Args)]
    struct Demo {
        #[arg(long)]
        burst: Option<u32>,
        #[arg(long)]
        server_skips_expired: bool,
        #[arg(long)]
        out: Option<String>,
    }

    #[test]
    fn decodes_form_encoding() {
        assert_eq!(
            pairs("strategy=full%2Bbreaker,none&x=a+b&flag").unwrap(),
            vec![
                ("strategy".into(), "full+breaker,none".into()),
                ("x".into(), "a b".into()),
                ("flag".into(), String::new())
            ]
        );
        assert!(pairs("a=%zz").is_err());
        assert!(pairs("a=%ff").is_err(), "not UTF-8");
    }

    #[test]
    fn switches_and_values_become_flags() {
        let d: Demo = parse("demo", "burst=7&server_skips_expired=1", &[]).unwrap();
        assert_eq!(d.burst, Some(7));
        assert!(d.server_skips_expired);
        let d: Demo = parse("demo", "server-skips-expired=0", &[]).unwrap();
        assert!(!d.server_skips_expired);
    }

    #[test]
    fn bad_values_name_the_parameter() {
        let e = parse::<Demo>("demo", "burst=lots", &[]).unwrap_err();
        assert_eq!(e.parameter, "burst");
        assert!(e.message.contains("lots"), "{}", e.message);
        let e = parse::<Demo>("demo", "bursts=1", &[]).unwrap_err();
        assert_eq!(e.parameter, "bursts");
        let e = parse::<Demo>("demo", "out=/tmp/x", &["out"]).unwrap_err();
        assert_eq!(e.parameter, "out");
        let e = parse::<Demo>("demo", "burst=1&burst=2", &[]).unwrap_err();
        assert_eq!(e.parameter, "burst", "{}", e.message);
        let e = parse::<Demo>("demo", "server_skips_expired=maybe", &[]).unwrap_err();
        assert_eq!(e.parameter, "server_skips_expired");
    }

    #[test]
    fn usage_messages_name_their_flag() {
        let e = BadParam::from_usage("--outage-end: must be after --outage-start");
        assert_eq!(e.parameter, "outage_end");
    }
}
